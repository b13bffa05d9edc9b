"""The number formats of the Tensor Core chapter, from their bit layouts.

A binary floating-point format is sign, `exp_bits` of exponent with a
`bias`, and `man_bits` of stored mantissa. From that follow its largest
finite value, its smallest normal and subnormal values and its machine
epsilon (the gap above 1.0). `quantize(x, fmt)` rounds float64 values to the
nearest value of the format, ties to even, as a conversion instruction
does; overflow goes to infinity in the IEEE-style formats and saturates to
the largest finite value in FP8 E4M3, which has no infinity (OCP 8-bit
Floating Point Specification, "E4M3FN"; CUDA's __NV_SATFINITE conversion).

Sources for the layouts: IEEE 754-2019 (FP64, FP32, FP16); the bfloat16
layout (8 exponent bits, 7 stored mantissa bits); TF32 as the Ampere
architecture whitepaper defines it (FP32's range, 10 mantissa bits); OCP
8-bit Floating Point Specification (OFP8) rev. 1.0 for E4M3 and E5M2.
"""

from __future__ import annotations

# --8<-- [start:float_format]
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class FloatFormat:
    name: str
    exp_bits: int
    man_bits: int
    has_inf: bool = True  # False: E4M3, whose top exponent holds numbers (and one NaN per sign)

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def emin(self) -> int:
        """The exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """The exponent of the largest finite number."""
        top = 2**self.exp_bits - 1  # all ones
        return (top if not self.has_inf else top - 1) - self.bias

    @property
    def max(self) -> float:
        # E4M3 gives the all-ones mantissa of its top exponent to NaN
        frac = 2 - 2.0 ** -self.man_bits if self.has_inf else 2 - 2.0 ** (1 - self.man_bits)
        return frac * 2.0**self.emax

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def eps(self) -> float:
        """The gap between 1.0 and the next larger value: 2^-man_bits."""
        return 2.0**-self.man_bits


FP64 = FloatFormat("FP64", 11, 52)
FP32 = FloatFormat("FP32", 8, 23)
TF32 = FloatFormat("TF32", 8, 10)
BF16 = FloatFormat("BF16", 8, 7)
FP16 = FloatFormat("FP16", 5, 10)
E4M3 = FloatFormat("FP8 E4M3", 4, 3, has_inf=False)
E5M2 = FloatFormat("FP8 E5M2", 5, 2)
FORMATS = (FP64, FP32, TF32, BF16, FP16, E4M3, E5M2)
# --8<-- [end:float_format]


# --8<-- [start:quantize]
def quantize(x, fmt: FloatFormat) -> np.ndarray:
    """x (float64) rounded to the nearest value of `fmt`, ties to even, as
    float64. NaN stays NaN; overflow gives +-inf, or +-max for E4M3."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    _, e = np.frexp(a)  # a = f * 2^e with f in [0.5, 1): the leading bit is 2^(e - 1)
    exp = np.maximum(e - 1, fmt.emin)  # below the normal range the spacing stays that of emin
    quantum = np.ldexp(1.0, exp - fmt.man_bits)
    q = np.round(a / quantum) * quantum  # np.round: half to even; a / quantum is exact
    over = q > fmt.max
    q = np.where(over, np.inf if fmt.has_inf else fmt.max, q)
    out = np.copysign(q, x)
    return np.where(np.isnan(x), np.nan, out)
# --8<-- [end:quantize]


def fp8_values(fmt: FloatFormat) -> np.ndarray:
    """Every finite value of an 8-bit format, decoded from its 256 codes
    (independently of quantize: the tests compare the two)."""
    assert fmt.bits == 8
    vals = []
    for code in range(256):
        s, e, m = code >> 7, (code >> fmt.man_bits) & (2**fmt.exp_bits - 1), code & (2**fmt.man_bits - 1)
        top = e == 2**fmt.exp_bits - 1
        if top and (fmt.has_inf or m == 2**fmt.man_bits - 1):
            continue  # inf / NaN codes
        v = (m / 2**fmt.man_bits) * 2.0**fmt.emin if e == 0 else (1 + m / 2**fmt.man_bits) * 2.0 ** (e - fmt.bias)
        vals.append(-v if s else v)
    return np.unique(np.array(vals))


def int8_quantize(x, scale: float) -> np.ndarray:
    """Symmetric INT8: round(x / scale) clamped to [-127, 127], times scale
    (the value an INT8 GEMM's operand stands for)."""
    q = np.clip(np.round(np.asarray(x, dtype=np.float64) / scale), -127, 127)
    return q * scale


# --8<-- [start:format_table]
def format_table() -> list[dict]:
    """One row per format: bits, exponent and mantissa bits, largest finite,
    smallest normal and subnormal values, epsilon, and decimal digits."""
    rows = []
    for f in FORMATS:
        rows.append({"format": f.name, "bits": f.bits, "exp_bits": f.exp_bits, "man_bits": f.man_bits,
                     "max": f.max, "min_normal": f.min_normal, "min_subnormal": f.min_subnormal, "eps": f.eps,
                     "digits": (f.man_bits + 1) * np.log10(2)})
    return rows
# --8<-- [end:format_table]
