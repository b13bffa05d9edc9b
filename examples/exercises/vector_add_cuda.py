"""Exercise vector_add_cuda (chapter: the CUDA programming model), in CUDA C.

The same job as vector_add_guard, written in CUDA C and compiled by CuPy's
RawModule: out = a + b, one thread per element. The kernel has no bounds
guard, so the last block writes past the end of `out` whenever n is not a
multiple of the block size (a GPU does not check; the grader puts NaN
after the output and looks). Make it right for every n >= 1. Needs a GPU.

    python -m kernels.exercises check vector_add_cuda examples/exercises/vector_add_cuda.py
"""

import cupy as cp

SOURCE = r"""
extern "C" __global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = a[i] + b[i];
}
"""
THREADS = 256
_kernel = cp.RawModule(code=SOURCE).get_function("add_kernel")


def add(a, b, out):
    """a, b, out: float32 CuPy arrays of one length n >= 1."""
    n = out.size
    _kernel(((n + THREADS - 1) // THREADS,), (THREADS,), (a, b, out, cp.int64(n)))
