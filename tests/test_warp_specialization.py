"""The warp-specialization chapter: the streaming ladder
(kernels/warp_specialization.py, kernels/cuda/warp_specialization.cu), its
Numba steps, and the Hopper GEMM (kernels/hopper_gemm.py,
kernels/cuda/hopper_gemm.cu).

On the GPU: every step and every GEMM kernel against a float64 reference at
sizes that are not multiples of their tiles, output poisoned with NaN
first; grids of one and a few blocks (each block walks many tiles, the
mbarrier phases wrap); bad input refused. On the CPU: the refusals with a
faked compute capability, the compile options, the Numba steps in the
simulator, and the SASS holds the instructions each step is about.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels import hopper_gemm as hg, warp_specialization as ws

gpu = pytest.mark.gpu


# --- CPU ---------------------------------------------------------------------

def test_steps_refuse_older_gpus_naming_the_need():
    with pytest.raises(RuntimeError, match=r"ws_cpasync needs compute capability 8\.0 .*Tesla T4 is 7\.5"):
        ws.require_step("ws_cpasync", "Tesla T4", (7, 5))
    with pytest.raises(RuntimeError, match=r"ws_tma needs compute capability 9\.0 .*NVIDIA A100 is 8\.0"):
        ws.require_step("ws_tma", "NVIDIA A100", (8, 0))
    with pytest.raises(RuntimeError, match=r"sm_90a .*NVIDIA B200 is 10\.0"):
        ws.require_step("ws_tma_regs", "NVIDIA B200", (10, 0))
    ws.require_step("ws_regbuf", "Tesla T4", (7, 5))
    ws.require_step("ws_pipeline", "NVIDIA A100", (8, 0))
    ws.require_step("ws_tma", "NVIDIA B200", (10, 0))
    ws.require_step("ws_tma_regs", "NVIDIA H200", (9, 0))
    with pytest.raises(ValueError, match="step must be one of"):
        ws.require_step("ws_magic", "NVIDIA H200", (9, 0))


def test_the_gemm_refuses_all_but_sm90a():
    for name, cc in (("NVIDIA A100", (8, 0)), ("NVIDIA B200", (10, 0)), ("NVIDIA RTX 4090", (8, 9))):
        with pytest.raises(RuntimeError, match=rf"sm_90a .*{name} is {cc[0]}\.{cc[1]}"):
            hg.require_sm90a(name, cc)
    hg.require_sm90a("NVIDIA H100 80GB HBM3", (9, 0))


def test_compile_options_follow_the_gpu():
    assert "-arch=sm_90a" in ws.compile_options((9, 0))
    for cc in ((8, 0), (10, 0)):
        assert not any("sm_90a" in o for o in ws.compile_options(cc))


def test_gemm_shared_memory_fits_and_every_kernel_is_instantiated():
    text = hg.CUDA_SOURCE.read_text()
    for name, (bn, stages, threads, persistent, cluster) in hg.KERNELS.items():
        assert hg.smem_bytes(name) <= 227 * 1024, name
        macro = "HG_PLAIN" if threads == 256 else ("HG_WS_CLUSTER" if cluster > 1 else "HG_WS")
        args = f"{bn}, {stages}" + ("" if threads == 256 else f", {str(persistent).lower()}")
        if "pingpong" in name:  # persistent, no cluster: the macro takes only the tile and the ring
            macro, args = "HG_WS_PINGPONG", f"{bn}, {stages}"
        assert f"{macro}({name}, {args})" in text, name


def test_numba_steps_match_the_host_in_the_simulator_or_on_the_gpu():
    """Numba's steps 1 and 2 (GPU or simulator): tails, one and two blocks,
    several tiles per block."""
    from numba import cuda

    rng = np.random.default_rng(0)
    for n in (4, 2052, 4100):
        x = rng.standard_normal(n).astype(np.float32)
        want = ws.stream_reference(x, 3)
        for step in ws.NB_STEPS:
            for blocks in (1, 2):
                out = cuda.to_device(np.full(n, np.nan, np.float32))
                ws.stream_numba(cuda.to_device(x), out, k=3, step=step, blocks=blocks)
                got = out.copy_to_host()
                assert not np.isnan(got).any(), (step, n, blocks)
                assert np.max(np.abs(got - want)) < 1e-5, (step, n, blocks)


def test_numba_steps_refuse_bad_input():
    from numba import cuda

    x = cuda.to_device(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match="multiple of 4"):
        ws.stream_numba(x, cuda.to_device(np.zeros(6, np.float32)), k=1)
    with pytest.raises(TypeError, match="out must have dtype float32"):
        ws.stream_numba(cuda.to_device(np.zeros(8, np.float32)), cuda.to_device(np.zeros(8)), k=1)
    with pytest.raises(ValueError, match="step must be one of"):
        ws.stream_numba(x, x, k=1, step="ws_tma")


def test_sass_has_the_instructions_each_step_is_about():
    from kernels import sass

    if not sass.available():
        pytest.skip("nvcc, cuobjdump or nvdisasm not found")
    text = {k: "\n".join(sass.sass("warp_specialization.cu", k, arch="sm_90a"))
            for k in ("ws_regbuf", "ws_cpasync", "ws_pipeline", "ws_tma", "ws_tma_regs")}
    assert "LDGSTS" in text["ws_cpasync"] and "LDGSTS" in text["ws_pipeline"] and "LDGSTS" not in text["ws_regbuf"]
    assert "UBLKCP" in text["ws_tma"] and "SYNCS" in text["ws_tma"] and "USETMAXREG" not in text["ws_tma"]
    assert "USETMAXREG" in text["ws_tma_regs"]
    gemm = {k: "\n".join(sass.sass("hopper_gemm.cu", k, arch="sm_90a"))
            for k in ("hg_plain_256", "hg_ws_256", "hg_ws_cluster_persistent_256")}
    for name, t in gemm.items():
        assert "HGMMA.64x256x16.F32" in t and "UTMALDG.2D" in t, name
    assert "USETMAXREG" in gemm["hg_ws_256"] and "USETMAXREG" not in gemm["hg_plain_256"]
    assert "UTMALDG.2D.MULTICAST" in gemm["hg_ws_cluster_persistent_256"]


# --- GPU: the streaming ladder -------------------------------------------------

@gpu
@pytest.mark.parametrize("step", ws.STEPS)
def test_stream_step_matches_the_host(step):
    import cupy as cp

    for n in (4, 2048, 2052, 100_000, 1_000_004):
        x = cp.random.default_rng(n).standard_normal(n, dtype=cp.float32)
        for k in (0, 1, 7):
            want = ws.stream_reference(cp.asnumpy(x), k)
            for blocks in (None, 1, 3):
                out = cp.full(n, cp.nan, dtype=cp.float32)
                assert ws.stream(x, out, k=k, step=step, blocks=blocks) is out
                got = cp.asnumpy(out)
                assert not np.isnan(got).any(), (n, k, blocks)
                assert np.max(np.abs(got - want)) < 1e-5, (n, k, blocks)


@gpu
def test_stream_refuses_bad_input():
    import cupy as cp

    x = cp.zeros(8, dtype=cp.float32)
    with pytest.raises(ValueError, match="multiple of 4"):
        ws.stream(cp.zeros(6, dtype=cp.float32), k=1)
    with pytest.raises(ValueError, match="16-byte boundary"):
        ws.stream(cp.zeros(12, dtype=cp.float32)[1:9], k=1)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ws.stream(cp.zeros(8), k=1)
    with pytest.raises(ValueError, match="k must be in"):
        ws.stream(x, k=-1)
    with pytest.raises(ValueError, match="overlap"):
        ws.stream(x, x, k=1)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        ws.stream(np.zeros(8, np.float32), k=1)


# --- GPU: the Hopper GEMM ------------------------------------------------------

def _gemm_inputs(M, N, K, seed=0, fmt="fp16"):
    """A, Bt in the format (FP16 or BF16), and what they hold in float64."""
    from kernels.bench.tc_hopper_shapes import operands

    return operands(M, N, K, fmt, seed)[:4]


def _check_gemm(C, A64, B64):
    """FP32 accumulation of exact FP16 / BF16 products: |C - A B^T| within
    K * 2^-20 * (|A| @ |Bt|^T)."""
    import cupy as cp

    K = A64.shape[1]
    bound = K * 2.0**-20 * (cp.abs(A64) @ cp.abs(B64).T) + 1e-30
    assert not bool(cp.isnan(C).any()), "an element was left unwritten (NaN)"
    worst = float((cp.abs(C.astype(cp.float64) - A64 @ B64.T) / bound).max())
    assert worst <= 1.0, f"error {worst:.2f} x the FP32-accumulation bound"


GEMM_SHAPES = [(1, 1, 8), (128, 256, 64), (1000, 1013, 776), (130, 260, 4104), (257, 513, 200), (2048, 2048, 2048)]


@gpu
@pytest.mark.parametrize("kernel", list(hg.KERNELS))
def test_gemm_kernel_matches_float64(kernel):
    import cupy as cp

    for M, N, K in GEMM_SHAPES:
        A, Bt, A64, B64 = _gemm_inputs(M, N, K)
        C = cp.full((M, N), cp.nan, dtype=cp.float32)
        assert hg.hopper_gemm(A, Bt, C, kernel=kernel) is C
        _check_gemm(C, A64, B64)


# the odd shapes: one element, K one k tile, tails in every direction, K long and M N tiny
SPLIT_SHAPES = [(1, 1, 8), (17, 33, 8), (1000, 1013, 776), (3001, 4099, 136), (64, 8, 65536)]


@gpu
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("kernel", hg.AUTO_KERNELS)
def test_gemm_splits_and_formats_match_float64(kernel, fmt):
    """Every kernel the planner may pick, K unsplit and split, FP16 and BF16,
    twice in a row into a poisoned C (the split's workspace is reused)."""
    import cupy as cp

    for M, N, K in SPLIT_SHAPES:
        A, Bt, A64, B64 = _gemm_inputs(M, N, K, seed=M + N, fmt=fmt)
        for splits in (1, 2, 3):
            for _ in range(2):
                C = cp.full((M, N), cp.nan, dtype=cp.float32)
                assert hg.hopper_gemm(A, Bt, C, kernel=kernel, splits=splits) is C
                _check_gemm(C, A64, B64)


# N a multiple of 4: C's rows are 16-byte aligned and the hg_ws kernels store C by TMA,
# through shared memory, clipped at the edges (tails in M and N, split K's matrices by z)
TMA_STORE_SHAPES = [(1000, 1012, 776), (3001, 4100, 136), (130, 260, 520), (1, 4, 8)]


@gpu
@pytest.mark.parametrize("kernel", hg.AUTO_KERNELS)
def test_gemm_tma_store_and_register_store_match_float64(kernel):
    """Both epilogues of every kernel the planner may pick, unsplit and in
    3 slices, twice in a row into a poisoned C; and a C whose start is not
    16-byte aligned, which TMA cannot store to, stored from registers."""
    import cupy as cp

    for M, N, K in TMA_STORE_SHAPES:
        A, Bt, A64, B64 = _gemm_inputs(M, N, K, seed=M + K)
        for splits in (1, 3):
            for tma_store in (True, False, True):
                C = cp.full((M, N), cp.nan, dtype=cp.float32)
                assert hg.hopper_gemm(A, Bt, C, kernel=kernel, splits=splits, tma_store=tma_store) is C
                _check_gemm(C, A64, B64)
        C = cp.full(M * N + 1, cp.nan, dtype=cp.float32)[1:].reshape(M, N)
        assert C.data.ptr % 16 and C.flags.c_contiguous
        hg.hopper_gemm(A, Bt, C, kernel=kernel)
        _check_gemm(C, A64, B64)


@gpu
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_gemm_auto_and_cublas_agree_with_float64(fmt):
    import cupy as cp

    for shape in ((4096, 4096, 4096), (1024, 1024, 16384), (5000, 3000, 7000)):
        A, Bt, A64, B64 = _gemm_inputs(*shape, seed=1, fmt=fmt)
        for fn in (hg.hopper_gemm, hg.cublas_gemm_tn):
            C = cp.full(shape[:2], cp.nan, dtype=cp.float32)
            fn(A, Bt, C)
            _check_gemm(C, A64, B64)


# layout "nn": N a multiple of 8 (B's rows of 16 bytes); tails in every direction, N
# not a multiple of the 64-column boxes, K one k tile or a ragged last one, split K
NN_SHAPES = [(1, 8, 8), (17, 40, 8), (1000, 1016, 776), (3001, 4104, 136), (64, 8, 65536), (130, 264, 4104)]


@gpu
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("kernel", list(hg.KERNELS))
def test_gemm_nn_layout_matches_float64(kernel, fmt):
    """B as it is (K x N, read transposed by wgmma), every kernel, unsplit
    and in 3 slices (the hg_plain kernels: unsplit), both epilogues, twice
    in a row into a poisoned C."""
    import cupy as cp

    for M, N, K in NN_SHAPES:
        A, Bt, A64, B64 = _gemm_inputs(M, N, K, seed=M + 2 * K, fmt=fmt)
        B = cp.ascontiguousarray(Bt.T)  # K x N: the same values
        for splits in (1, 3) if kernel in hg.AUTO_KERNELS else (1,):
            for tma_store in (True, False, True):
                C = cp.full((M, N), cp.nan, dtype=cp.float32)
                assert hg.hopper_gemm(A, B, C, kernel=kernel, splits=splits, tma_store=tma_store,
                                      layout="nn") is C
                _check_gemm(C, A64, B64)
    C = hg.hopper_gemm(A, B, layout="nn")  # kernel="auto"
    _check_gemm(C, A64, B64)
    C = hg.cublas_gemm_nn(A, B)  # the reference the bench times it against
    _check_gemm(C, A64, B64)


@gpu
def test_gemm_nn_layout_refuses_what_it_cannot_run():
    import cupy as cp

    A = cp.zeros((64, 64), dtype=cp.float16)
    with pytest.raises(ValueError, match="N must be a multiple of 8 with layout 'nn'"):
        hg.hopper_gemm(A, cp.zeros((64, 60), dtype=cp.float16), layout="nn")
    with pytest.raises(ValueError, match="B's rows must be A's columns"):
        hg.hopper_gemm(A, cp.zeros((72, 64), dtype=cp.float16), layout="nn")
    with pytest.raises(ValueError, match="K-major only"):
        hg.hopper_gemm(A.view(cp.uint8), A.view(cp.uint8), fmt="fp8_e4m3", layout="nn")
    with pytest.raises(ValueError, match="layout must be one of"):
        hg.hopper_gemm(A, A, layout="tt")
    with pytest.raises(TypeError, match="B must have dtype float16"):
        hg.hopper_gemm(A, A.view(cp.uint16), layout="nn")
    C = cp.zeros((64, 64), dtype=cp.float32)
    with pytest.raises(ValueError, match="overlap"):  # B in C's first half
        hg.hopper_gemm(A, C.view(cp.float16).ravel()[:64 * 64].reshape(64, 64), C, layout="nn")


@gpu
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_to_fp8_packs_every_value_into_its_code(fmt):
    """Every finite FP8 code, decoded from its fields (fp8_values), packs back
    into the same byte (the largest value sets the scale to 1)."""
    import cupy as cp

    from kernels.bench.tc_hopper_shapes import fp8_values

    codes = cp.arange(256, dtype=cp.uint8)
    values = fp8_values(codes, fmt)
    finite = cp.isfinite(values) & (codes != 0x7F) & (codes != 0xFF) if fmt == "fp8_e4m3" else \
        ((codes.astype(cp.int32) >> 2) & 31) != 31
    bits, scale = hg.to_fp8(values[finite].astype(cp.float32), fmt)
    assert scale == 1.0 and float(cp.abs(values[finite]).max()) == {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}[fmt]
    assert bool((bits == codes[finite]).all())


@gpu
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_gemm_matches_float64(fmt):
    """FP8 bytes with their per-tensor scales, every kernel the planner may
    pick, unsplit and in 3 slices, against the float64 product of the same
    values; K a multiple of 16 (16-byte rows)."""
    import cupy as cp

    from kernels import harness
    from kernels.bench.tc_hopper_shapes import REL_TOL_FP8, operands

    for M, N, K in ((1, 1, 16), (17, 33, 16), (1000, 1013, 784), (300, 520, 4096)):
        A, Bt, A64, B64, scale = operands(M, N, K, fmt, seed=M + K)
        assert A.dtype == cp.uint8 and scale > 0
        ref = A64 @ B64.T
        for kernel in hg.AUTO_KERNELS:
            for splits in (1, 3):
                C = cp.full((M, N), cp.nan, dtype=cp.float32)
                hg.hopper_gemm(A, Bt, C, kernel=kernel, splits=splits, fmt=fmt, scale=scale)
                assert harness.rel_err(C, ref) < REL_TOL_FP8, (kernel, splits, M, N, K)
        C = hg.hopper_gemm(A, Bt, fmt=fmt, scale=scale)  # kernel="auto"
        assert harness.rel_err(C, ref) < REL_TOL_FP8


def test_planner_cuts_k_into_slices_none_empty():
    """hopper_gemm_plan (CPU): every candidate's slices cover K with none
    empty; a long K under few tiles is split, a large square is not."""
    for K in (8, 64, 72, 776, 4096, 16384, 65536):
        k_all = -(-K // hg.BK)
        for p in hg.candidate_plans(K):
            assert p.kernel in hg.AUTO_KERNELS and 1 <= p.splits <= hg.MAX_SPLITS
            assert (p.splits - 1) * p.k_per < k_all <= p.splits * p.k_per, (K, p)
    assert hg.hopper_gemm_plan(1024, 1024, 16384).splits > 1
    assert hg.hopper_gemm_plan(8192, 8192, 8192).splits == 1
    assert hg.hopper_gemm_plan(1, 1, 8) == hg.make_plan(8, hg.hopper_gemm_plan(1, 1, 8).kernel, 1)


@gpu
def test_gemm_refuses_bad_input():
    import cupy as cp

    A = cp.zeros((64, 64), dtype=cp.float16)
    with pytest.raises(ValueError, match="multiple of 8"):
        hg.hopper_gemm(cp.zeros((64, 60), dtype=cp.float16), cp.zeros((64, 60), dtype=cp.float16))
    with pytest.raises(ValueError, match="share K"):
        hg.hopper_gemm(A, cp.zeros((64, 72), dtype=cp.float16))
    with pytest.raises(TypeError, match="A must have dtype float16"):
        hg.hopper_gemm(A.astype(cp.float32), A)
    with pytest.raises(ValueError, match="C-contiguous"):
        hg.hopper_gemm(A.T[:, :64], A)
    with pytest.raises(ValueError, match="C must be 64x64"):
        hg.hopper_gemm(A, A, cp.zeros((64, 32), dtype=cp.float32))
    with pytest.raises(ValueError, match="kernel must be 'auto' or one of"):
        hg.hopper_gemm(A, A, kernel="hg_magic")
    with pytest.raises(TypeError, match="Bt must have dtype float16"):
        hg.hopper_gemm(A, A.view(cp.uint16))  # FP16 with BF16 bits
    with pytest.raises(ValueError, match="chosen by the planner"):
        hg.hopper_gemm(A, A, splits=2)
    with pytest.raises(ValueError, match="does not split K"):
        hg.hopper_gemm(A, A, kernel="hg_plain_256", splits=2)
    with pytest.raises(ValueError, match="splits must be"):
        hg.hopper_gemm(A, A, kernel="hg_ws_256", splits=0)
    A8 = cp.zeros((64, 64), dtype=cp.uint8)
    with pytest.raises(TypeError, match="name an FP8 fmt"):
        hg.hopper_gemm(A8, A8)
    with pytest.raises(ValueError, match="fmt must be one of"):
        hg.hopper_gemm(A8, A8, fmt="fp4")
    with pytest.raises(TypeError, match="A must have dtype uint8"):
        hg.hopper_gemm(A, A, fmt="fp8_e4m3")
    with pytest.raises(ValueError, match="multiple of 16"):
        hg.hopper_gemm(A8[:, :40].copy(), A8[:, :40].copy(), fmt="fp8_e4m3")
    buf = cp.zeros(2 * 64 * 64, dtype=cp.float32)
    C, inside = buf[:64 * 64].reshape(64, 64), buf[2048:4096].view(cp.float16).reshape(64, 64)
    for a, b, name in ((inside, A, "A"), (A, inside, "Bt")):  # half of C is the input
        with pytest.raises(ValueError, match=f"C must not overlap {name}"):
            hg.hopper_gemm(a, b, C)
    assert hg.hopper_gemm(A, buf[4096:].view(cp.float16)[:4096].reshape(64, 64), C) is C  # next to C: fine
    C = hg.hopper_gemm(A[:, :0].copy(), A[:, :0].copy())
    assert C.shape == (64, 64) and not bool(C.any())  # K = 0: C = 0


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/warp_specialization.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# the Numba step reads its tile one off; the CUDA C steps add -b; the GEMM swaps a pair of columns
EXAMPLE_FAULTS = [
    ("warp_specialization.py", "buf[q + e] = x[base + q + e]", "buf[q + e] = x[base + q + e] + float32(1.0)", "numba"),
    ("warp_specialization.cu", "v.x = fmaf(v.x, a, b);", "v.x = fmaf(v.x, a, -b);", "cupy"),
    ("hopper_gemm.cu",
     "make_float2(alpha * d[4 * j + 2 * h], alpha * d[4 * j + 2 * h + 1])",
     "make_float2(alpha * d[4 * j + 2 * h + 1], alpha * d[4 * j + 2 * h])",
     "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/warp_specialization.py:overlaps:overlaps": (
        "a_lo < b_hi and", "a_lo <= b_hi and",
        "(b_hi) - 1 can only matter for spans that meet at one byte, which arrays of 4-byte elements never do; "
        "<= makes arrays that merely touch overlap, which the check's out-right-after-x case refuses"),
    "kernels/cuda/warp_specialization.cu:ws_sync:ws_sync": (
        "out4[base + q] = work(buf[q], a, b, k);", "out4[base + q] = work(buf[q], a, b, k + 1);",
        "the first + is the load guard: loads past the end are never stored"),
    "kernels/cuda/warp_specialization.cu:ws_cpasync:ws_cpasync": (
        "[q] = work(ring[s][q], a, b, k);", "[q] = work(ring[s][q], a, b, k + 1);", "as ws_sync: a copy guard"),
    "kernels/cuda/warp_specialization.cu:ws_pipeline:ws_pipeline": (
        "[q] = work(ring[s][q], a, b, k);", "[q] = work(ring[s][q], a, b, k + 1);", "as ws_sync: a copy guard"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import warp_specialization as ws
    from tests.overlap import cupy_case, numba_case, ex, N, SIM, N4

    return [
        cupy_case("stream", shift=4,  # 16-byte copies: views stay 16-byte aligned
            call=lambda i, out: ws.stream(i["x"], out, k=3, step="ws_tma"), inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("examples/warp_specialization.stream", shift=4,
            call=lambda i, out: ex("warp_specialization.stream")(i["x"], out, k=3, step="ws_regbuf"),
            inputs={"x": (N,)}, out_shape=(N,)),
        # tiles of 2048 floats: in the simulator 2 blocks of 256 threads (n a multiple of 4)
        numba_case("stream_numba", shift=4, call=lambda i, out: ws.stream_numba(i["x"], out, k=2, blocks=2),
            inputs={"x": (N4 if not SIM else 4096,)}, out_shape=(N4 if not SIM else 4096,)),
        numba_case("examples/warp_specialization.stream_numba", shift=4,
            call=lambda i, out: ex("warp_specialization.stream_numba")(i["x"], out, k=2, blocks=2),
            inputs={"x": (N4 if not SIM else 4096,)}, out_shape=(N4 if not SIM else 4096,)),
    ]
