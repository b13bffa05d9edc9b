"""Kernel fusion (kernels/fusion.py, kernels/cuda/fusion.cu): bias + GELU +
residual and row softmax, unfused and fused.

On the CPU: the float64 references (GELU's tanh form against its erf
definition, softmax's invariances and large logits), the bytes each variant
moves, which softmax kernel a row length gets, and the Numba kernels in the
simulator (output poisoned with NaN, odd sizes, a row of one, logits near
1e4) with their refusals of bad input. On the GPU: every CuPy and CUDA C
variant against float64 at sizes that are not multiples of a block or of 4,
M = 1 and N = 1, misaligned and short grids (the row loops and their
tails), large logits, the intermediates the unfused chain allocates, and
the CuPy wrappers' refusals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels import fusion as F

gpu = pytest.mark.gpu
GELU_TOL = 2e-6  # float32 arithmetic (tanhf, expf within a few ulp) against the same formula in float64
SOFTMAX_TOL = 2e-6


def rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def gelu_inputs(M, N, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32) for s in ((M, N), (N,), (M, N)))


# --- CPU: references ---------------------------------------------------------

def test_gelu_tanh_form_is_within_5e_4_of_the_erf_definition():
    h = np.linspace(-8, 8, 20001)
    zero = np.zeros_like(h)
    tanh_form = F.bias_gelu_residual_reference(h[None, :], zero, zero[None, :])[0]
    gap = np.abs(tanh_form - F.gelu_erf_reference(h))
    assert 1e-4 < gap.max() < 5e-4  # an approximation, and a close one
    assert F.gelu_erf_reference(np.array([0.0]))[0] == 0.0
    assert abs(F.gelu_erf_reference(np.array([1.0]))[0] - 0.5 * (1 + math.erf(1 / math.sqrt(2)))) < 1e-15


def test_gelu_reference_is_the_formula_with_the_bias_on_every_row():
    x, b, r = gelu_inputs(3, 5)
    want = np.empty((3, 5))
    for i in range(3):
        for j in range(5):
            h = float(x[i, j]) + float(b[j])
            want[i, j] = 0.5 * h * (1 + math.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3))) + float(r[i, j])
    got = F.bias_gelu_residual_reference(x, b, r)
    assert got.dtype == np.float64 and np.allclose(got, want, rtol=1e-14, atol=1e-14)
    big = F.bias_gelu_residual_reference(np.array([[30.0, -30.0]]), np.zeros(2), np.zeros((1, 2)))
    assert big[0, 0] == 30.0 and abs(big[0, 1]) < 1e-30  # gelu(h) -> h above, -> 0 below


def test_softmax_reference_rows_sum_to_one_and_ignore_a_shift():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 37)).astype(np.float32)
    p = F.softmax_reference(x)
    assert p.dtype == np.float64 and np.allclose(p.sum(axis=1), 1.0, rtol=1e-14)
    assert np.allclose(F.softmax_reference(x.astype(np.float64) + 1e4), p, rtol=1e-9)
    big = (rng.standard_normal((3, 50)) * 1e4).astype(np.float32)  # exp(1e4) overflows: the max must go first
    q = F.softmax_reference(big)
    assert np.isfinite(q).all() and np.allclose(q.sum(axis=1), 1.0)
    assert np.array_equal(F.softmax_reference(np.array([[3.0], [-7.0]], np.float32)), [[1.0], [1.0]])


# --- CPU: bytes moved and kernel choice ----------------------------------------

def test_bytes_moved_count_every_intermediate():
    M, N = 1000, 77
    assert len(F.GELU_UNFUSED) == 10 and len(F.SOFTMAX_UNFUSED) == 5
    # unfused GELU: 13 M x N reads + 10 writes, the bias once
    assert F.bytes_moved("bias_gelu_residual", "unfused", M, N) == 4 * (23 * M * N + N)
    for v in ("fuse", "elementwise", "cuda_c", "numba"):
        assert F.bytes_moved("bias_gelu_residual", v, M, N) == 4 * (3 * M * N + N)
    # unfused softmax: 5 reads + 3 writes of M x N, 2 columns written and 2 read
    assert F.bytes_moved("softmax", "unfused", M, N) == 4 * (8 * M * N + 4 * M)
    for v in ("fused", "warp", "block", "numba"):
        assert F.bytes_moved("softmax", v, M, N) == 8 * M * N
    assert F.bytes_moved("softmax", "online", M, N) == 12 * M * N
    # rows too long for shared memory: "fused" is the online kernel, one more read
    assert F.bytes_moved("softmax", "fused", 2, F.FUSED_MAX_N + 1) == 12 * 2 * (F.FUSED_MAX_N + 1)
    assert F.useful_bytes("bias_gelu_residual", M, N) == 4 * (3 * M * N + N)
    assert F.useful_bytes("softmax", M, N) == 8 * M * N
    for chain, table in (("bias_gelu_residual", F.GELU_UNFUSED), ("softmax", F.SOFTMAX_UNFUSED)):
        assert F.steps(chain, "unfused") is table


def test_bytes_moved_refuses_unknown_names():
    with pytest.raises(ValueError, match="chain must be one of"):
        F.bytes_moved("layernorm", "unfused", 2, 2)
    with pytest.raises(ValueError, match="variant must be one of .* for softmax"):
        F.bytes_moved("softmax", "fuse", 2, 2)
    with pytest.raises(ValueError, match="variant must be one of .* for bias_gelu_residual"):
        F.bytes_moved("bias_gelu_residual", "online", 2, 2)


def test_softmax_kernel_for_each_row_length():
    pick = F.softmax_kernel_for
    assert [pick(n) for n in (1, 128, 129, 256, 257, 1000, 1024)] == [
        "softmax_warp_4", "softmax_warp_4", "softmax_warp_8", "softmax_warp_8", "softmax_warp_16",
        "softmax_warp_32", "softmax_warp_32"]
    assert pick(1025) == pick(F.FUSED_MAX_N) == "softmax_block"
    assert pick(F.FUSED_MAX_N + 1) == "softmax_online"
    assert pick(5, "block") == "softmax_block" and pick(5, "online") == "softmax_online"
    with pytest.raises(ValueError, match="N <= 1024"):
        pick(1025, "warp")
    with pytest.raises(ValueError, match=f"N <= {F.FUSED_MAX_N}"):
        pick(F.FUSED_MAX_N + 1, "block")
    with pytest.raises(ValueError, match="variant must be one of"):
        pick(5, "unfused")


def test_every_cuda_kernel_named_in_python_is_in_the_source():
    import re

    text = F.CUDA_SOURCE.read_text()
    for name in ("bias_gelu_residual_vec4", "bias_gelu_residual", "softmax_block", "softmax_online"):
        assert re.search(rf'extern "C" __global__ void (__launch_bounds__\(.*?\)\s+)?{name}\(', text), name
    for vpt in F.WARP_VPT:
        assert f"SOFTMAX_WARP({vpt})" in text
    assert "#define SOFTMAX_WARP(VPT)" in text and max(F.WARP_VPT) * 32 == F.WARP_MAX_N


# --- CPU (or GPU): the Numba kernels --------------------------------------------

def test_numba_gelu_matches_float64():
    from numba import cuda

    for M, N, block in ((1, 1, (8, 4)), (3, 5, (8, 4)), (7, 33, (16, 2)), (2, 70, (32, 8))):
        x, b, r = gelu_inputs(M, N, seed=M * N)
        out = cuda.to_device(np.full((M, N), np.nan, np.float32))
        got = F.bias_gelu_residual_numba(cuda.to_device(x), cuda.to_device(b), cuda.to_device(r), out, block=block)
        assert got is out
        host = out.copy_to_host()
        assert not np.isnan(host).any(), (M, N)
        assert rel(host, F.bias_gelu_residual_reference(x, b, r)) < GELU_TOL, (M, N)


def test_numba_gelu_allocates_out():
    from numba import cuda

    x, b, r = gelu_inputs(2, 3)
    out = F.bias_gelu_residual_numba(cuda.to_device(x), cuda.to_device(b), cuda.to_device(r), block=(4, 2))
    assert rel(out.copy_to_host(), F.bias_gelu_residual_reference(x, b, r)) < GELU_TOL


def test_numba_softmax_matches_float64():
    from numba import cuda

    rng = np.random.default_rng(2)
    cases = [((1, 1), 32, 1.0), ((3, 70), 32, 1.0), ((2, 5), 64, 1.0), ((4, 45), 32, 1e4), ((2, 33), 32, 30.0),
             ((1, F.NB_MAX_N), 32, 3.0)]
    for (M, N), threads, scale in cases:
        x = (rng.standard_normal((M, N)) * scale).astype(np.float32)
        out = cuda.to_device(np.full((M, N), np.nan, np.float32))
        assert F.softmax_rows_numba(cuda.to_device(x), out, threads=threads) is out
        host = out.copy_to_host()
        assert np.isfinite(host).all(), (M, N, scale)
        assert rel(host, F.softmax_reference(x)) < SOFTMAX_TOL, (M, N, scale)
        assert np.allclose(host.sum(axis=1), 1.0, rtol=1e-5)


def test_numba_wrappers_refuse_bad_input():
    from numba import cuda

    x, b, r = (cuda.to_device(a) for a in gelu_inputs(4, 6))
    with pytest.raises(TypeError, match="x must be a CUDA device array.*numba.cuda.to_device"):
        F.bias_gelu_residual_numba(np.zeros((4, 6), np.float32), b, r)
    with pytest.raises(TypeError, match="residual must have dtype float32, got float64"):
        F.bias_gelu_residual_numba(x, b, cuda.to_device(np.zeros((4, 6))))
    with pytest.raises(ValueError, match=r"bias must have length N = 6 \(the columns of x\), got 5"):
        F.bias_gelu_residual_numba(x, cuda.to_device(np.zeros(5, np.float32)), r)
    with pytest.raises(ValueError, match="residual must have the shape of x"):
        F.bias_gelu_residual_numba(x, b, cuda.to_device(np.zeros((6, 4), np.float32)))
    with pytest.raises(ValueError, match="x must be 2-D"):
        F.bias_gelu_residual_numba(cuda.to_device(np.zeros(6, np.float32)), b, r)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        F.bias_gelu_residual_numba(cuda.to_device(np.zeros((4, 12), np.float32))[:, ::2], b, r)
    with pytest.raises(ValueError, match="out must not overlap residual"):
        F.bias_gelu_residual_numba(x, b, r, r)
    with pytest.raises(ValueError, match="block must be two positive ints"):
        F.bias_gelu_residual_numba(x, b, r, block=(64, 32))
    with pytest.raises(ValueError, match="x must have at most 4096 columns"):
        F.softmax_rows_numba(cuda.to_device(np.zeros((1, F.NB_MAX_N + 1), np.float32)))
    with pytest.raises(ValueError, match="threads must be a power of two"):
        F.softmax_rows_numba(x, threads=96)
    with pytest.raises(ValueError, match="out must have the shape of x"):
        F.softmax_rows_numba(x, cuda.to_device(np.zeros((4, 5), np.float32)))
    with pytest.raises(ValueError, match="out must not overlap x"):
        F.softmax_rows_numba(x, x)


# --- CPU: the bench's records and plot, from made-up timings ---------------------

def fake_fusion_data():
    """Records as kernels/bench/fusion.py makes them, with made-up times and
    energies (the bytes are the real counts), merged into a results file."""
    from kernels import results
    from kernels.bench import fusion as B

    recs = []
    groups = [("bias_gelu_residual", B.GELU_SHAPE, B.GELU_FORMS)]
    groups += [("softmax", s, B.SOFTMAX_FORMS + (B.SHORT_ROW_EXTRA if s[1] <= 1024 else ())) for s in B.SOFTMAX_SHAPES]
    for chain, (M, N), forms in groups:
        for k, form in enumerate(forms + ("copy",)):
            moved = F.useful_bytes(chain, M, N) if form == "copy" else F.bytes_moved(chain, form, M, N)
            ms = moved / 3e9 * (1.5 if form == "numba" else 1.0)  # about 3 TB/s
            kernel = F.softmax_kernel_for(N, form) if chain == "softmax" and form in ("fused", "block") else None
            recs.append(B.make_record(
                chain, "cuda_memcpy" if form == "copy" else "numba" if form == "numba" else "cupy", form, M, N,
                t={"ms": ms, "ms_min": ms * 0.98}, e={"j_per_call": ms * 0.5, "avg_power_w": 500.0, "seconds": 2.0},
                moved=moved, kernels=1 if form != "unfused" else len(F.steps(chain, form)), err=1e-7 * (k + 1),
                kernel=kernel))
    B.finish(recs)
    env = {"gpu": "NVIDIA H200", "gpu_slug": "nvidia-h200", "compute_capability": "9.0", "driver": "1",
           "cuda_runtime": "13.0", "cupy": "14", "numba": "0.68", "numba_cuda": "0.30",
           "date": "2026-12-01T00:00:00Z", "commit": "fake"}
    return results.merge({}, env, recs, {"fusion": {"sources": {}}})


def test_bench_records_are_valid_and_relative_to_the_unfused_chain():
    from kernels import results
    from kernels.bench import fusion as B

    data = fake_fusion_data()
    assert results.validate(data) == []
    rows = results.select(data, "fusion")
    by = {(r["chain"], tuple(r["shape"]), r["form"]): r for r in rows}
    M, N = B.GELU_SHAPE
    un, ek = by["bias_gelu_residual", (M, N), "unfused"], by["bias_gelu_residual", (M, N), "elementwise"]
    assert un["ratio"] == 1.0 and un["energy_ratio_to_unfused"] == 1.0
    assert math.isclose(ek["ratio"], 23 / 3, rel_tol=1e-3)  # the made-up times follow the bytes
    assert math.isclose(ek["gbps"] / un["gbps"], ek["ratio"], rel_tol=1e-9)  # one denominator: the least bytes
    assert math.isclose(ek["energy_nj_per_element"], ek["energy_j_per_call"] / (M * N) * 1e9)
    assert math.isclose(by["softmax", B.SOFTMAX_SHAPES[0], "copy"]["copy_fraction"], 1.0)
    assert by["softmax", B.SOFTMAX_SHAPES[1], "fused"]["kernel"].startswith("softmax_warp")
    assert by["softmax", B.SOFTMAX_SHAPES[0], "fused"]["kernel"] == "softmax_block"
    assert len(B.summary(data)) == len(rows)
    html = results.render_table(data, "fusion", ["chain", "form", "ms", "gbps", "energy_ratio_to_unfused"], "zh",
                                labels=B.LABELS, words=B.WORDS)
    assert "偏置 + GELU + 残差" in html and "未融合" in html and "能耗 / 未融合" in html


def test_bench_plot_is_drawn_in_both_languages(tmp_path):
    """The plot from made-up records; the Chinese copy keeps no English word
    but those tests/test_plots.py allows (its KEPT and the records' names)."""
    import re
    import xml.etree.ElementTree as ET

    from kernels import results
    from kernels.bench import fusion as B
    from tests.test_plots import KEPT

    data = fake_fusion_data()
    paths = B.plot(data, tmp_path)
    assert [p.name for p in paths] == ["fusion-nvidia-h200.svg", "fusion-nvidia-h200-zh.svg"]
    names = {"fusion"}
    for r in results.select(data, "fusion"):
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f"{r['impl']} {r['variant']} {r['topic']}"))
        names.update(re.split(r"[_\s]+", r["variant"]))
    texts = ["".join(el.itertext()).strip() for el in ET.parse(paths[1]).iter() if el.tag.endswith("}text")]
    left = [w for t in texts for w in re.findall(r"(?<![0-9A-Za-z_])[A-Za-z_][A-Za-z0-9_]*", re.sub(r"\$.*?\$", "", t))
            if w not in KEPT | names]
    assert not left, left
    assert any("未融合" in t for t in texts)


# --- GPU: every CuPy and CUDA C variant -------------------------------------------

GELU_SHAPES = [(1, 1), (1, 1000), (37, 1), (129, 1013), (64, 4096), (300, 4100), (70_001, 3), (5, 8)]


def _cupy_gelu_inputs(M, N, seed=0):
    import cupy as cp

    return tuple(cp.asarray(a) for a in gelu_inputs(M, N, seed))


@gpu
@pytest.mark.parametrize("variant", F.GELU_VARIANTS)
def test_gelu_variant_matches_float64(variant):
    import cupy as cp

    for M, N in GELU_SHAPES:
        x, b, r = _cupy_gelu_inputs(M, N, seed=M + N)
        out = cp.full((M, N), cp.nan, dtype=cp.float32)
        assert F.bias_gelu_residual(x, b, r, variant=variant, out=out) is out
        assert not bool(cp.isnan(out).any()), (variant, M, N)
        assert rel(out.get(), F.bias_gelu_residual_reference(x.get(), b.get(), r.get())) < GELU_TOL, (variant, M, N)
        fresh = F.bias_gelu_residual(x, b, r, variant=variant)  # out allocated by the wrapper
        assert fresh.shape == (M, N) and fresh.dtype == cp.float32 and bool(cp.array_equal(fresh, out))


@gpu
def test_gelu_cuda_c_row_loops_blocks_and_alignment():
    """The CUDA C kernels with one, three and many rows of blocks (the
    batched loop and its tail), narrow blocks, and a bias that does not
    start on a 16-byte boundary (the float-at-a-time kernel)."""
    import cupy as cp

    for M, N in ((1, 8), (9, 8), (13, 36), (1000, 1028), (17, 5)):
        x, b, r = _cupy_gelu_inputs(M, N, seed=3)
        want = F.bias_gelu_residual_reference(x.get(), b.get(), r.get())
        for threads in (32, 96, 256):
            for grid_rows in (1, 3, None):
                out = cp.full((M, N), cp.nan, dtype=cp.float32)
                name = F.gelu_cuda_launch(x, b, r, out, threads, grid_rows)
                assert name == ("bias_gelu_residual_vec4" if N % 4 == 0 else "bias_gelu_residual")
                assert rel(out.get(), want) < GELU_TOL, (M, N, threads, grid_rows)
    x, _, r = _cupy_gelu_inputs(11, 16, seed=4)
    b_full = cp.asarray(np.random.default_rng(5).standard_normal(17).astype(np.float32))
    b = b_full[1:]  # contiguous, 4 bytes past an aligned start
    out = cp.full((11, 16), cp.nan, dtype=cp.float32)
    assert F.gelu_cuda_launch(x, b, r, out) == "bias_gelu_residual"
    assert rel(out.get(), F.bias_gelu_residual_reference(x.get(), b.get(), r.get())) < GELU_TOL


@gpu
def test_gelu_unfused_writes_every_intermediate_and_fused_none():
    """The unfused chain allocates one M x N array per step but the last
    (which writes into out); the fused variants allocate nothing."""
    import cupy as cp

    class Count(cp.cuda.MemoryHook):
        name = "count_mallocs"

        def __init__(self):
            self.sizes = []

        def malloc_postprocess(self, **kw):
            self.sizes.append(kw["size"])

    x, b, r = _cupy_gelu_inputs(64, 96)
    out = cp.empty_like(x)
    for variant in F.GELU_VARIANTS:
        F.bias_gelu_residual(x, b, r, variant=variant, out=out)  # compiled before counting
        with Count() as hook:
            F.bias_gelu_residual(x, b, r, variant=variant, out=out)
        want = len(F.GELU_UNFUSED) - 1 if variant == "unfused" else 0
        assert len(hook.sizes) == want and all(s == x.nbytes for s in hook.sizes), (variant, hook.sizes)


SOFTMAX_SHAPES = [(1, 1), (1, 1000), (37, 1), (129, 1013), (5, 128), (5, 129), (7, 1024), (5, 1025),
                  (3, 4096), (3, F.FUSED_MAX_N), (3, F.FUSED_MAX_N + 1), (2, 50_000), (2049, 33)]


@gpu
@pytest.mark.parametrize("variant", F.SOFTMAX_VARIANTS)
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_softmax_variant_matches_float64(variant, scale):
    """Every variant at odd and edge row lengths; logits near 1e4 (exp of
    them overflows float32 a thousand times over: the max must go first)."""
    import cupy as cp

    rng = np.random.default_rng(6)
    for M, N in SOFTMAX_SHAPES:
        x = cp.asarray((rng.standard_normal((M, N)) * scale).astype(np.float32))
        if (variant == "warp" and N > F.WARP_MAX_N) or (variant == "block" and N > F.FUSED_MAX_N):
            with pytest.raises(ValueError, match="N <="):
                F.softmax_rows(x, variant=variant)
            continue
        out = cp.full((M, N), cp.nan, dtype=cp.float32)
        assert F.softmax_rows(x, variant=variant, out=out) is out
        got = out.get()
        assert np.isfinite(got).all(), (variant, M, N, scale)
        assert rel(got, F.softmax_reference(x.get())) < SOFTMAX_TOL, (variant, M, N, scale)


@gpu
@pytest.mark.parametrize("threads", [32, 64, 96, 1024])
def test_softmax_kernels_with_any_block(threads):
    import cupy as cp

    rng = np.random.default_rng(7)
    for M, N in ((1, 1), (3, 31), (9, 700), (4, 2000), (2, 20_000)):
        x = cp.asarray(rng.standard_normal((M, N)).astype(np.float32))
        want = F.softmax_reference(x.get())
        for variant in ("fused", "warp", "block", "online"):
            if (variant == "warp" and N > F.WARP_MAX_N) or (variant == "block" and N > F.FUSED_MAX_N):
                continue
            out = cp.full((M, N), cp.nan, dtype=cp.float32)
            F.softmax_rows(x, variant=variant, out=out, threads=threads)
            assert rel(out.get(), want) < SOFTMAX_TOL, (variant, M, N, threads)


@gpu
def test_cupy_wrappers_refuse_bad_input():
    import cupy as cp

    x, b, r = _cupy_gelu_inputs(4, 8)
    with pytest.raises(TypeError, match="x must be a cupy.ndarray.*cupy.asarray"):
        F.bias_gelu_residual(x.get(), b, r)
    with pytest.raises(TypeError, match="bias must have dtype float32, got float64"):
        F.bias_gelu_residual(x, b.astype(cp.float64), r)
    with pytest.raises(ValueError, match="bias must have length N = 8"):
        F.bias_gelu_residual(x, b[:7], r)
    with pytest.raises(ValueError, match="residual must have the shape of x"):
        F.bias_gelu_residual(x, b, r[:3])
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        F.bias_gelu_residual(cp.zeros((4, 16), cp.float32)[:, ::2], b, r)
    with pytest.raises(ValueError, match="out must not overlap x"):
        F.bias_gelu_residual(x, b, r, out=x)
    with pytest.raises(ValueError, match="variant must be one of"):
        F.bias_gelu_residual(x, b, r, variant="magic")
    with pytest.raises(ValueError, match="threads applies to variant 'cuda_c' only"):
        F.bias_gelu_residual(x, b, r, variant="fuse", threads=128)
    with pytest.raises(ValueError, match="threads must be a multiple of 32 from 32 to 256"):
        F.bias_gelu_residual(x, b, r, variant="cuda_c", threads=512)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        F.softmax_rows(x.astype(cp.float16))
    with pytest.raises(ValueError, match="x must be 2-D"):
        F.softmax_rows(x.ravel())
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        F.softmax_rows(cp.zeros((8, 8), cp.float32).T)
    with pytest.raises(ValueError, match="out must have the shape of x"):
        F.softmax_rows(x, out=cp.empty((4, 7), cp.float32))
    with pytest.raises(ValueError, match="out must not overlap x"):
        F.softmax_rows(x, out=x)
    with pytest.raises(ValueError, match="threads applies to the CUDA C variants"):
        F.softmax_rows(x, variant="unfused", threads=64)
    with pytest.raises(ValueError, match="threads must be"):
        F.softmax_rows(x, threads=100)
    empty = cp.empty((0, 5), cp.float32)
    assert F.softmax_rows(empty).shape == (0, 5)
    assert F.bias_gelu_residual(empty, cp.zeros(5, cp.float32), empty, variant="cuda_c").shape == (0, 5)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/fusion.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# the Numba GELU subtracts the residual; the Numba softmax's block "max" is a min (softmax ignores the
# shift: only idle threads' -inf and logits near 1e4, whose exp overflows, expose it); the CUDA C GELU
# flips the cubic term; the online softmax forgets to rescale its running sum; the launcher takes the
# float4 kernel when N % 4 != 0
EXAMPLE_FAULTS = [
    ("fusion.py", "+ residual[r, c]", "- residual[r, c]", "numba"),
    ("fusion.py", "red[t] = max(red[t], red[t + s])", "red[t] = min(red[t], red[t + s])", "numba"),
    ("fusion.cu",
     "return 0.5f * h * (1.0f + tanhf(k0 * (h + k1 * h * h * h)));",
     "return 0.5f * h * (1.0f + tanhf(k0 * (h - k1 * h * h * h)));",
     "cupy"),
    ("fusion.cu",
     "s = s * expf(m - mx) + (expf(v0 - mx) + expf(v1 - mx)) + (expf(v2 - mx) + expf(v3 - mx));",
     "s = s + (expf(v0 - mx) + expf(v1 - mx)) + (expf(v2 - mx) + expf(v3 - mx));",
     "cupy"),
    ("fusion.py", "vec = N % 4 == 0 and all(", "vec = all(", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/fusion.py:fusion_numba:overlaps": (
        "a_lo < b_hi and", "a_lo <= b_hi and",
        "(b_hi) - 1 can only matter for spans that meet at one byte, which arrays of 4-byte elements never do; "
        "<= makes arrays that merely touch overlap, which the check's out-right-after-input case refuses"),
    "examples/fusion.py:fusion_numba:bias_gelu_residual_numba": (
        "grid = (-(-N // block[0]), ", "grid = (N // block[0], ",
        "its first // -> * only enlarges the grid, whose extra threads the bounds guard idles; "
        "rounding the columns' blocks down leaves the last columns unwritten"),
    "examples/fusion.py:fusion_numba_check:check_softmax_numba": (
        "err = rel_err(out.copy_to_host(), softmax_reference(x))",
        "err = rel_err(out.copy_to_host(), softmax_reference(x) * 2)",
        "its first * scales the logits, and softmax does not change when every logit moves together; "
        "a wrong reference must fail the check"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from tests.overlap import cupy_case, numba_case, ex, SIDE, SIM, SQ, SQ_NUMBA, WIDE

    return [
        cupy_case("examples/fusion.bias_gelu_residual",
            call=lambda i, out: ex("fusion.bias_gelu_residual")(i["x"], i["bias"], i["residual"], out),
            inputs={"x": SQ, "bias": (SIDE,), "residual": SQ}, out_shape=SQ),
        cupy_case("examples/fusion.softmax_rows", call=lambda i, out: ex("fusion.softmax_rows")(i["x"], out),
            inputs={"x": SQ}, out_shape=SQ),
        # blocks of 32 x 2 threads: 2 x 8 blocks in the simulator
        numba_case("examples/fusion.bias_gelu_residual_numba",
            call=lambda i, out: ex("fusion.bias_gelu_residual_numba")(i["x"], i["bias"], i["residual"], out,
                                                                    block=(32, 2)),
            inputs={"x": WIDE, "bias": (WIDE[1],), "residual": WIDE}, out_shape=WIDE),
        numba_case("examples/fusion.softmax_rows_numba",  # a block per row: 8 blocks in the simulator
            call=lambda i, out: ex("fusion.softmax_rows_numba")(i["x"], out, threads=32),
            inputs={"x": (8, 40) if SIM else SQ_NUMBA}, out_shape=(8, 40) if SIM else SQ_NUMBA),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "gelu_cuda_launch": "the launch bias_gelu_residual makes after checking out against x, bias and residual",
    "bias_gelu_residual_steps": "examples/fusion.py: the unfused chain as usually written (CuPy operators); bias_gelu_residual checks out before it calls this",
    "softmax_steps": "examples/fusion.py: the unfused softmax as usually written (CuPy operators); softmax_rows checks out before it calls this",
}
