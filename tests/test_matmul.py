"""The matmul ladder against a float64 reference.

Inputs are standard normal (never zeros), the output is poisoned with NaN
before each launch (an element left unwritten fails), and the error is the
relative Frobenius norm against A @ B in float64: < 1e-5.
Sizes: 1x1x1, 33x65x17 and 1000x1013x77 (tails of every tile) and 4096^3
on the GPU; the simulator runs the Numba steps at the two small sizes.

The second half checks the self-contained launchers of examples/matmul.py,
which docs/matmul*.md show (no `kernels` import there).
"""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from kernels import harness, matmul as mm
from kernels.device import numba_simulator
from numba import cuda, float32  # after `kernels`, which picks the simulator without a GPU

SHAPES = [(1, 1, 1), (33, 65, 17), (1000, 1013, 77)]  # (M, N, K)
RTOL = 1e-5


def operands(M, N, K, seed=0):
    rng = np.random.default_rng(seed + M + 7 * N + 13 * K)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    return A, B


def rel_err(C, A, B):
    ref = A.astype(np.float64) @ B.astype(np.float64)
    return np.linalg.norm(np.asarray(C, dtype=np.float64) - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("variant", list(mm.NUMBA_KERNELS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_numba_ladder(shape, variant):
    if numba_simulator() and shape[0] * shape[1] > 5000:
        pytest.skip("1000x1013 outputs is too slow for the CUDA simulator; runs on the GPU")
    from numba import cuda

    A, B = operands(*shape)
    C = cuda.to_device(np.full(shape[:2], np.nan, dtype=np.float32))
    out = mm.matmul_numba(cuda.to_device(A), cuda.to_device(B), C, variant=variant)
    assert out is C
    assert rel_err(C.copy_to_host(), A, B) < RTOL


@functools.cache
def gpu_case(shape):
    """Operands on the GPU and their float64 product (computed once per shape)."""
    import cupy as cp

    A, B = (cp.asarray(x) for x in operands(*shape))
    return A, B, cp.matmul(A.astype(cp.float64), B.astype(cp.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", mm.VARIANTS)
@pytest.mark.parametrize("shape", SHAPES + [(4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_cupy_ladder(shape, variant):
    import cupy as cp

    A, B, ref = gpu_case(shape)
    C = cp.full(shape[:2], cp.nan, dtype=cp.float32)
    assert mm.matmul_cupy(A, B, C, variant=variant) is C
    assert harness.rel_err(C, ref) < RTOL


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(mm.NUMBA_KERNELS))
def test_numba_4096(variant):
    import cupy as cp
    from numba import cuda

    A, B, ref = gpu_case((4096, 4096, 4096))
    C = cp.full((4096, 4096), cp.nan, dtype=cp.float32)
    mm.matmul_numba(cuda.as_cuda_array(A), cuda.as_cuda_array(B), cuda.as_cuda_array(C), variant=variant)
    assert harness.rel_err(C, ref) < RTOL


@pytest.mark.gpu
def test_warptiled_configs_of_the_sweep():
    """Every configuration the bench sweeps is correct on a tail shape."""
    import cupy as cp

    from kernels.matmul import CONFIGS

    for shape in ((1000, 1013, 77), (1, 1, 1), (256, 512, 64)):
        A, B, ref = gpu_case(shape)
        for cfg in CONFIGS:
            C = cp.full(shape[:2], cp.nan, dtype=cp.float32)
            mm.matmul_warptiled_config(A, B, C, cfg)
            assert harness.rel_err(C, ref) < RTOL, (shape, mm.config_name(cfg))


@pytest.mark.gpu
def test_misaligned_views_take_the_scalar_path():
    """A view starting one float into its buffer is C-contiguous but not
    16-byte aligned: the float4 steps must fall back to scalar loads."""
    import cupy as cp

    A0, B0 = operands(129, 131, 67)
    a = cp.asarray(np.concatenate([[1.0], A0.ravel()]).astype(np.float32))[1:].reshape(A0.shape)
    b = cp.asarray(np.concatenate([[1.0], B0.ravel()]).astype(np.float32))[1:].reshape(B0.shape)
    assert a.data.ptr % 16 and b.data.ptr % 16
    for variant in ("vectorized", "double_buffered", "warptiled"):
        C = cp.full((129, 131), cp.nan, dtype=cp.float32)
        mm.matmul_cupy(a, b, C, variant=variant)
        assert rel_err(C.get(), A0, B0) < RTOL, variant


@pytest.mark.gpu
def test_cupy_allocates_c():
    import cupy as cp

    A, B = (cp.asarray(x) for x in operands(65, 33, 17))
    C = mm.matmul_cupy(A, B)
    assert C.shape == (65, 33) and C.dtype == cp.float32
    assert rel_err(C.get(), A.get(), B.get()) < RTOL


@pytest.mark.gpu
def test_bad_inputs_cupy():
    import cupy as cp

    A = cp.ones((8, 4), dtype=cp.float32)
    B = cp.ones((4, 6), dtype=cp.float32)
    C = cp.empty((8, 6), dtype=cp.float32)
    with pytest.raises(TypeError, match="A .*host"):
        mm.matmul_cupy(np.ones((8, 4), dtype=np.float32), B, C)
    with pytest.raises(TypeError, match="B must have dtype float32"):
        mm.matmul_cupy(A, B.astype(cp.float64), C)
    with pytest.raises(ValueError, match="C must be 2-D"):
        mm.matmul_cupy(A, B, C.ravel())
    with pytest.raises(ValueError, match="inner dimensions"):
        mm.matmul_cupy(A, cp.ones((5, 6), dtype=cp.float32), C)
    with pytest.raises(ValueError, match="A must be C-contiguous"):
        mm.matmul_cupy(cp.ones((4, 8), dtype=cp.float32).T, B, C)
    with pytest.raises(ValueError, match=r"C must have shape \(8, 6\)"):
        mm.matmul_cupy(A, B, cp.empty((6, 8), dtype=cp.float32))
    with pytest.raises(ValueError, match="variant"):
        mm.matmul_cupy(A, B, C, variant="fastest")


def test_bad_inputs_numba():
    from numba import cuda

    A = cuda.to_device(np.ones((8, 4), dtype=np.float32))
    B = cuda.to_device(np.ones((4, 6), dtype=np.float32))
    C = cuda.device_array((8, 6), dtype=np.float32)
    with pytest.raises(TypeError, match="A .*host"):
        mm.matmul_numba(np.ones((8, 4), dtype=np.float32), B, C)
    with pytest.raises(TypeError, match="B must have dtype float32"):
        mm.matmul_numba(A, cuda.to_device(np.ones((4, 6))), C)
    with pytest.raises(ValueError, match="inner dimensions"):
        mm.matmul_numba(A, cuda.to_device(np.ones((5, 6), dtype=np.float32)), C)
    with pytest.raises(ValueError, match="C must have shape"):
        mm.matmul_numba(A, B, cuda.device_array((6, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="variant"):
        mm.matmul_numba(A, B, C, variant="warptiled")


def test_dimension_limits():
    """Shapes are checked before anything touches the device."""

    class Fake:  # only what check_operands reads of a device array
        dtype = np.float32
        flags = {"C_CONTIGUOUS": True}
        strides = ()

        def __init__(self, *shape):
            self.shape = shape

    with pytest.raises(ValueError, match=">= 1"):
        mm.check_operands(Fake(0, 4), Fake(4, 3), Fake(0, 3), lib=None)
    with pytest.raises(ValueError, match="2\\^31"):
        mm.check_operands(Fake(1 << 16, 1 << 15), Fake(1 << 15, 2), Fake(1 << 16, 2), lib=None)


def test_grid_covers_c():
    for variant in mm.VARIANTS:
        blocks, _ = mm.grid(variant, 1000, 1013)
        bm, bn, _ = mm._BLOCK_TILE[variant]
        rows, cols = (blocks[0], blocks[1]) if variant == "naive" else (blocks[1], blocks[0])
        assert rows * bm >= 1000 and cols * bn >= 1013
        assert (rows - 1) * bm < 1000 and (cols - 1) * bn < 1013


# ------------------------------------------- the example's own launchers --
# docs/matmul*.md show the launchers and checks of examples/matmul.py, not
# the library's wrappers: they must launch the same configurations, and
# their checks must fail on a wrong answer.

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def example():
    """examples/matmul.py as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location("matmul_example", ROOT / "examples" / "matmul.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_launches_the_steps_the_bench_measures():
    """Same steps, in ladder order, with the library's block tile and block size;
    the template configurations it checks are ones the tuning sweep runs."""
    from kernels.matmul import CONFIGS

    ex = example()
    assert tuple(ex.STEPS) == mm.VARIANTS
    for variant, (bm, bn, threads) in ex.STEPS.items():
        lbm, lbn, lthreads = mm._BLOCK_TILE[variant]
        assert (bm, bn) == (lbm, lbn), variant
        assert threads == (lthreads if isinstance(lthreads, tuple) else (lthreads,)), variant
    assert set(ex.CONFIGS) <= set(CONFIGS)


def test_example_check_fails_on_a_wrong_or_unwritten_element():
    ex = example()
    A, B = operands(5, 7, 3)
    C = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    assert ex.check_matmul(C, A, B) < 1e-5
    for bad in (np.nan, C[2, 3] + 1.0):
        wrong = C.copy()
        wrong[2, 3] = bad
        with pytest.raises(AssertionError):
            ex.check_matmul(wrong, A, B)


def test_example_numba_steps():
    """Every Numba step through the example's launcher, at 33x17x29 and 1x1x1."""
    example().numba_ladder(((33, 17, 29), (1, 1, 1)))


@cuda.jit
def no_tail_kernel(A, B, C, M, N, K):
    """The naive Numba step with a bug: it never writes the last row of C."""
    col, row = cuda.grid(2)
    if row < M - 1 and col < N:
        acc = float32(0.0)
        for k in range(K):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


def test_example_numba_check_catches_a_kernel_that_skips_the_tail():
    with pytest.raises(AssertionError):
        example().check_numba(no_tail_kernel, (16, 16), (16, 16), shapes=((33, 17, 29),))


@pytest.mark.gpu
def test_example_cupy_ladder():
    """Every CUDA C step and the template through the example's launcher, at
    the shapes the page checks (tails, 1x1x1, whole tiles, unaligned views)."""
    example().cupy_ladder()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 1013, 77, 0), (256, 512, 64, 0), (260, 264, 68, 1)],
                         ids=lambda s: "x".join(map(str, s[:3])) + ("-unaligned" if s[3] else ""))
def test_example_template_at_every_configuration_of_the_sweep(shape):
    from kernels.matmul import CONFIGS

    ex = example()
    M, N, K, offset = shape
    for cfg in CONFIGS:
        assert ex.check_cupy(cfg, M, N, K, offset=offset) < 1e-2, mm.config_name(cfg)


@pytest.mark.gpu
def test_example_cupy_allocates_c_and_rejects_bad_input():
    import cupy as cp

    f = example().matmul_cupy
    A, B = (cp.asarray(x) for x in operands(65, 33, 17))
    C = f(A, B)
    assert C.shape == (65, 33) and C.dtype == cp.float32
    assert rel_err(C.get(), A.get(), B.get()) < RTOL
    a = cp.ones((8, 4), dtype=cp.float32)
    b = cp.ones((4, 6), dtype=cp.float32)
    c = cp.empty((8, 6), dtype=cp.float32)
    cases = [
        (lambda: f(np.ones((8, 4), dtype=np.float32), b, c), TypeError, "A must be a cupy.ndarray"),
        (lambda: f(a, b.astype(cp.float64), c), TypeError, "B must have dtype float32"),
        (lambda: f(a, b, c.ravel()), ValueError, "C must be 2-D"),
        (lambda: f(a, cp.ones((5, 6), dtype=cp.float32), c), ValueError, "inner dimensions"),
        (lambda: f(cp.ones((4, 8), dtype=cp.float32).T, b, c), ValueError, "A must be C-contiguous"),
        (lambda: f(a, b, cp.empty((6, 8), dtype=cp.float32)), ValueError, r"C must have shape \(8, 6\)"),
        (lambda: f(a, b, c, variant="fastest"), ValueError, "variant"),
        (lambda: f(cp.ones((0, 4), dtype=cp.float32), b), ValueError, ">= 1"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


# ------------------------------------------- outputs that alias inputs --

def _overlap_cases(to_device, n):
    """(A, B, C, should_raise, name of the input C overlaps): C equal to A,
    C a view half a matrix into A's buffer, C equal to B, and C right after
    A in the same buffer (adjacent, sharing no byte: allowed)."""
    buf = to_device(np.random.default_rng(n).standard_normal(3 * n * n, dtype=np.float32))
    A = buf[:n * n].reshape(n, n)
    B = buf[2 * n * n:].reshape(n, n)
    return [(A, B, A, True, "A"), (A, B, buf[n * n // 2:n * n // 2 + n * n].reshape(n, n), True, "A"),
            (A, B, B, True, "B"), (A, B, buf[n * n:2 * n * n].reshape(n, n), False, None)]


def _check_overlap_cases(matmul, to_device, n, host):
    for A, B, C, should_raise, name in _overlap_cases(to_device, n):
        if should_raise:
            with pytest.raises(ValueError, match=f"C must not overlap {name}"):
                matmul(A, B, C)
        else:
            assert matmul(A, B, C) is C
            assert rel_err(host(C), host(A), host(B)) < RTOL


@pytest.mark.gpu
@pytest.mark.parametrize("wrapper", ["matmul_cupy", "matmul_warptiled_config", "cublas_matmul",
                                     "matmul_source001", "example matmul_cupy", "example matmul_source001",
                                     "matmul (dispatch)", "matmul (split K)"])
def test_cupy_wrappers_reject_c_overlapping_a_or_b(wrapper):
    """At 512^3 (256 blocks of the 32 x 32 steps, 16 of the 128 x 128 ones):
    a kernel run on an aliased C would overwrite A or B under other blocks."""
    import cupy as cp
    from kernels.matmul import CONFIGS

    calls = {"matmul_cupy": mm.matmul_cupy, "cublas_matmul": mm.cublas_matmul,
             "matmul_warptiled_config": lambda A, B, C: mm.matmul_warptiled_config(A, B, C, CONFIGS[0]),
             "matmul_source001": mm.matmul_source001,
             "example matmul_cupy": example().matmul_cupy, "example matmul_source001": example().matmul_source001,
             "matmul (dispatch)": mm.matmul,
             "matmul (split K)": lambda A, B, C: mm.matmul(A, B, C, force=("64x64", 4))}
    _check_overlap_cases(calls[wrapper], cp.asarray, 512, lambda x: x.get())


def test_numba_wrapper_rejects_c_overlapping_a_or_b():
    """64^3 with 16 x 16 tiles is 16 blocks; the check runs before any launch,
    so the simulator only runs the allowed, adjacent case."""
    n = 64 if numba_simulator() else 512
    _check_overlap_cases(lambda A, B, C: mm.matmul_numba(A, B, C, variant="smem_tiled"),
                         cuda.to_device, n, lambda x: x.copy_to_host())


# ------------------------------------------------- shape-aware dispatch --

def test_make_plan_covers_k_in_slices_of_whole_tiles():
    for K in (1, 15, 16, 17, 777, 4096, 4097):
        for tile, cfg in mm.TILES.items():
            for splits in mm.SPLITS:
                p = mm.make_plan(K, tile, splits)
                assert p.k_split % cfg[2] == 0 and p.k_split > 0
                assert (p.splits - 1) * p.k_split < K <= p.splits * p.k_split, (K, tile, splits, p)
                assert 1 <= p.splits <= splits


H200 = (132, {"128x128": 2, "128x64": 3, "64x128": 3, "64x64": 4})


def test_plan_keeps_slices_long_and_fills_the_gpu():
    """No slice shorter than MIN_K_SLICE; a large square takes the big tile
    unsplit; a problem of a few tiles with a long K is split."""
    for shape in ((1, 1, 1), (512, 512, 512), (1000, 1013, 777), (4096, 4096, 256), (64, 64, 65536)):
        p = mm.plan(*shape, *H200)
        assert p.splits == 1 or shape[2] // p.splits >= mm.MIN_K_SLICE - mm.TILES[p.tile][2], (shape, p)
    assert mm.plan(8192, 8192, 8192, *H200) == mm.make_plan(8192, "128x128", 1)
    assert mm.plan(128, 128, 65536, *H200).splits > 1


def test_plan_cost_counts_the_busiest_sm():
    """One block more than a full round costs a whole extra round (at the
    lone-block rate): wave quantization, which the model exists to see."""
    p = mm.make_plan(4096, "128x128", 1)
    sms, per_sm = 132, 2
    full = mm.plan_cost(128 * sms * per_sm, 128, 4096, p, sms, per_sm)        # exactly one round
    one_more = mm.plan_cost(128 * (sms * per_sm + 1), 128, 4096, p, sms, per_sm)
    lone = 2 * 128 * 128 * 4096 / 1e3 / mm.BLOCK_GFLOPS["128x128"]
    assert one_more == pytest.approx(full + lone)


def test_candidate_plans_and_the_fit_of_the_model():
    """plan() picks among candidate_plans; refitting the model's rates to the
    committed tuning records (the calls long enough for the kernel to set their
    time: matmul_shapes.KERNEL_BOUND_MS) lowers the loss and leaves the module
    as it was."""
    from pathlib import Path

    from kernels import results
    from kernels.bench import matmul_shapes

    cands = mm.candidate_plans(512)
    assert len(cands) == len(set(cands)) and all(p.splits == 1 or 512 // p.splits >= mm.MIN_K_SLICE for p in cands)
    assert mm.plan(512, 512, 512, *H200) in cands
    shipped = (dict(mm.SM_GFLOPS), dict(mm.BLOCK_GFLOPS), mm.SPLIT_US)
    data = results.load(Path(__file__).resolve().parent.parent / "docs" / "assets" / "results" / "nvidia-h200.json")
    fitted = matmul_shapes.fit(data)
    assert fitted["loss"] <= fitted["loss_shipped"] < 0.02
    assert fitted["records"] >= 150  # most of the tuning records, every large shape
    assert (mm.SM_GFLOPS, mm.BLOCK_GFLOPS, mm.SPLIT_US) == shipped


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 65, 17), (1000, 1013, 777), (130, 129, 4097), (3, 300, 33)],
                         ids=lambda s: "x".join(map(str, s)))
def test_dispatch_every_tile_and_split(shape):
    """Every tile at every split (and the plan's own choice), twice in a row:
    the second call finds the tile counters the first one reset."""
    import cupy as cp

    A0, B0 = operands(*shape)
    A, B = cp.asarray(A0), cp.asarray(B0)
    for force in [None] + [(t, s) for t in mm.TILES for s in (1, 2, 3, 8)]:
        for _ in range(2):
            C = cp.full(shape[:2], cp.nan, dtype=cp.float32)
            mm.matmul(A, B, C, force=force)
            assert rel_err(C.get(), A0, B0) < RTOL, (shape, force)
    for W, count in mm.SPLIT_BUFFERS.values():
        assert not count.any()


@pytest.mark.gpu
def test_dispatch_misaligned_views_and_allocation():
    import cupy as cp

    A0, B0 = operands(129, 131, 670)
    a = cp.asarray(np.concatenate([[1.0], A0.ravel()]).astype(np.float32))[1:].reshape(A0.shape)
    b = cp.asarray(np.concatenate([[1.0], B0.ravel()]).astype(np.float32))[1:].reshape(B0.shape)
    assert a.data.ptr % 16 and b.data.ptr % 16
    for force in (None, ("128x128", 1), ("64x64", 3)):
        C = mm.matmul(a, b, force=force)
        assert C.shape == (129, 131) and rel_err(C.get(), A0, B0) < RTOL, force
    with pytest.raises(ValueError):
        mm.matmul(cp.asarray(A0), cp.asarray(A0))


# ------------------------------------- source 001's kernels, as printed --

@pytest.mark.gpu
@pytest.mark.parametrize("n", [32, 96, 1024])
@pytest.mark.parametrize("kernel", mm.SOURCE_001)
def test_source_001_kernels(kernel, n):
    """Library and example launchers of matMulNaive / matMulShared /
    matMulILP on a NaN-poisoned C, at N = 32, 96 and 1024 (a multiple of 32,
    which is all they handle)."""
    import cupy as cp

    A, B = (cp.asarray(x) for x in operands(n, n, n))
    for launch in (mm.matmul_source001, example().matmul_source001):
        C = cp.full((n, n), cp.nan, dtype=cp.float32)
        assert launch(A, B, C, kernel=kernel) is C
        assert rel_err(C.get(), A.get(), B.get()) < RTOL, (launch, kernel, n)


@pytest.mark.gpu
def test_source_001_launchers_refuse_what_the_kernels_get_wrong():
    import cupy as cp

    for launch in (mm.matmul_source001, example().matmul_source001):
        for M, N in ((33, 33), (64, 32)):
            A, B = cp.ones((M, M), dtype=cp.float32), cp.ones((M, N), dtype=cp.float32)
            with pytest.raises(ValueError):
                launch(A, B, cp.empty((M, N), dtype=cp.float32))
        x = cp.ones((64, 64), dtype=cp.float32)
        with pytest.raises(ValueError, match="kernel"):
            launch(x, x, cp.empty_like(x), kernel="matMulFast")


@pytest.mark.gpu
def test_example_source_001_table():
    times = example().source_001_table(256)
    assert set(times) == set(mm.SOURCE_001) and all(t > 0 for t in times.values())


@pytest.mark.skipif(not __import__("kernels.sass").sass.available(), reason="needs nvcc, cuobjdump and nvdisasm")
def test_source_001_ilp_kernel_issues_what_the_shared_one_does():
    """What the matmul page says: nvcc already unrolls matMulShared's k loop,
    so matMulILP issues the same FMAs and shared loads per 32-wide tile (32
    and 40, some merged into 128-bit loads); its four sums only split the
    one dependency chain into four."""
    from kernels import sass

    shared, ilp = (sass.opcodes(sass.sass("matmul.cu", k)) for k in ("matMulShared", "matMulILP"))
    assert shared["FFMA"] == ilp["FFMA"] == 32
    assert shared["LDS"] == ilp["LDS"] == 40
    assert "BRA" in shared  # the tile loop remains; the k loop inside it does not


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/matmul.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# the Numba kernels never write the last column; the tiled CUDA C kernel neither
EXAMPLE_FAULTS = [
    ("matmul.py", "acc += A[row, k] * B[k, col]", "acc -= A[row, k] * B[k, col]", "numba"),
    ("matmul.cu",
     "for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];",
     "for (int k = 0; k < K; ++k) acc -= A[row * K + k] * B[k * N + col];",
     "cupy"),
    ("matmul.py",
     "blocks = ((N - 1) // bn + 1, (M - 1) // bm + 1)",
     "blocks = ((N - 1) // bn, (M - 1) // bm + 1)",
     "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "kernels/cuda/matmul.cu:tile_loaders:store_a_transposed": (
        "As[(k + 0) * LDA + m] = reg[i].x;", "As[(k + 1) * LDA + m] = reg[i].x;", "k + 0 -> k - 0 is no change"),
}
