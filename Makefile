# make serve  — build the site and serve it on http://127.0.0.1:8000
# make test   — what a reader runs: every code block of every page, every example
#               copied alone, every kernel at odd sizes and bad input, the results checks
# make check  — make test and the slow proofs: planted faults in pages, examples and
#               notebooks, notebooks through Jupyter, every architecture, the browser
# make bench  — measure on the GPU; writes docs/assets/results/<gpu>.json and plots
# make notebooks — rewrite docs/notebooks/ from examples/ (commit them)
# make exercise TASK=vector_add_guard [FILE=my_copy.py] — check an exercise (kernels/exercises.py)
# make notebooks-run — run every notebook on the GPU, keep its outputs (commit them)
# make sanitize — compute-sanitizer memcheck, racecheck and synccheck over the CUDA C kernels
# make profile — Nsight Compute on one example's kernel (GPU), e.g.
#                make profile EXAMPLE=stencil ARGS="--variant naive --impl cupy" KERNEL=conv_
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

# The GPU extra follows the driver: none without one; `gpu` (cupy-cuda12x,
# which runs on CUDA 12 and 13 drivers) when it supports CUDA 12 or later;
# GPU_EXTRA=gpu13 for the CUDA 13 wheels instead. Never both.
DRIVER_CUDA := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -1)
GPU_EXTRA ?= $(if $(DRIVER_CUDA),$(shell [ $(DRIVER_CUDA) -ge 12 ] && echo gpu),)
COMMA := ,
EXTRAS := docs,test$(if $(GPU_EXTRA),$(COMMA)$(GPU_EXTRA))
PYTEST_ARGS ?=
# pytest-xdist spreads the tests over the cores (JOBS=auto: a worker per core;
# the workers share the GPU); JOBS=0, or no xdist installed, runs one process.
JOBS ?= auto
XDIST = $$($(PY) -c 'import xdist' 2>/dev/null && echo "-n $(JOBS) --dist loadgroup")

.PHONY: help serve build test check bench sanitize profile clean notebooks exercise notebooks-run

export NO_MKDOCS_2_WARNING := 1

help:
	@sed -n '1,18p' Makefile

$(VENV)/.installed: pyproject.toml
	@echo "make: installing extras [$(EXTRAS)] (driver CUDA $(or $(DRIVER_CUDA),none); GPU extra: $(or $(GPU_EXTRA),none))"
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

serve: notebooks
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

build: notebooks
	$(PY) -m mkdocs build --strict

# examples/*.py -> docs/notebooks/*.ipynb (committed: Colab opens them from GitHub)
notebooks: $(SETUP)
	$(PY) docs/hooks/notebooks.py

# the checked exercises: the starter of TASK, or your FILE (python -m kernels.exercises list names them)
exercise: $(SETUP)
	$(PY) -m kernels.exercises check $(TASK) $(FILE)
# GPU only: each notebook through a Jupyter kernel at its default sizes, its
# outputs and the run's stamp (GPU, driver, commit, date, code hash) kept in
# both languages' notebooks; NOTEBOOKS="attention fusion" runs a few
notebooks-run: notebooks
	$(PY) docs/hooks/notebooks.py --run $(NOTEBOOKS)

# On a GPU both write the test record, docs/assets/results/test-runs/<gpu>.json
# (conftest.py), which the pages show; commit it.
test: $(SETUP)
	HANDBOOK_SUITE=test $(PY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

check: $(SETUP)
	HANDBOOK_SUITE=check $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

bench: $(SETUP)
	$(PY) -m kernels.bench $(BENCH_ARGS)

# compute-sanitizer over every CUDA C kernel (GPU only)
# (--report-api-errors no: cuda.bindings probes driver entry points with
# cuGetProcAddress, and the misses are not errors; a failed launch or copy
# raises in Python and fails the driver anyway)
# synccheck leaves out the kernels named *pipeline* (pipeline_copy, ws_pipeline): it reports
# "Missing wait" on every thread of any block-scope cuda::pipeline (libcu++, CUDA 13.0), even
# one whose threads wait for every stage they commit, while the same protocol written with
# mbarriers passes; memcheck and racecheck still check those kernels.
SANITIZE = compute-sanitizer --report-api-errors no --error-exitcode 1
sanitize: $(SETUP)
	$(SANITIZE) --tool memcheck $(PY) -m tests.gpu_driver
	$(SANITIZE) --tool racecheck $(PY) -m tests.gpu_driver
	$(SANITIZE) --tool synccheck --kernel-name-exclude kns=pipeline $(PY) -m tests.gpu_driver

# Nsight Compute, clocks left alone (--clock-control none: the card runs at the
# clocks the benchmarks saw), the first launch of kernels matching KERNEL;
# the sections and metrics that the four-step chapter reads at each step.
EXAMPLE ?= stencil
ARGS ?= --variant naive --impl cupy --size 2048
KERNEL ?= conv_
NCU_SECTIONS ?= --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
	--section WarpStateStats --section LaunchStats --section SchedulerStats
M1 := dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active
M2 := l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
M3 := l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
NCU_METRICS ?= --metrics $(M1),$(M2),$(M3)
profile: $(SETUP)
	mkdir -p profile
	ncu --clock-control none -k regex:$(KERNEL) -c 1 $(NCU_SECTIONS) $(NCU_METRICS) \
		-o profile/$(EXAMPLE) -f $(PY) examples/$(EXAMPLE).py $(ARGS)
	ncu --import profile/$(EXAMPLE).ncu-rep --page details

clean:
	rm -rf site build .pytest_cache
