"""Every examples/*.py runs as a script, at a small size, and checks itself.

Each example takes `--size N` and `--impl {all,cupy,numba}`. The Numba run
works anywhere (the CUDA simulator without a GPU); the CuPy run needs a GPU.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
SMALL = "1000"


def run(example, *args):
    env = dict(os.environ)  # NUMBA_ENABLE_CUDASIM carries over; the example finds kernels/ itself
    proc = subprocess.run([sys.executable, str(example), *args], capture_output=True, text=True,
                          cwd=ROOT / "examples", env=env, timeout=600)
    assert proc.returncode == 0, f"{example.name} {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_there_are_examples():
    assert EXAMPLES, "examples/ is empty"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_numba(example):
    out = run(example, "--size", SMALL, "--impl", "numba")
    assert "max |error|" in out or "no Numba version" in out


@pytest.mark.gpu
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_cupy(example):
    out = run(example, "--size", SMALL, "--impl", "cupy")
    assert "max |error|" in out and "skipped" not in out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_has_docstring_and_main(example):
    text = example.read_text()
    assert "Run:" in text, "the example says how to run it"
    assert "def main(" in text and 'if __name__ == "__main__":' in text
