"""The checked exercises' tasks (kernels/exercises.py grades them), chapter
by chapter: for each, the function the reader's file defines, its inputs
and float64 reference, the sizes it is checked at, and on a GPU the
chapter's own kernel and the vendor's way to time it against. Starters:
examples/exercises/<task>.py; solutions: examples/exercises/solutions/.
"""

from __future__ import annotations

import functools

import numpy as np

from .exercises import Task

# ---------------------------------------------------------------- the jobs --

def _vectors(n, rng):
    return {"a": rng.standard_normal(n).astype(np.float32), "b": rng.standard_normal(n).astype(np.float32)}


def _add_ref(a, b):
    return a.astype(np.float64) + b.astype(np.float64)


def _matrix(shape, rng):
    rows, cols = shape
    return {"x": rng.standard_normal((rows, cols)).astype(np.float32)}


def _vector(n, rng):
    return {"x": rng.standard_normal(n).astype(np.float32)}


def _chapter_add(variant):
    def _run(a, b, out):
        from . import vector_add

        vector_add.vector_add_cupy(a, b, out=out, variant=variant)
    return _run


def _cupy_add(a, b, out):
    import cupy as cp

    cp.add(a, b, out=out)


def _chapter_transpose(x, out):
    from . import transpose

    transpose.transpose_cupy(x, out=out, variant="coarsened")


def _cupy_transpose(x, out):
    import cupy as cp

    out[...] = cp.ascontiguousarray(x.T)


def _chapter_sum(x, out):
    from . import reduction

    out[...] = reduction.reduce_sum_cupy(x)


def _cupy_sum(x, out):
    import cupy as cp

    cp.sum(x, out=out[0])


ELEMENTWISE_CPU = (1, 2, 31, 255, 256, 257, 1000, 4097)
ELEMENTWISE_GPU = ELEMENTWISE_CPU + ((1 << 20) + 1, 10_000_019)
TRANSPOSE_CPU = ((1, 1), (1, 33), (33, 1), (31, 33), (64, 65), (97, 40))
TRANSPOSE_GPU = TRANSPOSE_CPU + ((1000, 1001), (4097, 4095))
SUM_CPU = (1, 2, 255, 256, 257, 1000, 5001)
SUM_GPU = SUM_CPU + ((1 << 20) + 3, 10_000_019)

_FIRST = (
    Task("vector_add_guard", "programming-model", "numba", "add", _vectors, lambda n: (n,), _add_ref,
         ELEMENTWISE_CPU, ELEMENTWISE_GPU, 1 << 26, lambda n: ("bytes", 12 * n),
         chapter_kernel=_chapter_add("guard"), vendor=_cupy_add, vendor_name="cupy.add",
         hint="the last block has threads past n: guard the load and the store"),
    Task("vector_add_grid_stride", "programming-model", "numba", "add", _vectors, lambda n: (n,), _add_ref,
         ELEMENTWISE_CPU, ELEMENTWISE_GPU, 1 << 26, lambda n: ("bytes", 12 * n),
         chapter_kernel=_chapter_add("grid_stride"), vendor=_cupy_add, vendor_name="cupy.add",
         goal=("chapter", 0.8), hint="a grid-stride loop covers any n with the launcher's grid; for speed, "
                                     "size the grid to fill every SM"),
    Task("vector_add_cuda", "programming-model", "cuda", "add", _vectors, lambda n: (n,), _add_ref,
         ELEMENTWISE_CPU, ELEMENTWISE_GPU, 1 << 26, lambda n: ("bytes", 12 * n),
         chapter_kernel=_chapter_add("vec4"), vendor=_cupy_add, vendor_name="cupy.add",
         hint="the last block has threads past n: guard the load and the store"),
    Task("transpose_tiled", "memory-hierarchy", "numba", "transpose", _matrix, lambda s: (s[1], s[0]),
         lambda x: x.astype(np.float64).T, TRANSPOSE_CPU, TRANSPOSE_GPU, (8192, 8192),
         lambda s: ("bytes", 8 * s[0] * s[1]), rtol=0.0,
         chapter_kernel=_chapter_transpose, vendor=_cupy_transpose, vendor_name="cupy ascontiguousarray(x.T)",
         # the goal is against CuPy's transpose: the reference solution (one element a thread, 32 x 32 threads)
         # ran 1.57 x CuPy and 0.36 x the chapter's coarsened CUDA C on the H200
         goal=("cupy ascontiguousarray(x.T)", 1.3),
         hint="stage a tile in shared memory, barrier, then store it transposed; pad the "
                                     "tile by one column against bank conflicts"),
    Task("block_sum", "divergence", "numba", "total", _vector, lambda n: (1,),
         lambda x: np.array([x.astype(np.float64).sum()]), SUM_CPU, SUM_GPU, 1 << 26, lambda n: ("bytes", 4 * n),
         rtol=1e-5, scale=lambda x: np.array([np.abs(x.astype(np.float64)).sum()]), deterministic=False,
         hint="threads past the end must add nothing (0), not read x[i]",
         chapter_kernel=_chapter_sum, vendor=_cupy_sum, vendor_name="cupy.sum"),
)



# ------------------------------------- memory hierarchy, tuning, occupancy, ILP --


def _copy_ref(x):
    return x.astype(np.float64)


def _chapter_copy(x, out):
    from kernels import memory

    memory.copy_strided_cupy(x, out, 1)


def _cupy_copy(x, out):
    import cupy as cp

    cp.copyto(out, x)


COPY_CPU = (1, 2, 31, 255, 256, 257, 1000, 2049, 4097)
COPY_GPU = COPY_CPU + ((1 << 20) + 1, 10_000_019)

# the 5 x 5 convolution of the four-step chapter (kernels/stencil.py)
CONV_R = 2
CONV_KW = 2 * CONV_R + 1


def _image(shape, rng):
    return {"x": rng.standard_normal(shape).astype(np.float32),
            "w": rng.standard_normal((CONV_KW, CONV_KW)).astype(np.float32)}


def _conv_ref(x, w):
    """kernels/stencil.py's reference: float64, zero padding, the filter not flipped."""
    H, W = x.shape
    p = np.zeros((H + 2 * CONV_R, W + 2 * CONV_R))
    p[CONV_R:CONV_R + H, CONV_R:CONV_R + W] = x
    out = np.zeros((H, W))
    for i in range(CONV_KW):
        for j in range(CONV_KW):
            out += float(w[i, j]) * p[i:i + H, j:j + W]
    return out


def _conv_scale(x, w):
    """What float32 rounding is measured against: the convolution of |x| with |w|."""
    return _conv_ref(np.abs(x), np.abs(w))


def _chapter_conv(variant):
    def _run(x, w, out):
        from kernels import stencil

        stencil.conv2d_cupy(x, w, out, variant=variant)
    return _run


def _cupy_correlate(x, w, out):
    from cupyx.scipy import ndimage

    ndimage.correlate(x, w, output=out, mode="constant", cval=0.0)


CONV_CPU = ((1, 1), (1, 7), (7, 1), (2, 3), (5, 5), (16, 17), (17, 16), (31, 33), (40, 23))
CONV_GPU = CONV_CPU + ((1000, 1013), (2049, 4095))
CONV_BENCH = (8192, 8192)
CONV_WORK = (lambda s: ("flop", 2 * CONV_KW * CONV_KW * s[0] * s[1]))



STAGED_CPU = (1, 2, 255, 1024, 1025, 2049, 6145)  # 6145: one past the starter's tile
STAGED_GPU = STAGED_CPU + ((1 << 20) + 1, 10_000_019)


def _dot_ref(a, b):
    return np.array([np.dot(a.astype(np.float64), b.astype(np.float64))])


def _dot_scale(a, b):
    return np.array([np.abs(a.astype(np.float64) * b.astype(np.float64)).sum()])


def _cupy_dot(a, b, out):
    import cupy as cp

    out[0] = cp.dot(a, b)


DOT_CPU = (1, 2, 3, 127, 129, 1000, 2049, 4097)  # from 2049 on, the unrolled loop runs in the simulator
DOT_GPU = DOT_CPU + ((1 << 20) + 3, 10_000_019)

# the FMA chains of the ILP chapter (kernels/cuda/ilp.cu, fma_chains<4>)
ILP_ITERS = 1 << 16  # FMAs per element, in all four chains (the chapter's ITERS)
ILP_CHAINS = 4
ILP_BENCH = 132 * 128  # 4 warps per SM on an H100 / H200 (132 SMs): the chapter's latency-bound launch


def _near_one(n, rng):
    """a in [0.9999, 0.99999]: after 16384 steps a^T is still 0.19 to 0.85,
    so the answer depends on every chain (with a far from 1 every chain
    converges to 1 and any kernel with four chains would give 4)."""
    return {"x": (0.9999 + 0.00009 * rng.random(n)).astype(np.float32)}


def _chains_ref(x):
    """sum over k of acc_k after T = ITERS / 4 steps acc = acc * a + (1 - a)
    from a + k: acc_k(T) = 1 + a^T (a + k - 1), in float64."""
    a = x.astype(np.float64)
    t = ILP_ITERS // ILP_CHAINS
    return sum(1.0 + a ** t * (a + k - 1.0) for k in range(ILP_CHAINS))


def _chapter_chains(x, out):
    from kernels import ilp

    ilp.fma_chains_cupy(x, out, kernel="ilp_chains_4", iters=ILP_ITERS, threads=32)


CHAINS_CPU = (1, 31, 33, 65)
CHAINS_GPU = CHAINS_CPU + (4097, ILP_BENCH)


_GROUP_A = [
    Task("coalesced_copy", "memory-hierarchy", "numba", "copy", _vector, lambda n: (n,), _copy_ref,
         COPY_CPU, COPY_GPU, 1 << 26, lambda n: ("bytes", 8 * n), rtol=0.0,
         chapter_kernel=_chapter_copy, vendor=_cupy_copy, vendor_name="cupy.copyto",
         goal=("chapter", 0.7), hint="in every step the 32 threads of a warp must touch 32 neighbouring "
                                     "elements: a grid-stride loop, not a chunk per thread"),
    Task("stencil_borders", "tuning-method", "numba", "conv", _image, lambda s: s, _conv_ref,
         CONV_CPU, CONV_GPU, CONV_BENCH, CONV_WORK, rtol=1e-5, scale=_conv_scale,
         chapter_kernel=_chapter_conv("coalesced"), vendor=_cupy_correlate,
         vendor_name="cupyx.scipy.ndimage.correlate",
         hint="a tap is in the image when its row is in [0, H) and its column in [0, W), each checked; "
              "a flat index in [0, H * W) can still be one row up or down"),
    Task("stencil_tiled", "tuning-method", "numba", "conv", _image, lambda s: s, _conv_ref,
         CONV_CPU, CONV_GPU, CONV_BENCH, CONV_WORK, rtol=1e-5, scale=_conv_scale,
         chapter_kernel=_chapter_conv("tiled16"), vendor=_cupy_correlate,
         vendor_name="cupyx.scipy.ndimage.correlate",
         goal=("chapter", 0.55), hint="fill the whole (TILE + 4)^2 tile, halo included, from x (0 outside "
                                     "the image), the block's threads striding over it, then a barrier"),
    Task("occupancy_block_size", "occupancy", "numba", "add", _vectors, lambda n: (n,), _add_ref,
         ELEMENTWISE_CPU, ELEMENTWISE_GPU, 1 << 26, lambda n: ("bytes", 12 * n),
         chapter_kernel=_chapter_add("guard"), vendor=_cupy_add, vendor_name="cupy.add", goal=("chapter", 0.8),
         hint="round the number of blocks up; blocks of one warp leave half of an SM's warp slots empty"),
    Task("occupancy_staged_add", "occupancy", "numba", "add", _vectors, lambda n: (n,), _add_ref,
         STAGED_CPU, STAGED_GPU, 1 << 26, lambda n: ("bytes", 12 * n),
         chapter_kernel=_chapter_add("grid_stride"), vendor=_cupy_add, vendor_name="cupy.add",
         goal=("chapter", 0.7), hint="guard the stores of the last tile; for speed, a memory-bound kernel "
                                     "needs warps: less shared memory per block, more threads, at least "
                                     "half occupancy"),
    Task("ilp_dot", "ilp", "numba", "dot", _vectors, lambda n: (1,), _dot_ref,
         DOT_CPU, DOT_GPU, 1 << 26, lambda n: ("bytes", 8 * n), rtol=1e-5, scale=_dot_scale,
         deterministic=False, vendor=_cupy_dot, vendor_name="cupy.dot",
         hint="after the unrolled loop, a plain grid-stride loop must add the elements left over"),
    Task("ilp_chains", "ilp", "numba", "chains", _near_one, lambda n: (n,), _chains_ref,
         CHAINS_CPU, CHAINS_GPU, ILP_BENCH, lambda n: ("flop", 2 * ILP_ITERS * n), rtol=1e-3,
         chapter_kernel=_chapter_chains,
         goal=("chapter", 0.7), hint="each accumulator's FMA must read that accumulator's own last value: "
                                     "four independent FMAs per step"),
]


# ------------------------------------------------- matmul, algorithms, divergence --




# ---------------------------------------------------------------- matmul --

def _gemm_inputs(size, rng):
    M, N, K = size
    return {"A": rng.standard_normal((M, K)).astype(np.float32),
            "B": rng.standard_normal((K, N)).astype(np.float32)}


def _gemm_ref(A, B):
    return A.astype(np.float64) @ B.astype(np.float64)


def _gemm_scale(A, B):
    """|A| @ |B|: what float32 rounding of the K products and sums is relative to
    (an element of out that cancels to near 0 is still held to rtol of it)."""
    return np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))


def _chapter_matmul(variant):
    """The chapter's Numba step `variant` on CuPy arrays (viewed as Numba's)."""
    def _run(A, B, out):
        from numba import cuda

        from kernels import matmul

        matmul.matmul_numba(cuda.as_cuda_array(A), cuda.as_cuda_array(B), cuda.as_cuda_array(out), variant=variant)
    return _run


def _cublas_matmul(A, B, out):
    from kernels import matmul

    matmul.cublas_matmul(A, B, out)


GEMM_CPU = ((1, 1, 1), (16, 16, 16), (17, 15, 33), (33, 40, 17), (40, 36, 33))
GEMM_GPU = GEMM_CPU + ((64, 64, 64), (65, 63, 129), (1000, 1013, 777), (2048, 2049, 2047))
GEMM_BENCH = (4096, 4096, 4096)


def _gemm_flop(size):
    M, N, K = size
    return ("flop", 2 * M * N * K)


# ------------------------------------------------------------------ spmv --

def _spmv_lengths(size):
    """Row lengths of the grader's CSR matrices, fixed by the size (n_rows,
    n_cols, longest): row i has (7 i + 3) mod (longest + 1) nonzeros (at most
    n_cols), and every fourth row from row 1 has none; so some rows are empty,
    the last one too when n_rows - 1 is 1 mod 4 (or its length comes out 0)."""
    n_rows, n_cols, longest = size
    i = np.arange(n_rows, dtype=np.int64)
    lengths = np.minimum((7 * i + 3) % (longest + 1), n_cols)
    lengths[i % 4 == 1] = 0
    return lengths


def _spmv_inputs(size, rng):
    from kernels import spmv

    n_rows, n_cols, _ = size
    indptr, indices, data = spmv.from_row_lengths(_spmv_lengths(size), n_cols, rng)  # sorted distinct columns
    return {"indptr": indptr, "indices": indices, "data": data, "x": rng.standard_normal(n_cols).astype(np.float32)}


def _spmv_ref(indptr, indices, data, x):
    from kernels import spmv

    return spmv.spmv_reference(indptr, indices, data, x)


def _spmv_scale(indptr, indices, data, x):
    """|A| |x| per row: what float32 rounding of a row's terms is relative to."""
    return _spmv_ref(indptr, indices, np.abs(data), np.abs(x))


def _spmv_bytes(size):
    from kernels import spmv

    n_rows, n_cols, _ = size
    return ("bytes", spmv.csr_bytes(n_rows, n_cols, int(_spmv_lengths(size).sum())))


def _chapter_spmv(indptr, indices, data, x, out):
    from kernels import spmv

    spmv.spmv(indptr, indices, data, x, out, check=False)  # the default kernel, no CSR check: what a reused call costs


_CUSPARSE = {}


def _cusparse_spmv(indptr, indices, data, x, out):
    """cuSPARSE's SpMV with its descriptors and buffer made once per set of
    arrays (spmv.cusparse_plan), as the chapter times it."""
    from kernels import spmv

    key = (indptr.data.ptr, indices.data.ptr, data.data.ptr, x.data.ptr, out.data.ptr)
    if key not in _CUSPARSE:
        _CUSPARSE.clear()
        A = spmv.cusparse_matrix(indptr, indices, data, x.size)
        _CUSPARSE[key] = spmv.cusparse_plan(A, x, out)[0]
    _CUSPARSE[key]()


# Some CPU sizes end in an empty row (2x5x3, 130x97x8), where the untouched
# starter reads one past the end of data and indices. The GPU sizes do not:
# the grader pads an int32 input with NaN cast to int32 (INT32_MIN on x86),
# and x[INT32_MIN] is an illegal address that ends the process's CUDA
# context (see the note on the grader's integer canaries).
SPMV_CPU = ((1, 1, 1), (3, 8, 4), (2, 5, 3), (1, 4, 0), (130, 97, 8), (300, 257, 16))
SPMV_GPU = ((1, 1, 1), (3, 8, 4), (2, 5, 3), (130, 97, 8), (300, 257, 16), (4097, 1000, 40), (100_001, 50_000, 64))
SPMV_BENCH = (1 << 20, 1 << 20, 32)  # about 12.6 M nonzeros, a quarter of the rows empty


# --------------------------------------------------------------- softmax --

SOFTMAX_SHIFTS = (0.0, 100.0, -100.0)  # row r of the grader's logits is shifted by SOFTMAX_SHIFTS[r % 3]


def _softmax_inputs(size, rng):
    M, N = size
    shift = np.array(SOFTMAX_SHIFTS)[np.arange(M) % 3][:, None]
    return {"x": (3.0 * rng.standard_normal((M, N)) + shift).astype(np.float32)}


def _softmax_ref(x):
    from kernels import fusion

    return fusion.softmax_reference(x)


def _chapter_softmax(x, out):
    from kernels import fusion

    fusion.softmax_rows(x, variant="fused", out=out)


def _cupy_softmax(x, out):
    import cupy as cp

    e = cp.exp(x - x.max(axis=1, keepdims=True))
    cp.divide(e, e.sum(axis=1, keepdims=True), out=out)


SOFTMAX_CPU = ((1, 1), (1, 33), (2, 129), (3, 257), (5, 300), (4, 1000))
SOFTMAX_GPU = SOFTMAX_CPU + ((1000, 4097), (64, 12289), (4099, 1000))
SOFTMAX_BENCH = (16384, 4096)


# ------------------------------------------------------------ divergence --

BRANCH_ITERS = 256  # ITERS of the starter: the steps per element
BRANCH_A = (np.float32(0.999), np.float32(0.001))   # x >= 0
BRANCH_B = (np.float32(1.001), np.float32(-0.001))  # x < 0


def _branch_inputs(n, rng):
    """Random signs (nearly every warp holds both), and every seventh element
    exactly 0 (path A: the condition is x >= 0)."""
    x = rng.standard_normal(n).astype(np.float32)
    x[::7] = 0
    return {"x": x}


def _branch_ref(x):
    """ITERS steps of v = a v + b in exact arithmetic (float64), in closed form:
    v = a^n x + b (1 - a^n) / (1 - a), a and b the float32 constants of the
    element's path. A float32 loop rounds at every step: about 1e-5 off after
    256 steps in the simulator (which does not fuse the multiply-add), hence
    rtol=1e-4; a wrong path or step count is off by 1e-3 or more."""
    pos = x >= 0
    a = np.where(pos, BRANCH_A[0], BRANCH_B[0]).astype(np.float64)
    b = np.where(pos, BRANCH_A[1], BRANCH_B[1]).astype(np.float64)
    an = a ** BRANCH_ITERS
    return an * x.astype(np.float64) + b * (1.0 - an) / (1.0 - a)


def _chapter_branch(x, out):
    from kernels import divergence

    divergence.branch_cupy(x, out, split=0, iters=BRANCH_ITERS, kind="branch_long")


BRANCH_CPU = (1, 2, 31, 257, 1000)
BRANCH_GPU = BRANCH_CPU + ((1 << 20) + 1, 10_000_019)


_GROUP_B = [
    Task("sgemm_tiled_edges", "matmul", "numba", "matmul", _gemm_inputs, lambda s: (s[0], s[1]), _gemm_ref,
         GEMM_CPU, GEMM_GPU, GEMM_BENCH, _gemm_flop, rtol=1e-5, scale=_gemm_scale,
         chapter_kernel=_chapter_matmul("smem_tiled"), vendor=_cublas_matmul, vendor_name="cuBLAS (cupy.matmul)",
         hint="a tile's element outside A or B must be loaded as 0 (not skipped: the barrier needs every "
              "thread), and only threads inside out may store"),
    Task("sgemm_register_tiles", "matmul", "numba", "matmul", _gemm_inputs, lambda s: (s[0], s[1]), _gemm_ref,
         GEMM_CPU + ((65, 66, 9),), GEMM_GPU, GEMM_BENCH, _gemm_flop, rtol=1e-5, scale=_gemm_scale,
         chapter_kernel=_chapter_matmul("register_blocked"), vendor=_cublas_matmul,
         vendor_name="cuBLAS (cupy.matmul)", goal=("chapter", 0.6),
         hint="each thread: a TM x TN local array of sums; per k, TM values of A and TN of B from shared "
              "memory into registers, then TM * TN multiply-adds; store every output inside out"),
    Task("spmv_csr_rows", "algorithms", "numba", "spmv", _spmv_inputs, lambda s: (s[0],), _spmv_ref,
         SPMV_CPU, SPMV_GPU, SPMV_BENCH, _spmv_bytes, rtol=1e-5, scale=_spmv_scale,
         chapter_kernel=_chapter_spmv, vendor=_cusparse_spmv, vendor_name="cuSPARSE (cusparseSpMV)",
         hint="an empty row (indptr[row] == indptr[row + 1]) has the sum 0 and no term to read: start at 0 "
              "and loop over indptr[row] .. indptr[row + 1] - 1"),
    Task("softmax_rows", "algorithms", "numba", "softmax", _softmax_inputs, lambda s: s, _softmax_ref,
         SOFTMAX_CPU, SOFTMAX_GPU, SOFTMAX_BENCH, lambda s: ("bytes", 8 * s[0] * s[1]), rtol=1e-5,
         chapter_kernel=_chapter_softmax, vendor=_cupy_softmax, vendor_name="CuPy (max, exp, sum, divide)",
         hint="exp overflows float32 above 88.7 and underflows to 0 far below 0: subtract the row's maximum "
              "m first (softmax does not change) and write exp(x - m) / sum exp(x - m)"),
    Task("divergence_branch_free", "divergence", "numba", "apply", _branch_inputs, lambda n: (n,), _branch_ref,
         BRANCH_CPU, BRANCH_GPU, 1 << 26, lambda n: ("flop", 2 * BRANCH_ITERS * n), rtol=1e-4,
         scale=lambda x: np.maximum(np.abs(x.astype(np.float64)), 1.0),
         chapter_kernel=_chapter_branch, goal=("chapter", 0.55),  # the reference solution: 0.65 on the H200
         hint="choose both constants, a and b, by the sign of x[i] (x >= 0: path A) with selects before the "
              "loop; then every lane runs one loop"),
]

# ------------------------------------------------ tensor cores, warp specialization --
# ---------------------------------------------------------------- tensor cores --


def _wmma_inputs(size, rng):
    """a (M x K) and b (K x N) in float16: the kernels take FP16 operands as they are."""
    M, N, K = size
    return {"a": rng.standard_normal((M, K)).astype(np.float16),
            "b": rng.standard_normal((K, N)).astype(np.float16)}


def _wmma_ref(a, b):
    """The float64 product of the float16 values (every FP16 product is exact in FP32)."""
    return a.astype(np.float64) @ b.astype(np.float64)


def _wmma_scale(a, b):
    """|a| @ |b|: the size of the sum's terms, which FP32 accumulation errs against."""
    return np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))


def _tc_chapter(step):
    def _run(a, b, out):
        from kernels import tensor_cores

        tensor_cores.tc_matmul(a, b, out, step=step)
    return _run


def _cublas_gemm(a, b, out):
    from kernels import tensor_cores

    tensor_cores.cublas_gemm(a, b, out)


# Any M, N, K (K up to 520, so that 1e-3 of |a| @ |b| stays above the chapter's bound K * 2^-20 of it).
EDGES_GPU = ((1, 1, 1), (16, 16, 16), (15, 17, 9), (17, 33, 40), (33, 16, 31), (64, 64, 64), (100, 75, 130),
             (129, 65, 48), (257, 300, 520), (1000, 1001, 264))
# M, N, K multiples of 16, M and N not all multiples of the 64 x 64 block tile, K not all of the slice of 32.
SMEM_GPU = ((16, 16, 16), (48, 80, 16), (64, 64, 64), (80, 48, 96), (144, 208, 48), (272, 336, 112),
            (1040, 1008, 528))


def _gemm_work(size):
    M, N, K = size
    return ("flop", 2 * M * N * K)


# ---------------------------------------------------------------- streaming --

WS_K, WS_A, WS_B = 8, 0.999, 0.001  # out[i] = f^8(x[i]), f(v) = v * 0.999 + 0.001: the chapter's workload


def _stream_ref(x):
    """f^8 in float64, with a and b rounded to float32 as the kernels hold them."""
    y = x.astype(np.float64)
    a, b = float(np.float32(WS_A)), float(np.float32(WS_B))
    for _ in range(WS_K):
        y = y * a + b
    return y


def _stream_scale(x):
    """|x|: the size of the values each chain carries (the result alone can be near 0)."""
    return np.abs(x.astype(np.float64))


@functools.cache
def _fk_kernel():
    import cupy as cp

    return cp.ElementwiseKernel("float32 x", "float32 y",
                                f"float v = x; for (int j = 0; j < {WS_K}; ++j) v = fmaf(v, {WS_A}f, {WS_B}f); y = v;",
                                "exercise_stream_f8")


def _cupy_stream(x, out):
    _fk_kernel()(x, out)


def _ws_chapter(step):
    def _run(x, out):
        from kernels import warp_specialization

        warp_specialization.stream(x, out, k=WS_K, step=step, a=WS_A, b=WS_B)
    return _run


_numba_views: dict = {}


def _ws_chapter_numba(x, out):
    """The chapter's Numba step 2 (ws_regbuf_numba), on Numba views of the CuPy
    arrays (made once per pair of arrays: the timing loop calls this often)."""
    from numba import cuda

    from kernels import warp_specialization

    key = (x.data.ptr, out.data.ptr, x.size)
    if key not in _numba_views:
        _numba_views.clear()
        _numba_views[key] = (x, out, cuda.as_cuda_array(x), cuda.as_cuda_array(out))  # keeps x, out alive with them
    nx, nout = _numba_views[key][2:]
    warp_specialization.stream_numba(nx, nout, k=WS_K, step="ws_regbuf_numba", a=WS_A, b=WS_B)


DB_CPU = (1, 2, 31, 511, 512, 513, 1000, 4097, 9001)  # 4097 and 9001: blocks of 2 and 3 tiles in the simulator
DB_GPU = DB_CPU + ((1 << 20) + 3, 10_000_019)
CPA_GPU = (1, 2, 3, 4, 5, 31, 2047, 2048, 2049, 4097, 100_003, (1 << 20) + 3, 10_000_019)

_GROUP_C = [
    Task("wmma_gemm_edges", "tensor-cores", "cuda", "gemm", _wmma_inputs, lambda s: (s[0], s[1]), _wmma_ref,
         EDGES_GPU[:6], EDGES_GPU, (2048, 2048, 2048), _gemm_work, rtol=1e-3, scale=_wmma_scale,
         chapter_kernel=_tc_chapter("wmma_global"), vendor=_cublas_gemm,
         vendor_name="cublasGemmEx (FP16 in, FP32 out)",
         hint="a warp whose tile crosses an edge of C must still compute it (zeros past the edges add nothing) "
              "and store only what lies inside; the K loop must cover the last, partial slice"),
    Task("wmma_gemm_smem", "tensor-cores", "cuda", "gemm", _wmma_inputs, lambda s: (s[0], s[1]), _wmma_ref,
         SMEM_GPU[:5], SMEM_GPU, (4096, 4096, 4096), _gemm_work, rtol=1e-3, scale=_wmma_scale,
         chapter_kernel=_tc_chapter("wmma_smem"), vendor=_cublas_gemm,
         vendor_name="cublasGemmEx (FP16 in, FP32 out)", goal=("chapter", 0.75),
         hint="a fragment load's leading dimension is the row length of the array it reads, padding included; "
              "store each fragment that lies inside C; for speed, keep 16-byte copies into padded tiles and "
              "2 x 2 fragments a warp"),
    Task("ws_double_buffer", "warp-specialization", "numba", "stream", _vector, lambda n: (n,), _stream_ref,
         DB_CPU, DB_GPU, 1 << 27, lambda n: ("bytes", 8 * n), rtol=1e-5, scale=_stream_scale,
         chapter_kernel=_ws_chapter_numba, vendor=_cupy_stream, vendor_name="cupy ElementwiseKernel (fmaf x 8)",
         hint="a software pipeline needs a drain: the last tile is loaded on the turn before and must still be "
              "computed when there is nothing left to prefetch"),
    Task("ws_cp_async", "warp-specialization", "cuda", "stream", _vector, lambda n: (n,), _stream_ref,
         CPA_GPU[:9], CPA_GPU, 1 << 27, lambda n: ("bytes", 8 * n), rtol=1e-5, scale=_stream_scale,
         chapter_kernel=_ws_chapter("ws_cpasync"), vendor=_cupy_stream, vendor_name="cupy ElementwiseKernel (fmaf x 8)",
         goal=("chapter", 0.6),  # the reference solution: 0.69 on the H200 (its per-tile index work)
         hint="copy every chunk that starts inside x with a source size of the bytes inside it (cp.async "
              "zero-fills the rest), store the last chunk float by float; for speed, keep STAGES - 1 tiles in "
              "flight (issue tile j + STAGES - 1 before waiting for tile j) and fill every SM"),
]

# Planted faults: (task, old, new); each old text occurs once in the task's solution, and each makes the
# check fail on a GPU (the Numba task's in the simulator too), deterministically:

TASKS = {t.name: t for t in (*_FIRST, *_GROUP_A, *_GROUP_B, *_GROUP_C)}
