"""The memory-hierarchy kernels (kernels/memory.py, kernels/cuda/memory.cu).

- The pointer chases must end on the node the chain predicts after
  warm + steps loads (a chase that skipped or repeated a load would not).
- The energy kernels must compute what their closed forms say.
- Strided / misaligned copies and AoS / SoA are exact (they only move or
  scale floats), at odd sizes, with outputs poisoned with NaN.
Numba versions run in the CUDA simulator at tiny sizes; CuPy needs a GPU.
"""

import numpy as np
import pytest

from kernels import memory
from kernels.device import numba_simulator

STRIDES = [1, 2, 3, 8, 32]
OFFSETS = [0, 1, 7, 32]


def walk(succ, node, count):
    for _ in range(count):
        node = succ[node]
    return node


def test_random_cycle_visits_every_node_once():
    for nodes in (1, 2, 7, 1000):
        succ = memory.random_cycle(nodes, seed=nodes)
        seen, node = set(), 0
        for _ in range(nodes):
            seen.add(int(node))
            node = succ[node]
        assert node == 0 and len(seen) == nodes


# ------------------------------------------------------------- CuPy ----

@pytest.mark.gpu
@pytest.mark.parametrize("l2_only", [False, True])
@pytest.mark.parametrize("nbytes,stride,steps", [(128, 128, 5), (16 << 10, 128, 1000), (1 << 20, 256, 333)])
def test_global_chase_ends_where_the_chain_says(nbytes, stride, steps, l2_only):
    import cupy as cp

    buf, start = memory.chain_global(nbytes, stride, seed=3)
    # the chain itself: every node points at its successor's address
    succ = memory.random_cycle(nbytes // stride, seed=3)
    host = cp.asnumpy(buf).reshape(-1, stride // 8)[:, 0]
    np.testing.assert_array_equal(host, start + succ.astype(np.uint64) * stride)
    r = memory.latency_global(nbytes, stride=stride, steps=steps, l2_only=l2_only, seed=3)
    nodes = nbytes // stride
    assert r["warm"] == nodes  # by default a chain this short is walked once untimed
    want = walk(succ, 0, r["warm"] + steps)
    assert r["end"] == want * stride
    assert r["cycles"] > 0 and r["ns"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("nbytes,warm,want_warm", [(16 << 10, 0, 0), (16 << 10, 7, 7), (1 << 26, None, 1 << 19),
                                                   ((1 << 26) + 128, None, 0)])
def test_global_chase_reports_its_warm_up(nbytes, warm, want_warm):
    """The result says how many untimed loads came first (the bench predicts
    where the chase stops from it): as asked, or by default one walk of a
    chain of at most 2^19 nodes and none beyond."""
    r = memory.latency_global(nbytes, steps=100, warm=warm, seed=4)
    assert r["warm"] == want_warm
    assert r["end"] == walk(memory.random_cycle(r["nodes"], seed=4), 0, want_warm + 100) * 128
    with pytest.raises(ValueError, match="warm"):
        memory.latency_global(nbytes, steps=100, warm=-1)


@pytest.mark.gpu
@pytest.mark.parametrize("entries,steps", [(1, 10), (100, 1000), (memory.CHASE_SHARED_MAX, 4096)])
def test_shared_chase_ends_where_the_chain_says(entries, steps):
    r = memory.latency_shared(entries, steps=steps, seed=5)
    succ = memory.random_cycle(entries, seed=5)
    assert r["end"] == 4 * walk(succ, 0, entries + steps)
    assert r["cycles"] > 0


@pytest.mark.gpu
def test_read_global_sums_every_element_reps_times():
    import cupy as cp

    x = cp.random.default_rng(0).random(4 * 4096, dtype=cp.float32)
    blocks, threads = 5, 64
    out = cp.full(blocks * threads, cp.nan, dtype=cp.float32)
    memory.read_global_cupy(x, 3, out, blocks=blocks, threads=threads)
    want = 3 * float(cp.sum(x, dtype=cp.float64))
    assert abs(float(cp.sum(out, dtype=cp.float64)) - want) <= 1e-5 * want


@pytest.mark.gpu
def test_read_shared_matches_its_indexing():
    import cupy as cp

    x = cp.random.default_rng(1).random(4 * memory.READ_SHARED_F4, dtype=cp.float32)
    blocks, threads, reps = 3, 64, 40
    out = cp.full(blocks * threads, cp.nan, dtype=cp.float32)
    memory.read_shared_cupy(x, reps, out, blocks=blocks, threads=threads)
    x4 = cp.asnumpy(x).astype(np.float64).reshape(-1, 4).sum(axis=1)
    t = np.arange(threads)
    idx = (t[:, None] + 32 * np.arange(reps)[None, :]) & (memory.READ_SHARED_F4 - 1)
    want = np.tile(x4[idx].sum(axis=1), blocks)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-5)


@pytest.mark.gpu
def test_fma_registers_follows_the_recurrence():
    import cupy as cp

    blocks, threads, iters = 2, 128, 1000
    out = cp.full(blocks * threads, cp.nan, dtype=cp.float32)
    memory.fma_registers_cupy(iters, out, blocks=blocks, threads=threads)
    want = np.tile(memory.fma_registers_reference(iters, threads), blocks)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("stride", STRIDES)
@pytest.mark.parametrize("n", [1, 1000, 2**16 + 3])
def test_cupy_copy_strided(n, stride):
    import cupy as cp

    x = cp.random.default_rng(n).random((n - 1) * stride + 1, dtype=cp.float32)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    assert memory.copy_strided_cupy(x, out, stride) is out
    cp.testing.assert_array_equal(out, x[::stride])


@pytest.mark.gpu
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("n", [1, 1000, 2**16 + 3])
def test_cupy_copy_offset(n, offset):
    import cupy as cp

    x = cp.random.default_rng(n).random(n + offset, dtype=cp.float32)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    memory.copy_offset_cupy(x, out, offset)
    cp.testing.assert_array_equal(out, x[offset:])


def points(n, layout, seed=0):
    aos = np.random.default_rng(seed).standard_normal((n, 3), dtype=np.float32)
    return aos, (aos if layout == "aos" else np.ascontiguousarray(aos.T))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", memory.LAYOUTS)
@pytest.mark.parametrize("n", [1, 1000, 2**16 + 3])
def test_cupy_aos_soa(n, layout):
    import cupy as cp

    aos, p = points(n, layout, seed=n)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    memory.norm_cupy(cp.asarray(p), layout, out)
    np.testing.assert_allclose(cp.asnumpy(out), np.linalg.norm(aos.astype(np.float64), axis=1), rtol=1e-6)
    scaled = memory.scale_x_cupy(cp.asarray(p), layout)
    np.testing.assert_array_equal(cp.asnumpy(scaled), 2 * aos[:, 0])


@pytest.mark.gpu
def test_cupy_wrappers_reject_bad_input():
    import cupy as cp

    x = cp.zeros(100, dtype=cp.float32)
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        memory.copy_strided_cupy(np.zeros(100, np.float32), x, 1)
    with pytest.raises(TypeError, match="dtype float32"):
        memory.copy_strided_cupy(x.astype(cp.float64), x, 1)
    with pytest.raises(ValueError, match="x must hold"):
        memory.copy_strided_cupy(x, cp.zeros(51, dtype=cp.float32), 2)
    with pytest.raises(ValueError, match="stride must be in"):
        memory.copy_strided_cupy(x, x, 0)
    with pytest.raises(ValueError, match="x must hold out.size"):
        memory.copy_offset_cupy(x, x, 1)
    with pytest.raises(ValueError, match="shape"):
        memory.norm_cupy(cp.zeros((3, 5), dtype=cp.float32), "aos")
    with pytest.raises(ValueError, match="layout"):
        memory.norm_cupy(cp.zeros((5, 3), dtype=cp.float32), "aosoa")
    with pytest.raises(ValueError, match="4 \\* 2\\^k"):
        memory.read_global_cupy(cp.zeros(12, dtype=cp.float32), 1, x, blocks=1, threads=32)


# ------------------------------------------------------------ Numba ----

@pytest.mark.parametrize("stride", [1, 3, 32])
def test_numba_copy_strided(stride):
    from numba import cuda

    n = 301 if numba_simulator() else 2**16 + 3  # 3 blocks of 32 threads x 4
    x = np.random.default_rng(stride).random((n - 1) * stride + 1, dtype=np.float32)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
    memory.copy_strided_numba(cuda.to_device(x), out, stride, threads=32)
    np.testing.assert_array_equal(out.copy_to_host(), x[::stride])


@pytest.mark.parametrize("offset", [0, 1, 32])
def test_numba_copy_offset(offset):
    from numba import cuda

    n = 301 if numba_simulator() else 2**16 + 3  # 3 blocks of 32 threads x 4
    x = np.random.default_rng(offset).random(n + offset, dtype=np.float32)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
    memory.copy_offset_numba(cuda.to_device(x), out, offset, threads=32)
    np.testing.assert_array_equal(out.copy_to_host(), x[offset:])


@pytest.mark.parametrize("layout", memory.LAYOUTS)
def test_numba_aos_soa(layout):
    from numba import cuda

    n = 150 if numba_simulator() else 2**16 + 3
    aos, p = points(n, layout, seed=n)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
    memory.points_numba("norm", cuda.to_device(p), layout, out, threads=32)
    np.testing.assert_allclose(out.copy_to_host(), np.linalg.norm(aos.astype(np.float64), axis=1), rtol=1e-6)
    scaled = memory.points_numba("scale_x", cuda.to_device(p), layout, threads=32)
    np.testing.assert_array_equal(scaled.copy_to_host(), 2 * aos[:, 0])


def test_numba_chase_ends_where_the_chain_says():
    nbytes, stride = (4096, 128) if numba_simulator() else (1 << 20, 128)
    steps = 50 if numba_simulator() else 4096
    r = memory.latency_global_numba(nbytes, steps=steps, stride=stride, seed=2)
    succ = memory.random_cycle(nbytes // stride, seed=2)
    assert r["end"] == walk(succ, 0, steps) * (stride // 4)
    if not numba_simulator():
        assert r["ns"] > 0


def test_numba_wrappers_reject_bad_input():
    from numba import cuda

    x = cuda.to_device(np.zeros(10, dtype=np.float32))
    with pytest.raises(TypeError, match="CUDA device array"):
        memory.copy_strided_numba(np.zeros(10, np.float32), x, 1)
    with pytest.raises(ValueError, match="x must hold"):
        memory.copy_offset_numba(x, x, 3)
    with pytest.raises(ValueError, match="shape"):
        memory.points_numba("norm", cuda.to_device(np.zeros((4, 2), np.float32)), "soa")
    with pytest.raises(ValueError, match="op must be"):
        memory.points_numba("sum", cuda.to_device(np.zeros((4, 3), np.float32)), "aos")


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/memory.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("memory.py", "v[k] = x[i * stride]  # a warp reads", "v[k] = x[i * stride] + 1.0  # a warp reads", "numba"),
    ("memory.cu", "return 2.0f * p[i];", "return 3.0f * p[i];", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/memory.py:overlaps:overlaps": (
        "a_lo < b_hi and", "a_lo <= b_hi and",
        "(b_hi) - 1 can only matter for spans that meet at one byte, which arrays of 4-byte elements never do; "
        "<= makes arrays that merely touch overlap, which the check's out-right-after-input case refuses"),
    "examples/memory.py:numba_copy:overlaps": (
        "a_lo < b_hi and", "a_lo <= b_hi and",
        "(b_hi) - 1 can only matter for spans that meet at one byte, which arrays of 4-byte elements never do; "
        "<= makes arrays that merely touch overlap, which the check's out-right-after-x case refuses"),
    "examples/memory.py:numba_aos_soa:norm_aos_numba_kernel": (
        "p[i, 1], p[i, 2]", "p[i, 1], p[i, 1]",
        "the first - in the index sends block 0 below zero, which the simulator wraps onto the right points"),
    "examples/memory.py:numba_aos_soa:norm_soa_numba_kernel": (
        "p[1, i], p[2, i]", "p[1, i], p[1, i]", "as norm_aos_numba_kernel"),
    "kernels/cuda/memory.cu:per_thread:per_thread": (
        "blockDim.x * PER_THREAD + threadIdx.x", "blockDim.x + threadIdx.x",
        "the first < is the load guard: one element read past the end is never stored"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import memory as mem
    from tests.overlap import cupy_case, numba_case, ex, N, N4

    return [
        cupy_case("read_global_cupy", call=lambda i, out: mem.read_global_cupy(i["x"], 1, out, blocks=N // 256, threads=256),
            inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("read_shared_cupy", call=lambda i, out: mem.read_shared_cupy(i["x"], 4, out, blocks=16, threads=256),
            inputs={"x": (4096,)}, out_shape=(4096,)),
        cupy_case("copy_strided_cupy", call=lambda i, out: mem.copy_strided_cupy(i["x"], out, 2),
            inputs={"x": (2 * N - 1,)}, out_shape=(N,)),
        cupy_case("copy_offset_cupy", call=lambda i, out: mem.copy_offset_cupy(i["x"], out, 3),
            inputs={"x": (N + 3,)}, out_shape=(N,)),
        cupy_case("norm_cupy", call=lambda i, out: mem.norm_cupy(i["p"], "aos", out), inputs={"p": (N, 3)}, out_shape=(N,)),
        cupy_case("scale_x_cupy", call=lambda i, out: mem.scale_x_cupy(i["p"], "soa", out),
            inputs={"p": (3, N)}, out_shape=(N,)),
        cupy_case("examples/memory.read_global_cupy",
            call=lambda i, out: ex("memory.read_global_cupy")(i["x"], 1, out, blocks=N // 256, threads=256),
            inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("examples/memory.read_shared_cupy",
            call=lambda i, out: ex("memory.read_shared_cupy")(i["x"], 4, out, blocks=16, threads=256),
            inputs={"x": (4096,)}, out_shape=(4096,)),
        cupy_case("examples/memory.copy_strided_cupy", call=lambda i, out: ex("memory.copy_strided_cupy")(i["x"], out, 2),
            inputs={"x": (2 * N - 1,)}, out_shape=(N,)),
        cupy_case("examples/memory.copy_offset_cupy", call=lambda i, out: ex("memory.copy_offset_cupy")(i["x"], out, 3),
            inputs={"x": (N + 3,)}, out_shape=(N,)),
        cupy_case("examples/memory.points_cupy", call=lambda i, out: ex("memory.points_cupy")("norm", i["p"], "aos", out),
            inputs={"p": (N, 3)}, out_shape=(N,)),
        cupy_case("examples/memory.vector_add_vec4_cupy", shift=4,  # float4 loads: views stay 16-byte aligned
            call=lambda i, out: ex("memory.vector_add_vec4_cupy")(i["a"], i["b"], out),
            inputs={"a": (N,), "b": (N,)}, out_shape=(N,)),
        numba_case("copy_strided_numba", call=lambda i, out: mem.copy_strided_numba(i["x"], out, 2, threads=32),
            inputs={"x": (2 * N4 - 1,)}, out_shape=(N4,)),
        numba_case("copy_offset_numba", call=lambda i, out: mem.copy_offset_numba(i["x"], out, 3, threads=32),
            inputs={"x": (N4 + 3,)}, out_shape=(N4,)),
        numba_case("points_numba", call=lambda i, out: mem.points_numba("norm", i["p"], "aos", out, threads=32),
            inputs={"p": (N4, 3)}, out_shape=(N4,)),
        numba_case("examples/memory.copy_strided_numba",
            call=lambda i, out: ex("memory.copy_strided_numba")(i["x"], out, 2, threads=32),
            inputs={"x": (2 * N4 - 1,)}, out_shape=(N4,)),
        numba_case("examples/memory.norm_numba", call=lambda i, out: ex("memory.norm_numba")(i["p"], "aos", out, threads=32),
            inputs={"p": (N4, 3)}, out_shape=(N4,)),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "fma_registers_cupy": "no array input: it writes out from registers only",
}
