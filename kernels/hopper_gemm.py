"""Topics tc_hopper_gemm and tc_hopper_shapes: launch wrappers for
kernels/cuda/hopper_gemm.cu, a warp-specialized FP16 / BF16 GEMM for Hopper
(TMA, mbarriers, wgmma, setmaxnreg), its twin without specialization, the
planner that picks a kernel and a split of K for a shape (kernel="auto"),
and cuBLAS's GEMM of the same layouts (B transposed, "tn", or not, "nn")."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from . import checks
from .device import CudaBuild, device_info

CUDA_SOURCE = Path(__file__).with_name("cuda") / "hopper_gemm.cu"

# --8<-- [start:hg_plan]
import dataclasses  # noqa: E402
import functools  # noqa: E402
import math  # noqa: E402

BM, BK = 128, 64
# kernel name -> (BN, stages, threads, persistent, cluster)
KERNELS = {
    "hg_plain_128": (128, 6, 256, False, 1),
    "hg_plain_256": (256, 4, 256, False, 1),
    "hg_ws_128": (128, 6, 384, False, 1),
    "hg_ws_256": (256, 4, 384, False, 1),
    "hg_ws_persistent_128": (128, 6, 384, True, 1),
    "hg_ws_persistent_256": (256, 4, 384, True, 1),
    "hg_ws_cluster_256": (256, 4, 384, False, 2),
    "hg_ws_cluster_persistent_256": (256, 4, 384, True, 2),
    # ping-pong: each consumer warpgroup computes whole 128 x 128 tiles, taking turns at the Tensor Cores
    "hg_ws_pingpong_128": (128, 6, 384, True, 1),
}

# What the planner weighs: the warp-specialized kernels, K unsplit or cut
# into SPLITS slices of at least MIN_K_TILES k tiles (BK = 64 each).
AUTO_KERNELS = ("hg_ws_128", "hg_ws_256", "hg_ws_persistent_128", "hg_ws_persistent_256",
                "hg_ws_cluster_256", "hg_ws_cluster_persistent_256", "hg_ws_pingpong_128")
SPLITS = (1, 2, 3, 4, 6, 8)
MAX_SPLITS = 16
MIN_K_TILES = 4

# The planner's model, microseconds: a block spends KTILE_US on each k tile
# when every SM is busy, and TILE_US more on each tile (filling the ring,
# the part of storing C that the next tile's k loop does not hide: none
# for ping-pong, whose other warpgroup computes meanwhile); a split adds
# SPLIT_US and its traffic (every slice written once and read once). Rows
# of A and Bt whose length in bytes (2K) is not a multiple of 128 start off
# the 128-byte lines TMA reads; then a k tile takes at least
# UNALIGNED_ROW_US for each row a block loads (BM of A, BN / cluster of Bt:
# a cluster's multicast halves the second), whatever the math costs.
# Fitted to the tuning records of a run of topic tc_hopper_shapes on the
# H200 at commit e719c0c: `python -m kernels.bench.tc_hopper_shapes --fit`
# refits them from the results file (its docstring says how); its claims
# check that with these values the planner's pick is within 15 % of the
# fastest candidate measured, at every shape.
KTILE_US = {"hg_ws_128": 0.398, "hg_ws_256": 0.709, "hg_ws_persistent_128": 0.388,
            "hg_ws_persistent_256": 0.737, "hg_ws_cluster_256": 0.771, "hg_ws_cluster_persistent_256": 0.702,
            "hg_ws_pingpong_128": 0.399}
TILE_US = {"hg_ws_128": 4.42, "hg_ws_256": 5.6, "hg_ws_persistent_128": 1.38, "hg_ws_persistent_256": 3.1,
           "hg_ws_cluster_256": 6.03, "hg_ws_cluster_persistent_256": 3.54, "hg_ws_pingpong_128": 0.51}
SPLIT_US = 1.18
SPLIT_GBPS = 5330.0
UNALIGNED_ROW_US = 0.00285


@dataclasses.dataclass(frozen=True)
class HgPlan:
    kernel: str   # a key of KERNELS
    splits: int   # slices of K (1: no split, no workspace)
    k_per: int    # k tiles in each slice (the last may have fewer, never none)


def make_plan(K: int, kernel: str, splits: int) -> HgPlan:
    """kernel with K cut into at most `splits` slices, none empty."""
    k_all = max(1, math.ceil(K / BK))
    k_per = math.ceil(k_all / splits)
    return HgPlan(kernel, math.ceil(k_all / k_per), k_per)


def plan_rounds(M: int, N: int, p: HgPlan, sms: int) -> int:
    """Tiles the busiest SM computes, one after another."""
    bn, _, _, persistent, cluster = KERNELS[p.kernel]
    tiles = math.ceil(M / (BM * cluster)) * math.ceil(N / bn)  # one per cluster
    if persistent:  # each slice gets sms / splits SMs; a block walks its share of the tiles
        return math.ceil(tiles / min(tiles, max(1, sms // (cluster * p.splits))))
    return math.ceil(tiles * cluster * p.splits / (sms // cluster * cluster))  # every slice's blocks, sms at a time


def plan_cost(M: int, N: int, K: int, p: HgPlan, sms: int) -> float:
    """Modelled microseconds: the busiest SM's rounds of tiles, each its k
    tiles and a tile's fixed cost, and the split's sum."""
    bn, _, _, _, cluster = KERNELS[p.kernel]
    rounds = plan_rounds(M, N, p, sms)
    k_tile = KTILE_US[p.kernel]
    if K * 2 % 128:
        k_tile = max(k_tile, UNALIGNED_ROW_US * (BM + bn // cluster))
    t = rounds * (p.k_per * k_tile + TILE_US[p.kernel])
    if p.splits > 1:
        t += SPLIT_US + 2 * p.splits * M * N * 4 / (SPLIT_GBPS * 1e3)
    return t


def candidate_plans(K: int) -> list[HgPlan]:
    """Every plan the planner weighs (distinct, in a fixed order)."""
    k_all = max(1, math.ceil(K / BK))
    plans = {make_plan(K, k, s) for k in AUTO_KERNELS for s in SPLITS if s == 1 or k_all // s >= MIN_K_TILES}
    return sorted(plans, key=lambda p: (AUTO_KERNELS.index(p.kernel), p.splits))


@functools.lru_cache(maxsize=256)
def hopper_gemm_plan(M: int, N: int, K: int, sms: int = 132) -> HgPlan:
    """The kernel and split of K with the lowest plan_cost, remembered per shape."""
    return min(candidate_plans(K), key=lambda p: plan_cost(M, N, K, p, sms))
# --8<-- [end:hg_plan]


# --8<-- [start:hg_launch]
TMAP = np.dtype([("v", "<u8", (16,))])  # a CUtensorMap: 128 opaque bytes, passed by value


EPI_BOX = (64, 32)  # rows x float32 columns of C a TMA store writes from shared memory


def smem_bytes(kernel: str) -> int:
    """The ring, the epilogue's buffers (the hg_ws kernels: two per consumer
    warpgroup), the barriers, alignment slack."""
    bn, stages, _, _, _ = KERNELS[kernel]
    epi = 0 if kernel.startswith("hg_plain") else 2 * 2 * EPI_BOX[0] * EPI_BOX[1] * 4
    return stages * (BM + bn) * BK * 2 + epi + 2 * stages * 8 + 1024


def require_sm90a(gpu: str, cc: tuple[int, int]) -> None:
    """wgmma and setmaxnreg exist only on sm_90a: compute capability 9.0 exactly.
    (Kept here rather than taken from ws_primitives, so that this topic's
    freshness stamp does not follow every change to the primitives.)"""
    if tuple(cc) != (9, 0):
        raise RuntimeError(f"the Hopper GEMM needs sm_90a (wgmma, setmaxnreg): compute capability 9.0, "
                           f"an H100 or H200; {gpu} is {cc[0]}.{cc[1]}")


def tensor_map_f16(X, box_rows: int, box_cols: int = BK):
    """The TMA descriptor of a row-major FP16 matrix X: boxes of box_rows x
    box_cols, 128-byte swizzle (the layout wgmma's descriptor names), zeros
    read past the edges."""
    return _tensor_map_f16(X.data.ptr, *X.shape, X.strides[0], box_rows, box_cols)


def tensor_map_c(W, M: int, N: int, slices: int):
    """The TMA descriptor the hg_ws kernels store C through: `slices` float32
    M x N matrices one after another from W's start (split K's workspace,
    or C itself when 1), boxes of EPI_BOX, 128-byte swizzle. TMA wants rows of
    a multiple of 16 bytes: N a multiple of 4, W 16-byte aligned."""
    return _tensor_map("FLOAT32", W.data.ptr, (N, M, slices), (N * 4, M * N * 4), (EPI_BOX[1], EPI_BOX[0], 1))


NO_MAP = np.zeros(1, dtype=TMAP)[0]  # passed where a kernel reads no descriptor (tma_c = 0)


@functools.lru_cache(maxsize=64)  # a descriptor depends only on these numbers
def _tensor_map_f16(ptr: int, rows: int, cols: int, row_bytes: int, box_rows: int, box_cols: int):
    return _tensor_map("FLOAT16", ptr, (cols, rows), (row_bytes,), (box_cols, box_rows))


@functools.lru_cache(maxsize=64)
def _tensor_map(dtype: str, ptr: int, sizes: tuple, strides: tuple, box: tuple):
    """cuTensorMapEncodeTiled: sizes and box innermost first, the byte strides
    of every dimension but the innermost (whose elements are adjacent)."""
    from cuda.bindings import driver as cu  # cuda-bindings 12.x / 13.x

    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{dtype}"), len(sizes), ptr,
        [cu.cuuint64_t(n) for n in sizes], [cu.cuuint64_t(n) for n in strides],
        [cu.cuuint32_t(n) for n in box], [cu.cuuint32_t(1)] * len(sizes),
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err}")
    return np.frombuffer(ctypes.string_at(tmap.getPtr(), 128), dtype=TMAP)[0]


# The formats: the dtype A and Bt arrive in, and the define that compiles
# hopper_gemm.cu for it. CuPy has neither bfloat16 nor FP8 dtypes: BF16
# travels as its bit patterns in uint16 (kernels.gemm_formats.to_bf16 makes
# them), FP8 as bytes (to_fp8 below).
FORMATS = {"fp16": (np.float16, ()), "bf16": (np.uint16, ("-DHG_BF16",)),
           "fp8_e4m3": (np.uint8, ("-DHG_FP8_E4M3",)), "fp8_e5m2": (np.uint8, ("-DHG_FP8_E5M2",))}
FROM_DTYPE = {np.dtype(np.float16): "fp16", np.dtype(np.uint16): "bf16"}  # FP8 is named: two formats share uint8
# The layouts of the second operand: "tn", Bt (N x K, the way a linear layer
# stores its weights), or "nn", B (K x N) as it is, which wgmma reads
# transposed (-DHG_B_KN). FP8's wgmma reads B K-major only: "tn" alone.
LAYOUTS = {"tn": (), "nn": ("-DHG_B_KN",)}
BUILDS = [(fmt, layout) for layout in LAYOUTS for fmt in FORMATS if layout == "tn" or not fmt.startswith("fp8")]


def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """How hopper_gemm.cu is compiled: for sm_90a (wgmma, setmaxnreg), whatever
    the GPU, once per format and layout of BUILDS."""
    return [CudaBuild(CUDA_SOURCE.name, CUDA_SOURCE.read_text(),
                      ("-arch=sm_90a", "--std=c++17", *FORMATS[fmt][1], *LAYOUTS[layout]))
            for fmt, layout in BUILDS]


@functools.cache
def hg_module(fmt: str = "fp16", layout: str = "tn"):
    return cuda_builds()[BUILDS.index((fmt, layout))].module()


@functools.cache
def hg_kernel(kernel: str, fmt: str = "fp16", layout: str = "tn"):
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {tuple(KERNELS)}, got {kernel!r}")
    k = hg_module(fmt, layout).get_function(kernel)
    k.max_dynamic_shared_size_bytes = smem_bytes(kernel)
    return k


@functools.cache
def sm_count(device_id: int) -> int:
    """The device's SMs, asked once (Device.attributes reads every attribute)."""
    import cupy as cp

    return cp.cuda.Device(device_id).attributes["MultiProcessorCount"]


def hopper_gemm(A, B, C=None, *, kernel: str = "auto", splits: int | None = None, fmt: str | None = None,
                scale: float = 1.0, tma_store: bool = True, layout: str = "tn"):
    """C = scale * A @ B.T (layout "tn": B is Bt, N x K) or scale * A @ B
    (layout "nn": B is K x N, FP16 and BF16 only, N a multiple of 8): A
    (M x K) and B both float16 (FP16), both uint16 (BF16 bit patterns), or
    both uint8 with fmt="fp8_e4m3" or "fp8_e5m2" (FP8 bytes, to_fp8), C
    (M x N) float32, all C-contiguous CuPy arrays; K a multiple of 8 (of 16
    for FP8). Both layouts run the same plan. kernel="auto": the kernel and
    split of K that hopper_gemm_plan picks for the shape; a name of KERNELS
    runs that kernel, K cut into `splits` slices (default 1; the hg_plain
    kernels do not split). tma_store: the hg_ws kernels store C through
    shared memory by TMA, behind the next tile's work, when N is a multiple
    of 4 (rows of 16 bytes); False stores from registers, as hg_plain does."""
    import cupy as cp

    if kernel != "auto" and kernel not in KERNELS:
        raise ValueError(f"kernel must be 'auto' or one of {tuple(KERNELS)}, got {kernel!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    bname = "Bt" if layout == "tn" else "B"
    checks.require_cupy_array("A", A)
    checks.require_cupy_array(bname, B)
    if fmt is None:
        fmt = FROM_DTYPE.get(np.dtype(A.dtype))
        if fmt is None:
            raise TypeError(f"A must have dtype float16 (FP16) or uint16 (BF16 bit patterns), or name an FP8 "
                            f"fmt for uint8, got {np.dtype(A.dtype)}")
    elif fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {tuple(FORMATS)}, got {fmt!r}")
    if (fmt, layout) not in BUILDS:
        raise ValueError(f"layout {layout!r} is not built for {fmt} (FP8's wgmma reads B K-major only: "
                         f"pass Bt, N x K, with layout 'tn')")
    for name, X in (("A", A), (bname, B)):
        checks.require_dtype(name, X, FORMATS[fmt][0])
        checks.require_ndim(name, X, 2)
        checks.require_contiguous(name, X)
        if X.data.ptr % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary (TMA), got address {X.data.ptr:#x}")
    if layout == "tn":
        (M, K), (N, K2) = A.shape, B.shape
        if K2 != K:
            raise ValueError(f"A is {M}x{K} and Bt is {N}x{K2}: they must share K (the second dimension)")
    else:
        (M, K), (K2, N) = A.shape, B.shape
        if K2 != K:
            raise ValueError(f"A is {M}x{K} and B is {K2}x{N}: B's rows must be A's columns (K)")
        if N % 8:
            raise ValueError(f"N must be a multiple of 8 with layout 'nn' (TMA copies B's rows of N values, "
                             f"a multiple of 16 bytes), got {N}")
    if K * A.itemsize % 16:
        raise ValueError(f"K must be a multiple of {16 // A.itemsize} (TMA copies rows of a multiple of "
                         f"16 bytes), got {K}")
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    else:
        checks.require_cupy_array("C", C)
        checks.require_dtype("C", C, np.float32)
        checks.require_contiguous("C", C)
        if C.shape != (M, N):
            raise ValueError(f"C must be {M}x{N}, got {'x'.join(map(str, C.shape))}")
        # all three are contiguous: each spans [ptr, ptr + nbytes), so a check of two intervals
        # finds an overlap (the general check, which names it, then raises; it costs a call's time)
        c0, c1 = C.data.ptr, C.data.ptr + C.nbytes
        if any(X.data.ptr < c1 and c0 < X.data.ptr + X.nbytes for X in (A, B) if X.size and C.size):
            checks.require_no_overlap("C", C, **{"A": A, bname: B})
    dev = cp.cuda.Device().id
    info = device_info(dev)
    require_sm90a(info["name"], info["cc"])
    if A.itemsize == 1:  # FP8: the kernels count K in two-byte words (a k tile: 64 words, 128 values)
        A, B, K = A.view(cp.uint16), B.view(cp.uint16), K // 2
    if kernel == "auto":
        if splits is not None:
            raise ValueError("splits is chosen by the planner with kernel='auto'; name a kernel to set it")
        plan = hopper_gemm_plan(M, N, K, sm_count(dev))
    else:
        splits = 1 if splits is None else checks.require_int("splits", splits, 1, MAX_SPLITS)
        if splits > 1 and kernel.startswith("hg_plain"):
            raise ValueError(f"{kernel} does not split K (the hg_ws kernels do)")
        plan = make_plan(K, kernel, splits)
    if M == 0 or N == 0:
        return C
    if K == 0:
        return C.fill(0) or C
    bn, _, threads, persistent, cluster = KERNELS[plan.kernel]
    tiles = math.ceil(M / (BM * cluster)) * math.ceil(N / bn)  # tiles of the whole cluster
    sms = sm_count(dev)
    grid_x = cluster * (min(tiles, max(1, sms // (cluster * plan.splits))) if persistent else tiles)
    out = C if plan.splits == 1 else split_workspace(plan.splits * M * N)
    # the hg_ws kernels store C by TMA when its rows allow it (else from registers)
    tma_c = tma_store and not plan.kernel.startswith("hg_plain") and N % 4 == 0 and out.data.ptr % 16 == 0
    # Bt: boxes of a block's rows x BK; B (K x N): boxes of BK rows x 64 columns (hg_b_layout)
    map_b = tensor_map_f16(B, bn // cluster) if layout == "tn" else tensor_map_f16(B, BK, 64)
    hg_kernel(plan.kernel, fmt, layout)((grid_x, plan.splits), (threads,),
                                        (tensor_map_f16(A, BM), map_b, out,
                                         np.int32(M), np.int32(N), np.int32(K), np.float32(scale),
                                         tensor_map_c(out, M, N, plan.splits) if tma_c else NO_MAP, np.int32(tma_c)),
                                        shared_mem=smem_bytes(plan.kernel))
    if plan.splits > 1:  # the slices' partial sums, added in order
        hg_module(fmt, layout).get_function("hg_split_sum")((min(4 * sms, math.ceil(M * N / 1024)),), (256,),
                                                    (out, C, np.int64(M * N), np.int32(plan.splits)))
    return C


SPLIT_WORKSPACE: dict = {}  # (device, stream) -> float32 workspace, grown when too small


def split_workspace(floats: int):
    """A float32 workspace of at least `floats` elements for this device and
    stream, kept between calls."""
    import cupy as cp

    key = (cp.cuda.Device().id, cp.cuda.get_current_stream().ptr)
    W = SPLIT_WORKSPACE.get(key)
    if W is None or W.size < floats:
        W = SPLIT_WORKSPACE[key] = cp.empty(floats, dtype=cp.float32)
    return W
# --8<-- [end:hg_launch]


# cuBLAS on the same layout: C = A @ Bt.T with A (M x K), Bt (N x K) row-major,
# FP16 in, FP32 out and accumulation (cublasGemmEx). cuBLAS is column-major:
# it computes C^T (N x M) = Bt (as K x N, transposed) @ A^T (K x M).
# --8<-- [start:to_fp8]
FP8_BITS = {"fp8_e4m3": (3, 7), "fp8_e5m2": (2, 15)}  # mantissa bits, exponent bias


def to_fp8(x, fmt: str = "fp8_e4m3"):
    """float32 CuPy array -> (its FP8 bytes, scale), with x ~ scale * value:
    a power-of-two scale per tensor brings max |x| to the format's largest
    value, then kernels.gemm_formats.round_fp8 rounds (ties to even,
    saturating) and this packs sign, exponent and mantissa into a byte."""
    import cupy as cp

    from .gemm_formats import FP8, round_fp8

    if fmt not in FP8_BITS:
        raise ValueError(f"fmt must be one of {tuple(FP8_BITS)}, got {fmt!r}")
    top = FP8[fmt][2]
    amax = float(cp.abs(x).max()) if x.size else 0.0
    scale = float(2.0 ** np.ceil(np.log2(amax / top))) if amax > 0 else 1.0
    values = round_fp8(x / scale, fmt).astype(cp.float32)  # on the FP8 grid (exact in float16 and float32)
    man, bias = FP8_BITS[fmt]
    pack = cp.ElementwiseKernel(
        "float32 x, int32 man, int32 bias", "uint8 b",
        """
        float v = fabsf(x);
        unsigned code = 0;
        if (v > 0.0f) {
            int e;
            frexpf(v, &e);                                 // v = f * 2^e, f in [0.5, 1): exponent e - 1
            if (e - 1 + bias <= 0) {                       // subnormal: v = m * 2^(1 - bias - man)
                code = (unsigned)rintf(ldexpf(v, bias - 1 + man));
            } else {                                       // normal: 1.m * 2^(e - 1)
                code = ((unsigned)(e - 1 + bias) << man) | (unsigned)rintf((ldexpf(v, 1 - e) - 1.0f) * (1 << man));
            }
        }
        b = (unsigned char)(code | (signbit(x) ? 0x80u : 0u));
        """, "to_fp8_bits")
    return pack(values, np.int32(man), np.int32(bias)), scale
# --8<-- [end:to_fp8]


CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 0, 1, 2, 0, 68, -1
CUDA_R_16BF = 14


def cublas_gemm_tn(A, Bt, C=None):
    """cuBLAS's C = A @ Bt.T for the operands hopper_gemm takes (float16, or
    uint16 as BF16 bit patterns)."""
    (M, K), (N, _) = A.shape, Bt.shape
    return _cublas_gemmex(A, Bt, C, M, N, K, CUBLAS_OP_T, K)


def cublas_gemm_nn(A, B, C=None):
    """cuBLAS's C = A @ B for B as it is (K x N), the operands of
    hopper_gemm(..., layout="nn"): column-major, it computes C^T = B^T A^T,
    neither transposed."""
    (M, K), (_, N) = A.shape, B.shape
    return _cublas_gemmex(A, B, C, M, N, K, CUBLAS_OP_N, N)


def _cublas_gemmex(A, B, C, M: int, N: int, K: int, op_b: int, ldb: int):
    """cublasGemmEx of C^T (N x M) = op_b(B) A^T, FP32 out and accumulation;
    B's leading dimension ldb."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    ab = CUDA_R_16BF if A.dtype == np.uint16 else CUDA_R_16F
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    cublas.gemmEx(cp.cuda.device.get_cublas_handle(), op_b, CUBLAS_OP_N, N, M, K,
                  one.ctypes.data, B.data.ptr, ab, ldb, A.data.ptr, ab, K,
                  zero.ctypes.data, C.data.ptr, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
    return C
