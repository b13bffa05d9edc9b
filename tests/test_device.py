"""Target selection: no GPU means Numba's simulator, a GPU means hardware."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.device import has_gpu, numba_simulator

ROOT = Path(__file__).resolve().parent.parent


def test_target_matches_the_machine():
    if has_gpu() and numba_simulator():
        pytest.skip("NUMBA_ENABLE_CUDASIM=1 was set by hand on a GPU machine")
    assert numba_simulator() == (not has_gpu())


def test_forced_cpu_selects_the_simulator():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["HANDBOOK_FORCE_CPU"] = "1"
    code = "import kernels, os; from numba import cuda; print(os.environ['NUMBA_ENABLE_CUDASIM'], cuda.simulator_available if hasattr(cuda, 'simulator_available') else '')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "1"


@pytest.mark.gpu
def test_gpu_machine_uses_hardware():
    from numba import cuda

    assert cuda.is_available()
    assert not numba_simulator()


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "kernels/device.py:kernel_attributes:driver_blocks_per_sm": (
        "threads, dynamic_smem))", "threads, 0))", "no arithmetic of its own: drop the shared memory"),
}
