"""Exercise coalesced_copy (chapter: memory hierarchy, coalescing).

`copy(x, out)` copies n >= 1 floats, out = x, with a fixed grid (a few
blocks per SM, whatever n is). Each thread copies its own contiguous chunk
of n // (threads in the grid) elements, the way a CPU thread would split
the work. Two things are wrong with that:

1) it is wrong: the chunk is rounded down, so the last n % (threads in the
   grid) elements are never written (and when n is smaller than the grid,
   nothing is);
2) it is slow: in each step the 32 threads of a warp touch 32 addresses a
   chunk apart, 32 sectors of 32 bytes for 128 useful bytes, on the loads
   and on the stores.

Make it right for every n, then, on a GPU, make it fast: at least 0.7 of
the speed of the chapter's copy (`copy_strided` at stride 1, within a few
percent of the device copy). Keep the fixed grid; change which elements
each thread takes, so that neighbouring threads of a warp touch
neighbouring elements in every step.

    python -m kernels.exercises check coalesced_copy examples/exercises/coalesced_copy.py
"""

from numba import cuda

THREADS = 256


@cuda.jit
def copy_kernel(x, out):
    n = out.shape[0]
    t, threads = cuda.grid(1), cuda.gridsize(1)
    chunk = n // threads
    for i in range(t * chunk, (t + 1) * chunk):  # thread t's own chunk: a warp's accesses are a chunk apart
        out[i] = x[i]


def blocks() -> int:
    """Eight blocks of 256 threads per SM; two in the simulator (it has no
    SM count, and runs a thread at a time)."""
    sms = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", None)
    return 8 * sms if sms else 2


def copy(x, out):
    """x, out: float32 device arrays of one length n >= 1."""
    copy_kernel[blocks(), THREADS](x, out)
