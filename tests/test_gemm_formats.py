"""GEMM in every format (kernels/gemm_formats.py).

On the GPU: the bfloat16 and FP8 rounding against kernels/number_formats.py
(an independent float64 implementation), every format's GEMM against the
float64 product of the values it stores (output poisoned first) and against
the original inputs with a bound for the format, INT8 exactly, the
calibrated INT8 layer, and bad input refused. On the CPU: the format names
and the FP8 parameters against number_formats.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels import gemm_formats as gf, number_formats as nf

gpu = pytest.mark.gpu


def test_an_unknown_format_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"format must be one of .*'fp8_e4m3'.*got 'fp4'"):
        gf.check_format("fp4")


def test_fp8_parameters_agree_with_the_number_formats():
    for name, f in (("fp8_e4m3", nf.E4M3), ("fp8_e5m2", nf.E5M2)):
        assert gf.FP8[name] == (f.man_bits, f.emin, f.max)


# --- GPU -------------------------------------------------------------------

def _probe_values(cp, n=200_000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)
    return cp.asarray(x.astype(np.float32))


@gpu
def test_bf16_rounds_to_nearest_even_like_the_reference():
    import cupy as cp

    x = _probe_values(cp)
    ties = cp.asarray(np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.0], dtype=np.float32))
    for v in (x, ties):
        got = gf.from_bf16(gf.to_bf16(v)).get().astype(np.float64)
        want = nf.quantize(v.get().astype(np.float64), nf.BF16)
        np.testing.assert_array_equal(got, want)


@gpu
@pytest.mark.parametrize("fmt,ref", [("fp8_e4m3", nf.E4M3), ("fp8_e5m2", nf.E5M2)])
def test_fp8_rounding_matches_the_reference_and_saturates(fmt, ref):
    import cupy as cp

    x = _probe_values(cp) * np.float32(2.0**-20)
    got = gf.round_fp8(x, fmt).get().astype(np.float64)
    want = nf.quantize(x.get().astype(np.float64), ref)
    want = np.clip(want, -ref.max, ref.max)  # the GEMM path saturates
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(np.abs(got))) <= set(np.abs(nf.fp8_values(ref)))
    big = gf.round_fp8(cp.asarray([1e6, -1e6], dtype=cp.float32), fmt).get()
    assert list(big) == [ref.max, -ref.max]


# format -> (bound on the error against the exact product of the values it
# stores, bound against the original float64 inputs), N(0, 1) inputs, K <= 200.
# tf32 rounds its float32 inputs inside cuBLAS (10 mantissa bits: 2^-11 ~ 5e-4
# relative each); int8's integer sums are exact, its dequantization is float64.
BOUNDS = {"fp64": (1e-14, 1e-14), "fp32": (1e-6, 1e-6), "tf32": (1e-3, 2e-3), "bf16": (1e-6, 1e-2),
          "fp16": (1e-6, 2e-3), "fp16_acc16": (2e-3, 4e-3), "int8": (1e-14, 3e-2),
          "fp8_e4m3": (1e-6, 8e-2), "fp8_e5m2": (1e-6, 2e-1)}


@gpu
@pytest.mark.parametrize("fmt", gf.FORMATS)
@pytest.mark.parametrize("shape", [(16, 16, 16), (64, 48, 40), (100, 36, 200)])
def test_every_format_multiplies_right(fmt, shape):
    import cupy as cp

    M, N, K = shape
    rng = cp.random.default_rng(1)
    A, B = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    q = gf.quantize(A, B, fmt)
    C = gf.matmul(q)
    C.fill(np.nan if C.dtype.kind == "f" else -(2**31))
    gf.matmul(q, C)
    Av, Bv = gf.values(q)
    R = gf.dequantize(q, C)
    exact = Av @ Bv
    arith, total = BOUNDS[fmt]
    err = float(cp.linalg.norm(R - exact) / cp.linalg.norm(exact))
    assert err <= arith, (fmt, shape, err)
    err = float(cp.linalg.norm(R - A @ B) / cp.linalg.norm(A @ B))
    assert err < total, (fmt, shape, err)
    if fmt == "int8":  # integer sums: exact
        assert bool((C.astype(cp.int64) == q.A.astype(cp.int64) @ q.B.T.astype(cp.int64)).all())


@gpu
def test_out_of_the_wrong_type_or_shape_is_refused():
    import cupy as cp

    q = gf.quantize(cp.ones((8, 8)), cp.ones((8, 8)), "fp16")
    with pytest.raises(ValueError, match=r"out must be a C-contiguous float32 array of shape \(8, 8\)"):
        gf.matmul(q, cp.empty((8, 8), dtype=cp.float16))
    with pytest.raises(ValueError, match="matching K"):
        gf.quantize(cp.ones((8, 4)), cp.ones((8, 8)), "fp16")


@gpu
def test_the_calibrated_int8_layer_saturates_beyond_its_calibration():
    import cupy as cp

    from kernels.bench.tc_formats import calibrated_int8

    rng = cp.random.default_rng(2)
    X = cp.maximum(rng.standard_normal((64, 32)), 0)
    W = rng.standard_normal((32, 24)) / 32**0.5
    calib = X[:8] * 0.5  # a calibration batch of smaller values: X's larger ones saturate
    q = calibrated_int8(X, W, calib)
    assert int(q.A.max()) == 127 and float(q.row_scale[0]) == pytest.approx(float(calib.max()) / 127)
    R = gf.dequantize(q, gf.matmul(q))
    Xs = cp.minimum(X, float(calib.max()))  # what the saturated operand stands for, roughly
    assert float(cp.linalg.norm(R - Xs @ W) / cp.linalg.norm(Xs @ W)) < 3e-2


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from tests.overlap import SIDE, cupy_case

    def fp32_matmul(i, out):  # cublasGemmEx in FP32: 8 x 8 tiles of 128 at least
        return gf.matmul(gf.Operands("fp32", i["A"], i["B"], SIDE, SIDE, SIDE), out)

    return [cupy_case("matmul", call=fp32_matmul, inputs={"A": (SIDE, SIDE), "B": (SIDE, SIDE)},
                      out_shape=(SIDE, SIDE))]
