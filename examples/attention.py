# %% [markdown]
# # Fused attention: the scores never leave the chip
#
# O = softmax(Q K^T / sqrt(d) (+ causal mask)) V for BH = batch * heads
# independent problems of N queries and N keys of d = 64 or 128. The naive
# version runs three steps through CuPy (S = Q K^T on cuBLAS, a numerically
# stable softmax, O = P V), and the BH x N x N matrix S goes to device
# memory and back several times. The fused kernels (attention.cu) walk the
# keys tile by tile with an online softmax: each query row keeps its running
# maximum and sum, rescales its output when the maximum grows, and S never
# leaves registers and shared memory.
#
# Shown here: the float64 reference; the naive version; two FP32 fused
# kernels of the ladder (one query row per thread; register-blocked and fed
# by cp.async, at its default tile); the FP16 kernel on the Tensor Cores
# (mma.sync, FlashAttention-2 style); on Hopper, the FlashAttention-3 style
# kernel (TMA, wgmma, a producer warp) and its ladder, FP16 and BF16; the
# one-row-per-thread kernel again in Numba. Each is checked against float64
# at N = 1, 100 and 1000 (the Hopper kernels: 1, 77, 1000), d = 64 and
# 128, causal or not, with its output poisoned with NaN, and on logits near
# 1e4 (exp overflows float32 unless each row's maximum is subtracted first);
# the script exits non-zero on a wrong answer. On a GPU it then times them.
#
# Run:
#
#     python attention.py                 # check everything, time N = 4096 (BH = 16, d = 64 and 128)
#     python attention.py --size 1000     # time N = 1000
#     python attention.py --impl numba    # only the Numba kernel
#
# Copy with it: kernels/cuda/attention.cu, kernels/cuda/tensor_cores.cu,
# kernels/cuda/hopper_attention.cu and kernels/cuda/hopper_gemm.cu (beside
# this file). Needs numpy and numba(-cuda); cupy for the naive version and
# the CUDA C kernels. The FP16 kernel needs compute capability 8.0 or newer,
# the Hopper kernels sm_90a (an H100 or H200). Without a GPU the Numba kernel runs in Numba's CUDA simulator
# (at N of a few dozen: one Python thread per GPU thread) and the CuPy part
# is skipped.

# %%
# --8<-- [start:pick_target]
import ctypes
import os
import sys


def has_gpu() -> bool:
    """True when the CUDA driver loads and reports a device. Asks the driver
    through ctypes, so it initialises neither CuPy nor Numba."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


# Numba reads NUMBA_ENABLE_CUDASIM when it is first imported: with no GPU,
# run its CUDA simulator (one Python thread per GPU thread: keep sizes small).
if "numba" not in sys.modules and not has_gpu():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# --8<-- [end:pick_target]

# %%
# --8<-- [start:load_cuda]
import functools
from pathlib import Path


def find_cuda_source(name: str) -> Path:
    """The CUDA C file `name`: beside this script (an example copied with its
    .cu file), else in the handbook's kernels/cuda/ (run from the repository
    or from examples/)."""
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    for folder in (here, here / "cuda", here.parent / "kernels" / "cuda", Path.cwd() / "kernels" / "cuda"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{name}: copy it beside this script (it is in the handbook's kernels/cuda/)")


@functools.cache
def load_cuda(name: str):
    """kernels/cuda/<name> compiled once per process by CuPy's RawModule (NVRTC)."""
    import cupy as cp

    return cp.RawModule(code=find_cuda_source(name).read_text(), options=("--std=c++17",))
# --8<-- [end:load_cuda]

# %%
import argparse  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402

# %% [markdown]
# ## The float64 reference
#
# Every score rounded once to float64; each row's maximum subtracted before
# exp, so logits near 1e4 stay finite. `rows` picks a few query rows: the
# timing checks large problems whose N x N scores would not fit on the host.

# %%
# --8<-- [start:attention_reference]
import math

import numpy as np


def attention_reference(q, k, v, causal=False, rows=None):
    """float64 attention of host arrays q, k, v (BH, N, d), for the query rows
    `rows` (a slice; None: all)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n = q.shape[-2]
    rows = rows or slice(0, n)
    s = q[:, rows] @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])  # (BH, rows, N)
    if causal:  # key j > query i is masked
        s[:, np.arange(n)[None, :] > np.arange(n)[rows][:, None]] = -np.inf
    s -= s.max(axis=-1, keepdims=True)  # every row holds its own maximum: exp <= 1
    p = np.exp(s)
    return (p / p.sum(axis=-1, keepdims=True)) @ v


# --8<-- [start:rel_err]
def rel_err(got, want):
    """||got - want|| / ||want|| in float64 (||got|| when want is 0): NaN when
    got holds a NaN, an element no thread wrote."""
    got = np.asarray(got, dtype=np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / den if den else np.linalg.norm(got))
# --8<-- [end:rel_err]


def attention_inputs(bh, n, d, seed=0, scale=1.0):
    """q, k, v: float32 host arrays (BH, N, d), N(0, 1); q and k times scale
    (100: logits q.k / sqrt(d) of about 1e4)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((bh, n, d)).astype(np.float32) for _ in range(3))
    return q * np.float32(scale), k * np.float32(scale), v
# --8<-- [end:attention_reference]


# %% [markdown]
# ## The arguments every CuPy wrapper checks
#
# q, k, v of one shape, (BH, N, d) or (B, H, N, d) (the kernels see
# (B * H, N, d), a free reshape), C-contiguous, d = 64 or 128; an output
# sharing no byte with an input (the kernels read K and V while other blocks
# write O); 16-byte boundaries where the kernels copy 16 bytes at a time.

# %%
# --8<-- [start:qkv_check]
import numpy as np

D_VALUES = (64, 128)
MAX_BH = 65535  # the grid's y dimension


def check_causal(causal) -> int:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    return int(causal)


def check_qkv(q, k, v, out, *, dtype, out_dtype=np.float32, align=1):
    """q, k, v: CuPy arrays of `dtype`, one shape (BH, N, d) or (B, H, N, d),
    C-contiguous, d in D_VALUES, N >= 1; out (or None): `out_dtype`, the
    same shape, no byte shared with an input; each starting on an
    `align`-byte boundary. Returns (BH, N, d)."""
    import cupy as cp

    arrays = {"q": q, "k": k, "v": v}
    for name, x in arrays.items():
        if not isinstance(x, cp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(x).__name__}")
        if x.dtype != dtype:
            raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {x.dtype}")
        if x.shape != q.shape:
            raise ValueError(f"{name} must have the shape of q {q.shape}, got {x.shape}")
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
    if q.ndim not in (3, 4):
        raise ValueError(f"q must be 3-D (BH, N, d) or 4-D (B, H, N, d), got shape {q.shape}")
    n, d = q.shape[-2], q.shape[-1]
    bh = int(np.prod(q.shape[:-2]))
    if d not in D_VALUES:
        raise ValueError(f"d (the last dimension of q, k, v) must be one of {D_VALUES}, got d={d}")
    if n < 1 or not 1 <= bh <= MAX_BH:
        raise ValueError(f"N must be >= 1 and batch * heads in [1, {MAX_BH}], got shape {q.shape}")
    if out is not None:
        if not isinstance(out, cp.ndarray) or out.dtype != out_dtype:
            raise TypeError(f"out must be a cupy.ndarray of dtype {np.dtype(out_dtype).name}")
        if out.shape != q.shape or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous with the shape of q {q.shape}, got {out.shape}")
        for name, x in arrays.items():
            if cp.may_share_memory(out, x):  # other blocks still read K and V (and Q) while O is written
                raise ValueError(f"out must not overlap {name}: write the result to a new array")
        arrays["out"] = out
    for name, x in arrays.items():
        if x.data.ptr % align:  # cp.async and float4 copy 16 bytes at a time
            raise ValueError(f"{name} must start on a {align}-byte boundary: pass a fresh array, not an offset view")
    return bh, n, d
# --8<-- [end:qkv_check]


# %% [markdown]
# ## The naive version: three steps, S in device memory
#
# A copy of the handbook's kernels/attention.py.

# %%
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


# %% [markdown]
# ## The CUDA C kernels
#
# attention.cu builds on the Tensor Core chapter's PTX wrappers (cp.async,
# ldmatrix, mma.sync): NVRTC compiles them, the `mma_helpers` section of
# tensor_cores.cu, in front of attention.cu, and ATTENTION_MMA_HELPERS tells
# attention.cu they are there (nvcc compiling attention.cu alone includes
# the whole of tensor_cores.cu instead). A kernel that asks for more than
# 48 KB of dynamic shared memory must opt in before its launch.

# %%
# --8<-- [start:load_attention]
import functools


@functools.cache
def load_attention():
    """attention.cu, with the mma_helpers section of tensor_cores.cu in front,
    compiled once per process by CuPy's RawModule (NVRTC)."""
    import cupy as cp

    text = find_cuda_source("tensor_cores.cu").read_text()
    start = text.index("\n", text.index("[start:mma_helpers]")) + 1  # the line after the start marker
    end = text.rindex("\n", 0, text.index("[end:mma_helpers]")) + 1  # up to the end marker's line
    source = "#define ATTENTION_MMA_HELPERS\n" + text[start:end] + "\n" + find_cuda_source("attention.cu").read_text()
    return cp.RawModule(code=source, options=("--std=c++17",))


@functools.cache
def attention_kernel(name, smem):
    """A kernel of attention.cu, allowed `smem` bytes of dynamic shared memory."""
    kern = load_attention().get_function(name)
    if smem > 48 * 1024:  # above 48 KB, an opt-in (up to 227 KB per block on an H100 or H200)
        kern.max_dynamic_shared_size_bytes = smem
    return kern
# --8<-- [end:load_attention]


# %% [markdown]
# Two steps of the FP32 ladder. `fp32_rows`: a query row per thread (two
# threads at d = 128), K and V tiles through shared memory, the online
# softmax in registers. `fp32_async`: a block of BM query rows, each thread
# TM = 8 rows by TN keys of scores and 8 rows by d / TX columns of the
# output in registers (as a good SGEMM blocks), K and V chunks fed by a
# cp.async ring of STAGES buffers. Its tile is the one the handbook's sweep
# found fastest on an H200 (kernels/attention.py lists the others). Both
# take the softmax in base 2, exp(x) = 2^(x log2 e): the scale they expect
# is log2(e) / sqrt(d).

# %%
# --8<-- [start:attention_fused]
import math

import numpy as np

FP32_KERNELS = ("fp32_rows", "fp32_async")
# fp32_async's tile for each d: its name in attention.cu (BM x BN keys, BK, STAGES) and
# (TX, TY, TN, BK, STAGES): TX * TY threads, BM = 8 TY query rows, BN = TX TN keys per tile.
ASYNC_TILE = {64: ("128x64k32s2", (8, 16, 8, 32, 2)), 128: ("64x64k32s2", (16, 8, 4, 32, 2))}


def fp32_launch_shape(kernel, d):
    """(kernel name in attention.cu, threads per block, BM query rows per
    block, dynamic shared memory in bytes)."""
    if kernel == "fp32_rows":  # 64 rows, d / 64 threads each; K and V tiles in static shared memory
        return f"attention_fp32_rows_d{d}", d, 64, 0
    config, (tx, ty, tn, bk, stages) = ASYNC_TILE[d]
    bm, bn = 8 * ty, tx * tn
    # as attention.cu's TiledShape: Q (BM x (d + 4) floats, padded against bank conflicts), P (BM x
    # (BN + TX)), and STAGES buffers each holding a K chunk (BN x (BK + 4)) or a V chunk (BK x d)
    floats = bm * (d + 4) + bm * (bn + tx) + stages * max(bn * (bk + 4), bk * d)
    return f"attention_fp32_async_d{d}_{config}", tx * ty, bm, 4 * floats


def attention_fused(q, k, v, causal=False, *, kernel="fp32_async", out=None):
    """O = softmax(Q K^T / sqrt(d)) V in FP32 with one kernel of attention.cu
    (`kernel` one of FP32_KERNELS): q, k, v float32 CuPy arrays (BH, N, d) or
    (B, H, N, d), C-contiguous, 16-byte aligned; out: float32 of that shape
    (None: a new array). Returns out."""
    import cupy as cp

    causal = check_causal(causal)
    bh, n, d = check_qkv(q, k, v, out, dtype=np.float32, align=16)
    if kernel not in FP32_KERNELS:
        raise ValueError(f"kernel must be one of {FP32_KERNELS}, got {kernel!r}")
    name, threads, bm, smem = fp32_launch_shape(kernel, d)
    if out is None:
        out = cp.empty_like(q)
    scale_log2 = np.float32(math.log2(math.e) / math.sqrt(d))  # the kernels' softmax runs in base 2
    grid = (-(-n // bm), bh)  # query tiles x heads
    attention_kernel(name, smem)(grid, (threads,), (q, k, v, out, np.int32(n), scale_log2, np.int32(causal)),
                                 shared_mem=smem)
    return out
# --8<-- [end:attention_fused]


# %% [markdown]
# The FP16 kernel: 4 warps per 64 query rows, 16 rows each; S = Q K^T and
# O += P V on mma.sync.m16n8k16 with FP32 accumulation, P converted to FP16
# straight from the accumulators' layout; K and V tiles of 64 keys in two
# cp.async stages. FP16 in, FP32 out.

# %%
# --8<-- [start:attention_fp16]
import math

import numpy as np

FP16_BR = 64  # query rows per block: 4 warps of 16
FP16_THREADS = 128


def attention_fused_fp16(q, k, v, causal=False, out=None):
    """The FP16 Tensor Core kernel: q, k, v float16 CuPy arrays as
    attention_fused's, out float32 (None: a new array). Needs compute
    capability 8.0 or newer. Returns out."""
    import cupy as cp

    causal = check_causal(causal)
    bh, n, d = check_qkv(q, k, v, out, dtype=np.float16, align=16)
    cc = cp.cuda.Device(q.device.id).compute_capability  # "90" on an H100 or H200
    if int(cc) < 80:  # below sm_80 attention.cu compiles the kernel empty: refuse it
        gpu = cp.cuda.runtime.getDeviceProperties(q.device.id)["name"].decode()
        raise RuntimeError(f"attention_fused_fp16 needs compute capability 8.0 or newer (mma.sync.m16n8k16, "
                           f"ldmatrix, cp.async); {gpu} is {cc[:-1]}.{cc[-1]}")
    if out is None:
        out = cp.empty(q.shape, dtype=cp.float32)
    smem = (FP16_BR + 4 * 64) * d * 2  # Q (64 x d) and two stages of K and V (64 x d each) in halves: 80 KB at d = 128
    scale_log2 = np.float32(math.log2(math.e) / math.sqrt(d))
    attention_kernel(f"attention_fp16_d{d}", smem)(
        (-(-n // FP16_BR), bh), (FP16_THREADS,), (q, k, v, out, np.int32(n), scale_log2, np.int32(causal)),
        shared_mem=smem)
    return out
# --8<-- [end:attention_fp16]


# %% [markdown]
# ## On Hopper: TMA, wgmma and a producer warp
#
# hopper_attention.cu (sm_90a: an H100 or H200) in the style of
# FlashAttention-3. TMA copies Q once and K and V tiles of 128 keys into a
# two-slot ring, with mbarriers counting the bytes; wgmma computes S = Q K^T
# from shared memory and O += P V with P from registers (the accumulator of
# S is already laid out as wgmma's A operand) and V from shared memory as
# loaded. The ladder: `ha_plain` (one warpgroup), `ha_ws` (a producer warp,
# two consumer warpgroups, setmaxnreg), `ha_pingpong` (the consumers take
# turns at the Tensor Cores), `ha_overlap` (the softmax of one tile beside
# the P V of the last). NVRTC compiles it after the barrier, TMA and wgmma
# helpers of hopper_gemm.cu; -DHG_BF16 makes it BF16 (bit patterns in
# uint16, as CuPy has no bfloat16). The output has the inputs' format.

# %%
# --8<-- [start:hopper_attention]
import ctypes
import functools
import math

import numpy as np

# kernel -> (threads, query rows per block), as instantiated in hopper_attention.cu; at d = 64
# ha_overlap runs three consumer warpgroups: 512 threads, 192 rows
HOPPER_KERNELS = {"ha_plain": (128, 64), "ha_ws": (384, 128), "ha_pingpong": (384, 128), "ha_overlap": (384, 128)}
HOPPER_D64 = {"ha_overlap": (512, 192)}
HA_BN, HA_STAGES = 128, 2  # keys per tile, slots of the K and V ring
TMAP = np.dtype([("v", "<u8", (16,))])  # a CUtensorMap: 128 opaque bytes, passed by value


@functools.cache
def load_hopper_attention(bf16=False):
    """hopper_gemm.cu up to the end of its hg_wgmma section, then
    hopper_attention.cu, compiled for sm_90a by NVRTC (once per format)."""
    import cupy as cp

    gemm = find_cuda_source("hopper_gemm.cu").read_text()
    end = gemm.rindex("\n", 0, gemm.index("[end:hg_wgmma]")) + 1  # up to the end marker's line
    source = gemm[:end] + find_cuda_source("hopper_attention.cu").read_text()
    return cp.RawModule(code=source, options=("-arch=sm_90a", "--std=c++17") + (("-DHG_BF16",) if bf16 else ()))


def tensor_map_3d(x, box_rows):
    """The TMA descriptor of a (BH, N, d) CuPy array of 16-bit values: boxes
    of 64 columns x box_rows rows of one head, 128-byte swizzle, zeros read
    past row N. Encoded by the driver's cuTensorMapEncodeTiled (ctypes)."""
    bh, n, d = x.shape
    raw = np.zeros(24, dtype=np.uint64)  # room for a 64-byte aligned 128-byte map
    start = (-raw.ctypes.data % 64) // 8
    out = raw[start:start + 16]
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    err = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled(
        ctypes.c_void_p(out.ctypes.data), ctypes.c_int(6), u32(3), ctypes.c_void_p(x.data.ptr),  # 6: 16-bit float
        (u64 * 3)(d, n, bh),               # sizes, innermost first
        (u64 * 2)(2 * d, 2 * d * n),       # strides in bytes of a row and of a head
        (u32 * 3)(64, box_rows, 1), (u32 * 3)(1, 1, 1),
        ctypes.c_int(0), ctypes.c_int(3), ctypes.c_int(3), ctypes.c_int(0))  # 128-byte swizzle, L2 256 B, zeros
    if err != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {err}")
    return np.frombuffer(out.tobytes(), dtype=TMAP)[0]


def hopper_attention(q, k, v, causal=False, out=None, *, kernel="ha_overlap"):
    """O = softmax(Q K^T / sqrt(d)) V: q, k, v float16 (FP16) or uint16 (BF16
    bit patterns) CuPy arrays (BH, N, d) or (B, H, N, d), C-contiguous,
    16-byte aligned; out of the same dtype and shape (None: a new array).
    Needs sm_90a. Returns out."""
    import cupy as cp

    if q.dtype not in (np.float16, np.uint16):
        raise TypeError(f"q must have dtype float16 or uint16 (BF16 bits), got {q.dtype}")
    causal = check_causal(causal)
    bh, n, d = check_qkv(q, k, v, out, dtype=q.dtype, out_dtype=q.dtype, align=16)
    if kernel not in HOPPER_KERNELS:
        raise ValueError(f"kernel must be one of {tuple(HOPPER_KERNELS)}, got {kernel!r}")
    if cp.cuda.Device(q.device.id).compute_capability != "90":
        raise RuntimeError("the Hopper attention kernel needs sm_90a (TMA, wgmma, setmaxnreg): an H100 or H200")
    if out is None:
        out = cp.empty_like(q)
    threads, bm = HOPPER_D64.get(kernel, HOPPER_KERNELS[kernel]) if d == 64 else HOPPER_KERNELS[kernel]
    # Q (BM x d), a ring of K and V tiles (HA_BN x d each), 4 mbarriers per slot and Q's, alignment slack
    smem = (bm * d + 2 * HA_STAGES * HA_BN * d) * 2 + (4 * HA_STAGES + 1) * 8 + 1024
    kern = load_hopper_attention(q.dtype == np.uint16).get_function(f"{kernel}_d{d}")
    kern.max_dynamic_shared_size_bytes = smem
    maps = [tensor_map_3d(x.reshape(bh, n, d), rows) for x, rows in ((q, bm), (k, HA_BN), (v, HA_BN))]
    scale_log2 = np.float32(math.log2(math.e) / math.sqrt(d))  # the softmax runs in base 2
    kern((-(-n // bm), bh), (threads,), (*maps, out, np.int32(n), scale_log2, np.int32(causal)), shared_mem=smem)
    return out


def to_bf16_bits(x):
    """float32 host array -> its BF16 bit patterns (uint16), rounded to nearest even."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b):
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


def check_hopper_attention(kernel, sizes=(1, 77, 1000), ds=(64, 128)):
    """One of HOPPER_KERNELS, FP16 and BF16, against float64 of the 16-bit
    inputs' values at every N in sizes, d in ds, causal or not, the output
    poisoned with NaN, and once at N = 300 with logits near 600. Raises
    AssertionError on a wrong answer; returns the largest relative error."""
    import cupy as cp

    worst = 0.0
    cases = [(n, d, 1.0) for n in sizes for d in ds] + [(300, 64, 25.0)]
    for fmt, tol in (("fp16", 4e-3), ("bf16", 3e-2)):
        for n, d, scale in cases:
            host = attention_inputs(2, n, d, seed=n + d, scale=scale)
            if fmt == "fp16":
                bits = [x.astype(np.float16) for x in host]
                vals = [b.astype(np.float32) for b in bits]
            else:
                bits = [to_bf16_bits(x) for x in host]
                vals = [from_bf16_bits(b) for b in bits]
                for x, val in zip(host, vals):  # rounded to nearest: within half a unit of BF16's last place
                    assert (np.abs(val - x) <= np.abs(x) * 2.0**-8).all(), "to_bf16_bits does not round to nearest"
            q, k, v = (cp.asarray(b) for b in bits)
            for causal in (False, True):
                out = cp.full(q.shape, 0x7E00 if fmt == "fp16" else 0x7FC0, dtype=q.dtype)  # NaN in either format
                hopper_attention(q, k, v, causal, out, kernel=kernel)
                got = cp.asnumpy(out)
                got = got.astype(np.float32) if fmt == "fp16" else from_bf16_bits(got)
                err = rel_err(got, attention_reference(*vals, causal))
                if not (np.isfinite(got).all() and err < tol):
                    raise AssertionError(f"{kernel} {fmt} at N={n}, d={d}, causal={causal}, scale {scale:g}: "
                                         f"relative error {err:.1e}")
                worst = max(worst, err)
    return worst
# --8<-- [end:hopper_attention]


# %% [markdown]
# ## The same idea in Numba
#
# A copy of the handbook's kernel (kernels/attention.py): one query row per
# thread, K and V tiles in shared memory, the online softmax. Numba's
# simulator runs it on a CPU too.

# %%
# --8<-- [start:overlaps]
import numpy as np


def byte_span(x):
    """[lo, hi): the bytes array x's elements occupy, from its CUDA array
    interface (CuPy, Numba device arrays) or its NumPy one (host arrays;
    Numba's simulator, whose device arrays wrap NumPy arrays). Empty: (0, 0)."""
    face = getattr(x, "__cuda_array_interface__", None)
    if face is None:
        face = x.__array_interface__
    shape, itemsize = tuple(face["shape"]), np.dtype(face["typestr"]).itemsize
    if any(s == 0 for s in shape):
        return 0, 0
    strides = face.get("strides")
    if strides is None:  # C-contiguous
        strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) * itemsize for k in range(len(shape))]
    lo = hi = face["data"][0]
    for size, step in zip(shape, strides):
        hi += max(step, 0) * (size - 1)
        lo += min(step, 0) * (size - 1)  # a negative stride reaches below the first element
    return lo, hi + itemsize


def overlaps(a, b):
    """Might arrays a and b share memory? True when the byte ranges their
    elements span intersect: a bounds check, as cupy.may_share_memory (a[::2]
    and a[1::2] overlap). Host and device pointers share one address space
    (unified addressing), so spans of either kind compare."""
    (a_lo, a_hi), (b_lo, b_hi) = byte_span(a), byte_span(b)
    return a_lo < b_hi and b_lo < a_hi
# --8<-- [end:overlaps]


# %%
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


# %% [markdown]
# ## Checks against float64
#
# N = 1, 100 and 1000 (not a multiple of any tile), d = 64 and 128, causal
# or not, three heads, the output poisoned with NaN first (an element no
# thread writes stays NaN, and so does the error). Tolerances: FP32 1e-5;
# FP16 2e-3, against the reference of the inputs rounded to FP16 (P is
# rounded to FP16 before P V). Logits near 1e4: the FP32 logits themselves
# are rounded to about 1e-3 absolute, so 1e-3; FP16 holds at most 65504, so
# its q and k are scaled by 25 rather than 100 (logits near 600), 2e-2.

# %%
# --8<-- [start:attention_check]
import numpy as np

KERNELS = ("naive", "fp32_rows", "fp32_async", "fp16")


def run_kernel(kernel, q, k, v, causal, out):
    """One of KERNELS on CuPy arrays; out (poisoned by the caller) is written
    by the fused kernels; the naive version returns an array of its own."""
    if kernel == "naive":
        return attention_naive(q, k, v, causal)
    if kernel == "fp16":
        return attention_fused_fp16(q, k, v, causal, out=out)
    return attention_fused(q, k, v, causal, kernel=kernel, out=out)


def check_attention(kernel, sizes=(1, 100, 1000), ds=(64, 128), scale=1.0, bh=3):
    """One of KERNELS against float64 at every N in sizes, d in ds, causal or
    not; scale: q and k times it (100: logits near 1e4). Raises
    AssertionError on a wrong or non-finite answer, returns the largest
    relative error."""
    import cupy as cp

    fp16 = kernel == "fp16"
    if fp16 and scale > 1:
        scale /= 4  # FP16 holds up to 65504: logits near 600
    tol = (2e-2 if fp16 else 1e-3) if scale > 1 else (2e-3 if fp16 else 1e-5)
    worst = 0.0
    for d in ds:
        for n in sizes:
            q, k, v = attention_inputs(bh, n, d, seed=n + d, scale=scale)
            if fp16:
                q, k, v = (x.astype(np.float16) for x in (q, k, v))
            for causal in (False, True):
                out = cp.full(q.shape, cp.nan, dtype=cp.float32)  # poison: an unwritten element stays NaN
                got = cp.asnumpy(run_kernel(kernel, *(cp.asarray(x) for x in (q, k, v)), causal, out))
                err = rel_err(got, attention_reference(q, k, v, causal))
                if not (np.isfinite(got).all() and err < tol):
                    raise AssertionError(f"{kernel} at N={n}, d={d}, causal={causal}, scale {scale:g}: "
                                         f"relative error {err:.1e}")
                worst = max(worst, err)
    return worst


# Numba cases (BH, N, d, causal, scale) for the simulator, where each GPU thread is a Python thread:
# odd N over several key tiles and blocks, N = 1, d = 64 and 128, causal or not, logits near 1e4.
NB_SIM_CASES = ((2, 37, 64, False, 1.0), (2, 37, 64, True, 1.0), (1, 1, 64, False, 1.0),
                (1, 1, 128, True, 1.0), (1, 19, 128, True, 1.0), (1, 20, 64, False, 100.0))


def check_attention_numba(cases=NB_SIM_CASES):
    """The Numba kernel against float64 on (BH, N, d, causal, scale) cases;
    returns the largest relative error."""
    from numba import cuda

    worst = 0.0
    for bh, n, d, causal, scale in cases:
        q, k, v = attention_inputs(bh, n, d, seed=n + d, scale=scale)
        out = cuda.to_device(np.full(q.shape, np.nan, dtype=np.float32))  # poison
        attention_numba(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), causal, out)
        got = out.copy_to_host()
        err = rel_err(got, attention_reference(q, k, v, causal))
        if not (np.isfinite(got).all() and err < (1e-3 if scale > 1 else 1e-5)):
            raise AssertionError(f"numba at BH={bh}, N={n}, d={d}, causal={causal}, scale {scale:g}: "
                                 f"relative error {err:.1e}")
        worst = max(worst, err)
    q, k, v = attention_inputs(1, 5, 64, seed=5)
    buf = cuda.to_device(np.stack([q, k, v, np.full(q.shape, np.nan, dtype=np.float32)]))
    attention_numba(buf[0], buf[1], buf[2], False, buf[3])  # q, k, v, out one after another: accepted
    if not rel_err(buf[3].copy_to_host(), attention_reference(q, k, v, False)) < 1e-5:
        raise AssertionError("numba with q, k, v and out one after another in one buffer: wrong answer")
    return worst
# --8<-- [end:attention_check]


# %% [markdown]
# ## Timing
#
# CUDA events around a few launches after a warm-up. TFLOP/s count the
# useful work, the same for every version: 4 N^2 d per head (2 N^2 d for
# Q K^T, 2 N^2 d for P V), with a causal mask only the N (N + 1) / 2 visible
# pairs, 2 N (N + 1) d. Each result is checked first on a few query rows
# against float64 (the whole N x N reference would not fit on the host).

# %%
# --8<-- [start:attention_timing]
import numpy as np


# --8<-- [start:time_ms]
def time_ms(fn, reps=10):
    """Mean time of one call over reps back-to-back calls, after a warm-up call (CUDA events)."""
    import cupy as cp

    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / reps
# --8<-- [end:time_ms]


def time_attention(n, d, bh=16, causal=False):
    """Every one of KERNELS on (BH, N, d), checked first on 64 query rows at
    each end; returns {kernel: ms} (the naive version is left out when its
    BH x N x N scores do not fit in device memory)."""
    import cupy as cp

    host = attention_inputs(bh, n, d, seed=1)
    rows = (slice(0, min(n, 64)), slice(max(0, n - 64), n))
    want = [attention_reference(*host, causal, rows=r) for r in rows]
    useful = 4 * bh * (n * (n + 1) // 2 if causal else n * n) * d
    times = {}
    print(f"BH={bh}, N={n}, d={d}, causal={causal}")
    for kernel in KERNELS:
        dtype = np.float16 if kernel == "fp16" else np.float32
        q, k, v = (cp.asarray(x.astype(dtype)) for x in host)
        out = cp.full(q.shape, cp.nan, dtype=cp.float32)
        try:
            got = cp.asnumpy(run_kernel(kernel, q, k, v, causal, out))
        except cp.cuda.memory.OutOfMemoryError:
            print(f"  {kernel:10s} does not fit: S alone is {4 * bh * n * n / 2**30:.1f} GiB")
            continue
        err = max(rel_err(got[:, r], w) for r, w in zip(rows, want))
        if not err < (1e-2 if kernel == "fp16" else 1e-5):  # FP16 against the FP32 inputs' reference
            raise AssertionError(f"{kernel} at BH={bh}, N={n}, d={d}: relative error {err:.1e}")
        times[kernel] = time_ms(lambda: run_kernel(kernel, q, k, v, causal, out))
    for kernel, ms in times.items():
        ratio = f"{times['naive'] / ms:5.2f} x naive" if "naive" in times else ""
        print(f"  {kernel:10s} {ms:8.3f} ms  {useful / ms / 1e9:6.1f} TFLOP/s  {ratio}")
    return times
# --8<-- [end:attention_timing]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Fused attention: naive, FP32 and FP16 fused kernels, Numba.")
    p.add_argument("--size", type=int, default=None, help="N of the timed problem (default 4096; BH = 16)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    n = args.size if args.size is not None else 4096
    if args.impl in ("all", "numba"):
        cases = NB_SIM_CASES
        if not simulator:  # on a GPU: the CUDA C kernels' sizes
            cases = [(3, m, d, causal, 1.0) for m in (1, 100, 1000) for d in D_VALUES for causal in (False, True)]
            cases += [(2, 300, d, causal, 100.0) for d in D_VALUES for causal in (False, True)]
        print(f"numba: max relative error {check_attention_numba(cases):.1e} "
              f"({len(cases)} cases{', simulator' if simulator else ''})")
    if args.impl == "numba":
        return
    if not has_gpu():
        print("cupy: skipped (needs a CUDA GPU)")
        return
    import cupy as cp

    fp16 = int(cp.cuda.Device().compute_capability) >= 80
    for kernel in KERNELS:
        if kernel == "fp16" and not fp16:
            print("cupy fp16: skipped (needs compute capability 8.0)")
            continue
        err, big = check_attention(kernel), check_attention(kernel, sizes=(300,), scale=100.0, bh=2)
        print(f"cupy {kernel}: max relative error {err:.1e}, {big:.1e} on logits near 1e4")
    if cp.cuda.Device().compute_capability == "90":
        for kernel in HOPPER_KERNELS:
            print(f"cupy {kernel}: max relative error {check_hopper_attention(kernel):.1e} (FP16 and BF16)")
    else:
        print("cupy Hopper kernels: skipped (they need sm_90a: an H100 or H200)")
    for d in D_VALUES:
        time_attention(n, d)


if __name__ == "__main__":
    main()
