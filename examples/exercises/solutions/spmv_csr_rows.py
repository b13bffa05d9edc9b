"""Solution of spmv_csr_rows: each row's sum starts at 0 and the loop runs
over indptr[row] .. indptr[row + 1] - 1, so an empty row gets 0 and reads
nothing."""

import math

from numba import cuda, float32

THREADS = 128


@cuda.jit
def spmv_kernel(indptr, indices, data, x, out):
    row = cuda.grid(1)
    if row < out.shape[0]:
        acc = float32(0.0)
        for k in range(indptr[row], indptr[row + 1]):
            acc += data[k] * x[indices[k]]
        out[row] = acc


def spmv(indptr, indices, data, x, out):
    """indptr: n_rows + 1 int32, indices: nnz int32, data: nnz float32,
    x: n_cols float32, out: n_rows float32 (device arrays)."""
    spmv_kernel[math.ceil(out.shape[0] / THREADS), THREADS](indptr, indices, data, x, out)
