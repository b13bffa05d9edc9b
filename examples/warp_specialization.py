# %% [markdown]
# # Warp specialization: the streaming ladder, the primitives, a Hopper GEMM
#
# Three parts, each checked against a NumPy reference with its output
# poisoned first; the script exits non-zero on a wrong result.
#
# 1. The streaming ladder (warp_specialization.cu): out = f^k(x), k FMAs per
#    element, through shared memory in six steps, from load-sync-compute to a
#    TMA producer thread with consumer warpgroups and setmaxnreg; and Numba's
#    two steps (the furthest Numba goes: it has no cp.async, mbarrier or TMA).
# 2. The primitives (ws_primitives.cu): cuda::pipeline, cuda::barrier, an
#    mbarrier with a transaction count fed by a bulk copy, a 2-D TMA box, a
#    cluster's distributed shared memory, setmaxnreg; and a pipeline with its
#    wait removed, which gives a wrong answer.
# 3. The Hopper GEMM (hopper_gemm.cu): TMA, wgmma, a producer warpgroup and
#    two consumer warpgroups, against cuBLAS.
#
# Run:
#
#     python warp_specialization.py                # check everything, time the ladder
#     python warp_specialization.py --size 4096    # also time the GEMM at 4096^3
#
# Copy with it: kernels/cuda/warp_specialization.cu, kernels/cuda/ws_primitives.cu
# and kernels/cuda/hopper_gemm.cu (beside this file). Needs numpy, cupy and numba(-cuda); the
# TMA descriptors come from the CUDA driver itself, through ctypes. Steps 3-4 need
# compute capability 8.0, steps 5-6, the TMA primitives and clusters 9.0,
# setmaxnreg and the GEMM sm_90a (an H100 or H200). Without a GPU only
# Numba's steps run, in its simulator.

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


# --8<-- [start:load_cuda_arch]
@functools.cache
def load_cuda_arch(name: str):
    """kernels/cuda/<name> for this GPU: sm_90a on compute capability 9.0
    (wgmma and setmaxnreg exist only there), else load_cuda's default, the
    GPU's own target."""
    import cupy as cp

    if cp.cuda.Device().compute_capability != "90":
        return load_cuda(name)
    return cp.RawModule(code=find_cuda_source(name).read_text(), options=("-arch=sm_90a", "--std=c++17"))
# --8<-- [end:load_cuda_arch]


# %%
# --8<-- [start:stream_reference]
import numpy as np


def stream_reference(x, k, a=0.999, b=0.001):
    """fmaf k times on the host: the float32 product is exact in float64, then
    one rounding to float32 after the add."""
    y = np.asarray(x, dtype=np.float32)
    for _ in range(k):
        y = (y.astype(np.float64) * np.float64(np.float32(a)) + np.float64(np.float32(b))).astype(np.float32)
    return y
# --8<-- [end:stream_reference]


# --8<-- [start:ws_stream]
import numpy as np

TILE = 2048  # floats per tile, as in warp_specialization.cu
STEPS = ("ws_sync", "ws_regbuf", "ws_cpasync", "ws_pipeline", "ws_tma", "ws_tma_regs")
THREADS = {"ws_sync": 256, "ws_regbuf": 256, "ws_cpasync": 256, "ws_pipeline": 256, "ws_tma": 384, "ws_tma_regs": 384}
NEEDS = {"ws_sync": "70", "ws_regbuf": "70", "ws_cpasync": "80", "ws_pipeline": "80", "ws_tma": "90",
         "ws_tma_regs": "90"}


def stream(x, out, *, k, step="ws_regbuf", a=0.999, b=0.001):
    """out[i] = f^k(x[i]), f(v) = fmaf(v, a, b): float32 CuPy vectors of one
    length, a multiple of 4, 16-byte aligned; the grid fills every SM once."""
    import cupy as cp

    if x.dtype != cp.float32 or out.dtype != cp.float32 or x.shape != out.shape or x.ndim != 1:
        raise ValueError("x and out must be float32 vectors of one length")
    if x.size % 4 or x.data.ptr % 16 or out.data.ptr % 16:
        raise ValueError("x.size must be a multiple of 4, x and out 16-byte aligned")
    if cp.may_share_memory(out, x):  # x and out are __restrict__ in the kernels
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    dev = cp.cuda.Device()
    cc = dev.compute_capability
    if int(cc) < int(NEEDS[step]) or (step == "ws_tma_regs" and cc != "90"):
        raise RuntimeError(f"{step} needs compute capability {NEEDS[step][0]}.{NEEDS[step][1]}"
                           f"{' exactly (sm_90a)' if step == 'ws_tma_regs' else ' or newer'}; this GPU is {cc}")
    kern = load_cuda_arch("warp_specialization.cu").get_function(step)
    per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kern.kernel.ptr, THREADS[step], 0)
    blocks = max(1, min(-(-x.size // TILE), dev.attributes["MultiProcessorCount"] * per_sm))
    kern((blocks,), (THREADS[step],), (x, out, np.int64(x.size), np.int32(k), np.float32(a), np.float32(b)))
    return out


def check_stream(step, n=100_004, k=7):
    """One step against the host, output poisoned with NaN first."""
    import cupy as cp

    x = cp.random.default_rng(n).standard_normal(n, dtype=cp.float32)
    try:
        stream(x, x, k=k, step=step)
        raise AssertionError(f"{step}: out = x was accepted")
    except ValueError as e:
        assert "must not overlap" in str(e), e
    buf = cp.full(n + 64, cp.nan, dtype=cp.float32)  # out, then 64 floats that must stay NaN
    out = buf[:n]
    stream(x, out, k=k, step=step)
    assert bool(cp.isnan(buf[n:]).all()), f"{step} wrote past the end of out"
    err = float(np.max(np.abs(cp.asnumpy(out) - stream_reference(cp.asnumpy(x), k))))
    if not err < 1e-5:
        raise AssertionError(f"{step}: max error {err}")
    return err
# --8<-- [end:ws_stream]


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
# --8<-- [start:ws_numba]
import numpy as np
from numba import cuda, float32

# Numba has no cp.async, pipeline, mbarrier, TMA or setmaxnreg: steps 1 and
# 2 of the ladder are as far as it goes. Four values per thread per tile
# piece, four independent FMA chains, as in the CUDA C steps.
TILE = 2048  # floats per tile, as in warp_specialization.cu
NB_THREADS = 256
NB_PER = TILE // 4 // NB_THREADS  # float4-sized pieces per thread per tile
NB_HELD = 4 * NB_PER  # floats each thread holds for the next tile (step 2)


@cuda.jit
def ws_sync_numba(x, out, k, a, b):
    """Step 1: every thread copies its pieces of the tile, barrier, computes, barrier."""
    buf = cuda.shared.array(TILE, float32)
    n = x.size
    base = cuda.blockIdx.x * TILE
    while base < n:
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            for e in range(4):
                if base + q + e < n:
                    buf[q + e] = x[base + q + e]
        cuda.syncthreads()
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            v0, v1, v2, v3 = buf[q], buf[q + 1], buf[q + 2], buf[q + 3]
            for _ in range(k):  # four independent chains
                v0 = cuda.fma(v0, a, b)
                v1 = cuda.fma(v1, a, b)
                v2 = cuda.fma(v2, a, b)
                v3 = cuda.fma(v3, a, b)
            if base + q + 3 < n:
                out[base + q], out[base + q + 1], out[base + q + 2], out[base + q + 3] = v0, v1, v2, v3
        cuda.syncthreads()  # the buffer is refilled next
        base += cuda.gridDim.x * TILE


@cuda.jit
def ws_regbuf_numba(x, out, k, a, b):
    """Step 2: the next tile's pieces are loaded into registers before this
    tile's arithmetic, and land while it runs."""
    buf = cuda.shared.array(TILE, float32)
    nxt = cuda.local.array(NB_HELD, float32)  # constant indices after unrolling: registers
    n = x.size
    stride = cuda.gridDim.x * TILE
    base = cuda.blockIdx.x * TILE
    for j in range(NB_PER):
        q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
        for e in range(4):
            nxt[4 * j + e] = x[base + q + e] if base + q + e < n else float32(0.0)
    while base < n:
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            for e in range(4):
                buf[q + e] = nxt[4 * j + e]
        cuda.syncthreads()
        for j in range(NB_PER):  # in flight during the arithmetic below
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            for e in range(4):
                nxt[4 * j + e] = x[base + stride + q + e] if base + stride + q + e < n else float32(0.0)
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            v0, v1, v2, v3 = buf[q], buf[q + 1], buf[q + 2], buf[q + 3]
            for _ in range(k):
                v0 = cuda.fma(v0, a, b)
                v1 = cuda.fma(v1, a, b)
                v2 = cuda.fma(v2, a, b)
                v3 = cuda.fma(v3, a, b)
            if base + q + 3 < n:
                out[base + q], out[base + q + 1], out[base + q + 2], out[base + q + 3] = v0, v1, v2, v3
        cuda.syncthreads()
        base += stride


NB_STEPS = {"ws_sync_numba": ws_sync_numba, "ws_regbuf_numba": ws_regbuf_numba}


def stream_numba(x, out, *, k: int, step: str = "ws_regbuf_numba", a: float = 0.999, b: float = 0.001,
                 blocks: int | None = None):
    """The Numba steps: x and out float32 Numba device arrays of one length,
    a multiple of 4; blocks: the grid (default six blocks per SM)."""
    if step not in NB_STEPS:
        raise ValueError(f"step must be one of {tuple(NB_STEPS)}, got {step!r}")
    for name, v in (("x", x), ("out", out)):
        if not hasattr(v, "copy_to_host"):  # a Numba device array (the simulator's too)
            raise TypeError(f"{name} must be a Numba device array, got {type(v).__name__}")
        if v.dtype != np.float32:
            raise TypeError(f"{name} must have dtype float32, got {v.dtype}")
    if x.shape != out.shape or len(x.shape) != 1:
        raise ValueError(f"x and out must be vectors of one length, got {x.shape} and {out.shape}")
    if x.size % 4:
        raise ValueError(f"x.size must be a multiple of 4, got {x.size}")
    if overlaps(out, x):  # one block's stores could land where another block still reads
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    if not isinstance(k, (int, np.integer)) or not 0 <= k <= 1 << 20:
        raise ValueError(f"k must be an int in [0, {1 << 20}], got {k!r}")
    if x.size:
        NB_STEPS[step][numba_grid(x.size, blocks), NB_THREADS](x, out, k, np.float32(a), np.float32(b))
    return out


def numba_grid(n, blocks=None):
    """Blocks to launch for n floats: `blocks` (default six per SM, what fits
    at 256 threads), never more than there are tiles."""
    if blocks is None:
        blocks = sm_count() * 6
    return max(1, min(blocks, -(-n // TILE)))


def sm_count():
    """The GPU's SM count (the simulator's device has none: one)."""
    return getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)
# --8<-- [end:ws_numba]


# --8<-- [start:numba_check]
def check_stream_numba(step, n=4100, k=3, blocks=2):
    """A Numba step against the host (GPU, or the simulator: keep n small)."""
    assert numba_grid(n, 100) == -(-n // TILE) and numba_grid(n, 1) == 1  # no more blocks than tiles
    from numba import config

    sms = 1 if config.ENABLE_CUDASIM else cuda.get_current_device().MULTIPROCESSOR_COUNT
    assert numba_grid(1 << 30) == 6 * sms  # six blocks per SM by default
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    both = cuda.to_device(np.concatenate([x, np.full(n, np.nan, np.float32)]))  # x, then out, in one buffer
    for bad in (both[4:n + 4], both[:n]):  # out shifted into x, out = x
        try:
            stream_numba(both[:n], bad, k=k, step=step, blocks=blocks)
            raise AssertionError(f"{step}: an out overlapping x was accepted")
        except ValueError as e:
            assert "must not overlap" in str(e), e
    assert not overlaps(both[n:], both[:n]) and not overlaps(both[:n], both[n:])  # side by side is fine
    out = both[n:]
    stream_numba(both[:n], out, k=k, step=step, blocks=blocks)
    err = float(np.max(np.abs(out.copy_to_host() - stream_reference(x, k))))
    if not err < 1e-5:
        raise AssertionError(f"{step}: max error {err}")
    return err
# --8<-- [end:numba_check]


# %%
# --8<-- [start:tensor_map]
import ctypes

import numpy as np

TMAP = np.dtype([("v", "<u8", (16,))])  # a CUtensorMap: 128 opaque bytes, passed by value
# Enum values from cuda.h (CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion)
TMA_FLOAT16, TMA_FLOAT32, TMA_SWIZZLE_NONE, TMA_SWIZZLE_128B, TMA_L2_256B = 6, 7, 0, 3, 3


def tensor_map_2d(X, box_rows, box_cols, swizzle_128b=False):
    """The TMA descriptor of a row-major float32 or float16 CuPy matrix X:
    boxes of box_rows x box_cols, zeros read past the edges."""
    rows, cols = X.shape
    return encode_tensor_map(X, (cols, rows), (X.strides[0],), (box_cols, box_rows), swizzle_128b)


def encode_tensor_map(X, sizes, strides, box, swizzle_128b):
    """The driver's cuTensorMapEncodeTiled, called through ctypes, for the
    array at X's address: sizes and box innermost first, the byte strides of
    every dimension but the innermost (its elements are adjacent)."""
    dtype = {np.dtype(np.float32): TMA_FLOAT32, np.dtype(np.float16): TMA_FLOAT16}[np.dtype(X.dtype)]
    rank = len(sizes)
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    raw = np.zeros(24, dtype=np.uint64)  # 192 bytes, so that a 64-byte aligned 128 fit in it
    start = (-raw.ctypes.data % 64) // 8
    out = raw[start:start + 16]          # the driver wants the map 64-byte aligned
    libcuda = ctypes.CDLL("libcuda.so.1")
    err = libcuda.cuTensorMapEncodeTiled(
        ctypes.c_void_p(out.ctypes.data), ctypes.c_int(dtype), u32(rank), ctypes.c_void_p(X.data.ptr),
        (u64 * rank)(*sizes), (u64 * (rank - 1))(*strides), (u32 * rank)(*box),
        (u32 * rank)(*[1] * rank),         # element strides
        ctypes.c_int(0),                   # no interleave
        ctypes.c_int(TMA_SWIZZLE_128B if swizzle_128b else TMA_SWIZZLE_NONE),
        ctypes.c_int(TMA_L2_256B), ctypes.c_int(0))  # L2 promotion; out-of-bounds elements read as zero
    if err != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {err}")
    return np.frombuffer(out.tobytes(), dtype=TMAP)[0]
# --8<-- [end:tensor_map]


# --8<-- [start:primitives]
def check_primitives():
    """Each primitive once at a size that leaves a partial tile, against NumPy.
    out is the front of a larger buffer: what lies past it must stay untouched."""
    import cupy as cp

    mod = load_cuda_arch("ws_primitives.cu")
    rng = cp.random.default_rng(0)
    x = rng.standard_normal(5000, dtype=cp.float32)  # a multiple of 4: the bulk copies move 16-byte pieces
    xh = cp.asnumpy(x)
    buf = cp.empty(x.size + 64, dtype=cp.float32)
    out = buf[:x.size]

    def run(name, grid, block, want, fill=cp.nan):
        buf.fill(fill)
        mod.get_function(name)(grid, block, (x, out, np.int32(x.size)))
        got = cp.asnumpy(buf)
        assert (got[x.size:] == -7.0).all() if fill == -7.0 else np.isnan(got[x.size:]).all(), \
            f"{name} wrote past the end of out"
        if want is not None:
            assert np.allclose(got[:x.size], want, rtol=1e-5, atol=1e-6), name
        return got[:x.size]

    run("pipeline_copy", (3,), (256,), 2 * xh + 1)  # 3 blocks walk 5 tiles
    tiles = np.zeros(-(-x.size // 256) * 256)
    tiles[:x.size] = xh
    tiles = tiles.reshape(-1, 256)  # out[i] = its right neighbour in the block (0 past n) + x[i]^2
    run("barrier_split", (-(-x.size // 256),), (256,), (np.roll(tiles, -1, axis=1) + tiles * tiles).ravel()[:x.size])
    run("mbarrier_bulk_copy", (2,), (128,), xh + 1)  # the barrier's parity flips with every tile
    got = run("mbarrier_bulk_copy_nowait", (2,), (128,), None, fill=-7.0)  # -7: never a value it writes
    assert not (got == -7.0).any(), "mbarrier_bulk_copy_nowait left elements unwritten"
    broken = not np.allclose(got, xh + 1, rtol=1e-6)
    pairs = np.zeros(-(-x.size // 512) * 512)
    pairs[:x.size] = xh
    pairs = pairs.reshape(-1, 2, 256)  # out[i] = x[i] + the same thread's x in the partner block
    run("cluster_dsmem", (-(-x.size // 512) * 2,), (256,), (pairs + pairs[:, ::-1]).ravel()[:x.size])
    X = rng.standard_normal((37, 52), dtype=cp.float32)  # boxes of 32 x 32: the last ones hang over the edges
    out2 = cp.full((64, 64), cp.nan, dtype=cp.float32)   # X transposed, padded with the zeros TMA reads
    mod.get_function("tma_tile_2d")((2, 2), (128,), (tensor_map_2d(X, 32, 32), out2, np.int32(32), np.int32(32)),
                                    shared_mem=32 * 32 * 4 + 128)
    want = np.zeros((64, 64), np.float32)
    want[:52, :37] = cp.asnumpy(X).T
    assert np.array_equal(cp.asnumpy(out2), want), "tma_tile_2d"
    W = rng.standard_normal((200, 48), dtype=cp.float32)
    Xs = rng.standard_normal((48, 160), dtype=cp.float32)
    out3 = cp.full((200, 160), cp.nan, dtype=cp.float32)  # 128 rows a block; its consumer holds 160 sums a thread
    mod.get_function("setmaxnreg_roles")((2,), (256,), (W, Xs, out3, np.int32(200), np.int32(48)))
    want = cp.asnumpy(W).astype(np.float64) @ cp.asnumpy(Xs).astype(np.float64)
    assert np.allclose(cp.asnumpy(out3), want, rtol=1e-4, atol=1e-4), "setmaxnreg_roles"
    print("primitives: pipeline, barrier, bulk copy + mbarrier, TMA box, cluster, setmaxnreg: correct; "
          f"the bulk copy without its wait: {'wrong, as it should be' if broken else 'happened to be right'}")
    return broken
# --8<-- [end:primitives]


# %%
# --8<-- [start:hopper_gemm]
import math

BM, BK = 128, 64
# kernel name -> (BN, stages, threads, persistent, cluster), as instantiated in hopper_gemm.cu
GEMM_KERNELS = {
    "hg_plain_256": (256, 4, 256, False, 1),              # no specialization: both warpgroups load and compute
    "hg_ws_256": (256, 4, 384, False, 1),                 # a producer warpgroup and two consumers
    "hg_ws_persistent_256": (256, 4, 384, True, 1),       # + one block per SM walking the tiles
    "hg_ws_cluster_persistent_256": (256, 4, 384, True, 2),  # + clusters of 2 sharing Bt's tile (multicast)
    "hg_ws_pingpong_128": (128, 6, 384, True, 1),         # each consumer its own 128 x 128 tiles, turn about
}


def hopper_gemm(A, Bt, C, *, kernel="hg_ws_persistent_256", tma_store=True):
    """C = A @ Bt.T: A (M x K), Bt (N x K) float16, C (M x N) float32, all
    C-contiguous CuPy arrays; K a multiple of 8 (TMA copies rows of a
    multiple of 16 bytes). Needs sm_90a: an H100 or H200. The hg_ws kernels
    store C by TMA when tma_store and C's rows allow it (N a multiple of 4,
    C 16-byte aligned), else from registers."""
    import cupy as cp

    (M, K), (N, K2) = A.shape, Bt.shape
    if A.dtype != cp.float16 or Bt.dtype != cp.float16 or C.dtype != cp.float32:
        raise TypeError("A and Bt must be float16, C float32")
    if K2 != K or C.shape != (M, N) or K % 8 or K == 0:
        raise ValueError(f"need A (M x K), Bt (N x K), C (M x N) and K a positive multiple of 8; got "
                         f"{A.shape}, {Bt.shape}, {C.shape}")
    if not (A.flags.c_contiguous and Bt.flags.c_contiguous and C.flags.c_contiguous):
        raise ValueError("A, Bt and C must be C-contiguous")
    if cp.cuda.Device().compute_capability != "90":
        raise RuntimeError("the Hopper GEMM needs sm_90a (wgmma, setmaxnreg): an H100 or H200")
    bn, stages, threads, persistent, cluster = GEMM_KERNELS[kernel]
    specialized = kernel != "hg_plain_256"
    epilogue = 2 * 2 * 64 * 32 * 4 if specialized else 0  # hg_ws: two 64 x 32 float buffers per consumer
    smem = stages * (BM + bn) * BK * 2 + epilogue + 2 * stages * 8 + 1024  # + the barriers, alignment slack
    tma_c = tma_store and specialized and N % 4 == 0 and C.data.ptr % 16 == 0
    # C as a 3-D map of one M x N matrix (the kernels name split K's matrix by the third
    # coordinate), boxes of 64 rows x 32 columns, the 128-byte swizzle of the kernel's buffers
    map_c = (encode_tensor_map(C, (N, M, 1), (N * 4, M * N * 4), (32, 64, 1), swizzle_128b=True) if tma_c
             else np.zeros(1, dtype=TMAP)[0])
    kern = load_cuda_arch("hopper_gemm.cu").get_function(kernel)
    kern.max_dynamic_shared_size_bytes = smem
    tiles = math.ceil(M / (BM * cluster)) * math.ceil(N / bn)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    grid = cluster * (min(tiles, sms // cluster) if persistent else tiles)
    # C = alpha * A @ Bt.T with alpha = 1 (the FP8 build's per-tensor scales); one row of the
    # grid (gridDim.y = 1): K unsplit
    kern((grid,), (threads,), (tensor_map_2d(A, BM, BK, swizzle_128b=True),
                               tensor_map_2d(Bt, bn // cluster, BK, swizzle_128b=True),
                               C, np.int32(M), np.int32(N), np.int32(K), np.float32(1.0), map_c, np.int32(tma_c)),
         shared_mem=smem)
    return C


def check_gemm(shapes=((1000, 1013, 776), (300, 520, 72))):
    """Every kernel against a float64 product of the same FP16 inputs: an odd
    N (columns stored from registers one by one) and N a multiple of 4 (stored
    by TMA, and from registers in pairs with tma_store=False). Returns each
    kernel's worst relative error."""
    import cupy as cp

    rng = cp.random.default_rng(1)
    errs = {}
    for M, N, K in shapes:
        A = rng.standard_normal((M, K), dtype=cp.float32).astype(cp.float16)
        Bt = rng.standard_normal((N, K), dtype=cp.float32).astype(cp.float16)
        ref = A.astype(cp.float64) @ Bt.astype(cp.float64).T
        for name in GEMM_KERNELS:
            for tma_store in (True, False):
                C = cp.full((M, N), cp.nan, dtype=cp.float32)
                hopper_gemm(A, Bt, C, kernel=name, tma_store=tma_store)
                err = float(cp.linalg.norm(C - ref) / cp.linalg.norm(ref))
                if not err < 1e-5:
                    raise AssertionError(f"{name} (tma_store={tma_store}) at {M}x{N}x{K}: rel_err {err}")
                errs[name] = max(err, errs.get(name, 0.0))
    return errs
# --8<-- [end:hopper_gemm]


# %%
import argparse


def main(argv=None):
    p = argparse.ArgumentParser(description="Warp specialization: streaming ladder, primitives, Hopper GEMM.")
    p.add_argument("--size", type=int, default=0, help="also time the GEMM at size^3 (a multiple of 8)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.impl in ("all", "numba"):
        for step in NB_STEPS:
            print(f"numba {step}: max error {check_stream_numba(step):.1e}")
    if args.impl == "numba":
        return
    if not has_gpu():
        print("cupy: skipped (needs a CUDA GPU)")
        return
    import cupy as cp

    cc = cp.cuda.Device().compute_capability
    steps = [s for s in STEPS if int(cc) >= int(NEEDS[s]) and (s != "ws_tma_regs" or cc == "90")]
    for step in steps:
        print(f"cupy {step}: max error {check_stream(step):.1e}")
    n = 1 << 26
    x = cp.random.default_rng(2).standard_normal(n, dtype=cp.float32)
    out = cp.empty_like(x)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for k in (8, 48, 256):
        row = []
        for step in steps:
            stream(x, out, k=k, step=step)
            start.record()
            for _ in range(5):
                stream(x, out, k=k, step=step)
            end.record()
            end.synchronize()
            row.append(f"{step} {2 * k * n * 5 / cp.cuda.get_elapsed_time(start, end) / 1e9:6.1f}")
        print(f"k={k:3d} TFLOP/s: " + "  ".join(row))
    if int(cc) < 90:
        print("primitives and GEMM: skipped (they need compute capability 9.0)")
        return
    check_primitives()
    for name, err in check_gemm().items():
        print(f"{name}: rel_err {err:.1e}")
    if args.size:
        A = cp.random.default_rng(3).standard_normal((args.size, args.size), dtype=cp.float32).astype(cp.float16)
        C = cp.empty((args.size, args.size), dtype=cp.float32)
        for name in GEMM_KERNELS:
            hopper_gemm(A, A, C, kernel=name)
            start.record()
            for _ in range(10):
                hopper_gemm(A, A, C, kernel=name)
            end.record()
            end.synchronize()
            print(f"{name}: {2 * args.size**3 * 10 / cp.cuda.get_elapsed_time(start, end) / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
