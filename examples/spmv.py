# %% [markdown]
# # Sparse matrix times vector (CSR): the SpMV ladder
#
# y = A x with A in CSR: indptr (n_rows + 1 offsets: row i's nonzeros are
# data[indptr[i]:indptr[i + 1]]), indices (their columns) and data (their
# values). Column indices need not be sorted within a row, and a column may
# come twice (its values add): the product does not depend on the order of a
# row's terms, so every kernel here takes such matrices as they are.
#
# The CUDA C ladder (spmv.cu, launched through CuPy): one thread per row
# (scalar), one warp per row (vector), L lanes per row (subwarp), and the
# merge path, which gives every thread the same number of row ends and
# nonzeros whatever the row lengths (plus a fix-up kernel for rows cut
# between tiles); kernel="auto" picks from the row lengths; the first two
# steps again in Numba. Each kernel is checked
# against a float64 reference on the edge cases (empty rows, one row, all
# nonzeros in one row, unsorted columns, no nonzeros, no rows) with its
# output poisoned with NaN; the script exits non-zero on a wrong answer. On
# a GPU it then times the ladder on a uniform and a power-law matrix against
# cuSPARSE (cupyx.scipy.sparse).
#
# Run:
#
#     python spmv.py                      # check everything; time at 2^21 rows, ~16 nonzeros per row
#     python spmv.py --size 100000        # time at 10^5 rows
#     python spmv.py --impl numba         # only the Numba kernels
#
# Copy with it: kernels/cuda/spmv.cu (beside this file). Needs numpy and
# numba(-cuda); cupy for the CUDA C ladder and cuSPARSE. Without a GPU the
# Numba kernels run in Numba's CUDA simulator (on at most 100 rows: one
# Python thread per GPU thread) and the CuPy part is skipped.

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
import operator  # noqa: E402

import numpy as np  # noqa: E402

# %% [markdown]
# ## The CSR structure, checked once
#
# `check_csr` reads every index once and names the array at fault. The
# one-shot wrapper below runs it first by default: a bad index would
# otherwise be an illegal address, which ends the CUDA context. A loop that
# multiplies one checked matrix many times passes check=False: reading every
# index on every call costs as much as the product.

# %%
# --8<-- [start:csr_check]
class CSRDtypeError(TypeError, ValueError):
    """A CSR array of the wrong dtype: a TypeError, as every wrapper raises for
    a dtype, and a ValueError, as every other CSR check raises."""


def check_csr(indptr, indices, data, shape) -> tuple[int, int, int]:
    """Validate a CSR matrix held in NumPy or CuPy arrays; returns (n_rows,
    n_cols, nnz). Each error names the array at fault. Unsorted and repeated
    column indices within a row are valid (SpMV adds the terms in any order)."""
    try:
        n_rows, n_cols = (operator.index(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"shape must be two ints (n_rows, n_cols), got {shape!r}") from None
    if n_rows < 0 or n_cols < 0:
        raise ValueError(f"shape must be non-negative, got {(n_rows, n_cols)}")
    arrays = (("indptr", indptr, np.int32), ("indices", indices, np.int32), ("data", data, np.float32))
    for name, a, dtype in arrays:
        if not (hasattr(a, "dtype") and hasattr(a, "ndim") and hasattr(a, "size")):
            raise TypeError(f"{name} must be a NumPy or CuPy array, got {type(a).__name__}")
        if a.dtype != dtype:
            raise CSRDtypeError(f"{name} must be {np.dtype(dtype).name}, got {a.dtype}")
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got {a.ndim}-D")
    if len({type(a).__module__.split(".")[0] for _, a, _ in arrays}) != 1:
        raise TypeError("indptr, indices and data must live in one place: all NumPy or all CuPy arrays")
    xp = np
    if not isinstance(indptr, np.ndarray):
        import cupy as xp
    if indptr.size != n_rows + 1:
        raise ValueError(f"indptr must have n_rows + 1 = {n_rows + 1} entries, got {indptr.size}")
    nnz = int(indices.size)
    if data.size != nnz:
        raise ValueError(f"data must have one value per column index: {nnz} (indices.size), got {data.size}")
    if int(indptr[0]) != 0:
        raise ValueError(f"indptr must start at 0, got indptr[0] = {int(indptr[0])}")
    if int(indptr[-1]) != nnz:
        raise ValueError(f"indptr must end at nnz = indices.size = {nnz}, got indptr[-1] = {int(indptr[-1])}")
    if n_rows:
        falls = xp.diff(indptr) < 0
        if bool(falls.any()):
            i = int(xp.argmax(falls))
            raise ValueError(f"indptr must not decrease: indptr[{i + 1}] = {int(indptr[i + 1])} "
                             f"< indptr[{i}] = {int(indptr[i])}")
    if nnz:
        outside = (indices < 0) | (indices >= n_cols)
        if bool(outside.any()):
            k = int(xp.argmax(outside))
            raise ValueError(f"indices must lie in [0, n_cols = {n_cols}), got indices[{k}] = {int(indices[k])}")
    return n_rows, n_cols, nnz
# --8<-- [end:csr_check]


# %% [markdown]
# ## Matrices made in code, and the float64 reference
#
# A fixed seed, no download. Uniform: Poisson row lengths, every row close to
# the mean. Power law: Zipf row lengths, most rows short and a few holding a
# large share of the nonzeros (the case that separates the kernels).

# %%
# --8<-- [start:csr_matrices]
import numpy as np


def random_csr(lengths, n_cols: int, seed: int = 0, sort: bool = True):
    """A CSR matrix (indptr, indices, data) with the given row lengths:
    columns drawn uniformly from [0, n_cols) (a column may come twice in a
    row: its values add), sorted within each row unless sort=False, values
    N(0, 1), in float32."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    if nnz >= 2**31 or (nnz and n_cols < 1):
        raise ValueError(f"{nnz} nonzeros in {n_cols} columns: need int32 offsets and n_cols >= 1")
    indices = rng.integers(0, max(n_cols, 1), nnz, dtype=np.int64)
    if sort:  # one sort of row * n_cols + column sorts every row at once: a row's keys stay in its stretch
        base = np.repeat(np.arange(lengths.size, dtype=np.int64) * n_cols, lengths)
        indices = np.sort(base + indices) - base
    return indptr.astype(np.int32), indices.astype(np.int32), rng.standard_normal(nnz, dtype=np.float32)


def uniform_random(n: int, mean_row: float, seed: int = 0):
    """n x n, Poisson(mean_row) nonzeros per row at random columns."""
    lengths = np.minimum(np.random.default_rng(seed).poisson(mean_row, n), n)
    return random_csr(lengths, n, seed + 1)


def power_law(n: int, mean_row: float, seed: int = 0):
    """n x n, row lengths from a Zipf law (P(length = k) ~ 1/k^2) scaled so
    that their mean is mean_row, at least 1 and at most n: most rows short, a
    few holding thousands of nonzeros or more. (A Zipf law of exponent 2 has
    no finite mean, so the scale is found by bisection on the clipped lengths,
    not from the sample's mean.)"""
    raw = np.random.default_rng(seed).zipf(2.0, n).astype(np.float64)
    lo, hi = 0.0, float(mean_row)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if np.clip(np.round(raw * mid), 1, n).mean() < mean_row:
            lo = mid
        else:
            hi = mid
    lengths = np.clip(np.round(raw * hi), 1, n).astype(np.int64)
    return random_csr(lengths, n, seed + 1)


def edge_cases():
    """(name, (indptr, indices, data), n_cols): the small matrices every kernel
    must get right. The row of 4000 nonzeros spans three merge-path tiles."""
    return [
        ("empty_rows", random_csr([0, 3, 0, 0, 7, 0], 40, seed=4), 40),
        ("one_row", random_csr([9], 40, seed=5), 40),
        ("all_in_one_row", random_csr([0, 0, 4000, 0], 5000, seed=6), 5000),
        ("unsorted_columns", random_csr([6, 0, 11, 5, 8], 39, seed=7, sort=False), 39),
        ("no_nonzeros", random_csr([0, 0, 0], 40, seed=8), 40),
        ("no_rows", random_csr([], 5, seed=9), 5),
        ("uniform", uniform_random(41, 5.0, seed=2), 41),
    ]
# --8<-- [end:csr_matrices]


# --8<-- [start:spmv_reference]
import math

import numpy as np


def spmv_reference(indptr, indices, data, x):
    """y = A x in float64 on the host: every product rounded once to float64,
    summed per row by np.bincount."""
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    terms = data.astype(np.float64) * x.astype(np.float64)[indices]
    return np.bincount(rows, weights=terms, minlength=indptr.size - 1)


# --8<-- [start:rel_err]
def rel_err(got, want):
    """||got - want|| / ||want|| in float64 (||got|| when want is 0): NaN when
    got holds a NaN, an element no thread wrote."""
    got = np.asarray(got, dtype=np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / den if den else np.linalg.norm(got))
# --8<-- [end:rel_err]


def tolerance(indptr):
    """The largest rel_err a correct float32 product may have: a row of k terms
    summed in float32 errs by about eps * sqrt(k / 2) of its size (a random
    walk of roundings); 2e-6 * sqrt(k + 1) leaves a margin of ~50."""
    return 2e-6 * math.sqrt(int(np.max(np.diff(indptr), initial=0)) + 1)
# --8<-- [end:spmv_reference]


# %% [markdown]
# ## The CUDA C ladder through CuPy
#
# One wrapper: check the arguments, allocate, size the grid, launch. The
# merge path launches twice: the tiles (each leaves the partial sum of the
# row its end cuts in `carry`), then the fix-up that adds those carries to
# their rows, in the same stream.

# %%
# --8<-- [start:spmv_cupy]
# --8<-- [start:spmv_auto]
import math

import numpy as np

KERNELS = ("scalar", "vector", "subwarp", "merge")
THREADS = 256  # every kernel's block (the subwarp and merge kernels' __launch_bounds__)
LANES = (2, 4, 8, 16, 32)  # lanes per row: the spmv_subwarp[_v4]_l{L} kernels
ITEMS = 8  # merge path: items (row ends + nonzeros) per thread, a tile of 256 * 8 = 2048: spmv_merge[_v4]_i8


def default_lanes(mean_row: float, vec: bool) -> int:
    """Lanes per row for the subwarp kernel: about one step of the row per
    lane (4 nonzeros per lane per step with 128-bit loads, 2 without), the
    power of two nearest in ratio, from 2 to 32."""
    return int(min(32, max(2, 2 ** round(math.log2(max(mean_row / (4 if vec else 2), 1.0))))))


# kernel="auto": a cost model of the two kernels that can win, fitted to the handbook's H200 runs
STEP_NS = {False: 270.0, True: 750.0}  # one sub-warp step along a row, 4-byte / 128-bit loads
STREAM_GBPS = 3000.0  # CSR bytes streamed by the sub-warp kernel on rows of even length
TAIL_SHARE = 0.75  # merge path once the longest row alone would take this share of the streaming time
WIDEN_SHARE = 0.2  # twice the lanes once it would take this share
LAUNCH_NS = 5000.0  # added to the streaming time: the shortest products measured took about 7.5 us
EVEN_ROWS = 0.1  # 128-bit loads when the row lengths' spread (std / mean) is below this
VEC_MAX_LANES = 16  # with 128-bit loads: 16 lanes beat 32 on rows of 160 and 500 nonzeros (H200)


def row_stats(indptr):
    """n_rows, nnz, mean_row, max_row and spread (std / mean) of the row
    lengths, from indptr alone (NumPy or CuPy: on the GPU, a few passes over
    n_rows ints and one transfer of three numbers)."""
    if isinstance(indptr, np.ndarray):
        xp = np
    else:
        import cupy as xp
    n_rows = indptr.size - 1
    lengths = xp.diff(indptr).astype(xp.float64)
    sums = xp.stack([lengths.sum(), lengths.max(), (lengths * lengths).sum()])
    nnz, max_row, sq = (float(v) for v in (sums if xp is np else sums.get()))
    mean = nnz / n_rows
    spread = math.sqrt(max(sq / n_rows - mean * mean, 0.0)) / mean if mean > 0 else 0.0
    return {"n_rows": n_rows, "nnz": int(nnz), "mean_row": mean, "max_row": int(max_row), "spread": spread}


def auto_options(stats, aligned=True):
    """What kernel="auto" runs: the subwarp kernel (lanes from the mean row
    length, 128-bit loads on rows of even length) unless its longest row,
    walked by one sub-warp, would take longer than TAIL_SHARE of the time the
    whole matrix takes to stream; then the merge path, whose time does not
    depend on the row lengths. Between WIDEN_SHARE and TAIL_SHARE, twice the
    lanes walk the long row."""
    vec = aligned and stats["spread"] < EVEN_ROWS
    most = VEC_MAX_LANES if vec else 32
    lanes = min(default_lanes(stats["mean_row"], vec), most)
    stream_bytes = 8 * stats["nnz"] + 4 * (stats["n_rows"] + 1) + 8 * stats["n_rows"]  # square A: x, out
    stream_ns = stream_bytes / STREAM_GBPS + LAUNCH_NS

    def tail_ns(lanes):
        return math.ceil(stats["max_row"] / (lanes * (4 if vec else 2))) * STEP_NS[vec]

    if tail_ns(lanes) > WIDEN_SHARE * stream_ns:
        lanes = min(2 * lanes, most)
    if tail_ns(lanes) > TAIL_SHARE * stream_ns:
        return {"kernel": "merge", "vec": False}
    return {"kernel": "subwarp", "lanes": lanes, "vec": vec}
# --8<-- [end:spmv_auto]


def spmv_cupy(indptr, indices, data, x, out=None, *, kernel="auto", lanes=None, vec=None, check=True):
    """out = A x by one kernel of spmv.cu: CuPy arrays, indptr and indices
    int32, data and x float32; A is (indptr.size - 1) x x.size. kernel: one of
    KERNELS, or "auto" (auto_options on row_stats: one sync); lanes: the
    subwarp kernel's lanes per row (default from the mean row length); vec:
    subwarp and merge read data and indices 128 bits at a time (default:
    subwarp when both start on a 16-byte boundary, merge never: its 4-byte
    loads measured faster); check: run check_csr first (reads every index,
    so a bad matrix is a ValueError, not an illegal address that ends the
    CUDA context; check=False for a matrix already checked). Returns out."""
    import cupy as cp

    for name, a, dtype in (("indptr", indptr, np.int32), ("indices", indices, np.int32),
                           ("data", data, np.float32), ("x", x, np.float32)):
        if not isinstance(a, cp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(a).__name__}")
        if a.dtype != dtype:
            raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {a.dtype}")
        if a.ndim != 1 or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a contiguous 1-D array, got shape {a.shape}")
    if kernel not in KERNELS + ("auto",):
        raise ValueError(f"kernel must be 'auto' or one of {KERNELS}, got {kernel!r}")
    if lanes is not None and kernel != "subwarp":
        raise ValueError(f"lanes applies to kernel 'subwarp' only, not {kernel!r}")
    if vec is not None and kernel not in ("subwarp", "merge"):
        raise ValueError(f"vec applies to kernels 'subwarp' and 'merge' only, not {kernel!r}")
    if indptr.size < 1:
        raise ValueError("indptr must have n_rows + 1 >= 1 entries, got 0")
    n_rows, nnz = indptr.size - 1, indices.size
    if data.size != nnz:
        raise ValueError(f"data must have one value per column index: {nnz} (indices.size), got {data.size}")
    if n_rows + nnz > 2**31 - 2**17:  # the merge path's coordinates are int32, a tile past the last one too
        raise ValueError(f"n_rows + nnz must be below 2^31 - 2^17, got {n_rows + nnz}")
    if check:
        check_csr(indptr, indices, data, (n_rows, x.size))
    if out is None:
        out = cp.empty(n_rows, dtype=cp.float32)
    elif (not isinstance(out, cp.ndarray) or out.dtype != cp.float32 or out.shape != (n_rows,)
          or not out.flags.c_contiguous):
        raise ValueError(f"out must be a contiguous float32 cupy array of n_rows = {n_rows} entries")
    for name, a in (("indptr", indptr), ("indices", indices), ("data", data), ("x", x)):
        if cp.may_share_memory(out, a):  # rows still read what other rows' threads would overwrite
            raise ValueError(f"out must not overlap {name}: write the result to a new array")
    aligned = data.data.ptr % 16 == 0 and indices.data.ptr % 16 == 0
    if vec and not aligned:
        raise ValueError("vec=True needs data and indices on 16-byte boundaries (128-bit loads)")
    if n_rows == 0:
        return out
    if kernel == "auto":  # lanes and vec were refused above for it
        chosen = auto_options(row_stats(indptr), aligned)
        kernel, lanes, vec = chosen["kernel"], chosen.get("lanes"), chosen["vec"]
    vec = (aligned and kernel == "subwarp") if vec is None else vec
    module = load_cuda("spmv.cu")
    args = (indptr, indices, data, x, out, np.int32(n_rows))
    if kernel != "merge":
        if kernel == "subwarp":
            per_row = default_lanes(nnz / n_rows, vec) if lanes is None else lanes
            if per_row not in LANES:
                raise ValueError(f"lanes must be one of {LANES}, got {per_row!r}")
            name = f"spmv_subwarp{'_v4' if vec else ''}_l{per_row}"
        else:
            per_row = 1 if kernel == "scalar" else 32  # threads per row
            name = f"spmv_{kernel}"
        module.get_function(name)((-(-n_rows * per_row // THREADS),), (THREADS,), args)
        return out
    tiles = -(-(n_rows + nnz) // (THREADS * ITEMS))
    carry = cp.empty(2 * tiles, dtype=cp.int32)  # an int2 per tile: (row its end cuts or -1, partial sum's bits)
    module.get_function(f"spmv_merge{'_v4' if vec else ''}_i{ITEMS}")(
        (tiles,), (THREADS,), args + (np.int32(nnz), carry))
    # after the tiles, in the same stream: the carries added to their rows by one block of
    # 1024 threads (FIXUP_THREADS in spmv.cu), in an order fixed by the matrix: the same bits every run
    module.get_function("spmv_merge_fixup")((1,), (1024,), (carry, out, np.int32(tiles)))
    return out
# --8<-- [end:spmv_cupy]


# %% [markdown]
# ## The first two steps in Numba
#
# A copy of the handbook's kernels (kernels/spmv.py). The vector step sums a
# warp's 32 partial sums in shared memory, where the CUDA C step shuffles:
# Numba's simulator has no shuffles, so both steps run on a CPU too.

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
# --8<-- [start:spmv_numba]
import math

import numpy as np
from numba import cuda, float32

NB_THREADS = 128  # scalar: 128 rows per block; vector: 4 rows per block, a warp each


@cuda.jit
def spmv_scalar_numba(indptr, indices, data, x, out):
    """Step 1: one thread per row (uncoalesced; a warp waits for its longest row)."""
    row = cuda.grid(1)
    if row < out.size:
        acc = float32(0.0)
        for k in range(indptr[row], indptr[row + 1]):
            acc += data[k] * x[indices[k]]
        out[row] = acc


@cuda.jit
def spmv_vector_numba(indptr, indices, data, x, out):
    """Step 2: one warp per row, the 32 partial sums summed in shared memory
    (the CUDA C step shuffles; Numba's simulator has no shuffles)."""
    partial = cuda.shared.array(NB_THREADS, float32)
    t = cuda.threadIdx.x
    lane = t % 32
    row = cuda.blockIdx.x * (NB_THREADS // 32) + t // 32
    acc = float32(0.0)
    if row < out.size:
        for k in range(indptr[row] + lane, indptr[row + 1], 32):  # 32 consecutive nonzeros per step
            acc += data[k] * x[indices[k]]
    partial[t] = acc
    cuda.syncthreads()
    step = 16
    while step > 0:  # a tree over each warp's 32 sums; every thread reaches every barrier
        if lane < step:
            partial[t] += partial[t + step]
        cuda.syncthreads()
        step //= 2
    if lane == 0 and row < out.size:
        out[row] = partial[t]


NB_KERNELS = {"scalar": spmv_scalar_numba, "vector": spmv_vector_numba}


def spmv_numba(indptr, indices, data, x, out=None, *, kernel="vector"):
    """out = A x for Numba device arrays (CSR as in spmv: int32 indptr and
    indices, float32 data and x; A is (indptr.size - 1) x x.size)."""
    if kernel not in NB_KERNELS:
        raise ValueError(f"kernel must be one of {tuple(NB_KERNELS)}, got {kernel!r}")
    for name, a, dtype in (("indptr", indptr, np.int32), ("indices", indices, np.int32),
                           ("data", data, np.float32), ("x", x, np.float32)):
        if not hasattr(a, "copy_to_host"):  # a Numba device array (the simulator's too)
            raise TypeError(f"{name} must be a Numba device array (numba.cuda.to_device), got {type(a).__name__}")
        if a.dtype != dtype:
            raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {a.dtype}")
        if len(a.shape) != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if indptr.size < 1:
        raise ValueError("indptr must have n_rows + 1 >= 1 entries, got 0")
    if data.size != indices.size:
        raise ValueError(f"data must have one value per column index: {indices.size}, got {data.size}")
    n_rows = indptr.size - 1
    if out is None:
        out = cuda.device_array(n_rows, dtype=np.float32)
    elif not hasattr(out, "copy_to_host") or out.dtype != np.float32 or out.shape != (n_rows,):
        raise ValueError(f"out must be a float32 Numba device array of n_rows = {n_rows} entries")
    for name, a in (("indptr", indptr), ("indices", indices), ("data", data), ("x", x)):
        if overlaps(out, a):  # rows still read what other rows' threads would overwrite
            raise ValueError(f"out must not overlap {name}: write the result to a new array")
    if n_rows:
        rows_per_block = NB_THREADS if kernel == "scalar" else NB_THREADS // 32
        NB_KERNELS[kernel][math.ceil(n_rows / rows_per_block), NB_THREADS](indptr, indices, data, x, out)
    return out
# --8<-- [end:spmv_numba]


# %% [markdown]
# ## Checks: every kernel on the edge cases
#
# Each matrix against the float64 reference, the output poisoned with NaN
# first (a row no thread writes stays NaN, and so does the error). The row
# of 4000 nonzeros spans three merge-path tiles: only the fix-up completes
# it. Then check_csr on broken matrices.

# %%
# --8<-- [start:spmv_check]
import numpy as np


def check_spmv(kernel="merge", n=1000, **options):
    """A CUDA C kernel (spmv_cupy's options) on the edge cases and a power-law
    matrix of n rows against float64; raises AssertionError on a wrong
    answer, returns the largest relative error."""
    import cupy as cp

    worst = 0.0
    for name, (indptr, indices, data), n_cols in edge_cases() + [("power_law", power_law(n, 8.0, seed=3), n)]:
        x = np.random.default_rng(11).standard_normal(n_cols).astype(np.float32)
        out = cp.full(indptr.size - 1, cp.nan, dtype=cp.float32)  # poison: an unwritten row stays NaN
        spmv_cupy(*(cp.asarray(a) for a in (indptr, indices, data, x)), out, kernel=kernel, **options)
        err = rel_err(cp.asnumpy(out), spmv_reference(indptr, indices, data, x))
        if not err < tolerance(indptr):
            raise AssertionError(f"{kernel} {options} on {name}: relative error {err:.1e}")
        worst = max(worst, err)
    return worst
# --8<-- [end:spmv_check]


# %%
# --8<-- [start:spmv_numba_check]
import numpy as np


def check_spmv_numba(kernel="vector", n=100):
    """A Numba kernel on the edge cases and a power-law matrix of n rows
    (keep n small in the simulator) against float64; returns the largest
    relative error."""
    from numba import cuda

    worst = 0.0
    for name, (indptr, indices, data), n_cols in edge_cases() + [("power_law", power_law(n, 8.0, seed=3), n)]:
        x = np.random.default_rng(11).standard_normal(n_cols).astype(np.float32)
        out = cuda.to_device(np.full(indptr.size - 1, np.nan, dtype=np.float32))
        spmv_numba(*(cuda.to_device(a) for a in (indptr, indices, data, x)), out, kernel=kernel)
        err = rel_err(out.copy_to_host(), spmv_reference(indptr, indices, data, x))
        if not err < tolerance(indptr):
            raise AssertionError(f"numba {kernel} on {name}: relative error {err:.1e}")
        worst = max(worst, err)
    indptr, indices, data = power_law(n, 8.0, seed=3)  # n x n: x and out both of n floats
    host = np.full((2, n), np.nan, dtype=np.float32)
    host[0] = np.random.default_rng(11).standard_normal(n)
    buf = cuda.to_device(host)
    arrays = (cuda.to_device(a) for a in (indptr, indices, data))
    spmv_numba(*arrays, buf[0], buf[1], kernel=kernel)  # out right after x in one buffer: accepted
    x, got = buf.copy_to_host()
    if not rel_err(got, spmv_reference(indptr, indices, data, x)) < tolerance(indptr):
        raise AssertionError(f"numba {kernel} with out right after x in one buffer: wrong answer")
    return worst
# --8<-- [end:spmv_numba_check]


# %%
# --8<-- [start:csr_rejects]
import numpy as np


def check_csr_rejects():
    """check_csr on broken matrices: each refused with a ValueError naming the
    array at fault. Returns the messages."""
    indptr, indices, data = random_csr([2, 0, 3], 10, seed=1)
    broken = {
        "indptr": (np.array([0, 2, 1, 5], np.int32), indices, data),  # decreases
        "indices": (indptr, indices + 10, data),  # a column past n_cols
        "data": (indptr, indices, data[:-1]),  # one value short
    }
    messages = []
    for name, arrays in broken.items():
        try:
            check_csr(*arrays, (3, 10))
        except ValueError as e:
            if not str(e).startswith(name):
                raise AssertionError(f"broken {name}: the error names something else: {e}") from None
            messages.append(str(e))
        else:
            raise AssertionError(f"a broken {name} was accepted")
    check_csr(indptr, indices, data, (3, 10))  # the unbroken matrix passes
    return messages
# --8<-- [end:csr_rejects]


# %% [markdown]
# ## Timing against cuSPARSE
#
# CUDA events around a few launches after a warm-up. Bandwidth counts the
# bytes SpMV must move at least: values and column indices (8 bytes per
# nonzero), indptr, x once and out.

# %%
# --8<-- [start:spmv_timing]
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


def time_spmv(family, n, mean_row=16.0):
    """Every kernel of the ladder and cuSPARSE on one n x n matrix, each
    result checked against float64 first; returns {kernel: ms}."""
    import cupy as cp
    import cupyx.scipy.sparse as sparse

    host = family(n, mean_row, seed=1)
    x_host = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    want = spmv_reference(*host, x_host)
    indptr, indices, data = (cp.asarray(a) for a in host)
    x = cp.asarray(x_host)
    nnz = indices.size
    moved = 8 * nnz + 4 * (n + 1) + 4 * n + 4 * n  # values + indices, indptr, x, out
    A = sparse.csr_matrix((data, indices, indptr), shape=(n, n), copy=True)  # cuSPARSE's own copy
    err = rel_err(cp.asnumpy(A @ x), want)
    if not err < tolerance(host[0]):
        raise AssertionError(f"cuSPARSE on {family.__name__}: relative error {err:.1e}")
    times = {"cusparse": time_ms(lambda: A @ x)}
    out = cp.empty(n, dtype=cp.float32)
    for kernel in KERNELS + ("auto",):
        out.fill(cp.nan)  # poison: an unwritten row stays NaN
        err = rel_err(cp.asnumpy(spmv_cupy(indptr, indices, data, x, out, kernel=kernel)), want)
        if not err < tolerance(host[0]):
            raise AssertionError(f"{kernel} on {family.__name__}: relative error {err:.1e}")
        # checked above: the timed calls skip check_csr (a pass over the whole matrix)
        times[kernel] = time_ms(lambda: spmv_cupy(indptr, indices, data, x, out, kernel=kernel, check=False))
    print(f"{family.__name__}: {n} rows, {nnz} nonzeros, longest row {int(np.diff(host[0]).max())}")
    for kernel, ms in times.items():
        print(f"  {kernel:9s} {ms:8.3f} ms  {moved / ms / 1e6:7.0f} GB/s  {times['cusparse'] / ms:5.2f} x cuSPARSE")
    return times
# --8<-- [end:spmv_timing]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="CSR SpMV: the CUDA C ladder and Numba, checked against float64.")
    p.add_argument("--size", type=int, default=None,
                   help="rows of the timed matrices (default 2^21; the simulator's Numba checks take at most 100)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    n = args.size if args.size is not None else 1 << 21
    print("check_csr refuses:", *check_csr_rejects(), sep="\n  ")
    if args.impl in ("all", "numba"):
        n_numba = min(n, 100) if simulator else min(n, 100_000)  # one Python thread per GPU thread
        for kernel in NB_KERNELS:
            print(f"numba {kernel}: max relative error {check_spmv_numba(kernel, n_numba):.1e} "
                  f"(edge cases and {n_numba} power-law rows{', simulator' if simulator else ''})")
    if args.impl == "numba":
        return
    if not has_gpu():
        print("cupy: skipped (needs a CUDA GPU)")
        return
    for kernel in KERNELS + ("auto",):
        for vec in ((False, True) if kernel in ("subwarp", "merge") else (None,)):
            err = check_spmv(kernel, **({} if vec is None else {"vec": vec}))
            print(f"cupy {kernel}{' vec' if vec else ''}: max relative error {err:.1e}")
    for family in (uniform_random, power_law):
        time_spmv(family, n)


if __name__ == "__main__":
    main()
