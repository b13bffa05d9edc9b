"""Topic attention: O = softmax(Q K^T / sqrt(d) (+ causal mask)) V, forward.

- `attention_reference`: float64 (NumPy, or CuPy when given CuPy arrays).
- `attention_naive`: the three steps through CuPy, FP32: S = Q K^T and
  O = P V on cuBLAS (cupy.matmul), a numerically stable softmax in between;
  the N x N matrix S goes through device memory (HBM) several times.
- `attention_fused`: the FP32 CUDA C ladder of kernels/cuda/attention.cu
  (one query row per thread; register-blocked; register-blocked and fed by a
  cp.async pipeline), the N x N scores never leaving the chip.
- `attention_fused_fp16`: FP16 in, FP32 out, on the Tensor Cores (mma.sync,
  sm_80 and newer), FlashAttention-2 style.
- `attention_numba`: the one-row-per-thread kernel in Numba (it runs in
  Numba's CUDA simulator too).

Shapes: q, k, v are (BH, N, d) with BH = batch * heads, or (B, H, N, d),
C-contiguous (the kernels see (B * H, N, d), a free reshape); the output has
the shape of q. d is 64 or 128; N >= 1. Scale: 1 / sqrt(d).

Counting (one denominator for every implementation): the useful FLOP of
attention are 4 N^2 d per head (2 N^2 d for Q K^T, 2 N^2 d for P V); with a
causal mask only the N (N + 1) / 2 visible (query, key) pairs count:
2 N (N + 1) d per head. The softmax's exponentials are counted apart.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np

from . import checks
from .checks import overlaps  # the Numba wrappers below call it as the examples do
from .device import CUDA_DIR, CudaBuild, device_info, select_numba_target

select_numba_target()  # before the Numba section below imports numba

CUDA_SOURCE = CUDA_DIR / "attention.cu"
# The Tensor Core chapter's mma.sync / ldmatrix / cp.async helpers, put in front of attention.cu.
HELPERS_SOURCE = CUDA_DIR / "tensor_cores.cu"
HELPERS_SECTION = "mma_helpers"
D_VALUES = (64, 128)
MAX_BH = 65535  # the grid's y dimension
FP16_MIN_CC = (8, 0)  # mma.sync.m16n8k16, ldmatrix, cp.async

# The FP32 ladder (attention.cu): step 1 has one shape; steps 2 and 3 take a
# configuration "BMxBNkBK[sSTAGES]" -> (TX, TY, TN, BK, STAGES): a block of
# TX * TY threads, BM = 8 TY query rows, BN = TX TN keys per tile, BK d (or
# keys) per shared-memory chunk, STAGES chunk buffers (1: loads between
# barriers; more: cp.async, STAGES - 1 in flight). attention.cu instantiates
# exactly these (tests/test_attention.py checks it).
FP32_KERNELS = ("fp32_rows", "fp32_blocked", "fp32_async")
FP32_CONFIGS = {
    "fp32_blocked": {
        64: {"128x64k16": (8, 16, 8, 16, 1)},
        128: {"64x128k16": (16, 8, 8, 16, 1)},
    },
    "fp32_async": {
        64: {"128x64k16s3": (8, 16, 8, 16, 3), "128x64k32s2": (8, 16, 8, 32, 2),
             "64x128k16s3": (16, 8, 8, 16, 3), "128x32k16s3": (8, 16, 4, 16, 3)},
        128: {"64x128k16s3": (16, 8, 8, 16, 3), "64x128k16s2": (16, 8, 8, 16, 2),
              "64x128k16s4": (16, 8, 8, 16, 4), "64x64k16s3": (16, 8, 4, 16, 3),
              "64x64k32s2": (16, 8, 4, 32, 2), "128x128k16s3": (16, 16, 8, 16, 3),
              "128x64k16s3": (16, 16, 4, 16, 3)},
    },
}
# The configuration a kernel runs when none is given.
DEFAULT_CONFIG = {"fp32_blocked": {64: "128x64k16", 128: "64x128k16"},
                  "fp32_async": {64: "128x64k32s2", 128: "64x64k32s2"}}  # the fastest of 4 and of 7 (H200)
TM = 8  # query rows per thread in steps 2 and 3
ROWS_BR = 64  # query rows per block in step 1
FP16_BR = 64  # query rows per block (4 warps of 16) in the FP16 kernel
FP16_THREADS = 128
LOG2_E = math.log2(math.e)


# ---------------------------------------------------------------- counting --

def useful_flop(bh: int, n: int, d: int, causal: bool = False) -> int:
    """4 N^2 d per head (Q K^T and P V, 2 N^2 d each); causal: the
    N (N + 1) / 2 visible pairs only, 2 N (N + 1) d per head."""
    pairs = n * (n + 1) // 2 if causal else n * n
    return 4 * bh * pairs * d


def naive_bytes(bh: int, n: int, d: int, causal: bool = False) -> int:
    """Device memory the naive version holds at its peak: S (BH x N x N
    float32; the softmax runs in place), Q, K, V and O, the row maxima and
    sums, and with a causal mask the N x N mask and the temporary that
    builds it."""
    out = 4 * bh * n * n + 4 * 4 * bh * n * d + 2 * 4 * bh * n
    if causal:
        out += 2 * 4 * n * n
    return out


def naive_max_n(bh: int, d: int, free_bytes: int, causal: bool = False) -> int:
    """The largest N whose naive_bytes fit in free_bytes (0: not even N = 1)."""
    lo, hi = 0, 1
    while naive_bytes(bh, hi, d, causal) <= free_bytes:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # naive_bytes(lo) fits, naive_bytes(hi) does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if naive_bytes(bh, mid, d, causal) <= free_bytes else (lo, mid)
    return lo


# The passes over S (BH x N x N float32) that attention_naive makes, each a
# read or a write of the whole matrix: QK^T writes S (1); S *= scale (2);
# the causal mask S += M (2); the row max (1); S -= max (2); exp (2); the row
# sum (1); S /= sum (2); P V reads P (1).
NAIVE_S_PASSES = 12
NAIVE_S_PASSES_CAUSAL = 14


def naive_hbm_bytes(bh: int, n: int, d: int, causal: bool = False) -> int:
    """The naive version's device-memory traffic, counted from its code:
    NAIVE_S_PASSES passes over S, Q, K and V read once, O written once (the
    GEMMs' re-reads of Q, K, V tiles hit L2), the mask read once. The
    fewest any three separate kernels could do is 4 passes over S (written,
    read, P written, P read)."""
    passes = NAIVE_S_PASSES_CAUSAL if causal else NAIVE_S_PASSES
    return passes * 4 * bh * n * n + 4 * 4 * bh * n * d + (4 * n * n if causal else 0)


def fused_hbm_bytes(bh: int, n: int, d: int, in_bytes: int = 4, out_bytes: int = 4) -> int:
    """A fused kernel's device-memory traffic when each head's K and V (8 N d
    bytes in FP32: 8 MB at N = 8192, d = 128) stay in L2 while the query
    tiles of that head pass over them: Q, K, V read once, O written once."""
    return 3 * in_bytes * bh * n * d + out_bytes * bh * n * d


def fused_l2_bytes(bh: int, n: int, d: int, bm: int, in_bytes: int = 4, causal: bool = False) -> int:
    """What a fused kernel reads from L2 into shared memory: K and V once per
    query tile of BM rows (causal: the tiles up to the diagonal, about half),
    plus Q once."""
    tiles = -(-n // bm)
    kv_rows = sum(min(n, (t + 1) * bm) for t in range(tiles)) if causal else tiles * n
    return 2 * in_bytes * bh * kv_rows * d + in_bytes * bh * n * d


# ---------------------------------------------------------------- reference --

def attention_reference(q, k, v, causal: bool = False, rows=None):
    """float64 attention of q, k, v (any float dtype; (BH, N, d) or
    (B, H, N, d)), for the query rows `rows` (a slice; None: all). NumPy
    arrays in, NumPy out; CuPy in, CuPy out (float64 on the GPU)."""
    xp = checks.array_module(q)
    q, k, v = (xp.asarray(a, dtype=xp.float64) for a in (q, k, v))
    n = q.shape[-2]
    rows = rows or slice(0, n)
    idx = xp.arange(n)[rows]
    s = q[..., rows, :] @ xp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = xp.where(xp.arange(n)[None, :] > idx[:, None], -xp.inf, s)
    s -= s.max(axis=-1, keepdims=True)
    p = xp.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


# ---------------------------------------------------------------- checks --

def check_qkv(q, k, v, out, *, dtype, out_dtype=np.float32, align: int = 1):
    """q, k, v: CuPy arrays of `dtype`, one shape (BH, N, d) or (B, H, N,
    d), C-contiguous, d in D_VALUES, N >= 1, BH <= MAX_BH, each starting on
    an `align`-byte boundary; out (or None): `out_dtype`, the same shape, no
    overlap with the inputs. Returns (BH, N, d)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        checks.require_cupy_array(name, x)
        checks.require_dtype(name, x, dtype)
    if q.ndim not in (3, 4):
        raise ValueError(f"q must be 3-D (BH, N, d) or 4-D (B, H, N, d), got shape {tuple(q.shape)}")
    for name, x in (("k", k), ("v", v)):
        checks.require_same_shape(name, x, "q", q)
    for name, x in (("q", q), ("k", k), ("v", v)):
        checks.require_contiguous(name, x)
    n, d = int(q.shape[-2]), int(q.shape[-1])
    bh = int(np.prod(q.shape[:-2]))
    if d not in D_VALUES:
        raise ValueError(f"d (the last dimension of q, k, v) must be one of {D_VALUES}, got d={d}")
    if n < 1:
        raise ValueError(f"N (the number of queries and keys) must be >= 1, got N={n}")
    if not 1 <= bh <= MAX_BH:
        raise ValueError(f"batch * heads must be in [1, {MAX_BH}] (the grid's y dimension), got {bh}")
    if out is not None:
        checks.require_cupy_array("out", out)
        checks.require_dtype("out", out, out_dtype)
        checks.require_same_shape("out", out, "q", q)
        checks.require_contiguous("out", out)
        checks.require_no_overlap("out", out, q=q, k=k, v=v)
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        if x is not None and x.data.ptr % align:  # cp.async and float4 copy 16 bytes at a time
            raise ValueError(f"{name} must start on a {align}-byte boundary (its address is "
                             f"{x.data.ptr:#x}): pass a fresh array, not an offset view")
    return bh, n, d


def check_causal(causal) -> int:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    return int(causal)


def require_fp16(gpu: str, cc: tuple[int, int]) -> None:
    """Refuse a GPU without mma.sync.m16n8k16 / cp.async, naming it and the need."""
    if tuple(cc) < FP16_MIN_CC:
        raise RuntimeError(f"attention_fused_fp16 needs compute capability {FP16_MIN_CC[0]}.{FP16_MIN_CC[1]} "
                           f"or newer (mma.sync.m16n8k16, ldmatrix, cp.async); {gpu} is {cc[0]}.{cc[1]}")


# ---------------------------------------------------------------- CUDA C --

def resolve(kernel: str, d: int, config: str | None = None) -> tuple[str, str | None]:
    """(kernel, configuration) after defaults; ValueError naming what is wrong."""
    if kernel not in FP32_KERNELS:
        raise ValueError(f"kernel must be one of {FP32_KERNELS}, got {kernel!r}")
    if kernel == "fp32_rows":
        if config is not None:
            raise ValueError(f"fp32_rows has one shape: config must be None, got {config!r}")
        return kernel, None
    config = DEFAULT_CONFIG[kernel][d] if config is None else config
    if config not in FP32_CONFIGS[kernel][d]:
        raise ValueError(f"config for {kernel} at d={d} must be one of {tuple(FP32_CONFIGS[kernel][d])}, "
                         f"got {config!r}")
    return kernel, config


def kernel_name(kernel: str, d: int, config: str | None = None) -> str:
    """The extern "C" name in attention.cu."""
    kernel, config = resolve(kernel, d, config)
    return f"attention_{kernel}_d{d}" + (f"_{config}" if config else "")


def tile_shape(kernel: str, d: int, config: str | None = None) -> dict:
    """threads, BM (query rows per block), BN (keys per tile) and dynamic
    shared memory in bytes, as attention.cu computes them (TiledShape):
    BM x (d + 4) floats of Q, BM x (BN + TX) of P, STAGES buffers of
    max(BN x (BK + 4), BK x d)."""
    kernel, config = resolve(kernel, d, config)
    if kernel == "fp32_rows":
        return {"threads": ROWS_BR * d // 64, "bm": ROWS_BR, "bn": 32, "smem": 0}
    tx, ty, tn, bk, stages = FP32_CONFIGS[kernel][d][config]
    bm, bn = ty * TM, tx * tn
    floats = bm * (d + 4) + bm * (bn + tx) + stages * max(bn * (bk + 4), bk * d)
    return {"threads": tx * ty, "bm": bm, "bn": bn, "smem": 4 * floats}


def fp16_smem(d: int) -> int:
    """Q (64 x d) and two stages of K and V (64 x d each), in halves."""
    return (FP16_BR + 4 * 64) * d * 2


def helpers_text() -> str:
    """The mma_helpers section of tensor_cores.cu (between its markers)."""
    text = HELPERS_SOURCE.read_text()
    start = f"// --8<-- [start:{HELPERS_SECTION}]"
    end = f"// --8<-- [end:{HELPERS_SECTION}]"
    return text[text.index(start):text.index(end)]


def nvrtc_source() -> str:
    """What NVRTC compiles: the Tensor Core chapter's helpers, then
    attention.cu (ATTENTION_MMA_HELPERS tells it they are there)."""
    return "#define ATTENTION_MMA_HELPERS\n" + helpers_text() + "\n" + CUDA_SOURCE.read_text()


def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """How attention.cu is compiled: the helpers put in front of it."""
    return [CudaBuild(CUDA_SOURCE.name, nvrtc_source())]


@functools.cache
def module(device_id: int = 0):
    """attention.cu's module for one device (NVRTC compiles it at the first
    get_function, for that device's architecture)."""
    import cupy as cp

    (build,) = cuda_builds()
    return cp.RawModule(code=build.code, options=build.options)


@functools.cache
def get_kernel(name: str, smem: int, device_id: int = 0):
    """A kernel of the module, allowed its dynamic shared memory (above 48 KB an opt-in)."""
    import cupy as cp

    with cp.cuda.Device(device_id):
        kern = module(device_id).get_function(name)
        if smem > 48 * 1024:
            kern.max_dynamic_shared_size_bytes = smem
    return kern


def fused_kernel(kernel: str, d: int, config: str | None = None, device_id: int = 0):
    """(compiled kernel, tile_shape) of one FP32 step and configuration."""
    shape = tile_shape(kernel, d, config)
    return get_kernel(kernel_name(kernel, d, config), shape["smem"], device_id), shape


def _scale_log2(d: int) -> np.float32:
    """log2(e) / sqrt(d): the CUDA C kernels' softmax runs in base 2, exp(x) = 2^(x log2 e)."""
    return np.float32(LOG2_E / math.sqrt(d))


# --8<-- [start:attention_launch]
def attention_fused(q, k, v, causal: bool = False, *, kernel: str = "fp32_async",
                    config: str | None = None, out=None):
    """O = softmax(Q K^T / sqrt(d)) V in FP32 with one step of the ladder of
    attention.cu (`kernel` one of FP32_KERNELS; `config` one of its
    FP32_CONFIGS, default DEFAULT_CONFIG). q, k, v: float32 CuPy arrays
    (BH, N, d) or (B, H, N, d), C-contiguous, 16-byte aligned; out: float32
    of that shape (None: a new array). Returns out."""
    import cupy as cp

    causal = check_causal(causal)
    bh, n, d = check_qkv(q, k, v, out, dtype=np.float32, align=16)
    kern, shape = fused_kernel(kernel, d, config, q.device.id)
    if out is None:
        out = cp.empty_like(q)
    grid = (-(-n // shape["bm"]), bh)  # query tiles x heads
    kern(grid, (shape["threads"],), (q, k, v, out, np.int32(n), _scale_log2(d), np.int32(causal)),
         shared_mem=shape["smem"])
    return out
# --8<-- [end:attention_launch]


def attention_fused_fp16(q, k, v, causal: bool = False, out=None):
    """The FP16 Tensor Core kernel: q, k, v float16 CuPy arrays as
    attention_fused's, out float32 (FP32 accumulation and output). Needs
    compute capability 8.0 or newer."""
    import cupy as cp

    causal = check_causal(causal)
    bh, n, d = check_qkv(q, k, v, out, dtype=np.float16, align=16)
    info = device_info(q.device.id)
    require_fp16(info["name"], info["cc"])
    if out is None:
        out = cp.empty(q.shape, dtype=cp.float32)
    kern = get_kernel(f"attention_fp16_d{d}", fp16_smem(d), q.device.id)
    kern((-(-n // FP16_BR), bh), (FP16_THREADS,), (q, k, v, out, np.int32(n), _scale_log2(d), np.int32(causal)),
         shared_mem=fp16_smem(d))
    return out


# --8<-- [start:attention_naive]
def attention_naive(q, k, v, causal: bool = False):
    """The three steps in CuPy, FP32, the BH x N x N matrix S in device
    memory: S = Q K^T (cuBLAS), a numerically stable softmax in place
    (subtract the row's maximum before exp), O = P V (cuBLAS). Raises
    cupy.cuda.memory.OutOfMemoryError when S does not fit (naive_bytes)."""
    import cupy as cp

    causal = check_causal(causal)
    bh, n, d = check_qkv(q, k, v, None, dtype=np.float32)
    q3, k3, v3 = (x.reshape(bh, n, d) for x in (q, k, v))
    s = cp.matmul(q3, k3.transpose(0, 2, 1))  # (BH, N, N)
    s *= 1.0 / math.sqrt(d)
    if causal:  # key j > query i: -inf, so exp gives 0
        s += cp.triu(cp.full((n, n), -cp.inf, dtype=cp.float32), 1)
    s -= s.max(axis=2, keepdims=True)  # every row holds its own maximum: exp <= 1, no overflow
    cp.exp(s, out=s)
    s /= s.sum(axis=2, keepdims=True)
    return cp.matmul(s, v3).reshape(q.shape)
# --8<-- [end:attention_naive]


# ---------------------------------------------------------------- Numba --

# --8<-- [start:attention_numba]
import math

import numpy as np
from numba import cuda, float32

NB_BR = 32  # query rows per block, one per thread
NB_BC = 16  # keys per tile in shared memory
NB_DMAX = 128  # the largest d (shared arrays need a constant size)


@cuda.jit
def attention_rows_numba(q, k, v, out, scale, causal):
    """One query row per thread; K and V tiles of NB_BC keys in shared
    memory; the online softmax: each row keeps its running maximum m and sum
    l, and rescales its output when m grows. The row's q and output live in
    shared memory, a column per thread (consecutive threads, consecutive
    words: no bank conflict): as local arrays indexed by a loop variable
    they would sit in local memory, which is off-chip."""
    ks = cuda.shared.array((NB_BC, NB_DMAX), float32)
    vs = cuda.shared.array((NB_BC, NB_DMAX), float32)
    qs = cuda.shared.array((NB_DMAX, NB_BR), float32)
    acc = cuda.shared.array((NB_DMAX, NB_BR), float32)
    s = cuda.local.array(NB_BC, float32)
    n, d = q.shape[1], q.shape[2]
    h, t = cuda.blockIdx.y, cuda.threadIdx.x
    row = cuda.blockIdx.x * NB_BR + t
    live = row < n
    for e in range(d):
        qs[e, t] = q[h, row, e] * scale if live else float32(0.0)
        acc[e, t] = 0.0
    m = float32(-math.inf)
    l = float32(0.0)
    end = min(n, (cuda.blockIdx.x + 1) * NB_BR) if causal else n  # causal: no key past the block's rows
    for c0 in range(0, end, NB_BC):
        cuda.syncthreads()  # everyone is done with the previous tile
        for i in range(t, NB_BC * d, NB_BR):
            j, e = i // d, i % d
            in_range = c0 + j < n
            ks[j, e] = k[h, c0 + j, e] if in_range else float32(0.0)
            vs[j, e] = v[h, c0 + j, e] if in_range else float32(0.0)
        cuda.syncthreads()
        tile_max = float32(-math.inf)
        for j in range(NB_BC):
            dot = float32(0.0)
            for e in range(d):
                dot += qs[e, t] * ks[j, e]
            col = c0 + j
            if col >= n or (causal and col > row):
                dot = float32(-math.inf)
            s[j] = dot
            tile_max = max(tile_max, dot)
        m_new = max(m, tile_max)
        if m_new == -math.inf:  # every key so far masked (a row past N)
            continue
        corr = math.exp(m - m_new)  # 0 on the row's first scores (m = -inf)
        l *= corr
        for e in range(d):
            acc[e, t] *= corr
        for j in range(NB_BC):
            p = math.exp(s[j] - m_new)  # masked: exp(-inf) = 0
            l += p
            for e in range(d):
                acc[e, t] += p * vs[j, e]
        m = m_new
    if live:
        for e in range(d):
            out[h, row, e] = acc[e, t] / l


def attention_numba(q, k, v, causal=False, out=None):
    """The Numba kernel: q, k, v float32 Numba device arrays (BH, N, d),
    C-contiguous, d 64 or 128; out: the same (None: a new device array).
    Returns out."""
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        if x is None:
            continue
        if not hasattr(x, "copy_to_host"):  # a Numba device array (the simulator's too)
            raise TypeError(f"{name} must be a Numba device array, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
        if len(x.shape) != 3 or x.shape != q.shape:
            raise ValueError(f"{name} must be 3-D (BH, N, d), the shape of q {q.shape}, got {x.shape}")
        if not x.is_c_contiguous():
            raise ValueError(f"{name} must be C-contiguous")
    bh, n, d = q.shape
    if d not in (64, 128):
        raise ValueError(f"d (the last dimension of q, k, v) must be one of (64, 128), got d={d}")
    if n < 1 or bh < 1:
        raise ValueError(f"N and BH must be >= 1, got shape {q.shape}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if out is None:
        out = cuda.device_array(q.shape, dtype=np.float32)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if overlaps(out, x):  # other blocks still read K and V (and their own Q rows) while O is written
            raise ValueError(f"out must not overlap {name}: write the result to a new array")
    grid = ((n + NB_BR - 1) // NB_BR, bh)
    attention_rows_numba[grid, NB_BR](q, k, v, out, np.float32(1.0 / math.sqrt(d)), causal)
    return out
# --8<-- [end:attention_numba]


def cu_instantiations(text: str | None = None) -> dict[str, tuple[int, ...]]:
    """{kernel name: (D, TX, TY, TN, BK, STAGES)} of every ATTENTION_FP32_TILED line of attention.cu."""
    text = CUDA_SOURCE.read_text() if text is None else text
    pat = r"^ATTENTION_FP32_TILED\((\w+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)\)"
    return {m[0]: tuple(int(x) for x in m[1:]) for m in re.findall(pat, text, flags=re.M)}
