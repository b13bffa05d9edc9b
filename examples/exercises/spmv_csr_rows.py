"""Exercise spmv_csr_rows (chapter: algorithm-level optimization, SpMV in CSR).

`spmv(indptr, indices, data, x, out)` computes out = A x for a sparse
matrix A of n_rows x n_cols in CSR: row i's nonzeros are
data[indptr[i]:indptr[i + 1]] (float32) at columns
indices[indptr[i]:indptr[i + 1]] (int32); indptr (int32) has n_rows + 1
entries, from 0 to nnz. One thread per row, as the chapter's scalar step.
The kernel starts each row's sum with the row's first term and adds the
others: wrong for an empty row (indptr[i] == indptr[i + 1]), which has no
first term. It then takes the first term of the next row instead, and for
an empty last row it reads past the end of data and indices. The grader's
matrices have empty rows (sparse matrices often do: a node with no edges,
a word in no document). Make it right for every matrix.

    python -m kernels.exercises check spmv_csr_rows examples/exercises/spmv_csr_rows.py
"""

import math

from numba import cuda

THREADS = 128


@cuda.jit
def spmv_kernel(indptr, indices, data, x, out):
    row = cuda.grid(1)
    if row < out.shape[0]:
        start, end = indptr[row], indptr[row + 1]
        acc = data[start] * x[indices[start]]  # the first term starts the sum
        for k in range(start + 1, end):
            acc += data[k] * x[indices[k]]
        out[row] = acc


def spmv(indptr, indices, data, x, out):
    """indptr: n_rows + 1 int32, indices: nnz int32, data: nnz float32,
    x: n_cols float32, out: n_rows float32 (device arrays)."""
    spmv_kernel[math.ceil(out.shape[0] / THREADS), THREADS](indptr, indices, data, x, out)
