"""Warp specialization's primitives: launch wrappers for kernels/cuda/ws_primitives.cu.

One wrapper per kernel (check arguments -> allocate -> grid -> launch), a
NumPy reference beside each, and the host side of TMA: `tensor_map_2d`
encodes a CUtensorMap (cuda-bindings' cuTensorMapEncodeTiled) that the
kernel takes by value.

What each kernel needs, checked before anything is compiled or launched:

- pipeline_copy, barrier_split: compute capability 8.0+ (cp.async behind
  cuda::memcpy_async, the hardware-accelerated cuda::barrier);
- mbarrier_bulk_copy(_nowait), tma_tile_2d, cluster_dsmem: 9.0+ (mbarrier
  transaction counts, bulk copies, TMA, thread-block clusters);
- setmaxnreg_roles: sm_90a, i.e. exactly 9.0 (H100, H200): setmaxnreg is in
  the sm_90a feature set, whose code runs on no other GPU.

How the source is compiled: on a 9.0 GPU with ("-arch=sm_90a",
"--std=c++17"), so that every kernel is there; on any other GPU with
("--std=c++17",) and CuPy's own -arch for the device: the .cu guards its
sm_90 bodies with __CUDA_ARCH__ >= 900 and setmaxnreg_roles's with the
sm_90a feature macro, so the same file compiles for an A100 (the sm_80
kernels run, the others are empty and refused here) or a Blackwell GPU
(everything but setmaxnreg_roles). CuPy appends its own -arch=sm_90 after
ours; NVRTC 12.9 and 13.0 still build sm_90a code from the pair, and
`compiled_arch()` runs a probe kernel that reports what NVRTC really built:
setmaxnreg_roles refuses to run on a module without the sm_90a features
(its body would be empty).
"""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from . import checks
from .device import CUDA_DIR, CudaBuild, device_info

CUDA_SOURCE = CUDA_DIR / "ws_primitives.cu"

# kernel -> what it needs (see require_*); ws_arch_probe runs anywhere
NEEDS = {
    "pipeline_copy": "sm_80",
    "barrier_split": "sm_80",
    "mbarrier_bulk_copy": "sm_90",
    "mbarrier_bulk_copy_nowait": "sm_90",
    "tma_tile_2d": "sm_90",
    "cluster_dsmem": "sm_90",
    "setmaxnreg_roles": "sm_90a",
    "ws_arch_probe": None,
}
KERNELS = tuple(NEEDS)
SM90A_OPTIONS = ("-arch=sm_90a", "--std=c++17")
DEFAULT_OPTIONS = ("--std=c++17",)

# Constants of ws_primitives.cu
PIPE_TILE = 1024  # pipeline_copy: floats per tile
BULK_TILE = 1024  # mbarrier_bulk_copy: floats per bulk copy
BLOCK_SMEM_FLOATS = 1024  # barrier_split, cluster_dsmem: one float per thread, blockDim.x <= 1024
ROLE_COLS, ROLE_KMAX, ROLE_THREADS, ROLE_ROWS = 160, 64, 256, 128  # setmaxnreg_roles
ROLE_MAXNREG = 136  # its __maxnreg__: the registers each thread has at launch
TMA_SMEM_LIMIT = 48 * 1024  # tma_tile_2d: the box + 128 bytes of alignment slack, default dynamic limit
MAX_N = 2**30  # the kernels index with int

TMAP = np.dtype([("v", "<u8", (16,))])  # a CUtensorMap: 128 opaque bytes, passed by value
SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
TMA_DTYPES = {np.dtype(np.float32): "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
              np.dtype(np.float16): "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"}


# --- what a GPU must have ------------------------------------------------------

def _cc(cc) -> str:
    return f"{cc[0]}.{cc[1]}"


def require_sm80(gpu: str, cc: tuple[int, int]) -> None:
    """cuda::pipeline / cuda::barrier kernels: refuse a GPU older than 8.0."""
    if tuple(cc) < (8, 0):
        raise RuntimeError(f"needs sm_80 or newer (compute capability 8.0+: cp.async, which cuda::memcpy_async "
                           f"compiles to; an older GPU copies synchronously and nothing overlaps); "
                           f"{gpu} is {_cc(cc)}")


def require_sm90(gpu: str, cc: tuple[int, int]) -> None:
    """mbarrier transaction counts, bulk copies, TMA, clusters: 9.0 or newer."""
    if tuple(cc) < (9, 0):
        raise RuntimeError(f"needs sm_90 or newer (compute capability 9.0+: mbarrier transaction counts, "
                           f"bulk copies, TMA, thread-block clusters); {gpu} is {_cc(cc)}")


def require_sm90a(gpu: str, cc: tuple[int, int]) -> None:
    """setmaxnreg: the sm_90a feature set, which runs on compute capability 9.0 only."""
    if tuple(cc) != (9, 0):
        raise RuntimeError(f"needs sm_90a (compute capability 9.0: H100/H200): setmaxnreg is in the sm_90a "
                           f"feature set, whose code runs on no other GPU; {gpu} is {_cc(cc)}")


REQUIRE = {"sm_80": require_sm80, "sm_90": require_sm90, "sm_90a": require_sm90a, None: lambda gpu, cc: None}


def compile_options(cc: tuple[int, int]) -> tuple[str, ...]:
    """-arch=sm_90a on compute capability 9.0 (its code runs there only);
    elsewhere CuPy's default, the device's own architecture."""
    return SM90A_OPTIONS if tuple(cc) == (9, 0) else DEFAULT_OPTIONS


@functools.cache
def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """How ws_primitives.cu compiles for a GPU of compute capability cc (compile_options)."""
    return [CudaBuild(CUDA_SOURCE.name, CUDA_SOURCE.read_text(), compile_options(cc))]


def kernel(name: str):
    """The compiled kernel `name` for the current device, after refusing a
    GPU that lacks what it needs (RuntimeError naming the GPU and the need)."""
    import cupy as cp

    if name not in NEEDS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")
    info = device_info(cp.cuda.Device().id)
    REQUIRE[NEEDS[name]](info["name"], info["cc"])
    (build,) = cuda_builds(info["cc"])
    return build.module().get_function(name)


@functools.cache
def _compiled_arch(device_id: int) -> tuple[int, bool]:
    import cupy as cp

    out = cp.zeros(2, dtype=cp.int32)
    kernel("ws_arch_probe")((1,), (1,), (out,))
    arch, feat = (int(v) for v in out.get())
    return arch, bool(feat)


def compiled_arch() -> tuple[int, bool]:
    """(__CUDA_ARCH__, sm_90a features present) of the module the current
    device runs, from the probe kernel: (900, True) on an H100/H200."""
    import cupy as cp

    return _compiled_arch(cp.cuda.Device().id)


# --- argument checks -------------------------------------------------------------

def _vector_pair(x, out):
    """x: a float32 CuPy vector of 1..MAX_N elements; out: None (allocated)
    or a float32 vector of x's shape that does not overlap it."""
    import cupy as cp

    checks.require_vector("x", x, np.float32, lib="cupy")
    if not 1 <= x.size <= MAX_N:
        raise ValueError(f"x must have 1 to 2^30 elements (the kernels index with int), got {x.size}")
    if out is None:
        return cp.empty_like(x)
    checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
    checks.require_no_overlap("out", out, x=x)
    return out


MAX_BLOCKS = 2**20  # a block's tile index plus two grid strides stays an int


def _blocks(blocks, tiles: int) -> int:
    """A grid of `blocks` (an int in 1..MAX_BLOCKS), or by default one block
    per tile up to 4 per SM (each block then walks several tiles)."""
    import cupy as cp

    if blocks is None:
        return max(1, min(tiles, 4 * cp.cuda.Device().attributes["MultiProcessorCount"]))
    return checks.require_int("blocks", blocks, 1, MAX_BLOCKS)


# --- sm_80: cuda::pipeline, cuda::barrier -------------------------------------------

def pipeline_copy(x, out=None, *, blocks: int | None = None, threads: int = 256):
    """out = 2 x + 1 through a 2-stage shared-memory ring filled by
    cuda::memcpy_async (block-scope cuda::pipeline). With fewer blocks than
    tiles of PIPE_TILE floats, each block walks several tiles and the ring
    wraps. Any n."""
    out = _vector_pair(x, out)
    checks.require_block_size("threads", threads)
    tiles = math.ceil(x.size / PIPE_TILE)
    grid = _blocks(blocks, tiles)
    kernel("pipeline_copy")((grid,), (threads,), (x, out, np.int32(x.size)))
    return out


def pipeline_copy_reference(x: np.ndarray) -> np.ndarray:
    return 2.0 * x.astype(np.float64) + 1.0


def barrier_split(x, out=None, *, threads: int = 256):
    """out[i] = x[j] + x[i]^2, j the next thread's element in i's block
    (wrapping at the block's end; 0 past n): arrive and wait of a
    cuda::barrier split around the independent x[i]^2."""
    out = _vector_pair(x, out)
    checks.require_block_size("threads", threads)
    kernel("barrier_split")((math.ceil(x.size / threads),), (threads,), (x, out, np.int32(x.size)))
    return out


def barrier_split_reference(x: np.ndarray, threads: int = 256) -> np.ndarray:
    n = x.size
    blocks = math.ceil(n / threads)
    padded = np.zeros(blocks * threads, np.float64)
    padded[:n] = x
    tiles = padded.reshape(blocks, threads)
    return (np.roll(tiles, -1, axis=1) + tiles * tiles).ravel()[:n]


# --- sm_90: mbarrier + bulk copy, TMA, clusters ----------------------------------------

def _bulk_copy(name: str, x, out, blocks, threads):
    out = _vector_pair(x, out)
    checks.require_block_size("threads", threads)
    if x.size % 4:
        raise ValueError(f"x.size must be a multiple of 4 (bulk copies move multiples of 16 bytes), got {x.size}")
    if x.data.ptr % 16:
        raise ValueError(f"x must start on a 16-byte boundary for a bulk copy (its address is {x.data.ptr:#x}): "
                         "pass a fresh array, not an offset view")
    grid = _blocks(blocks, math.ceil(x.size / BULK_TILE))
    kernel(name)((grid,), (threads,), (x, out, np.int32(x.size)))
    return out


def mbarrier_bulk_copy(x, out=None, *, blocks: int | None = None, threads: int = 128):
    """out = x + 1, one 1-D bulk copy (cp.async.bulk) per tile of BULK_TILE
    floats, completed on an mbarrier with a transaction count; a block's
    k-th tile is the barrier's k-th phase (parity k % 2). x.size % 4 == 0."""
    return _bulk_copy("mbarrier_bulk_copy", x, out, blocks, threads)


def mbarrier_bulk_copy_nowait(x, out=None, *, blocks: int | None = None, threads: int = 128):
    """The broken twin of mbarrier_bulk_copy: it reads each tile before
    waiting for its copy, so its output is wrong (NaN from the poisoned
    tile, or a mix). For the test that shows the harness catches it."""
    return _bulk_copy("mbarrier_bulk_copy_nowait", x, out, blocks, threads)


def bulk_copy_reference(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) + 1.0


def _driver():
    """cuda.bindings.driver, imported only when a tensor map is encoded."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise ImportError("tensor_map_2d encodes the TMA descriptor with cuda-bindings' cuTensorMapEncodeTiled: "
                          "pip install cuda-bindings (12.x or 13.x, matching the driver)") from e
    return driver


def check_tensor_map_2d(X, box_rows: int, box_cols: int, swizzle: str = "none") -> dict:
    """tensor_map_2d's argument checks, without the driver: X a row-major
    2-D device array (a CuPy array or any object with
    __cuda_array_interface__) of float32 or float16, rows of a multiple of
    16 bytes, 16-byte aligned; the box 1..256 x 1..256 elements, its rows a
    multiple of 16 bytes and within the swizzle's span. Returns what the
    encoder needs (rows, cols, dtype, ptr, box_rows, box_cols)."""
    face = getattr(X, "__cuda_array_interface__", None)
    if face is None:
        hint = " (a host array: move it with cupy.asarray)" if isinstance(X, np.ndarray) else ""
        raise TypeError(f"X must be a device array (cupy.ndarray or any __cuda_array_interface__ object), "
                        f"got {type(X).__module__}.{type(X).__qualname__}{hint}")
    shape, dtype = tuple(face["shape"]), np.dtype(face["typestr"])
    if dtype not in TMA_DTYPES:
        raise TypeError(f"X must have dtype float32 or float16, got {dtype}")
    if len(shape) != 2:
        raise ValueError(f"X must be 2-D, got shape {shape}")
    rows, cols = shape
    if rows < 1 or cols < 1:
        raise ValueError(f"X must not be empty, got shape {shape}")
    size = dtype.itemsize
    strides = face.get("strides")
    if strides is not None and tuple(strides) != (cols * size, size):
        raise ValueError(f"X must be C-contiguous (row-major), got strides {tuple(strides)}")
    if cols * size % 16:
        raise ValueError(f"X's rows must be a multiple of 16 bytes (TMA's row stride): {cols} columns of {dtype} "
                         f"are {cols * size} bytes; use a multiple of {16 // size} columns")
    ptr = face["data"][0]
    if ptr % 16:
        raise ValueError(f"X must start on a 16-byte boundary (its address is {ptr:#x}): pass a fresh array")
    box_rows = checks.require_int("box_rows", box_rows, 1, 256)
    box_cols = checks.require_int("box_cols", box_cols, 1, 256)
    if box_cols * size % 16:
        raise ValueError(f"box_cols must make the box's rows a multiple of 16 bytes: {box_cols} x {size} bytes "
                         f"= {box_cols * size}")
    if swizzle not in SWIZZLE_BYTES:
        raise ValueError(f"swizzle must be one of {tuple(SWIZZLE_BYTES)}, got {swizzle!r}")
    span = SWIZZLE_BYTES[swizzle]
    if span and box_cols * size > span:
        raise ValueError(f"box_cols: with a {swizzle} swizzle the box's rows must fit in {span} bytes, "
                         f"got {box_cols} x {size} = {box_cols * size}")
    return {"rows": rows, "cols": cols, "dtype": dtype, "ptr": ptr, "box_rows": box_rows, "box_cols": box_cols}


def tensor_map_2d(X, box_rows: int, box_cols: int, swizzle: str = "none"):
    """The TMA descriptor (CUtensorMap) of a row-major 2-D device array X
    (rows x cols, float32 or float16; a CuPy array or any object with
    __cuda_array_interface__): boxes of box_rows x box_cols elements, zeros
    past the edges, `swizzle` one of SWIZZLE_BYTES. Returned as a 128-byte
    NumPy structured scalar (dtype TMAP), which CuPy passes by value to a
    `const __grid_constant__ TmaDesc` parameter. The map holds X's address:
    keep X alive while a kernel uses it. Every argument is checked
    (check_tensor_map_2d) before cuda.bindings is imported."""
    a = check_tensor_map_2d(X, box_rows, box_cols, swizzle)
    rows, cols, dtype, size = a["rows"], a["cols"], a["dtype"], a["dtype"].itemsize
    box_rows, box_cols = a["box_rows"], a["box_cols"]

    cu = _driver()
    swz = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
           "64B": "CU_TENSOR_MAP_SWIZZLE_64B", "128B": "CU_TENSOR_MAP_SWIZZLE_128B"}[swizzle]
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t  # the lists take these, not plain ints
    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, TMA_DTYPES[dtype]), 2, a["ptr"],
        [u64(cols), u64(rows)],          # sizes, innermost first
        [u64(cols * size)],              # the row stride in bytes (the innermost stride is the element)
        [u32(box_cols), u32(box_rows)],  # the box, innermost first
        [u32(1), u32(1)],                # element strides: every element
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, swz),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # NONE: zeros past the edges
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err.name} (X {rows} x {cols} {dtype}, "
                           f"box {box_rows} x {box_cols}, swizzle {swizzle})")
    return np.frombuffer(ctypes.string_at(tmap.getPtr(), TMAP.itemsize), dtype=TMAP)[0]


def tma_tile_2d(X, out=None, *, box_rows: int = 32, box_cols: int = 32, threads: int = 128):
    """Each block loads one box_rows x box_cols box of X (float32, rows x
    cols, cols % 4 == 0) by TMA and writes it transposed: out (gx * box_cols
    x gy * box_rows, gx = ceil(cols / box_cols), gy = ceil(rows / box_rows))
    is the transpose of X padded with zeros to whole boxes."""
    import cupy as cp

    checks.require_cupy_array("X", X)
    checks.require_dtype("X", X, np.float32)
    checks.require_ndim("X", X, 2)
    checks.require_contiguous("X", X)
    checks.require_block_size("threads", threads)
    rows, cols = X.shape
    a = check_tensor_map_2d(X, box_rows, box_cols)  # rows of 16 bytes, alignment, the box
    box_rows, box_cols = a["box_rows"], a["box_cols"]
    smem = box_rows * box_cols * 4 + 128
    if smem > TMA_SMEM_LIMIT:
        raise ValueError(f"box_rows x box_cols must fit in {TMA_SMEM_LIMIT} bytes of shared memory with 128 to "
                         f"spare: {box_rows} x {box_cols} floats are {box_rows * box_cols * 4} bytes")
    gx, gy = math.ceil(cols / box_cols), math.ceil(rows / box_rows)
    shape = (gx * box_cols, gy * box_rows)
    if shape[0] * shape[1] > MAX_N:
        raise ValueError(f"out would have {shape[0] * shape[1]} elements, more than 2^30")
    if out is None:
        out = cp.empty(shape, dtype=cp.float32)
    else:
        checks.require_cupy_array("out", out)
        checks.require_dtype("out", out, np.float32)
        checks.require_contiguous("out", out)
        if tuple(out.shape) != shape:
            raise ValueError(f"out must have shape {shape} (the padded transpose of X {X.shape} in boxes of "
                             f"{box_rows} x {box_cols}), got {tuple(out.shape)}")
        checks.require_no_overlap("out", out, X=X)
    kern = kernel("tma_tile_2d")  # refuses a GPU older than 9.0 before the driver is asked for a tensor map
    tmap = tensor_map_2d(X, box_rows, box_cols)
    kern((gx, gy), (threads,), (tmap, out, np.int32(box_rows), np.int32(box_cols)), shared_mem=smem)
    return out


def tma_tile_2d_reference(X: np.ndarray, box_rows: int, box_cols: int) -> np.ndarray:
    rows, cols = X.shape
    padded = np.zeros((math.ceil(rows / box_rows) * box_rows, math.ceil(cols / box_cols) * box_cols), np.float64)
    padded[:rows, :cols] = X
    return padded.T


def cluster_dsmem(x, out=None, *, threads: int = 256):
    """out[i] = x[i] + the element of the same thread in the partner block of
    its 2-block cluster (0 past n), read through distributed shared memory.
    The grid is rounded up to an even number of blocks."""
    out = _vector_pair(x, out)
    checks.require_block_size("threads", threads)
    blocks = 2 * math.ceil(x.size / (2 * threads))  # whole clusters of 2
    kernel("cluster_dsmem")((blocks,), (threads,), (x, out, np.int32(x.size)))
    return out


def cluster_dsmem_reference(x: np.ndarray, threads: int = 256) -> np.ndarray:
    n = x.size
    pairs = math.ceil(n / (2 * threads))
    padded = np.zeros(pairs * 2 * threads, np.float64)
    padded[:n] = x
    p = padded.reshape(pairs, 2, threads)
    return (p + p[:, ::-1, :]).ravel()[:n]


# --- sm_90a: setmaxnreg -------------------------------------------------------------------

def setmaxnreg_roles(W, X, out=None):
    """out (M x 160) = W (M x K) @ X (K x 160), float32, K <= 64: in each
    block of 256 threads a producer warpgroup (setmaxnreg.dec to 40) stages
    X in shared memory and a consumer warpgroup (setmaxnreg.inc to 232)
    keeps a row of out in 160 accumulators, 128 rows per block."""
    import cupy as cp

    for name, A in (("W", W), ("X", X)):
        checks.require_cupy_array(name, A)
        checks.require_dtype(name, A, np.float32)
        checks.require_ndim(name, A, 2)
        checks.require_contiguous(name, A)
    (M, K), (K2, C) = W.shape, X.shape
    if C != ROLE_COLS:
        raise ValueError(f"X must have {ROLE_COLS} columns (the consumer's accumulators), got shape {X.shape}")
    if K2 != K:
        raise ValueError(f"X must have {K} rows (W is {M} x {K}), got {K2}")
    if not 1 <= K <= ROLE_KMAX:
        raise ValueError(f"K must be in [1, {ROLE_KMAX}] (X is staged whole in shared memory), got {K}")
    if not 1 <= M <= MAX_N // ROLE_COLS:
        raise ValueError(f"W must have 1 to {MAX_N // ROLE_COLS} rows (the kernel indexes with int), got {M}")
    if out is None:
        out = cp.empty((M, ROLE_COLS), dtype=cp.float32)
    else:
        checks.require_cupy_array("out", out)
        checks.require_dtype("out", out, np.float32)
        checks.require_contiguous("out", out)
        if tuple(out.shape) != (M, ROLE_COLS):
            raise ValueError(f"out must have shape {(M, ROLE_COLS)}, got {tuple(out.shape)}")
        checks.require_no_overlap("out", out, W=W, X=X)
    kern = kernel("setmaxnreg_roles")  # refuses a GPU other than compute capability 9.0
    arch, sm90a = compiled_arch()
    if not sm90a:
        raise RuntimeError(f"the module was built for sm_{arch // 10} without the sm_90a features (NVRTC did not "
                           "honour -arch=sm_90a): setmaxnreg_roles would run an empty kernel")
    kern((math.ceil(M / ROLE_ROWS),), (ROLE_THREADS,), (W, X, out, np.int32(M), np.int32(K)))
    return out
