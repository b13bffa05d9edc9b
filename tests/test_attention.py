"""Fused attention (kernels/attention.py, kernels/cuda/attention.cu).

On the CPU: the configurations the wrapper lists are the ones attention.cu
instantiates, with the shapes they are named after, and fit in shared
memory; the counting formulas; the float64 reference against a plain
definition; the refusals (FP16 on an older GPU, unknown kernels and
configurations); the Numba kernel in the simulator at tiny sizes (odd N,
N = 1, causal, logits near 1e4), its bad input; and the source the wrapper
builds for NVRTC (helpers in front) compiled to PTX below sm_80 holds no
sm_80 instruction. On the GPU: every CUDA C kernel and configuration, the
FP16 kernel and the naive version against float64 at N not a multiple of
any tile and N = 1, d = 64 and 128, causal or not, output poisoned with NaN
first; logits near 1e4 stay finite; bad input refused.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from kernels import attention as at
from tests.test_cuda_compile import nvcc

gpu = pytest.mark.gpu


def _inputs(bh, n, d, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((bh, n, d)).astype(np.float32) for _ in range(3))
    return q * np.float32(scale), k * np.float32(scale), v


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


# --- CPU ----------------------------------------------------------------------

def test_configurations_are_the_ones_attention_cu_instantiates():
    inst = at.cu_instantiations()
    listed = {}
    for kernel, by_d in at.FP32_CONFIGS.items():
        for d, configs in by_d.items():
            assert at.DEFAULT_CONFIG[kernel][d] in configs
            for name, params in configs.items():
                listed[at.kernel_name(kernel, d, name)] = (d, *params)
    assert listed == inst
    for name, (d, tx, ty, tn, bk, stages) in inst.items():
        bm, bn = ty * at.TM, tx * tn
        want = f"{bm}x{bn}k{bk}" + ("" if "blocked" in name else f"s{stages}")
        assert name.endswith(f"_d{d}_{want}"), name                    # named after its shape
        assert (stages == 1) == ("blocked" in name), name               # step 2 loads between barriers
        assert 32 % tx == 0 and (d // tx) % 4 == 0 and bn % bk == 0 and d % bk == 0, name


def test_every_kernel_fits_in_shared_memory():
    for kernel in at.FP32_KERNELS:
        for d in at.D_VALUES:
            for config in ([None] if kernel == "fp32_rows" else at.FP32_CONFIGS[kernel][d]):
                shape = at.tile_shape(kernel, d, config)
                assert shape["smem"] <= 227 * 1024, (kernel, d, config)
                assert shape["threads"] % 32 == 0 and shape["threads"] <= 1024
    assert at.fp16_smem(128) == 80 * 1024 and at.fp16_smem(64) == 40 * 1024


def test_ladder_names_and_refusals():
    assert at.kernel_name("fp32_rows", 128) == "attention_fp32_rows_d128"
    assert at.kernel_name("fp32_async", 128) == "attention_fp32_async_d128_" + \
        at.DEFAULT_CONFIG["fp32_async"][128]
    with pytest.raises(ValueError, match="kernel must be one of"):
        at.resolve("fp32_magic", 64)
    with pytest.raises(ValueError, match="config for fp32_async at d=64 must be one of"):
        at.resolve("fp32_async", 64, "64x64k16s3x")
    with pytest.raises(ValueError, match="fp32_rows has one shape"):
        at.resolve("fp32_rows", 64, "128x64k16s3")


def test_fp16_refuses_older_gpus_naming_the_need():
    with pytest.raises(RuntimeError, match=r"needs compute capability 8\.0 .*mma\.sync.*Tesla T4 is 7\.5"):
        at.require_fp16("Tesla T4", (7, 5))
    at.require_fp16("NVIDIA A100", (8, 0))
    at.require_fp16("NVIDIA H200", (9, 0))


def test_counting_formulas():
    assert at.useful_flop(16, 8192, 128) == 4 * 16 * 8192**2 * 128
    assert at.useful_flop(1, 3, 64, causal=True) == 4 * 6 * 64          # pairs (0,0) (1,0) (1,1) (2,0..2)
    for free in (10**9, 141 * 10**9, 12345678901):
        for causal in (False, True):
            n = at.naive_max_n(16, 128, free, causal)
            assert at.naive_bytes(16, n, 128, causal) <= free < at.naive_bytes(16, n + 1, 128, causal)
    assert at.naive_max_n(16, 128, 10) == 0
    # S dominates: 12 passes of 4 bytes over BH N^2
    assert at.naive_hbm_bytes(16, 8192, 128) == 12 * 4 * 16 * 8192**2 + 16 * 16 * 8192 * 128
    assert at.fused_hbm_bytes(16, 8192, 128) == 16 * 16 * 8192 * 128
    assert at.fused_hbm_bytes(16, 8192, 128, in_bytes=2) == 10 * 16 * 8192 * 128
    full, causal = (at.fused_l2_bytes(2, 1000, 64, 64, causal=c) for c in (False, True))
    assert full == 2 * 4 * 2 * 16 * 1000 * 64 + 4 * 2 * 1000 * 64 and causal < 0.6 * full


def test_reference_against_the_definition():
    q, k, v = _inputs(2, 5, 64, seed=1)
    ref = at.attention_reference(q, k, v)
    for h in range(2):
        s = q[h].astype(np.float64) @ k[h].T.astype(np.float64) / 8.0
        p = np.exp(s - s.max(axis=1, keepdims=True))
        assert np.allclose(ref[h], (p / p.sum(axis=1, keepdims=True)) @ v[h], rtol=1e-12, atol=1e-12)
    causal = at.attention_reference(q, k, v, causal=True)
    assert np.allclose(causal[:, 0], v[:, 0])                               # row 0 sees key 0 only
    assert np.allclose(at.attention_reference(q, k, v, True, rows=slice(2, 4)), causal[:, 2:4])
    assert np.allclose(at.attention_reference(q[:, :1], k[:, :1], v[:, :1]), v[:, :1])  # N = 1: O = V
    q4 = q.reshape(1, 2, 5, 64)
    assert np.allclose(at.attention_reference(q4, k.reshape(q4.shape), v.reshape(q4.shape)).reshape(ref.shape), ref)
    big = at.attention_reference(*_inputs(1, 50, 64, scale=100.0))           # logits ~ 1e4
    assert np.isfinite(big).all()


def test_numba_kernel_matches_float64_in_the_simulator_or_on_the_gpu():
    """Tiny sizes (the simulator runs each GPU thread as a Python thread):
    odd N over several tiles and blocks, N = 1, d = 64 and 128, causal or
    not, logits near 1e4."""
    from numba import cuda

    for bh, n, d, causal, scale in ((2, 37, 64, False, 1.0), (2, 37, 64, True, 1.0), (1, 1, 64, False, 1.0),
                                    (1, 1, 128, True, 1.0), (1, 19, 128, True, 1.0), (1, 20, 64, False, 100.0)):
        q, k, v = _inputs(bh, n, d, seed=n + d, scale=scale)
        out = cuda.to_device(np.full((bh, n, d), np.nan, np.float32))
        assert at.attention_numba(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), causal, out) is out
        got = out.copy_to_host()
        assert np.isfinite(got).all(), (bh, n, d, causal, scale)
        assert _rel(got, at.attention_reference(q, k, v, causal)) < (2e-4 if scale > 1 else 2e-6), \
            (bh, n, d, causal, scale)


def test_numba_wrapper_refuses_bad_input():
    from numba import cuda

    x = cuda.to_device(np.zeros((1, 4, 64), np.float32))
    with pytest.raises(TypeError, match="q must be a Numba device array"):
        at.attention_numba(np.zeros((1, 4, 64), np.float32), x, x)
    with pytest.raises(TypeError, match="k must have dtype float32"):
        at.attention_numba(x, cuda.to_device(np.zeros((1, 4, 64))), x)
    with pytest.raises(ValueError, match=r"d \(the last dimension of q, k, v\) must be one of \(64, 128\), got d=32"):
        y = cuda.to_device(np.zeros((1, 4, 32), np.float32))
        at.attention_numba(y, y, y)
    with pytest.raises(ValueError, match="v must be 3-D"):
        at.attention_numba(x, x, cuda.to_device(np.zeros((1, 5, 64), np.float32)))
    with pytest.raises(TypeError, match="causal must be a bool"):
        at.attention_numba(x, x, x, causal=1)


@pytest.mark.skipif(nvcc() is None, reason="nvcc not found (install the CUDA toolkit)")
def test_the_source_built_for_nvrtc_compiles_below_sm80_without_sm80_instructions(tmp_path):
    """The wrapper compiles helpers + attention.cu for the GPU it runs on:
    on sm_75 (a T4) the file must still compile, step 3 copying
    synchronously and step 4 empty (the wrapper refuses it there); on sm_90
    steps 3 and 4 use cp.async and mma.sync."""
    src = tmp_path / "attention_nvrtc.cu"
    src.write_text(at.nvrtc_source())
    ptx = {}
    for arch in ("sm_75", "sm_90"):
        # -Xcicc -O0: the front end only (seconds); which instructions appear does not depend on it
        proc = subprocess.run([nvcc(), f"-arch={arch}", "-std=c++17", "-ptx", "-Xcicc", "-O0", "-Werror",
                               "all-warnings", str(src), "-o", str(tmp_path / f"{arch}.ptx")],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        ptx[arch] = (tmp_path / f"{arch}.ptx").read_text()
    for instr in ("cp.async", "mma.sync", "ldmatrix"):
        assert instr not in ptx["sm_75"] and instr in ptx["sm_90"], instr
    entries = set(re.findall(r"\.entry (\w+)", ptx["sm_90"]))
    assert set(at.cu_instantiations()) | {"attention_fp16_d64", "attention_fp16_d128",
                                          "attention_fp32_rows_d64", "attention_fp32_rows_d128"} == entries


# --- GPU ----------------------------------------------------------------------

def _all_fp32():
    out = []
    for kernel in at.FP32_KERNELS:
        for d in at.D_VALUES:
            for config in ([None] if kernel == "fp32_rows" else at.FP32_CONFIGS[kernel][d]):
                out.append((kernel, d, config))
    return out


@gpu
@pytest.mark.parametrize("kernel,d,config", _all_fp32(), ids=lambda x: str(x))
def test_fp32_kernel_matches_float64(kernel, d, config):
    import cupy as cp

    for n in (1, 100, 1000):
        q, k, v = _inputs(3, n, d, seed=n)
        dq, dk, dv = (cp.asarray(x) for x in (q, k, v))
        for causal in (False, True):
            out = cp.full(q.shape, cp.nan, dtype=cp.float32)
            assert at.attention_fused(dq, dk, dv, causal, kernel=kernel, config=config, out=out) is out
            got = cp.asnumpy(out)
            assert np.isfinite(got).all(), (n, causal)
            assert _rel(got, at.attention_reference(q, k, v, causal)) < 1e-5, (n, causal)


@gpu
@pytest.mark.parametrize("d", at.D_VALUES)
def test_fp16_kernel_and_naive_match_float64(d):
    import cupy as cp

    for n in (1, 100, 1000):
        q, k, v = _inputs(3, n, d, seed=n)
        h = [x.astype(np.float16) for x in (q, k, v)]
        for causal in (False, True):
            out = cp.full(q.shape, cp.nan, dtype=cp.float32)
            assert at.attention_fused_fp16(*(cp.asarray(x) for x in h), causal, out=out) is out
            assert _rel(cp.asnumpy(out), at.attention_reference(*h, causal)) < 2e-3, (n, causal)
            naive = at.attention_naive(*(cp.asarray(x) for x in (q, k, v)), causal)
            assert _rel(cp.asnumpy(naive), at.attention_reference(q, k, v, causal)) < 1e-5, (n, causal)


@gpu
def test_large_logits_stay_finite_and_accurate():
    """q and k scaled by 100: logits near 1e4 (exp overflows FP32 at 88.7
    without the subtraction of the row's maximum)."""
    import cupy as cp

    for d in at.D_VALUES:
        q, k, v = _inputs(2, 300, d, seed=7, scale=100.0)
        dq, dk, dv = (cp.asarray(x) for x in (q, k, v))
        for causal in (False, True):
            ref = at.attention_reference(q, k, v, causal)
            outs = {kernel: at.attention_fused(dq, dk, dv, causal, kernel=kernel) for kernel in at.FP32_KERNELS}
            outs["naive"] = at.attention_naive(dq, dk, dv, causal)
            for name, out in outs.items():
                got = cp.asnumpy(out)
                assert np.isfinite(got).all(), (name, d, causal)
                assert _rel(got, ref) < 1e-3, (name, d, causal)  # the logits' own FP32 rounding: ~1e-3 absolute
            h = [x.astype(np.float16) for x in (q / 4, k / 4, v)]  # FP16 holds up to 65504: logits ~ 600
            got = cp.asnumpy(at.attention_fused_fp16(*(cp.asarray(x) for x in h), causal))
            assert np.isfinite(got).all() and _rel(got, at.attention_reference(*h, causal)) < 2e-2


@gpu
def test_four_d_input_and_kernels_do_not_spill():
    import cupy as cp

    q, k, v = _inputs(6, 130, 64, seed=3)
    q4, k4, v4 = (cp.asarray(x.reshape(2, 3, 130, 64)) for x in (q, k, v))
    out = at.attention_fused(q4, k4, v4, True)
    assert out.shape == (2, 3, 130, 64)
    assert _rel(cp.asnumpy(out).reshape(q.shape), at.attention_reference(q, k, v, True)) < 1e-5
    for kernel, d, config in _all_fp32():
        kern, _ = at.fused_kernel(kernel, d, config)
        assert kern.local_size_bytes == 0, (kernel, d, config, "NVRTC spilled registers")
    for d in at.D_VALUES:
        assert at.get_kernel(f"attention_fp16_d{d}", at.fp16_smem(d)).local_size_bytes == 0


@gpu
def test_wrappers_refuse_bad_input():
    import cupy as cp

    x = cp.zeros((2, 8, 64), dtype=cp.float32)
    with pytest.raises(ValueError, match=r"d \(the last dimension of q, k, v\) must be one of \(64, 128\), got d=96"):
        y = cp.zeros((2, 8, 96), dtype=cp.float32)
        at.attention_fused(y, y, y)
    with pytest.raises(TypeError, match="q must have dtype float32"):
        at.attention_fused(x.astype(cp.float16), x, x)
    with pytest.raises(TypeError, match="k must have dtype float16"):
        at.attention_fused_fp16(x.astype(cp.float16), x, x.astype(cp.float16))
    with pytest.raises(TypeError, match="cupy.ndarray"):
        at.attention_fused(np.zeros((2, 8, 64), np.float32), x, x)
    with pytest.raises(ValueError, match="k must have the shape of q"):
        at.attention_fused(x, cp.zeros((2, 9, 64), dtype=cp.float32), x)
    with pytest.raises(ValueError, match="q must be 3-D"):
        at.attention_fused(x[0], x[0], x[0])
    with pytest.raises(ValueError, match="C-contiguous"):
        t = cp.zeros((2, 64, 8), dtype=cp.float32).transpose(0, 2, 1)
        at.attention_fused(t, t, t)
    with pytest.raises(ValueError, match="16-byte boundary"):
        big = cp.zeros(2 * 8 * 64 + 1, dtype=cp.float32)[1:].reshape(2, 8, 64)
        at.attention_fused(big, big, big)
    with pytest.raises(ValueError, match="N .* must be >= 1"):
        e = cp.zeros((2, 0, 64), dtype=cp.float32)
        at.attention_fused(e, e, e)
    with pytest.raises(ValueError, match="out must not overlap q"):
        at.attention_fused(x, x.copy(), x.copy(), out=x)
    with pytest.raises(ValueError, match="out must have the shape of q"):
        at.attention_fused(x, x, x, out=cp.zeros((2, 8, 128), dtype=cp.float32))
    with pytest.raises(TypeError, match="out must have dtype float32"):
        h = x.astype(cp.float16)
        at.attention_fused_fp16(h, h, h, out=cp.zeros(x.shape, dtype=cp.float16))
    with pytest.raises(TypeError, match="causal must be a bool"):
        at.attention_fused(x, x, x, 1)
    with pytest.raises(ValueError, match="config for fp32_async at d=64"):
        at.attention_fused(x, x, x, kernel="fp32_async", config="64x128k16s4")
    with pytest.raises(ValueError, match=r"batch \* heads must be in"):
        z = cp.zeros((65536, 1, 64), dtype=cp.float32)
        at.attention_fused(z, z, z)
    with pytest.raises(ValueError, match=r"got d=96"):
        y = cp.zeros((2, 8, 96), dtype=cp.float32)
        at.attention_naive(y, y, y)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/attention.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# the Numba kernel forgets to rescale a row's output when its maximum grows, or to mask keys past the
# query; the cp.async kernel forgets the same rescale; the one-row kernel at d = 128 drops the half of
# each dot product its partner thread holds; the FP16 kernel multiplies P by the wrong half of V's
# fragments; the FP32 launch passes 1 / sqrt(d) where the kernels' base-2 softmax wants log2(e) / sqrt(d)
EXAMPLE_FAULTS = [
    ("attention.py", "acc[e, t] *= corr", "acc[e, t] *= 1.0", "numba"),
    ("attention.py", "if col >= n or (causal and col > row):", "if col >= n:", "numba"),
    ("attention.cu",
     "for (int d = 0; d < TD; ++d) o[i][d] *= corr;",
     "for (int d = 0; d < TD; ++d) o[i][d] *= 1.0f;",
     "cupy"),
    ("attention.cu", "if (TPR == 2) dot += __shfl_xor_sync", "if (TPR == 3) dot += __shfl_xor_sync", "cupy"),
    ("attention.cu", "mma_16816(o[j + 1], p[kk], b[2], b[3]);", "mma_16816(o[j + 1], p[kk], b[0], b[1]);", "cupy"),
    ("attention.py",
     "np.float32(math.log2(math.e) / math.sqrt(d))  # the kernels' softmax",
     "np.float32(1.0 / math.sqrt(d))  # the kernels' softmax",
     "cupy"),
    # the Hopper kernel: P's two values of a register swapped; its causal mask dropped
    ("hopper_attention.cu",
     "pack_half2(s[8 * kc + 2 * r], s[8 * kc + 2 * r + 1])",
     "pack_half2(s[8 * kc + 2 * r + 1], s[8 * kc + 2 * r])",
     "cupy"),
    ("hopper_attention.cu",
     "if (col >= N || (causal && col > row0 + 8 * h))",
     "if (col >= N)",
     "cupy"),
]


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from tests.overlap import cupy_case, numba_case, ex, SIDE, SIM

    return [
        # a block per 128 query rows: 8 x 8 blocks; 16-byte copies: views stay 16-byte aligned
        cupy_case("examples/attention.attention_fused", shift=4,
            call=lambda i, out: ex("attention.attention_fused")(i["q"], i["k"], i["v"], out=out),
            inputs={name: (8, SIDE, 64) for name in "qkv"}, out_shape=(8, SIDE, 64)),
        # a query row per thread, 32-thread blocks: a block per head (8 blocks) in the simulator
        numba_case("examples/attention.attention_numba",
            call=lambda i, out: ex("attention.attention_numba")(i["q"], i["k"], i["v"], False, out),
            inputs={name: (8, 8, 64) if SIM else (8, SIDE, 64) for name in "qkv"},
            out_shape=(8, 8, 64) if SIM else (8, SIDE, 64)),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "attention_fused_fp16": "examples/attention.py: float16 q, k, v and a float32 out, which the cases' one buffer of one dtype cannot hold; its out goes through check_qkv, as attention_fused's does",
    "check_qkv": "examples/attention.py: the argument check attention_fused and attention_fused_fp16 call",
    "run_kernel": "examples/attention.py: the checks' dispatch to attention_naive (no out), attention_fused and attention_fused_fp16, which check out",
}
