"""kernels/number_formats.py against independent references: NumPy's own
float16 / float32 / float64 casts and finfo, bit-level rounding of float32
for BF16 and TF32, and the 256 decoded codes of each FP8 format."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import number_formats as nf


def samples(seed=0, n=200_000):
    """float64 values over the whole range: normal, subnormal, huge, ties, signs, zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-150, 130, n).astype(np.float64))
    return np.concatenate([x, [0.0, -0.0, 1.0, -1.0, 65504.0, 65520.0, 65519.99, 2.0**-24, 2.0**-25, 3 * 2.0**-26]])


@pytest.mark.parametrize("fmt, dtype", [(nf.FP16, np.float16), (nf.FP32, np.float32), (nf.FP64, np.float64)])
def test_ieee_formats_match_numpy(fmt, dtype):
    x = samples()
    with np.errstate(over="ignore"):
        want = x.astype(dtype).astype(np.float64)
    got = nf.quantize(x, fmt)
    assert np.array_equal(got, want), x[got != want][:5]
    fi = np.finfo(dtype)
    assert (fmt.max, fmt.min_normal, fmt.eps) == (float(fi.max), float(fi.smallest_normal), float(fi.eps))
    assert fmt.min_subnormal == float(fi.smallest_subnormal)


def _round_bits(x32: np.ndarray, drop: int) -> np.ndarray:
    """float32 rounded to nearest even by integer arithmetic on its bits,
    keeping 23 - drop mantissa bits (BF16: drop 16; TF32: drop 13)."""
    b = x32.view(np.uint32).astype(np.uint64)
    half = (1 << (drop - 1)) - 1
    b = (b + half + ((b >> drop) & 1)) & ~np.uint64((1 << drop) - 1)
    return (b & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("fmt, drop", [(nf.BF16, 16), (nf.TF32, 13)])
def test_bf16_and_tf32_match_bit_rounding(fmt, drop):
    with np.errstate(over="ignore"):
        x = samples(1).astype(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).smallest_normal)]
    x = x[np.abs(x) < 3e38]  # away from FP32's top, where bit rounding would carry into infinity
    got = nf.quantize(x.astype(np.float64), fmt)
    want = _round_bits(x, drop)
    assert np.array_equal(got, want), x[got != want][:5]


@pytest.mark.parametrize("fmt", [nf.E4M3, nf.E5M2], ids=lambda f: f.name)
def test_fp8_rounds_to_the_nearest_code_ties_to_even(fmt):
    vals = nf.fp8_values(fmt)
    assert len(vals) == (253 if fmt is nf.E4M3 else 247)  # +-0 merged; NaNs (and infinities) left out
    assert vals.max() == fmt.max and vals[vals > 0].min() == fmt.min_subnormal
    assert np.array_equal(nf.quantize(vals, fmt), vals)  # every code is its own value
    rng = np.random.default_rng(2)
    x = rng.uniform(-fmt.max, fmt.max, 20_000)
    got = nf.quantize(x, fmt)
    dist = np.abs(x[:, None] - vals[None, :])
    best = dist.min(axis=1)
    assert np.allclose(np.abs(x - got), best, rtol=0, atol=0)  # no code is nearer
    mids = (vals[1:] + vals[:-1]) / 2  # exact ties go to the even code (mantissa's last bit 0)
    q = nf.quantize(mids, fmt)
    assert np.all((q == vals[1:]) | (q == vals[:-1]))


def test_fp8_known_values():
    assert (nf.E4M3.max, nf.E5M2.max) == (448.0, 57344.0)
    assert (nf.E4M3.min_normal, nf.E4M3.min_subnormal) == (2.0**-6, 2.0**-9)
    assert (nf.E5M2.min_normal, nf.E5M2.min_subnormal) == (2.0**-14, 2.0**-16)
    assert nf.quantize(0.1, nf.E4M3) == 0.1015625 and nf.quantize(0.1, nf.E5M2) == 0.09375
    assert nf.quantize(1000.0, nf.E4M3) == 448.0  # no infinity: saturates
    assert nf.quantize(1e6, nf.E5M2) == np.inf
    assert np.isnan(nf.quantize(np.nan, nf.E4M3))


def test_int8_and_the_table():
    x = np.array([-2.0, -0.004, 0.0, 0.004, 0.5, 3.0])
    assert np.array_equal(nf.int8_quantize(x, 1 / 127), [-1.0, -1 / 127, 0.0, 1 / 127, 64 / 127, 1.0])  # 63.5 -> 64
    rows = {r["format"]: r for r in nf.format_table()}
    assert rows["FP16"]["max"] == 65504.0 and rows["BF16"]["max"] == float(np.finfo(np.float32).max) * (1 - 2.0**-8) / (1 - 2.0**-24)
    assert rows["TF32"]["eps"] == 2.0**-10 and rows["BF16"]["eps"] == 2.0**-7
    assert [r["bits"] for r in nf.format_table()] == [64, 32, 19, 16, 16, 8, 8]
