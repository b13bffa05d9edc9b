"""Topic spmv: y = A x with A in CSR, the ladder of kernels/cuda/spmv.cu, two
Numba kernels, the cuSPARSE reference, and the matrices the chapter measures.

CSR: indptr (n_rows + 1 int32 offsets: row i's nonzeros are
data[indptr[i]:indptr[i + 1]]), indices (nnz int32 column indices) and data
(nnz float32 values). Column indices need not be sorted within a row, and a
column may repeat (its values add): the product does not depend on the order
of a row's terms, so every kernel here accepts such matrices as they are.

- check_csr: the structure validated once (indptr starts at 0, never
  decreases, ends at nnz; indices in [0, n_cols); dtypes), each error naming
  the array. The launch wrappers check only what costs nothing (types,
  dtypes, sizes): reading every index on every call would cost as much as the
  product. spmv(..., check=True) runs check_csr first.
- Matrices made in code with a fixed seed: banded (every row the same
  length, neighbouring rows share columns), uniform random (Poisson row
  lengths, random columns) and power-law (Zipf row lengths: a few rows hold
  a large share of the nonzeros). Vectorized: 50 M nonzeros in seconds.
- spmv (CuPy, CUDA C): kernel "scalar", "vector", "subwarp" (lanes per row),
  "merge" (items per thread); "auto" picks the sub-warp kernel or the merge
  path from the row lengths (row_stats, auto_options). spmv checks the CSR
  structure by default; spmv_plan checks the arguments (not the matrix,
  unless asked) and allocates once and returns the bare launch, for timing
  and for loops that reuse one matrix.
- spmv_cusparse: the same product through cupyx.scipy.sparse (cuSPARSE).
- spmv_numba: the scalar and vector steps in Numba (the vector one reduces in
  shared memory, so it runs in Numba's CUDA simulator, which has no shuffles).
"""

from __future__ import annotations

import operator
from pathlib import Path

import numpy as np

from . import checks
from .checks import overlaps  # the Numba wrappers below call it as the examples do
from .device import cupy_module, select_numba_target

select_numba_target()  # before the first import of numba (the Numba section below)

CUDA_SOURCE = Path(__file__).with_name("cuda") / "spmv.cu"


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


# --8<-- [start:generators]
def from_row_lengths(lengths, n_cols: int, seed=0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR matrix (indptr, indices, data) with the given row lengths:
    distinct columns per row drawn uniformly from [0, n_cols), sorted, values
    N(0, 1) in float32. seed: an int or a numpy Generator.

    Vectorized: every column is drawn with replacement at once and each row
    sorted by one global sort of row * n_cols + column (a row's keys stay in
    its own stretch of the array); the few rows that drew a column twice
    (most of them long rows) are drawn again without replacement, one by one."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or (lengths.size and (lengths.min() < 0 or lengths.max() > n_cols)):
        raise ValueError(f"lengths must be a 1-D array of ints in [0, n_cols = {n_cols}]")
    n_rows = lengths.size
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    if nnz >= 2**31:
        raise ValueError(f"{nnz} nonzeros do not fit int32 offsets")
    base = np.repeat(np.arange(n_rows, dtype=np.int64) * n_cols, lengths)  # row * n_cols, per nonzero
    keys = base + rng.integers(0, max(n_cols, 1), nnz, dtype=np.int64)
    keys.sort()
    indices = (keys - base).astype(np.int32)
    for r in np.unique(keys[1:][keys[1:] == keys[:-1]] // max(n_cols, 1)):  # rows holding a repeated column
        a, b = indptr[r], indptr[r + 1]
        indices[a:b] = np.sort(rng.choice(n_cols, b - a, replace=False))
    data = rng.standard_normal(nnz, dtype=np.float32)
    return indptr.astype(np.int32), indices, data


def banded(n: int, half_width: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n x n, row i holding columns i - half_width .. i + half_width (clipped at
    the edges): 2 * half_width + 1 nonzeros per row, neighbouring rows sharing
    all but one column (x is read almost once)."""
    rng = np.random.default_rng(seed)
    i = np.arange(n, dtype=np.int64)
    lo, hi = np.maximum(i - half_width, 0), np.minimum(i + half_width + 1, n)
    lengths = hi - lo
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = (np.repeat(lo - indptr[:-1], lengths) + np.arange(nnz)).astype(np.int32)
    return indptr.astype(np.int32), indices, rng.standard_normal(nnz, dtype=np.float32)


def uniform_random(n: int, mean_row: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n x n, Poisson(mean_row) nonzeros per row at uniformly random columns:
    row lengths close to the mean, x gathered at random."""
    rng = np.random.default_rng(seed)
    return from_row_lengths(np.minimum(rng.poisson(mean_row, n), n), n, rng)


def power_law(n: int, mean_row: float, exponent: float = 2.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n x n, row lengths from a Zipf law (P(length = k) ~ k^-exponent),
    scaled so that their mean is mean_row (to within rounding), at least 1
    and at most n: most rows short, a few holding tens of thousands of
    nonzeros or more, the longest filling the whole width of the matrix.

    The scale is found by bisection on the lengths as rounded and clipped:
    a Zipf law with exponent <= 2 has no finite mean, so the sample's mean is
    set by its few largest draws, and scaling by mean_row / raw.mean() (then
    clipping at n) would leave the mean far below mean_row."""
    if not exponent > 1:
        raise ValueError(f"exponent must be > 1 (a Zipf law), got {exponent}")
    if not 1 <= mean_row <= n:
        raise ValueError(f"mean_row must lie in [1, n = {n}], got {mean_row}")
    rng = np.random.default_rng(seed)
    raw = rng.zipf(exponent, n).astype(np.float64)

    def lengths_at(scale):
        return np.clip(np.round(raw * scale), 1, n)

    lo, hi = 0.0, float(mean_row)  # mean 1 at scale 0, >= mean_row at scale mean_row
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if lengths_at(mid).mean() < mean_row else (lo, mid)
    return from_row_lengths(lengths_at(hi).astype(np.int64), n, rng)
# --8<-- [end:generators]


def csr_bytes(n_rows: int, n_cols: int, nnz: int) -> int:
    """The least any CSR product y = A x moves: indptr, a value and an index
    per nonzero, x read once and y written once (float32, int32)."""
    return 4 * (n_rows + 1) + 8 * nnz + 4 * n_cols + 4 * n_rows


def spmv_reference(indptr, indices, data, x) -> np.ndarray:
    """y = A x in float64 on the host (NumPy or CuPy inputs): every product
    rounded once to float64, summed per row by np.bincount."""
    indptr, indices, data, x = (np.asarray(a.get() if hasattr(a, "get") else a) for a in (indptr, indices, data, x))
    n_rows = indptr.size - 1
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    terms = data.astype(np.float64) * x.astype(np.float64)[indices]
    return np.bincount(rows, weights=terms, minlength=n_rows).astype(np.float64)


# --8<-- [start:spmv_launch]
KERNELS = ("scalar", "vector", "subwarp", "merge")
# The arrays every wrapper takes, in kernel-argument order, with their dtypes
ARRAYS = (("indptr", np.int32), ("indices", np.int32), ("data", np.float32), ("x", np.float32))
THREADS = 256  # every CUDA C kernel's block (the subwarp and merge kernels' __launch_bounds__)
LANES = (2, 4, 8, 16, 32)  # lanes per row: spmv_subwarp[_v4]_l{L}
FIXUP_THREADS = 1024  # spmv_merge_fixup: one block walks every tile's carry
MERGE_ITEMS = (4, 6, 8, 12, 16)  # items per thread: spmv_merge[_v4]_i{I}
DEFAULT_ITEMS = 8  # a tile of 2048 items: the fastest on the power-law matrices, 4-byte loads (H200)
# n_rows + nnz: the merge path's diagonals are int32, a tile past the last one too
MAX_ITEMS = 2**31 - 2**17


def default_lanes(mean_row: float, vec: bool = True) -> int:
    """Lanes per row for the subwarp kernel: about one step of the row per
    lane (4 nonzeros per lane per step with 128-bit loads, 2 without, the
    power of two nearest in ratio), from 2 to 32. Rows of 16: 4 lanes (v4) or 8."""
    per_lane = 4 if vec else 2
    if mean_row <= per_lane:
        return 2
    return int(min(32, max(2, 2 ** round(math.log2(mean_row / per_lane)))))


# kernel="auto": a cost model of the two kernels that can win, its constants from the H200's records of
# topics spmv and spmv_auto (claims() in kernels/bench/spmv_auto.py checks them against each new run)
STEP_NS = {False: 270.0, True: 750.0}  # one sub-warp step along a row, 4-byte / 128-bit loads
STREAM_GBPS = 3000.0  # the CSR bytes streamed by the sub-warp kernel on rows of even length (banded)
TAIL_SHARE = 0.75  # merge path once the longest row alone would take this share of the streaming time
WIDEN_SHARE = 0.2  # twice the lanes once it would take this share
LAUNCH_NS = 5000.0  # added to the streaming time: the shortest products measured took about 7.5 us
EVEN_ROWS = 0.1  # 128-bit loads when the row lengths' spread (std / mean) is below this
AUTO_ITEMS = 12  # the merge path's tile: 12 items a thread led on the power-law matrices (H200)
VEC_MAX_LANES = 16  # with 128-bit loads: 16 lanes beat 32 on rows of 160 and 500 nonzeros (H200)


def row_stats(indptr) -> dict:
    """Row-length statistics of a CSR matrix on the GPU (a few passes over
    n_rows ints, one transfer of three numbers): n_rows, nnz, mean_row,
    max_row and spread (standard deviation / mean)."""
    import cupy as cp

    n_rows = indptr.size - 1
    lengths = cp.diff(indptr).astype(cp.float64)
    nnz, max_row, sq = (float(v) for v in cp.stack([lengths.sum(), lengths.max(), (lengths * lengths).sum()]).get())
    mean = nnz / n_rows
    spread = math.sqrt(max(sq / n_rows - mean * mean, 0.0)) / mean if mean > 0 else 0.0
    return {"n_rows": n_rows, "nnz": int(nnz), "mean_row": mean, "max_row": int(max_row), "spread": spread}


def auto_estimates(stats: dict, aligned: bool = True) -> dict:
    """The sub-warp kernel auto weighs and the rule's two estimates for it:
    tail_ns, one sub-warp walking the longest row, and stream_ns, the whole
    matrix streamed (plus a launch's worth). Lanes from the mean row length
    (at most VEC_MAX_LANES with 128-bit loads, which it takes on rows of even
    length), doubled when the longest row's walk would be over WIDEN_SHARE
    of the streaming time."""
    vec = aligned and stats["spread"] < EVEN_ROWS
    most = VEC_MAX_LANES if vec else 32
    lanes = min(default_lanes(stats["mean_row"], vec), most)
    stream_ns = csr_bytes(stats["n_rows"], stats["n_rows"], stats["nnz"]) / STREAM_GBPS + LAUNCH_NS

    def tail(lanes):
        return math.ceil(stats["max_row"] / (lanes * (4 if vec else 2))) * STEP_NS[vec]

    if tail(lanes) > WIDEN_SHARE * stream_ns:
        lanes = min(2 * lanes, most)
    return {"lanes": lanes, "vec": vec, "tail_ns": tail(lanes), "stream_ns": stream_ns}


def auto_options(stats: dict, aligned: bool = True) -> dict:
    """The spmv_plan options kernel="auto" runs, from row_stats: the sub-warp
    kernel of auto_estimates unless its longest row would take longer than
    TAIL_SHARE of the streaming time; then the merge path, whose time does
    not depend on the row lengths."""
    e = auto_estimates(stats, aligned)
    if e["tail_ns"] > TAIL_SHARE * e["stream_ns"]:
        return {"kernel": "merge", "items": AUTO_ITEMS, "vec": False}
    return {"kernel": "subwarp", "lanes": e["lanes"], "vec": e["vec"]}


def cuda_kernel(name: str):
    """The compiled CUDA C kernel `name` of spmv.cu (compiled once per process)."""
    return cupy_module(CUDA_SOURCE.name).get_function(name)


def spmv_plan(indptr, indices, data, x, out=None, *, kernel: str = "auto", lanes: int | None = None,
              items: int | None = None, vec: bool | None = None, check: bool = False):
    """Check the arguments, pick the kernel and grid, allocate out (and the
    merge path's tile carries) once; returns (launch, out), launch() running
    out = A x and nothing else. CuPy arrays: indptr and indices int32, data
    and x float32, out float32 of n_rows = indptr.size - 1; A is n_rows x
    x.size.

    kernel: "scalar", "vector", "subwarp" (lanes per row: one of LANES,
    default from the mean row length), "merge" (items per thread: one of
    MERGE_ITEMS, default DEFAULT_ITEMS) or "auto": row_stats on the GPU (one
    sync), then auto_options' pick of kernel, lanes or items and vec. vec:
    read data and indices 128 bits at a time (subwarp, merge); None =
    subwarp: where both start on 16-byte boundaries, merge: no (its 4-byte
    loads are the faster on the skewed and random matrices, H200). check:
    validate the CSR structure first (check_csr; reads every index,
    synchronizes). spmv_plan does not check by default: a plan is made once
    and launched many times, and a loop that reuses one matrix should not
    pay a full pass over it per product; an out-of-range column index in an
    unchecked matrix is an illegal address, which ends the CUDA context."""
    import cupy as cp

    for (name, dtype), a in zip(ARRAYS, (indptr, indices, data, x)):
        checks.require_vector(name, a, dtype, lib="cupy")
    if indptr.size < 1:
        raise ValueError("indptr must have n_rows + 1 >= 1 entries, got 0")
    n_rows, nnz = indptr.size - 1, indices.size
    if data.size != nnz:
        raise ValueError(f"data must have one value per column index: {nnz} (indices.size), got {data.size}")
    if n_rows + nnz > MAX_ITEMS:
        raise ValueError(f"n_rows + nnz must be at most {MAX_ITEMS} (32-bit merge coordinates), got {n_rows + nnz}")
    if kernel not in KERNELS + ("auto",):
        raise ValueError(f"kernel must be 'auto' or one of {KERNELS}, got {kernel!r}")
    if lanes is not None and kernel != "subwarp":
        raise ValueError(f"lanes applies to kernel='subwarp' only, not {kernel!r}")
    if items is not None and kernel != "merge":
        raise ValueError(f"items applies to kernel='merge' only, not {kernel!r}")
    if vec is not None and kernel not in ("subwarp", "merge"):
        raise ValueError(f"vec applies to kernel='subwarp' or 'merge' only, not {kernel!r}")
    aligned = data.data.ptr % 16 == 0 and indices.data.ptr % 16 == 0
    if vec and not aligned:
        raise ValueError(f"vec=True needs data and indices on 16-byte boundaries (128-bit loads), got addresses "
                         f"{data.data.ptr:#x} and {indices.data.ptr:#x}")
    if check:
        check_csr(indptr, indices, data, (n_rows, x.size))
    if kernel == "auto":
        if n_rows:  # lanes, items and vec were refused above, the matrix checked if asked: auto picks them
            chosen = auto_options(row_stats(indptr), aligned)
            kernel, vec = chosen["kernel"], chosen["vec"]
            lanes, items = chosen.get("lanes"), chosen.get("items")
        else:
            kernel = "merge"
    vec = (aligned and kernel == "subwarp") if vec is None else bool(vec)
    if out is None:
        out = cp.empty(n_rows, dtype=cp.float32)
    else:
        checks.require_vector("out", out, np.float32, lib="cupy")
        if out.size != n_rows:
            raise ValueError(f"out must have n_rows = {n_rows} entries, got {out.size}")
        checks.require_no_overlap("out", out, indptr=indptr, indices=indices, data=data, x=x)
    if n_rows == 0:
        return (lambda: None), out
    args = (indptr, indices, data, x, out, np.int32(n_rows))
    if kernel in ("scalar", "vector"):
        k = cuda_kernel(f"spmv_{kernel}")
        grid = -(-n_rows * (1 if kernel == "scalar" else 32) // THREADS)
        return (lambda: k((grid,), (THREADS,), args)), out
    if kernel == "subwarp":
        lanes = default_lanes(nnz / n_rows, vec) if lanes is None else lanes
        if lanes not in LANES:
            raise ValueError(f"lanes must be one of {LANES}, got {lanes!r}")
        k = cuda_kernel(f"spmv_subwarp{'_v4' if vec else ''}_l{lanes}")
        grid = -(-n_rows * lanes // THREADS)
        return (lambda: k((grid,), (THREADS,), args)), out
    items = DEFAULT_ITEMS if items is None else items
    if items not in MERGE_ITEMS:
        raise ValueError(f"items must be one of {MERGE_ITEMS}, got {items!r}")
    tiles = -(-(n_rows + nnz) // (THREADS * items))
    carry = cp.empty(2 * tiles, dtype=cp.int32)  # int2 per tile: (row or -1, partial sum's bits)
    v4 = "_v4" if vec else ""
    main, fixup = cuda_kernel(f"spmv_merge{v4}_i{items}"), cuda_kernel("spmv_merge_fixup")
    main_args = args + (np.int32(nnz), carry)
    fix_args = (carry, out, np.int32(tiles))

    def launch():
        main((tiles,), (THREADS,), main_args)
        fixup((1,), (FIXUP_THREADS,), fix_args)  # after main, in the same stream; one block: a fixed order
    return launch, out


def spmv(indptr, indices, data, x, out=None, *, kernel: str = "auto", lanes: int | None = None,
         items: int | None = None, vec: bool | None = None, check: bool = True):
    """out = A x (CuPy arrays, CSR as in spmv_plan, which documents the options).
    One product, so it checks the matrix first by default (check_csr: a bad
    matrix is a ValueError naming the array, not a dead CUDA context); pass
    check=False for a matrix already checked, or make a plan once with
    spmv_plan (which does not check unless asked) and reuse it."""
    launch, out = spmv_plan(indptr, indices, data, x, out, kernel=kernel, lanes=lanes, items=items, vec=vec,
                            check=check)
    launch()
    return out
# --8<-- [end:spmv_launch]


# --8<-- [start:cusparse]
def cusparse_matrix(indptr, indices, data, n_cols: int, *, copy: bool = False):
    """The CSR arrays as a cupyx.scipy.sparse.csr_matrix (n_rows x n_cols).
    Its first product checks the format (sorted, no repeats; one sync) and,
    for a matrix that is not canonical, converts it to new arrays."""
    import cupyx.scipy.sparse as sparse

    return sparse.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, n_cols), copy=copy)


def cusparse_plan(A, x, out):
    """out = A x by cusparseSpMV with its descriptors and work buffer made
    once: (launch, out). cupyx's `A @ x` makes them on every call, tens of
    microseconds of host work that a product of 10 M nonzeros (about 50
    microseconds on an H200) cannot hide; the benchmark's reference is
    this one. A: a cupyx.scipy.sparse.csr_matrix of float32; x and out
    float32 CuPy vectors of A's column and row counts."""
    import cupy as cp
    from cupy._core import _dtype
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cusparse as lib
    from cupyx import cusparse as cs

    if A.dtype != np.float32 or x.dtype != np.float32 or out.dtype != np.float32:
        raise TypeError("A, x and out must be float32")
    if x.shape != (A.shape[1],) or out.shape != (A.shape[0],):
        raise ValueError(f"need x of {A.shape[1]} and out of {A.shape[0]} entries, got {x.shape} and {out.shape}")
    # cuSPARSE would read x or the matrix where it has written out
    checks.require_no_overlap("out", out, x=x, data=A.data, indices=A.indices, indptr=A.indptr)
    handle = device.get_cusparse_handle()
    desc_a, desc_x, desc_y = cs.SpMatDescriptor.create(A), cs.DnVecDescriptor.create(x), cs.DnVecDescriptor.create(out)
    alpha, beta = np.array(1.0, np.float32), np.array(0.0, np.float32)
    # CuPy's bindings name the default algorithm by its CUDA 10 name (the value is the same)
    op = lib.CUSPARSE_OPERATION_NON_TRANSPOSE
    alg = getattr(lib, "CUSPARSE_SPMV_ALG_DEFAULT", getattr(lib, "CUSPARSE_MV_ALG_DEFAULT", 0))
    cuda_dtype = _dtype.to_cuda_dtype(np.dtype(np.float32))
    size = lib.spMV_bufferSize(handle, op, alpha.ctypes.data, desc_a.desc, desc_x.desc, beta.ctypes.data,
                               desc_y.desc, cuda_dtype, alg)
    buf = cp.empty(max(int(size), 1), cp.int8)

    def launch(keep=(A, x, desc_a, desc_x, desc_y, alpha, beta, buf)):  # keep: alive with the closure
        lib.spMV(handle, op, alpha.ctypes.data, desc_a.desc, desc_x.desc, beta.ctypes.data, desc_y.desc,
                 cuda_dtype, alg, buf.data.ptr)

    return launch, out


def spmv_cusparse(indptr, indices, data, x, out=None):
    """out = A x through cuSPARSE (cupyx.scipy.sparse, csr_matrix @ x), on a
    copy of the arrays: the caller's stay as they are."""
    import cupy as cp

    for (name, dtype), a in zip(ARRAYS, (indptr, indices, data, x)):
        checks.require_vector(name, a, dtype, lib="cupy")
    if indptr.size < 1:
        raise ValueError("indptr must have n_rows + 1 >= 1 entries, got 0")
    n_rows = indptr.size - 1
    if out is None:
        out = cp.empty(n_rows, dtype=cp.float32)
    else:
        checks.require_vector("out", out, np.float32, lib="cupy")
        if out.size != n_rows:
            raise ValueError(f"out must have n_rows = {n_rows} entries, got {out.size}")
    if n_rows == 0:
        return out
    if indices.size == 0:  # cuSPARSE's path needs a nonzero
        out.fill(0)
        return out
    out[...] = cusparse_matrix(indptr, indices, data, x.size, copy=True) @ x
    return out
# --8<-- [end:cusparse]


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
