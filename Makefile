# make serve  — build the site and serve it on http://127.0.0.1:8000
# make test   — run every test: kernels, examples, every code block of every page
# make bench  — measure on the GPU; writes docs/assets/results/<gpu>.json and plots
# make sanitize — compute-sanitizer memcheck and racecheck over the CUDA C kernels
#
# With no PYTHON given, the first run creates .venv and installs what is needed
# (CuPy too, when nvidia-smi finds a GPU). With PYTHON=python3 (an interpreter
# that already has the packages) nothing is installed.

VENV ?= .venv
ifeq ($(origin PYTHON),undefined)
PY := $(VENV)/bin/python
SETUP := $(VENV)/.installed
else
PY := $(PYTHON)
SETUP :=
endif

EXTRAS := docs,test$(shell nvidia-smi -L >/dev/null 2>&1 && echo ,gpu)
PYTEST_ARGS ?=

.PHONY: help serve build test bench sanitize clean

export NO_MKDOCS_2_WARNING := 1

help:
	@sed -n '1,9p' Makefile

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

serve: $(SETUP)
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

build: $(SETUP)
	$(PY) -m mkdocs build --strict

test: $(SETUP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(SETUP)
	$(PY) -m kernels.bench $(BENCH_ARGS)

# compute-sanitizer over every CUDA C kernel (GPU only)
sanitize: $(SETUP)
	compute-sanitizer --tool memcheck --error-exitcode 1 $(PY) -m tests.gpu_driver
	compute-sanitizer --tool racecheck --error-exitcode 1 $(PY) -m tests.gpu_driver

clean:
	rm -rf site build .pytest_cache docs/notebooks/*.ipynb
