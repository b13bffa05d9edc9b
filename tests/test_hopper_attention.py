"""The Hopper attention kernel (kernels/hopper_attention.py,
kernels/cuda/hopper_attention.cu).

On the GPU (sm_90a): every step of the ladder, FP16 and BF16, d 64 and 128,
causal or not, at N = 1, 2, 77, 4095, 4097 against float64, the output
poisoned with NaN first; logits near 1e4; the (B, H, N, d) layout; bad
input refused. On the CPU: shared memory fits, every kernel instantiated,
the refusal on other GPUs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels import hopper_attention as ha

gpu = pytest.mark.gpu
NAN16 = {"fp16": 0x7E00, "bf16": 0x7FC0}  # a NaN in each 16-bit format


def test_every_kernel_is_instantiated_and_fits():
    text = ha.CUDA_SOURCE.read_text()
    for name in ha.KERNELS:
        for d in (64, 128):
            threads, bm, stages = ha.launch_shape(name, d)
            assert ha.smem_bytes(name, d) <= 227 * 1024, (name, d)
            consumers = max(1, threads // 128 - 1)
            assert f"HA_KERNEL({name}_d{d}, {threads}, {d}, {stages}, {str(threads > 128).lower()}, {consumers}, " \
                in text, (name, d)
            assert bm == 64 * consumers


def test_source_is_the_gemm_helpers_then_the_kernel():
    src = ha.nvrtc_source()
    assert src.index("mbar_init") < src.index("tma_load_3d") < src.index("ha_forward")
    assert "HG_WS(" not in src and "__global__" not in src[:src.index("tma_load_3d")]  # no GEMM kernel
    assert [b.options for b in ha.cuda_builds()] == [("-arch=sm_90a", "--std=c++17"),
                                                     ("-arch=sm_90a", "--std=c++17", "-DHG_BF16")]


def test_refuses_all_but_sm90a():
    from kernels.hopper_gemm import require_sm90a

    with pytest.raises(RuntimeError, match=r"sm_90a .*NVIDIA A100 is 8\.0"):
        require_sm90a("NVIDIA A100", (8, 0))


def reference(q, k, v, causal):
    """float64 softmax(Q K^T / sqrt(d)) V per head, on the GPU."""
    import cupy as cp

    n, d = q.shape[-2:]
    s = q @ k.swapaxes(-1, -2) / math.sqrt(d)
    if causal:
        s = s + cp.triu(cp.full((n, n), -cp.inf), 1)
    s = cp.exp(s - s.max(axis=-1, keepdims=True))
    return (s / s.sum(axis=-1, keepdims=True)) @ v


def operands(shape, fmt, seed, scale=1.0):
    import cupy as cp

    from kernels.gemm_formats import from_bf16, to_bf16

    rng = cp.random.default_rng(seed)
    x = [rng.standard_normal(shape, dtype=cp.float32) * np.float32(scale) for _ in range(3)]
    if fmt == "fp16":
        x = [a.astype(cp.float16) for a in x]
        return x, [a.astype(cp.float64) for a in x]
    x = [to_bf16(a) for a in x]
    return x, [from_bf16(a).astype(cp.float64) for a in x]


def values(o, fmt):
    from kernels.gemm_formats import from_bf16

    return o.astype(np.float64) if fmt == "fp16" else from_bf16(o).astype(np.float64)


TOL = {"fp16": 4e-3, "bf16": 3e-2}


@gpu
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("kernel", list(ha.KERNELS))
def test_kernel_matches_float64(kernel, fmt):
    import cupy as cp

    from kernels import harness

    for n in (1, 2, 77, 4095, 4097):
        for d in (64, 128):
            (q, k, v), (q64, k64, v64) = operands((1, n, d), fmt, seed=n + d)
            for causal in (False, True):
                ref = reference(q64, k64, v64, causal)
                for _ in range(2):  # twice into a poisoned output: nothing left over from a last run
                    out = cp.full_like(q, NAN16[fmt])
                    assert ha.hopper_attention(q, k, v, causal, out, kernel=kernel) is out
                    err = harness.rel_err(values(out, fmt), ref)
                    assert err < TOL[fmt], (kernel, fmt, n, d, causal, err)


@gpu
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_large_logits_and_four_dimensional_layout(fmt):
    """q and k scaled by 50 (logits near 1e4 at d = 64): the running maximum
    keeps exp from overflowing; (B, H, N, d) as (B * H, N, d)."""
    from kernels import harness

    (q, k, v), (q64, k64, v64) = operands((2, 3, 300, 64), fmt, seed=7, scale=50.0)
    assert float(abs(q64[0, 0] @ k64[0, 0].T).max()) / 8 > 5e3
    for causal in (False, True):
        out = ha.hopper_attention(q, k, v, causal)
        assert out.shape == q.shape and out.dtype == q.dtype
        ref = reference(q64, k64, v64, causal)
        assert harness.rel_err(values(out, fmt), ref) < TOL[fmt]


@gpu
def test_refuses_bad_input():
    import cupy as cp

    q = cp.zeros((2, 64, 64), dtype=cp.float16)
    with pytest.raises(ValueError, match="d .* must be 64 or 128"):
        ha.hopper_attention(*(cp.zeros((2, 64, 96), dtype=cp.float16),) * 3)
    with pytest.raises(TypeError, match="q must have dtype float16"):
        ha.hopper_attention(q.astype(cp.float32), q, q)
    with pytest.raises(TypeError, match="k must have dtype float16"):
        ha.hopper_attention(q, q.view(cp.uint16), q)
    with pytest.raises(ValueError, match="kernel must be one of"):
        ha.hopper_attention(q, q, q, kernel="ha_magic")
    with pytest.raises(TypeError, match="causal must be a bool"):
        ha.hopper_attention(q, q, q, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        ha.hopper_attention(q, q, q.swapaxes(1, 2))
    buf = cp.zeros(2 * 64 * 64 + 8, dtype=cp.float16)
    with pytest.raises(ValueError, match="16-byte boundary"):
        ha.hopper_attention(buf[1:1 + q.size].reshape(q.shape), q, q)
    with pytest.raises(ValueError, match="out must not overlap k"):
        ha.hopper_attention(q, buf[:q.size].reshape(q.shape), q, out=buf[:q.size].reshape(q.shape))
    with pytest.raises(ValueError, match="shape"):
        ha.hopper_attention(q, q, q, out=cp.zeros((2, 64, 128), dtype=cp.float16))
    with pytest.raises(ValueError, match=r"\(BH, N, d\) or \(B, H, N, d\)"):
        ha.hopper_attention(q[0], q[0], q[0])


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

def overlap_cases() -> list:
    """The Hopper wrappers (kernels/ and the example's copy) refuse an output
    that overlaps an input (tests/test_overlap.py)."""
    from tests.overlap import SIDE, cupy_case, ex

    # 8 heads x 1024 rows: 64 blocks of 128 query rows; an 8-element shift keeps 16-byte alignment (TMA)
    shapes = {name: (8, SIDE, 64) for name in "qkv"}
    return [
        cupy_case("kernels/hopper_attention.hopper_attention", shift=8, dtype=np.float16,
                  call=lambda i, out: ha.hopper_attention(i["q"], i["k"], i["v"], out=out),
                  inputs=shapes, out_shape=(8, SIDE, 64)),
        cupy_case("examples/attention.hopper_attention", shift=8, dtype=np.float16,
                  call=lambda i, out: ex("attention.hopper_attention")(i["q"], i["k"], i["v"], out=out),
                  inputs=shapes, out_shape=(8, SIDE, 64)),
    ]
