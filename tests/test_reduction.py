"""The reduction ladder against a float64 reference.

Inputs uniform in [0, 1) (positive, never zero), so the sum is well
conditioned; tolerance: relative error < 1e-5 (float32 accumulation over up
to a few thousand elements per thread, then a tree).
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels import reduction as red
from kernels.device import numba_simulator

ROOT = Path(__file__).resolve().parent.parent
SIZES = [1, 31, 33, 2**20 + 7]
RTOL = 1e-5


def data(n, seed=0):
    return np.random.default_rng(seed).random(n, dtype=np.float32)


def close(got, x):
    want = x.astype(np.float64).sum()
    assert abs(got - want) <= RTOL * want, (got, want)


def sim_skip(variant, n):
    if variant in red.NUMBA_GPU_ONLY and numba_simulator():
        pytest.skip("warp shuffles: GPU only (the CUDA simulator has no warp-level operations)")
    if numba_simulator() and n > 5000 and variant != "grid_stride":
        pytest.skip("one block per 256 elements at n > 5000 is too slow for the CUDA simulator; runs on the GPU")


@pytest.mark.parametrize("variant", list(red.NUMBA_KERNELS))
@pytest.mark.parametrize("n", SIZES)
def test_numba_ladder(n, variant):
    sim_skip(variant, n)
    from numba import cuda

    x = data(n, seed=n)
    threads = 64 if numba_simulator() else 256
    out = red.reduce_sum_numba(cuda.to_device(x), variant=variant, threads=threads)
    close(float(out.copy_to_host()[0]), x)


CUPY_CASES = [(n, v, t) for v in red.VARIANTS + red.TUNING for n in SIZES for t in (64, 256, 1024)] + \
             [(2**28, v, None) for v in red.VARIANTS + red.TUNING]  # the largest size once, default launch


@pytest.mark.gpu
@pytest.mark.parametrize("n,variant,threads", CUPY_CASES)
def test_cupy_ladder(n, variant, threads):
    import cupy as cp

    x = data(n, seed=n)
    got = red.reduce_sum_cupy(cp.asarray(x), variant=variant, threads=threads)
    assert got.shape == () and got.dtype == np.float32
    close(float(got), x)


@pytest.mark.gpu
def test_cupy_sum_agrees_and_empty():
    import cupy as cp

    x = cp.asarray(data(4099))
    assert float(red.reduce_sum_cupy(x)) == pytest.approx(float(cp.sum(x)), rel=RTOL)
    assert float(red.reduce_sum_cupy(cp.empty(0, dtype=cp.float32))) == 0.0


@pytest.mark.gpu
def test_bad_inputs_cupy():
    import cupy as cp

    x = cp.ones(64, dtype=cp.float32)
    with pytest.raises(TypeError, match="x"):
        red.reduce_sum_cupy(np.ones(64, dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        red.reduce_sum_cupy(x.astype(cp.float64))
    with pytest.raises(ValueError, match="1-D"):
        red.reduce_sum_cupy(x.reshape(8, 8))
    with pytest.raises(ValueError, match="contiguous"):
        red.reduce_sum_cupy(x[::2])
    with pytest.raises(ValueError, match="power of two"):
        red.reduce_sum_cupy(x, threads=96)
    with pytest.raises(ValueError, match="variant"):
        red.reduce_sum_cupy(x, variant="fastest")


def test_example_checks_every_step_of_the_ladder():
    """The page's CUDA C check (examples/reduction.py: reduce_sum_cupy and
    cupy_ladder, self-contained copies of the launch logic) runs the
    library's whole ladder, in the same order."""
    tree = ast.parse((ROOT / "examples" / "reduction.py").read_text())
    found = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "VARIANTS" for t in node.targets)]
    assert found == [red.VARIANTS]


def test_bad_inputs_numba():
    from numba import cuda

    x = cuda.to_device(np.ones(64, dtype=np.float32))
    with pytest.raises(TypeError, match="host"):
        red.reduce_sum_numba(np.ones(64, dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        red.reduce_sum_numba(cuda.to_device(np.ones(64)))
    with pytest.raises(ValueError, match="power of two"):
        red.reduce_sum_numba(x, threads=96)
    with pytest.raises(ValueError, match="variant"):
        red.reduce_sum_numba(x, variant="vectorized")


def test_warp_shuffle_refuses_the_simulator():
    """Run where Numba is the simulator (a subprocess forces it on a GPU machine)."""
    code = ("import kernels, numpy as np, pytest\n"
            "from numba import cuda\n"
            "from kernels.reduction import reduce_sum_numba\n"
            "with pytest.raises(RuntimeError, match='GPU'):\n"
            "    reduce_sum_numba(cuda.to_device(np.ones(64, dtype=np.float32)), variant='warp_shuffle')\n")
    env = dict(os.environ, HANDBOOK_FORCE_CPU="1", NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


MISSING_BARRIER = r'''
import cupy as cp, numpy as np
src = r"""
extern "C" __global__ void reduce_no_barrier(const float* x, float* partial, long long n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        /* __syncthreads() missing: the next round reads what this one writes */
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}
"""
k = cp.RawKernel(src, "reduce_no_barrier")
x = cp.ones(1 << 16, dtype=cp.float32)
p = cp.empty(256, dtype=cp.float32)
k((256,), (256,), (x, p, np.int64(x.size)), shared_mem=256 * 4)
cp.cuda.Device().synchronize()
'''


@pytest.mark.gpu
def test_racecheck_catches_a_missing_barrier(tmp_path):
    """The sanitizer run of `make sanitize` is not vacuous: racecheck reports
    the hazard of the sequential-addressing kernel without its barrier."""
    script = tmp_path / "race.py"
    script.write_text(MISSING_BARRIER)
    proc = subprocess.run(["compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "1",
                           sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "hazard" in out.lower(), out


@pytest.mark.gpu
def test_single_pass_ticket_is_left_at_zero():
    import cupy as cp

    x = cp.asarray(data(2**20 + 7, seed=5))
    a = float(red.reduce_sum_cupy(x, variant="single_pass"))
    b = float(red.reduce_sum_cupy(x, variant="single_pass"))
    assert a == b  # the same blocks, the same order inside each block: identical partials
    assert int(red._ticket(cp.cuda.Device().id, cp.cuda.get_current_stream().ptr)[0]) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["vectorized", "single_pass", "single_pass_streaming"])
@pytest.mark.parametrize("offset", [1, 2, 3, 5])
def test_misaligned_views_are_summed(variant, offset):
    """A view that is not 16-byte aligned (x[1:]) is summed as cupy.sum sums
    it: a scalar head, then the float4 body."""
    import cupy as cp

    base = cp.asarray(data(2**20 + 9, seed=offset))
    for x in (base[offset:], base[offset:offset + 2], base[offset:offset + 37]):
        assert x.data.ptr % 16
        got = float(red.reduce_sum_cupy(x, variant=variant))
        want = float(cp.sum(x.astype(cp.float64)))
        assert abs(got - want) <= 1e-5 * max(1.0, float(cp.sum(cp.abs(x.astype(cp.float64))))), (x.size, got, want)


@pytest.mark.gpu
def test_concurrent_single_pass_reductions_on_many_streams():
    """Many single-pass reductions in flight at once on several streams, over
    and over: every sum is right (each stream has its own ticket)."""
    import cupy as cp

    sizes = [2**20 + 7 * k for k in range(8)]
    xs = [cp.asarray(data(n, seed=k)) for k, n in enumerate(sizes)]
    want = [float(cp.sum(x.astype(cp.float64))) for x in xs]
    scale = [float(cp.sum(cp.abs(x.astype(cp.float64)))) for x in xs]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in xs]
    for _ in range(50):
        outs = []
        for s, x in zip(streams, xs):
            with s:
                outs.append(red.reduce_sum_cupy(x, variant="single_pass"))
        for s in streams:
            s.synchronize()
        for got, w, sc in zip(outs, want, scale):
            assert abs(float(got) - w) <= 1e-5 * sc, (float(got), w)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/reduction.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("reduction.py",
     "for i in range(cuda.grid(1), n, cuda.gridsize(1)):",
     "for i in range(cuda.grid(1), n - 1, cuda.gridsize(1)):",
     "numba"),
    ("reduction.cu", "v += x[i];", "v -= x[i];", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/reduction.py:cupy_sum:reduce_sum_cupy": (
        "(n + per_block - 1) // per_block", "n // per_block", "as seed_cupy"),
}
