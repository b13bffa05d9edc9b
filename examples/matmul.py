# %% [markdown]
# # Matrix multiplication: the ladder from naive to autotuned
#
# Each step computes the same C = A @ B in FP32 (row-major, any M, N, K >= 1).
# This script checks every step against NumPy in float64, with C poisoned
# with NaN before each launch, and exits non-zero on a wrong result; on a
# GPU it also times the CUDA C steps against cuBLAS (cupy.matmul).
#
# Run:
#
#     python matmul.py                         # checks at 1000 x 1013 x 77, then 4096^3 timings
#     python matmul.py --size 1000 --impl numba
#
# Copy with it: kernels/cuda/matmul.cu (the CUDA C steps; beside this file).
# On a GPU it also checks the shape-aware dispatch (a tile and a split of K
# picked by shape) at odd shapes.
# Needs numpy and numba-cuda, and cupy for the CUDA C steps (skipped, with a
# message, when there is no GPU). Without a GPU the Numba steps run in Numba's
# CUDA simulator, at 33 x 17 x 29 and 1 x 1 x 1 (it is slow).

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
import argparse

# %%
# --8<-- [start:check]
import numpy as np


def check_matmul(C, A, B, rtol=1e-5):
    """Assert that C (on the host) is A @ B: the relative Frobenius-norm error
    against float64 NumPy is below rtol. NaN fails (NaN < rtol is False), so a
    C poisoned with NaN before the launch catches any element left unwritten.
    Returns the largest absolute error."""
    ref = A.astype(np.float64) @ B.astype(np.float64)
    rel = np.linalg.norm(C - ref) / np.linalg.norm(ref)
    assert rel < rtol, f"relative error {rel:.1e} for {A.shape} @ {B.shape} (nan: an element never written)"
    return float(np.max(np.abs(C - ref)))
# --8<-- [end:check]


# %% [markdown]
# ## Numba: the kernels (copies of kernels/matmul.py, kept identical by the handbook's tests)

# %%
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


# %%
# --8<-- [start:numba_check]
from numba import cuda


def check_numba(kernel, threads, tile, shapes=((33, 17, 29), (1, 1, 1)), seed=0):
    """Launch one Numba step, a block of `threads` per tile = (BM, BN) of C,
    on random A and B (never zeros) and a C poisoned with NaN, and check C
    against NumPy, at each (M, N, K) of shapes. The default shapes leave a
    tail in every tile and are quick in the CUDA simulator."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for M, N, K in shapes:
        A = rng.standard_normal((M, K), dtype=np.float32)
        B = rng.standard_normal((K, N), dtype=np.float32)
        C = cuda.to_device(np.full((M, N), np.nan, dtype=np.float32))
        blocks = ((N - 1) // tile[1] + 1, (M - 1) // tile[0] + 1)  # x along N (columns), y along M
        kernel[blocks, threads](cuda.to_device(A), cuda.to_device(B), C, M, N, K)
        err = check_matmul(C.copy_to_host(), A, B)
        print(f"{M}x{N}x{K}: max |error| {err:.1e}", end="  ")
    print()
# --8<-- [end:numba_check]


def numba_ladder(shapes):
    """Every Numba step at every (M, N, K) of shapes, each with its own block and tile."""
    steps = {"naive": (matmul_naive_kernel, (16, 16), (16, 16)),
             "smem_tiled": (matmul_smem_tiled_kernel, (TILE, TILE), (TILE, TILE)),
             "register_blocked": (matmul_register_blocked_kernel, THREADS, (BM, BN)),
             "unrolled": (matmul_unrolled_kernel, THREADS, (BM, BN)),
             "unsigned": (matmul_unsigned_kernel, THREADS, (BM, BN))}
    for name, (kernel, threads, tile) in steps.items():
        print(f"numba {name:18s}", end=" ")
        check_numba(kernel, threads, tile, shapes)


# %% [markdown]
# ## CuPy: the CUDA C steps of matmul.cu

# %%
# --8<-- [start:check_operands]
def check_operands(A, B, C):
    """A (M x K), B (K x N), C (M x N, or None): float32, 2-D, C-contiguous
    CuPy arrays with matching inner dimensions, C sharing no byte with A or
    B; returns (M, N, K)."""
    import cupy as cp

    for name, x in (("A", A), ("B", B), ("C", C)):
        if x is None:
            continue
        if not isinstance(x, cp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(x).__name__}")
        if x.dtype != cp.float32:
            raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {x.shape}")
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (the kernels index rows as row * K)")
    (M, K), (K2, N) = A.shape, B.shape
    if K2 != K:
        raise ValueError(f"inner dimensions differ: A is {M}x{K} but B is {K2}x{N} (B must have {K} rows)")
    if C is not None and C.shape != (M, N):
        raise ValueError(f"C must have shape ({M}, {N}), got {C.shape}")
    for name, x in (("A", A), ("B", B)):  # __restrict__: C shares no byte with A or B
        if C is not None and cp.may_share_memory(C, x):
            raise ValueError(f"C must not overlap {name}: other threads still read {name} while C is written")
    if min(M, N, K) < 1:
        raise ValueError(f"every dimension must be >= 1, got M={M}, N={N}, K={K}")
    if max(M * K, K * N, M * N) >= 2**31:
        raise ValueError("a matrix has 2^31 elements or more: the kernels index with 32-bit int")
    return M, N, K
# --8<-- [end:check_operands]


# --8<-- [start:cupy_launcher]
import functools

# (BM, BN, threads per block) of each CUDA C step: one block per BM x BN tile
# of C. The first four map one thread to one output with a 2-D block.
STEPS = {"naive": (32, 32, (32, 32)), "coalesced": (32, 32, (32, 32)),
         "smem_tiled16": (16, 16, (16, 16)), "smem_tiled32": (32, 32, (32, 32)),
         "blocktile_1d": (64, 64, (512,)), "blocktile_2d": (128, 128, (256,)),
         "vectorized": (128, 128, (256,)), "double_buffered": (128, 128, (256,)),
         "warptiled": (128, 128, (256,)), "register_prefetch": (128, 128, (256,)),
         "autotuned": (128, 128, (128,))}


@functools.cache
def step_kernel(variant):
    """(kernel, BM, BN, threads) of a step. A name in STEPS is an extern "C"
    kernel of matmul.cu. A tuple is a configuration of step 8's template
    (BM, BN, BK, WM, WN, TM, TN, THREADS, MIN_BLOCKS, PREFETCH): a template
    has no C name, so NVRTC is told which instance to compile
    (name_expressions) and CuPy looks it up by that same C++ expression."""
    import cupy as cp

    if isinstance(variant, tuple):
        name = "matmul_warptiled_t<" + ",".join(str(v).lower() for v in variant) + ">"
        module = cp.RawModule(code=find_cuda_source("matmul.cu").read_text(), options=("--std=c++17",),
                              name_expressions=[name])
        return module.get_function(name), variant[0], variant[1], (variant[7],)
    bm, bn, threads = STEPS[variant]
    return load_cuda("matmul.cu").get_function(f"matmul_{variant}"), bm, bn, threads


def matmul_cupy(A, B, C=None, *, variant="autotuned"):
    """C = A @ B for float32 CuPy matrices with one step of the ladder (a
    name in STEPS, or a configuration tuple of step 8's template); C (M x N)
    is allocated when not given. Returns C."""
    import cupy as cp
    import numpy as np

    if not (variant in STEPS or isinstance(variant, tuple)):
        raise ValueError(f"variant must be one of {tuple(STEPS)} or a template configuration, got {variant!r}")
    M, N, K = check_operands(A, B, C)
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    kernel, bm, bn, threads = step_kernel(variant)
    if variant == "naive":  # blockIdx.x runs along M: the uncoalesced mapping
        blocks = ((M - 1) // bm + 1, (N - 1) // bn + 1)
    else:  # blockIdx.x runs along N
        blocks = ((N - 1) // bn + 1, (M - 1) // bm + 1)
    kernel(blocks, threads, (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    return C
# --8<-- [end:cupy_launcher]


# %% [markdown]
# ## Shape-aware dispatch (copies of kernels/matmul.py, kept identical by the handbook's tests)

# %%
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


# --8<-- [start:dispatch_check]
def check_dispatch(shapes=((1, 1, 1), (1000, 1013, 777), (130, 129, 4097)), seed=0):
    """matmul() by its own plan and at every tile with and without a split of
    K, each twice in a row (the second call finds the tile counters the first
    one reset), against NumPy in float64 with C poisoned first. Returns the
    plan of each shape."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(seed)
    plans = {}
    for M, N, K in shapes:
        A = rng.standard_normal((M, K), dtype=np.float32)
        B = rng.standard_normal((K, N), dtype=np.float32)
        a, b = cp.asarray(A), cp.asarray(B)
        for force in [None] + [(tile, s) for tile in TILES for s in (1, 3)]:
            for _ in range(2):
                C = cp.full((M, N), cp.nan, dtype=cp.float32)
                matmul(a, b, C, force=force)
                check_matmul(C.get(), A, B)
        plans[M, N, K] = plan_for(M, N, K, cp.cuda.Device().id)
    assert all(not count.any() for _, count in SPLIT_BUFFERS.values()), "a tile counter was left set"
    return plans
# --8<-- [end:dispatch_check]


# %%
# --8<-- [start:cupy_check]
def check_cupy(variant, M, N, K, *, offset=0, seed=0):
    """matmul_cupy(A, B, C, variant=variant) on random A, B and a C poisoned
    with NaN, checked against NumPy. Each operand sits in a buffer filled
    with NaN: a kernel that reads past the end of A or B (even to multiply
    it by zero) makes C NaN. offset=1 starts every operand one float into
    its buffer: C-contiguous but not 16-byte aligned, so the float4 steps
    must take their element-by-element path."""
    import cupy as cp
    import numpy as np

    def on_gpu(X):
        buf = cp.full(3 * X.size, cp.nan, dtype=cp.float32)
        view = buf[offset:offset + X.size].reshape(X.shape)
        view[...] = cp.asarray(X)
        return view

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    C = on_gpu(np.full((M, N), np.nan, dtype=np.float32))
    assert matmul_cupy(on_gpu(A), on_gpu(B), C, variant=variant) is C
    return check_matmul(C.get(), A, B)
# --8<-- [end:cupy_check]


# %%
# --8<-- [start:cupy_ladder]
# (M, N, K, offset): tails in every tile; one element; whole tiles (the
# float4 paths); K and N multiples of 4 with tails, aligned (float4 loads up
# to the K tail) and not (element by element).
SHAPES = ((1000, 1013, 77, 0), (1, 1, 1, 0), (256, 512, 64, 0), (260, 264, 68, 0), (260, 264, 68, 1))
# Step 8's template at one more configuration of the tuning sweep.
CONFIGS = ((128, 256, 8, 64, 64, 8, 16, 256, 1, True),)


def cupy_ladder(shapes=SHAPES, configs=CONFIGS):
    """Every CUDA C step, and the template at other configurations, checked
    at every shape (check_cupy asserts each one)."""
    for variant in (*STEPS, *configs):
        errors = [check_cupy(variant, M, N, K, offset=offset) for M, N, K, offset in shapes]
        print(f"{str(variant):18s} max |error| {max(errors):.1e} over {len(shapes)} shapes")
# --8<-- [end:cupy_ladder]


# %%
# --8<-- [start:cupy_timing]
def time_ladder(n=4096, rtol=1e-5):
    """Median time of cuBLAS (cupy.matmul, TF32 off) and of every step but
    the naive one (seconds per call at 4096^3) at n^3, in the same run; the
    output of each timed call is checked against a float64 product."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    rng = cp.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=cp.float32)
    B = rng.standard_normal((n, n), dtype=cp.float32)
    ref = cp.matmul(A.astype(cp.float64), B.astype(cp.float64))
    C = cp.empty((n, n), dtype=cp.float32)
    runs = {"cuBLAS": lambda: cp.matmul(A, B, out=C)}
    runs.update({v: (lambda v=v: matmul_cupy(A, B, C, variant=v)) for v in STEPS if v != "naive"})
    times = {}
    for name, run in runs.items():
        C.fill(cp.nan)
        result = benchmark(run, n_repeat=50, n_warmup=3, max_duration=2.0)
        rel = float(cp.linalg.norm(C - ref) / cp.linalg.norm(ref))
        assert rel < rtol, f"{name}: relative error {rel:.1e}"
        times[name] = float(np.median(result.gpu_times)) * 1e3  # ms
        print(f"{name:18s} {times[name]:8.3f} ms {2 * n**3 / times[name] / 1e9:6.1f} TFLOP/s  "
              f"{times['cuBLAS'] / times[name]:5.2f} x cuBLAS")
    return times
# --8<-- [end:cupy_timing]


# %%
# --8<-- [start:source_001]
SOURCE_001 = ("matMulNaive", "matMulShared", "matMulILP")


def matmul_source001(A, B, C, kernel="matMulILP"):
    """C = A @ B with one of source 001's kernels (matmul.cu, section
    source_001): square N x N float32 CuPy matrices, N a multiple of 32,
    since the kernels check no bounds. Returns C."""
    import cupy as cp
    import numpy as np

    if kernel not in SOURCE_001:
        raise ValueError(f"kernel must be one of {SOURCE_001}, got {kernel!r}")
    N = A.shape[0]
    for name, x in (("A", A), ("B", B), ("C", C)):
        if x.shape != (N, N) or x.dtype != cp.float32 or not x.flags.c_contiguous:
            raise ValueError(f"{name} must be a C-contiguous float32 {N} x {N} matrix, got {x.dtype} {x.shape}")
    if N % 32:
        raise ValueError(f"N must be a multiple of 32 (source 001's kernels check no bounds), got {N}")
    for name, x in (("A", A), ("B", B)):
        if cp.may_share_memory(C, x):
            raise ValueError(f"C must not overlap {name}: other threads still read {name} while C is written")
    load_cuda("matmul.cu").get_function(kernel)((N // 32, N // 32), (32, 32), (A, B, C, np.int32(N)))
    return C


def source_001_table(n=2048, rtol=1e-5):
    """Source 001's table on this GPU: each of its three kernels timed at
    n^3 (median, ms) and checked against a float64 product; speed relative
    to matMulNaive, the form of the source's table. Returns {kernel: ms}."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    rng = cp.random.default_rng(1)
    A = rng.standard_normal((n, n), dtype=cp.float32)
    B = rng.standard_normal((n, n), dtype=cp.float32)
    ref = cp.matmul(A.astype(cp.float64), B.astype(cp.float64))
    C = cp.empty((n, n), dtype=cp.float32)
    times = {}
    for kernel in SOURCE_001:
        C.fill(cp.nan)
        result = benchmark(matmul_source001, (A, B, C, kernel), n_repeat=20, n_warmup=2, max_duration=2.0)
        rel = float(cp.linalg.norm(C - ref) / cp.linalg.norm(ref))
        assert rel < rtol, f"{kernel}: relative error {rel:.1e}"
        times[kernel] = float(np.median(result.gpu_times)) * 1e3
        print(f"{kernel:13s} {times[kernel]:8.3f} ms  {times['matMulNaive'] / times[kernel]:4.2f} x matMulNaive")
    return times
# --8<-- [end:source_001]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The matmul ladder, checked against NumPy.")
    p.add_argument("--size", type=int, default=1000, help="M of the check (N = M + 13, K = 77)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    M, N, K = args.size, args.size + 13, 77
    if args.impl in ("all", "numba"):
        if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            print("numba: CUDA simulator, shapes cut to 33 x 17 x 29 and 1 x 1 x 1")
            shapes = ((33, 17, 29), (1, 1, 1))
        else:
            shapes = ((M, N, K), (1, 1, 1))
        numba_ladder(shapes)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            cupy_ladder(((M, N, K, 0),) + SHAPES[1:])
            for shape, p in check_dispatch(((M, N, K), (1000, 1013, 777), (130, 129, 4097))).items():
                print(f"dispatch {shape}: {p}")
            time_ladder(n=4096 if args.size >= 1000 else 1024)
            source_001_table(2048 if args.size >= 1000 else 256)


if __name__ == "__main__":
    main()
