"""Every examples/*.py runs alone, checks itself, and fails on a wrong answer.

- Copied alone (with the .cu files its docstring names) into an empty
  folder outside the repository, an example runs: the Numba path anywhere
  (the CUDA simulator without a GPU), the CuPy path on a GPU. A `kernels.py`
  that raises is put beside it, so an example reaching for this repository's
  package fails instead of finding the editable install.
- It imports nothing but the standard library, NumPy, CuPy, Numba and NVML.
- A wrong kernel planted in the copy (FAULTS, declared beside each chapter
  in tests/test_<topic>.py) makes it exit non-zero (`make check`).
- The sections it shares with the library are the library's text
  (tests/sync.py; `python -m tests.sync` rewrites them).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import chapters, sync

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
SMALL = "1000"
ALLOWED = {"numpy", "cupy", "cupyx", "cupy_backends", "numba", "pynvml"}  # cupy_backends ships in the cupy wheel
POISON = 'raise ImportError("an example must run without this repository\'s kernels package")\n'

# example -> [(file in the copy, old, new, impl)]: a wrong result planted in
# the copy; the example must exit non-zero. Numba faults run in the
# simulator on the CPU, CUDA C faults on the GPU. Each chapter declares its
# own in tests/test_<topic>.py (tests/chapters.py finds them).
FAULTS = chapters.example_faults()


def cu_files(example: Path) -> list[str]:
    """The .cu files an example says to copy with it (its "Copy with it:"
    sentence; docs/hooks/notebooks.py reads it the same way)."""
    from tests import pages

    return pages.hook("notebooks").copy_with_it(example.read_text())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_says_which_files_to_copy_with_it(example):
    text = example.read_text()
    named = set(re.findall(r'load_cuda\("(\w+\.cuh?)"\)', text))
    assert named <= set(cu_files(example)), (
        f"{example.name} loads {sorted(named)}; its 'Copy with it:' line names {cu_files(example)}")


def copy_alone(example: Path, dst: Path) -> Path:
    shutil.copy(example, dst / example.name)
    for cu in cu_files(example):
        shutil.copy(ROOT / "kernels" / "cuda" / cu, dst / cu)
    (dst / "kernels.py").write_text(POISON)
    return dst / example.name


def copy_with_fault(example: str, file: str, old: str, new: str, dst: Path) -> Path:
    """copy_alone, then old -> new in `file` of the copy (the example or a .cu it loads)."""
    script = copy_alone(ROOT / "examples" / example, dst)
    target = dst / file
    text = target.read_text()
    assert text.count(old) >= 1, f"{old!r} not in {file}"
    target.write_text(text.replace(old, new))
    return script


def alone_env() -> dict:
    """The environment of a run outside the repository: Numba's simulator
    without a GPU; the site dir of a PYTHONPATH-installed numpy (the GPU
    machine's wheels) kept, but never the repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    if "NUMBA_ENABLE_CUDASIM" not in env and not _gpu():
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p).resolve() != ROOT]
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(extra)
    return env


def run_alone(script: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script.name, *args], cwd=script.parent, env=alone_env(),
                          capture_output=True, text=True, timeout=900)


def _gpu() -> bool:
    from kernels.device import has_gpu

    return has_gpu()


def test_there_are_examples():
    assert EXAMPLES, "examples/ is empty"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_has_docstring_and_main(example):
    text = example.read_text()
    assert "Run:" in text, "the example says how to run it"
    assert "def main(" in text and 'if __name__ == "__main__":' in text


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_imports_only_what_a_reader_has(example):
    tree = ast.parse(example.read_text())
    bad = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for n in names:
            top = n.split(".")[0]
            if top not in ALLOWED and top not in sys.stdlib_module_names:
                bad.append(n)
    assert not bad, f"{example.name} imports {bad}"
    assert "sys.path" not in example.read_text(), "no sys.path hacks"


def test_examples_share_the_library_text():
    bad = sync.drift()
    assert not bad, "examples whose shared sections differ from the library " \
        "(run `python -m tests.sync`):\n" + "\n".join(f"{e.name}:{n} <- {lib.name}" for e, n, lib in bad)
    assert sync.shared(), "no example shares a section with the library"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_alone_numba(example, tmp_path):
    script = copy_alone(example, tmp_path)
    proc = run_alone(script, "--size", SMALL, "--impl", "numba")
    assert proc.returncode == 0, f"{example.name} failed when copied alone:\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.gpu
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_alone_cupy(example, tmp_path):
    script = copy_alone(example, tmp_path)
    proc = run_alone(script, "--size", SMALL, "--impl", "cupy")
    assert proc.returncode == 0, f"{example.name} failed when copied alone:\n{proc.stdout}\n{proc.stderr}"
    assert "skipped" not in proc.stdout.lower()


def fault_params():
    out = []
    for ex, faults in FAULTS.items():
        for k, (file, old, new, impl) in enumerate(faults):
            marks = [pytest.mark.gpu] if impl == "cupy" else []
            out.append(pytest.param(ex, file, old, new, impl, marks=marks, id=f"{ex}-{impl}-{k}"))
    return out


def test_every_example_has_planted_faults():
    names = {p.name for p in EXAMPLES}
    assert set(FAULTS) == names, f"examples without planted faults: {sorted(names - set(FAULTS))}"
    for ex, faults in FAULTS.items():
        impls = {f[3] for f in faults}
        assert "cupy" in impls, f"{ex}: no planted fault in its CUDA C path"


@pytest.mark.slow
@pytest.mark.parametrize("example,file,old,new,impl", fault_params())
def test_example_exits_nonzero_on_a_planted_fault(example, file, old, new, impl, tmp_path):
    script = copy_with_fault(example, file, old, new, tmp_path)
    proc = run_alone(script, "--size", SMALL, "--impl", impl)
    assert proc.returncode != 0, (f"{example} exited 0 with `{old}` -> `{new}` in {file}:\n"
                                  f"{proc.stdout[-2000:]}")
