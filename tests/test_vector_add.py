"""Vector add (kernels/vector_add.py, kernels/cuda/vector_add.cu) against NumPy,
and the standalone launchers of examples/vector_add.py that the page shows.

Random float32 inputs, output poisoned with NaN before each launch, compared
with a float64 reference. Numba runs in the CUDA simulator without a GPU;
the CuPy tests need a GPU.
"""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from kernels.device import numba_simulator
from kernels.vector_add import CUPY_VARIANTS, TUNING, VARIANTS, vector_add_numba

SIZES = [1, 1000, 2**20 + 3]
RTOL = 1e-6  # one float32 rounding of a sum is 2**-24 ~ 6e-8 relative


def inputs(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def reference(a, b):
    return a.astype(np.float64) + b.astype(np.float64)


def slow_in_simulator(variant, n):
    # The simulator runs one Python thread per GPU thread: a million threads
    # take minutes. The grid-stride variant covers the same n with 2 blocks.
    return numba_simulator() and variant == "guard" and n > 10_000


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", SIZES)
def test_numba_matches_numpy(n, variant):
    if slow_in_simulator(variant, n):
        pytest.skip("one thread per element at n > 10^4 is too slow for the CUDA simulator; runs on the GPU")
    from numba import cuda

    a, b = inputs(n, seed=n)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
    vector_add_numba(cuda.to_device(a), cuda.to_device(b), out, variant=variant)
    np.testing.assert_allclose(out.copy_to_host(), reference(a, b), rtol=RTOL, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 256, 1024])
@pytest.mark.parametrize("variant", CUPY_VARIANTS + TUNING)
@pytest.mark.parametrize("n", SIZES + [2**20 + 2, 5])
def test_cupy_matches_numpy(n, variant, threads):
    import cupy as cp

    from kernels.vector_add import vector_add_cupy

    a, b = inputs(n, seed=n + threads)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    res = vector_add_cupy(cp.asarray(a), cp.asarray(b), out, threads=threads, variant=variant)
    assert res is out
    np.testing.assert_allclose(cp.asnumpy(out), reference(a, b), rtol=RTOL, atol=1e-7)


@pytest.mark.gpu
def test_cupy_allocates_output_and_handles_empty():
    import cupy as cp

    from kernels.vector_add import vector_add_cupy

    a, b = inputs(4099, seed=1)
    out = vector_add_cupy(cp.asarray(a), cp.asarray(b))
    np.testing.assert_allclose(cp.asnumpy(out), reference(a, b), rtol=RTOL, atol=1e-7)
    empty = cp.empty(0, dtype=cp.float32)
    assert vector_add_cupy(empty, empty).size == 0


@pytest.mark.gpu
def test_a_512x512_block_does_not_launch():
    """The source's 512 x 512 block: over the 1024-thread limit, the launch fails."""
    import cupy as cp

    from kernels.vector_add import cupy_kernel

    assert cp.cuda.Device().attributes["MaxThreadsPerBlock"] == 1024
    x = cp.ones(512 * 512, dtype=cp.float32)
    with pytest.raises(cp.cuda.driver.CUDADriverError):
        cupy_kernel("guard")((1,), (512, 512), (x, x, x, np.int64(x.size)))
        cp.cuda.Device().synchronize()


# ------------------------------------------------------------ bad inputs --

def bad_calls(xp_asarray, wrap):
    """(description, call, exception, words the message must contain)."""
    a = xp_asarray(np.ones(8, dtype=np.float32))
    b = xp_asarray(np.ones(8, dtype=np.float32))
    host = np.ones(8, dtype=np.float32)
    return [
        ("host a", lambda: wrap(host, b), TypeError, ["a", "host"]),
        ("host b", lambda: wrap(a, host), TypeError, ["b", "host"]),
        ("list a", lambda: wrap([1.0] * 8, b), TypeError, ["a"]),
        ("float64 a", lambda: wrap(xp_asarray(np.ones(8)), b), TypeError, ["a", "float32", "float64"]),
        ("int32 b", lambda: wrap(a, xp_asarray(np.ones(8, dtype=np.int32))), TypeError, ["b", "float32"]),
        ("2-D a", lambda: wrap(xp_asarray(np.ones((2, 4), dtype=np.float32)), b), ValueError, ["a", "1-D"]),
        ("strided a", lambda: wrap(xp_asarray(np.ones(16, dtype=np.float32))[::2], b), ValueError, ["a", "contiguous"]),
        ("shape mismatch", lambda: wrap(a, xp_asarray(np.ones(9, dtype=np.float32))), ValueError, ["b", "shape"]),
        ("out shape", lambda: wrap(a, b, xp_asarray(np.ones(7, dtype=np.float32))), ValueError, ["out", "shape"]),
        ("out dtype", lambda: wrap(a, b, xp_asarray(np.ones(8))), TypeError, ["out", "float32"]),
        ("threads 100", lambda: wrap(a, b, threads=100), ValueError, ["threads", "32"]),
        ("threads 2048", lambda: wrap(a, b, threads=2048), ValueError, ["threads", "1024"]),
        ("variant", lambda: wrap(a, b, variant="fast"), ValueError, ["variant"]),
    ]


def check_bad(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


@pytest.mark.parametrize("case", range(13))
def test_numba_wrapper_rejects_bad_input(case):
    from numba import cuda

    def to_dev(x):
        return cuda.to_device(np.ascontiguousarray(x))

    def strided_ok(x):  # keep the strided view strided on the device
        return cuda.to_device(x)

    desc, call, exc, words = bad_calls(strided_ok, vector_add_numba)[case]
    check_bad(call, exc, words)


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(13))
def test_cupy_wrapper_rejects_bad_input(case):
    import cupy as cp

    from kernels.vector_add import vector_add_cupy

    desc, call, exc, words = bad_calls(cp.asarray, vector_add_cupy)[case]
    check_bad(call, exc, words)


def test_grid_stride_sass_issues_eight_loads_before_a_store():
    """docs/programming-model*.md: the unrolled grid-stride loop issues all
    eight loads of an iteration before its first store."""
    from kernels import sass

    if not sass.available():
        pytest.skip("needs nvcc, cuobjdump and nvdisasm")
    ops = [ln.split("*/ ", 1)[1].split()[0].split(".")[0] for ln in sass.sass("vector_add.cu", "vector_add_grid_stride")]
    longest, run = 0, 0
    for op in ops:
        if op == "LDG":
            run += 1
            longest = max(longest, run)
        elif op == "STG":
            run = 0
    assert longest >= 8, ops


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ("vec4",) + TUNING)
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_cupy_vec4_on_misaligned_views(variant, offset):
    """Views that start 4, 8 or 12 bytes into an allocation cannot take
    float4 loads: the wrapper falls back to the scalar loop, still right."""
    import cupy as cp

    from kernels.vector_add import vec4_aligned, vector_add_cupy

    n = 4099
    a, b = inputs(n + offset, seed=offset)
    da, db = cp.asarray(a)[offset:], cp.asarray(b)[offset:]
    out = cp.full(n + offset, cp.nan, dtype=cp.float32)[offset:]
    assert not vec4_aligned(da, db, out)
    vector_add_cupy(da, db, out, variant=variant)
    np.testing.assert_allclose(cp.asnumpy(out), reference(a[offset:], b[offset:]), rtol=RTOL, atol=1e-7)


# ------------------------------------------- the example's own launchers --
# docs/programming-model*.md show the wrapper and launchers of
# examples/vector_add.py (self-contained: no `kernels` import), not the
# library's: they get the same checks here.

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def example():
    """examples/vector_add.py as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location("vector_add_example", ROOT / "examples" / "vector_add.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("n", [1, 1000, 1003])
def test_example_numba_launchers_match_numpy(n):
    ex = example()
    a, b = inputs(n, seed=n)
    for add in (ex.add_with_numba, ex.add_grid_stride_numba):
        np.testing.assert_allclose(add(a, b), reference(a, b), rtol=RTOL, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 256, 1024])
@pytest.mark.parametrize("n", SIZES + [5])
def test_example_cupy_wrapper_matches_numpy(n, threads):
    import cupy as cp

    a, b = inputs(n, seed=n + threads)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    res = example().vector_add_cupy(cp.asarray(a), cp.asarray(b), out, threads=threads)
    assert res is out
    np.testing.assert_allclose(cp.asnumpy(out), reference(a, b), rtol=RTOL, atol=1e-7)


@pytest.mark.gpu
def test_example_cupy_wrapper_allocates_output_and_handles_empty():
    import cupy as cp

    add = example().vector_add_cupy
    a, b = inputs(4099, seed=1)
    np.testing.assert_allclose(cp.asnumpy(add(cp.asarray(a), cp.asarray(b))), reference(a, b), rtol=RTOL, atol=1e-7)
    empty = cp.empty(0, dtype=cp.float32)
    assert add(empty, empty).size == 0


@pytest.mark.gpu
@pytest.mark.parametrize("blocks,threads", [(1, 32), (2, 64), (1024, 256), (7, 1024)])
@pytest.mark.parametrize("n", SIZES)
def test_example_cupy_grid_stride_covers_any_n(n, blocks, threads):
    a, b = inputs(n, seed=n)
    out = example().add_grid_stride_cupy(a, b, blocks, threads)
    np.testing.assert_allclose(out, reference(a, b), rtol=RTOL, atol=1e-7)


@pytest.mark.gpu
def test_example_one_block_up_to_the_limit():
    import cupy as cp

    add_in_one_block = example().add_in_one_block
    a, b = inputs(1024, seed=2)
    np.testing.assert_allclose(add_in_one_block(a, b, (1024,)), reference(a, b), rtol=RTOL, atol=1e-7)
    for block, n in (((512, 512), 512 * 512), ((2048,), 2048)):
        x = np.ones(n, dtype=np.float32)
        with pytest.raises(cp.cuda.driver.CUDADriverError):
            add_in_one_block(x, x, block)


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(12))  # the 13th, `variant`, is the library's only
def test_example_cupy_wrapper_rejects_bad_input(case):
    import cupy as cp

    desc, call, exc, words = bad_calls(cp.asarray, example().vector_add_cupy)[case]
    check_bad(call, exc, words)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/vector_add.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("vector_add.py", "out[i] = a[i] + b[i]", "out[i] = a[i] - b[i]", "numba"),
    ("vector_add.cu", "out[i] = a[i] + b[i];", "out[i] = a[i] * b[i];", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/vector_add.py:numba_launch:add_with_numba": (
        "(n + threads - 1) // threads", "n // threads",
        "+ -> - in the rounding drops a block, which the bounds guard hides only when n is a multiple"),
    "examples/vector_add.py:cupy_wrapper:vector_add_cupy": (
        "(n + threads - 1) // threads", "n // threads", "as add_with_numba"),
    "examples/vector_add.py:too_big_block:add_in_one_block": (
        "np.int64(a.size)", "np.int64(a.size - 1)", "a second block of the grid is idled by the guard"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import vector_add as va
    from tests.overlap import cupy_case, numba_case, ex, N, N1

    return [
        cupy_case("vector_add_cupy", call=lambda i, out: va.vector_add_cupy(i["a"], i["b"], out, variant="guard"),
            inputs={"a": (N,), "b": (N,)}, out_shape=(N,)),
        cupy_case("examples/vector_add.vector_add_cupy",
            call=lambda i, out: ex("vector_add.vector_add_cupy")(i["a"], i["b"], out),
            inputs={"a": (N,), "b": (N,)}, out_shape=(N,)),
        numba_case("vector_add_numba", call=lambda i, out: va.vector_add_numba(i["a"], i["b"], out, threads=32),
            inputs={"a": (N1,), "b": (N1,)}, out_shape=(N1,)),
    ]
