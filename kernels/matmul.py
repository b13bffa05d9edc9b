"""FP32 matrix multiplication C = A @ B: the ladder in CuPy (CUDA C) and Numba.

CUDA C steps (kernels/cuda/matmul.cu), in ladder order:
    naive, coalesced, smem_tiled16, smem_tiled32, blocktile_1d,
    blocktile_2d, vectorized, double_buffered, warptiled, register_prefetch,
    autotuned
Numba steps (this file): naive, smem_tiled, register_blocked, unrolled,
unsigned;
all run in the CUDA simulator too (at tiny sizes: it is slow).

Row-major float32 matrices of any M, N, K >= 1: every kernel guards its
tails. The reference is cuBLAS SGEMM through cupy.matmul (TF32 off).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from . import checks
from .device import CUDA_DIR, cupy_module
from .standalone import find_cuda_source

CUDA_SOURCE = Path(__file__).with_name("cuda") / "matmul.cu"
VARIANTS = ("naive", "coalesced", "smem_tiled16", "smem_tiled32", "blocktile_1d",
            "blocktile_2d", "vectorized", "double_buffered", "warptiled", "register_prefetch",
            "autotuned")
MAX_ELEMENTS = 2**31 - 1  # the kernels index with int

# (BM, BN, threads) of each CUDA C step: the tile of C one block computes.
# The first three map one thread to one output with a 2D block.
_BLOCK_TILE = {"naive": (32, 32, (32, 32)), "coalesced": (32, 32, (32, 32)),
               "smem_tiled16": (16, 16, (16, 16)), "smem_tiled32": (32, 32, (32, 32)),
               "blocktile_1d": (64, 64, 512), "blocktile_2d": (128, 128, 256),
               "vectorized": (128, 128, 256), "double_buffered": (128, 128, 256),
               "warptiled": (128, 128, 256), "register_prefetch": (128, 128, 256),
               "autotuned": (128, 128, 128)}


def check_operands(A, B, C, *, lib: str = "cupy") -> tuple[int, int, int]:
    """A (M x K), B (K x N), C (M x N, or None: the wrapper allocates it):
    float32, 2-D, C-contiguous device arrays (lib "cupy" or "numba") with
    matching inner dimensions; returns (M, N, K)."""
    device_check = {"cupy": checks.require_cupy_array, "numba": checks.require_numba_array}.get(lib)
    for name, x in (("A", A), ("B", B), ("C", C)):
        if x is None:
            continue
        if device_check is not None:
            device_check(name, x)
        checks.require_dtype(name, x, np.float32)
        checks.require_ndim(name, x, 2)
        checks.require_contiguous(name, x)
    M, N, K = checks.require_gemm_shapes(A, B, C, max_elements=MAX_ELEMENTS)
    if C is not None:
        checks.require_no_overlap("C", C, A=A, B=B)
    return M, N, K


def grid(variant: str, M: int, N: int) -> tuple[tuple, tuple]:
    """(grid, block) of a CUDA C step: one block per BM x BN tile of C."""
    bm, bn, threads = _BLOCK_TILE[variant]
    if variant == "naive":  # blockIdx.x runs along M (the uncoalesced mapping)
        return (math.ceil(M / bm), math.ceil(N / bn)), threads
    block = threads if isinstance(threads, tuple) else (threads,)
    return (math.ceil(N / bn), math.ceil(M / bm)), block


# ---------------------------------------------------------------- CuPy --

def cupy_kernel(variant: str):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(f"matmul_{variant}")


def matmul_cupy(A, B, C=None, *, variant: str = "autotuned"):
    """C = A @ B for float32 cupy matrices with one step of the ladder;
    C (M x N) is allocated when not given. Returns C."""
    import cupy as cp

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    M, N, K = check_operands(A, B, C, lib="cupy")
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    blocks, threads = grid(variant, M, N)
    cupy_kernel(variant)(blocks, threads, (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    return C


# Source 001's three kernels as it prints them (kernels/cuda/matmul.cu,
# section source_001): square N x N, N a multiple of 32, a 32 x 32 block.
SOURCE_001 = ("matMulNaive", "matMulShared", "matMulILP")


def matmul_source001(A, B, C=None, *, kernel: str = "matMulILP"):
    """C = A @ B with one of source 001's kernels. They check no bounds, so
    this refuses what they would get wrong: non-square matrices and N not a
    multiple of 32. Returns C."""
    import cupy as cp

    if kernel not in SOURCE_001:
        raise ValueError(f"kernel must be one of {SOURCE_001}, got {kernel!r}")
    M, N, K = check_operands(A, B, C, lib="cupy")
    if not M == N == K or N % 32:
        raise ValueError(f"source 001's kernels need square matrices with N a multiple of 32 "
                         f"(they check no bounds); got M={M}, N={N}, K={K}")
    if C is None:
        C = cp.empty((N, N), dtype=cp.float32)
    cupy_module(CUDA_SOURCE.name).get_function(kernel)((N // 32, N // 32), (32, 32), (A, B, C, np.int32(N)))
    return C


# Step 8's tuning knobs: (BM, BN, BK, WM, WN, TM, TN, THREADS, MIN_BLOCKS, PREFETCH).
def config_name(cfg) -> str:
    bm, bn, bk, wm, wn, tm, tn, threads, minb, prefetch = cfg
    return f"{bm}x{bn}x{bk}_w{wm}x{wn}_t{tm}x{tn}_{threads}t_min{minb}" + ("_pf" if prefetch else "")


@functools.cache
def warptiled_config_kernel(cfg):
    """The step-8 template instantiated at cfg (one NVRTC module per config)."""
    import cupy as cp

    args = [str(int(v)) if not isinstance(v, bool) else str(v).lower() for v in cfg]
    name = f"matmul_warptiled_t<{','.join(args)}>"
    mod = cp.RawModule(code=(CUDA_DIR / CUDA_SOURCE.name).read_text(), options=("--std=c++17",),
                       name_expressions=[name])
    return mod.get_function(name)


def matmul_warptiled_config(A, B, C, cfg):
    """Step 8 at any tuning configuration (the sweep of kernels/bench/matmul.py)."""
    M, N, K = check_operands(A, B, C, lib="cupy")
    bm, bn, threads = cfg[0], cfg[1], cfg[7]
    warptiled_config_kernel(tuple(cfg))((math.ceil(N / bn), math.ceil(M / bm)), (threads,),
                                        (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    return C


# Step 8's tuning knobs, (BM, BN, BK, WM, WN, TM, TN, THREADS, MIN_BLOCKS,
# PREFETCH): steps 8 and 9, and the twelve best of a first sweep of 96
# configurations (every shape of the template that fits 48 KB of static
# shared memory without spills), re-measured in every run
# (kernels/bench/matmul.py; the occupancy chapter lists their resources).
CONFIGS = (
    (128, 128, 8, 32, 64, 8, 8, 256, 2, False),    # step 8
    (128, 128, 8, 32, 64, 8, 8, 256, 2, True),     # step 9
    (128, 128, 16, 32, 128, 8, 16, 128, 2, True),  # step 10
    (128, 128, 16, 32, 128, 8, 16, 128, 2, False),
    (128, 128, 16, 128, 32, 8, 16, 128, 2, False),
    (128, 128, 16, 128, 32, 8, 16, 128, 2, True),
    (128, 128, 16, 64, 64, 8, 16, 128, 2, True),
    (128, 128, 16, 64, 32, 8, 8, 256, 2, False),
    (128, 256, 8, 64, 64, 8, 16, 256, 1, True),
    (128, 256, 8, 128, 32, 8, 16, 256, 1, True),
    (128, 256, 8, 32, 128, 8, 16, 256, 1, True),
    (128, 256, 8, 32, 128, 8, 16, 256, 1, False),
    (256, 128, 8, 128, 32, 16, 8, 256, 1, True),
    (256, 128, 8, 128, 32, 16, 8, 256, 1, False),
)


def threads_of(variant: str) -> int:
    t = _BLOCK_TILE[variant][2]
    return math.prod(t) if isinstance(t, tuple) else t


def cublas_matmul(A, B, C):
    """The reference: cuBLAS SGEMM through cupy.matmul (FP32; TF32 stays off
    unless CUPY_TF32=1 is set, which the bench refuses)."""
    import cupy as cp

    checks.require_no_overlap("C", C, A=A, B=B)
    return cp.matmul(A, B, out=C)


# ------------------------------------------------- shape-aware dispatch --

# --8<-- [start:dispatch_plan]
import dataclasses  # noqa: E402

# Tiles of matmul_warptiled_t (step 10's template) and matmul_splitk_t
# (kernels/cuda/matmul.cu): four sizes, K split over blockIdx.z when the
# tiles are too few for the SMs.
# (BM, BN, BK, WM, WN, TM, TN, THREADS, MIN_BLOCKS)
TILES = {
    "128x128": (128, 128, 16, 32, 128, 8, 16, 128, 2),  # step 10
    "128x64": (128, 64, 16, 64, 32, 8, 8, 128, 3),
    "64x128": (64, 128, 16, 32, 64, 8, 8, 128, 3),
    "64x64": (64, 64, 16, 32, 32, 4, 8, 128, 4),
}
SPLITS = (1, 2, 3, 4, 6, 8)  # slices of K the planner considers
MIN_K_SLICE = 128  # no slice shorter than this

# The planner's model: rates fitted (least squares in log time) to the
# tuning records of a first run of topic matmul_shapes on an H200, at
# commit 52dbcd3. `python -m kernels.bench.matmul_shapes --fit` refits them
# from the results file; the topic's claims check that with these values
# plan() picks, for every shape, a candidate within 15 % of the fastest
# one measured in the committed run.
SM_GFLOPS = {"128x128": 345.0, "128x64": 305.0, "64x128": 335.0, "64x64": 277.0}   # an SM full of blocks
BLOCK_GFLOPS = {"128x128": 175.0, "128x64": 229.0, "64x128": 222.0, "64x64": 120.0}  # one block alone
SPLIT_US = 11.6      # a split's fixed cost (the last blocks' sums), microseconds
SPLIT_GBPS = 3000.0  # and its traffic: every slice's partial sums written and read


@dataclasses.dataclass(frozen=True)
class Plan:
    tile: str     # a key of TILES
    splits: int   # slices of K (1: no split, no workspace)
    k_split: int  # the length of each slice, a multiple of BK


def make_plan(K: int, tile: str, splits: int) -> Plan:
    bk = TILES[tile][2]
    k_split = -(-K // (splits * bk)) * bk
    return Plan(tile, -(-K // k_split), k_split)


def plan_cost(M: int, N: int, K: int, p: Plan, sms: int, per_sm: int) -> float:
    """Modelled microseconds. The busiest SM decides: it runs
    ceil(blocks / sms) blocks, per_sm at a time at the full SM's rate, and
    a last round of fewer blocks no faster than one block alone can go."""
    bm, bn = TILES[p.tile][:2]
    blocks = -(-M // bm) * -(-N // bn) * p.splits
    rounds, rest = divmod(-(-blocks // sms), per_sm)
    mflop = 2 * bm * bn * p.k_split / 1e3  # one block's work, in units of 1e3 FLOP: us at GFLOP/s
    t = rounds * per_sm * mflop / SM_GFLOPS[p.tile]
    if rest:
        t += max(rest * mflop / SM_GFLOPS[p.tile], mflop / BLOCK_GFLOPS[p.tile])
    if p.splits > 1:
        t += SPLIT_US + 2 * p.splits * M * N * 4 / (SPLIT_GBPS * 1e3)
    return t


def candidate_plans(K: int) -> list[Plan]:
    """Every plan the planner weighs: each tile, unsplit or split so that no
    slice of K is shorter than MIN_K_SLICE (distinct, in a fixed order)."""
    plans = {make_plan(K, tile, s) for tile in TILES for s in SPLITS if s == 1 or K // s >= MIN_K_SLICE}
    return sorted(plans, key=lambda p: (p.tile, p.splits))


def plan(M: int, N: int, K: int, sms: int, per_sm: dict[str, int]) -> Plan:
    """The tile and split of K with the lowest plan_cost. per_sm: blocks of
    each tile resident on one SM (the driver's occupancy answer)."""
    return min(candidate_plans(K), key=lambda p: plan_cost(M, N, K, p, sms, per_sm[p.tile]))
# --8<-- [end:dispatch_plan]


# --8<-- [start:dispatch]
import functools  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402


@functools.cache
def general_kernel(tile: str, split: bool = False):
    """Step 10's template matmul_warptiled_t (with PREFETCH) at one of TILES,
    or with split matmul_splitk_t: an NVRTC module each."""
    import cupy as cp

    args = ",".join(str(v) for v in TILES[tile])
    name = f"matmul_splitk_t<{args}>" if split else f"matmul_warptiled_t<{args},true>"
    mod = cp.RawModule(code=find_cuda_source("matmul.cu").read_text(), options=("--std=c++17",),
                       name_expressions=[name])
    return mod.get_function(name)


@functools.cache
def blocks_per_sm(device_id: int) -> tuple[int, dict[str, int]]:
    """(SMs, blocks of each tile resident on one SM), from the driver
    (cudaOccupancyMaxActiveBlocksPerMultiprocessor)."""
    import cupy as cp

    with cp.cuda.Device(device_id) as dev:
        occupancy = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
        return (dev.attributes["MultiProcessorCount"],
                {t: occupancy(general_kernel(t).kernel.ptr, TILES[t][7], 0) for t in TILES})


@functools.lru_cache(maxsize=256)
def plan_for(M: int, N: int, K: int, device_id: int) -> Plan:
    """plan() on this GPU, remembered per shape (the host's time counts for small problems)."""
    return plan(M, N, K, *blocks_per_sm(device_id))


SPLIT_BUFFERS: dict = {}  # (device, stream) -> (workspace, tile counters), grown when too small


def split_buffers(floats: int, tiles: int):
    """A workspace of at least `floats` float32 and `tiles` zeroed counters
    for this device and stream, kept between calls (the kernel resets the
    counters it uses)."""
    import cupy as cp

    key = (cp.cuda.Device().id, cp.cuda.get_current_stream().ptr)
    W, count = SPLIT_BUFFERS.get(key, (None, None))
    if W is None or W.size < floats:
        W = cp.empty(floats, dtype=cp.float32)
    if count is None or count.size < tiles:
        count = cp.zeros(tiles, dtype=cp.int32)
    SPLIT_BUFFERS[key] = (W, count)
    return W, count


def matmul(A, B, C=None, *, force: tuple[str, int] | None = None):
    """C = A @ B (float32 CuPy matrices) by the plan for their shape;
    `force=(tile, splits)` overrides the plan (the bench's tuning sweep)."""
    import cupy as cp

    M, N, K = check_operands(A, B, C)
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    p = plan_for(M, N, K, cp.cuda.Device().id) if force is None else make_plan(K, *force)
    bm, bn, threads = TILES[p.tile][0], TILES[p.tile][1], TILES[p.tile][7]
    grid = (math.ceil(N / bn), math.ceil(M / bm), p.splits)
    if p.splits == 1:
        general_kernel(p.tile)(grid, (threads,), (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    else:
        W, count = split_buffers(p.splits * M * (-(-N // 4) * 4), grid[0] * grid[1])
        general_kernel(p.tile, split=True)(grid, (threads,), (A, B, C, np.int32(M), np.int32(N), np.int32(K),
                                                              np.int32(p.k_split), W, count))
    return C
# --8<-- [end:dispatch]


# --------------------------------------------------------------- Numba --

# --8<-- [start:numba_import]
from numba import cuda, float32, uint64  # noqa: E402
from numba.cuda.misc.special import literal_unroll  # noqa: E402  (the CUDA target's own)

TILE = 16  # smem_tiled: a TILE x TILE block of threads, one output each
# register_blocked: a BM x BN tile of C per block of THREADS threads, TM x TN
# outputs per thread as float4-wide pieces (the layout of step 8 in CUDA C)
BM, BN, BK, TM, TN = 128, 128, 16, 8, 8
THREADS = (BM // TM) * (BN // TN)  # 256
LANES_N = 8  # a warp's 32 lanes as 4 x 8 over a 32 x 64 region
LANES_M = 32 // LANES_N
WARPS_N = BN // (LANES_N * TN)  # 2 warps side by side in N, 4 in M
LDA = BM + 4  # the transposed A tile, padded against bank conflicts
LOADS = BM * BK // THREADS  # elements of each tile one thread loads (8)
K_STEPS = tuple(range(BK))  # for literal_unroll: one copy of the body per k
U = uint64  # an unsigned index: Numba skips the wraparound of negative ones
# --8<-- [end:numba_import]


# --8<-- [start:numba_naive]
@cuda.jit
def matmul_naive_kernel(A, B, C, M, N, K):
    col, row = cuda.grid(2)  # x runs along a row of C: coalesced
    if row < M and col < N:
        acc = float32(0.0)
        for k in range(K):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc
# --8<-- [end:numba_naive]


# --8<-- [start:numba_smem_tiled]
@cuda.jit
def matmul_smem_tiled_kernel(A, B, C, M, N, K):
    As = cuda.shared.array((TILE, TILE), float32)
    Bs = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        As[ty, tx] = A[row, k0 + tx] if row < M and k0 + tx < K else float32(0.0)
        Bs[ty, tx] = B[k0 + ty, col] if k0 + ty < K and col < N else float32(0.0)
        cuda.syncthreads()  # tiles complete before anyone reads them
        for k in range(TILE):
            acc += As[ty, k] * Bs[k, tx]
        cuda.syncthreads()  # all reads done before the next tile overwrites them
    if row < M and col < N:
        C[row, col] = acc
# --8<-- [end:numba_smem_tiled]


# --8<-- [start:numba_load_tiles]
@cuda.jit(device=True)
def load_tiles(A, B, ra, rb, M, N, K, m0, n0, k0, full):
    """This thread's LOADS elements of the A and B tiles at k0, into
    registers; zeros outside the matrices. `full` (the whole tile is
    inside, the same for the block) skips the bounds tests."""
    tid = cuda.threadIdx.x
    for i in range(LOADS):
        e = tid + i * THREADS
        m, k = e // BK, e % BK  # A: consecutive threads along a row
        if full:
            ra[i] = A[U(m0 + m), U(k0 + k)]
        else:
            ra[i] = A[U(m0 + m), U(k0 + k)] if m0 + m < M and k0 + k < K else float32(0.0)
        k, n = e // BN, e % BN  # B: consecutive threads along a row
        if full:
            rb[i] = B[U(k0 + k), U(n0 + n)]
        else:
            rb[i] = B[U(k0 + k), U(n0 + n)] if k0 + k < K and n0 + n < N else float32(0.0)


@cuda.jit(device=True)
def store_tiles(As, Bs, ra, rb):
    """The registers into shared memory, the A tile transposed (As[k, m])."""
    tid = cuda.threadIdx.x
    for i in range(LOADS):
        e = tid + i * THREADS
        As[U(e % BK), U(e // BK)] = ra[i]
        Bs[U(e // BN), U(e % BN)] = rb[i]


@cuda.jit(device=True)
def store_c(C, acc, M, N, row0, col0):
    for i in range(TM):
        row = row0 + (i // 4) * (LANES_M * 4) + i % 4
        for j in range(TN):
            col = col0 + (j // 4) * (LANES_N * 4) + j % 4
            if row < M and col < N:
                C[U(row), U(col)] = acc[i, j]
# --8<-- [end:numba_load_tiles]


# --8<-- [start:numba_register_blocked]
@cuda.jit
def matmul_register_blocked_kernel(A, B, C, M, N, K):
    As = cuda.shared.array((BK, LDA), float32)
    Bs = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)  # constant indices after unrolling: registers
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    ra = cuda.local.array(LOADS, float32)  # the next tile, on its way from global memory
    rb = cuda.local.array(LOADS, float32)
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    warp, lane = cuda.threadIdx.x // 32, cuda.threadIdx.x % 32
    wm0 = (warp // WARPS_N) * (LANES_M * TM) + (lane // LANES_N) * 4  # first row of this thread
    wn0 = (warp % WARPS_N) * (LANES_N * TN) + (lane % LANES_N) * 4    # first column
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    inside = m0 + BM <= M and n0 + BN <= N
    load_tiles(A, B, ra, rb, M, N, K, m0, n0, 0, inside and BK <= K)
    for k0 in range(0, K, BK):
        store_tiles(As, Bs, ra, rb)
        cuda.syncthreads()  # the tiles are complete
        if k0 + BK < K:  # the next tile's loads fly while we compute
            load_tiles(A, B, ra, rb, M, N, K, m0, n0, k0 + BK, inside and k0 + 2 * BK <= K)
        for k in range(BK):
            for i in range(TM):  # pieces of 4, LANES_M * 4 rows apart
                a[i] = As[k, wm0 + (i // 4) * (LANES_M * 4) + i % 4]
            for j in range(TN):
                b[j] = Bs[k, wn0 + (j // 4) * (LANES_N * 4) + j % 4]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()  # all reads done before the next store
    store_c(C, acc, M, N, m0 + wm0, n0 + wn0)
# --8<-- [end:numba_register_blocked]


# --8<-- [start:numba_unrolled]
@cuda.jit
def matmul_unrolled_kernel(A, B, C, M, N, K):
    As = cuda.shared.array((BK, LDA), float32)
    Bs = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    ra = cuda.local.array(LOADS, float32)
    rb = cuda.local.array(LOADS, float32)
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    warp, lane = cuda.threadIdx.x // 32, cuda.threadIdx.x % 32
    wm0 = (warp // WARPS_N) * (LANES_M * TM) + (lane // LANES_N) * 4
    wn0 = (warp % WARPS_N) * (LANES_N * TN) + (lane % LANES_N) * 4
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    inside = m0 + BM <= M and n0 + BN <= N
    load_tiles(A, B, ra, rb, M, N, K, m0, n0, 0, inside and BK <= K)
    for k0 in range(0, K, BK):
        store_tiles(As, Bs, ra, rb)
        cuda.syncthreads()
        if k0 + BK < K:
            load_tiles(A, B, ra, rb, M, N, K, m0, n0, k0 + BK, inside and k0 + 2 * BK <= K)
        for k in literal_unroll(K_STEPS):  # k is a constant in each copy of the body
            for i in range(TM):
                a[i] = As[k, wm0 + (i // 4) * (LANES_M * 4) + i % 4]
            for j in range(TN):
                b[j] = Bs[k, wn0 + (j // 4) * (LANES_N * 4) + j % 4]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()
    store_c(C, acc, M, N, m0 + wm0, n0 + wn0)
# --8<-- [end:numba_unrolled]


# --8<-- [start:numba_unsigned]
@cuda.jit
def matmul_unsigned_kernel(A, B, C, M, N, K):
    As = cuda.shared.array((BK, LDA), float32)
    Bs = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)  # constant indices after unrolling: registers
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    ra = cuda.local.array(LOADS, float32)  # the next tile, on its way from global memory
    rb = cuda.local.array(LOADS, float32)
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    warp, lane = cuda.threadIdx.x // 32, cuda.threadIdx.x % 32
    wm0 = (warp // WARPS_N) * (LANES_M * TM) + (lane // LANES_N) * 4  # first row of this thread
    wn0 = (warp % WARPS_N) * (LANES_N * TN) + (lane % LANES_N) * 4    # first column
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    inside = m0 + BM <= M and n0 + BN <= N
    load_tiles(A, B, ra, rb, M, N, K, m0, n0, 0, inside and BK <= K)
    for k0 in range(0, K, BK):
        store_tiles(As, Bs, ra, rb)
        cuda.syncthreads()  # the tiles are complete
        if k0 + BK < K:  # the next tile's loads fly while we compute
            load_tiles(A, B, ra, rb, M, N, K, m0, n0, k0 + BK, inside and k0 + 2 * BK <= K)
        for k in range(BK):
            for i in range(TM):  # pieces of 4, LANES_M * 4 rows apart
                a[i] = As[U(k), U(wm0 + (i // 4) * (LANES_M * 4) + i % 4)]
            for j in range(TN):
                b[j] = Bs[U(k), U(wn0 + (j // 4) * (LANES_N * 4) + j % 4)]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()  # all reads done before the next store
    store_c(C, acc, M, N, m0 + wm0, n0 + wn0)
# --8<-- [end:numba_unsigned]


NUMBA_KERNELS = {"naive": matmul_naive_kernel, "smem_tiled": matmul_smem_tiled_kernel,
                 "register_blocked": matmul_register_blocked_kernel, "unrolled": matmul_unrolled_kernel,
                 "unsigned": matmul_unsigned_kernel}


def numba_grid(variant: str, M: int, N: int) -> tuple[tuple, tuple]:
    if variant in ("register_blocked", "unrolled", "unsigned"):
        return (math.ceil(N / BN), math.ceil(M / BM)), (THREADS,)
    t = TILE if variant == "smem_tiled" else 16
    return (math.ceil(N / t), math.ceil(M / t)), (t, t)


# --8<-- [start:numba_wrapper]
def matmul_numba(A, B, C=None, *, variant: str = "register_blocked"):
    """C = A @ B for float32 Numba device matrices; returns C."""
    if variant not in NUMBA_KERNELS:
        raise ValueError(f"variant must be one of {tuple(NUMBA_KERNELS)}, got {variant!r}")
    M, N, K = check_operands(A, B, C, lib="numba")
    if C is None:
        C = cuda.device_array((M, N), dtype=np.float32)
    blocks, threads = numba_grid(variant, M, N)
    NUMBA_KERNELS[variant][blocks, threads](A, B, C, M, N, K)
    return C
# --8<-- [end:numba_wrapper]
