"""Solution of coalesced_copy: the same fixed grid, but thread t copies
elements t, t + T, t + 2T, ... (T: the threads in the grid), a grid-stride
loop. In every step the 32 threads of a warp copy 32 neighbouring floats,
4 sectors per access, and the loop runs to n, so the tail is copied too."""

from numba import cuda

THREADS = 256


@cuda.jit
def copy_kernel(x, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):  # neighbouring threads, neighbouring elements
        out[i] = x[i]


def blocks() -> int:
    """Eight blocks of 256 threads per SM; two in the simulator (it has no
    SM count, and runs a thread at a time)."""
    sms = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", None)
    return 8 * sms if sms else 2


def copy(x, out):
    """x, out: float32 device arrays of one length n >= 1."""
    copy_kernel[blocks(), THREADS](x, out)
