"""Argument checks shared by every launch wrapper.

Each check raises TypeError (wrong kind of object or dtype) or ValueError
(wrong shape, layout or size) and names the argument and what was expected,
so a wrong call fails before anything reaches the GPU.
"""

from __future__ import annotations

import numpy as np

from .standalone import byte_span, overlaps  # noqa: F401  (one text: the examples carry a copy)


def _kind(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}"


def array_module(x):
    """numpy, or cupy for a CuPy array (so that a reference built from CuPy
    inputs runs on the GPU); cupy is imported only then."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def require_cupy_array(name: str, x):
    """x must be a cupy.ndarray (device memory), not a host array."""
    import cupy as cp

    if not isinstance(x, cp.ndarray):
        hint = " (a host array: move it with cupy.asarray)" if isinstance(x, np.ndarray) else ""
        raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {_kind(x)}{hint}")
    return x


def _is_numba_device_array(x) -> bool:
    from numba import cuda

    if hasattr(cuda, "is_cuda_array"):  # the hardware target
        return cuda.is_cuda_array(x)
    # Numba's CUDA simulator: device arrays are FakeCUDAArray wrappers
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return isinstance(x, FakeCUDAArray)


def require_numba_array(name: str, x):
    """x must be a Numba device array (or any __cuda_array_interface__ object)."""
    if isinstance(x, np.ndarray) or not _is_numba_device_array(x):
        hint = " (a host array: move it with numba.cuda.to_device)" if isinstance(x, np.ndarray) else ""
        raise TypeError(f"{name} must be a CUDA device array, got {_kind(x)}{hint}")
    return x


def require_dtype(name: str, x, dtype) -> None:
    if np.dtype(x.dtype) != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {np.dtype(x.dtype)}")


def require_ndim(name: str, x, ndim: int) -> None:
    if len(x.shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")


def require_contiguous(name: str, x) -> None:
    """C-contiguous: the kernels index memory as one dense row-major block."""
    flags = getattr(x, "flags", None)
    if flags is not None:
        ok = bool(flags["C_CONTIGUOUS"])
    else:  # Numba device arrays
        ok = bool(x.is_c_contiguous())
    if not ok:
        raise ValueError(f"{name} must be C-contiguous, got strides {tuple(x.strides)}")


def require_same_shape(name: str, x, like_name: str, like) -> None:
    if tuple(x.shape) != tuple(like.shape):
        raise ValueError(
            f"{name} must have the shape of {like_name} {tuple(like.shape)}, got {tuple(x.shape)}"
        )


def require_gemm_shapes(A, B, C=None, *, max_elements: int = 2**31 - 1) -> tuple[int, int, int]:
    """A (M x K) @ B (K x N) = C (M x N, or None): the inner dimensions agree,
    C has the product's shape, no dimension is 0, and no matrix has more
    than `max_elements` (kernels that index with int). Returns (M, N, K)."""
    (M, K), (K2, N) = A.shape, B.shape
    if K2 != K:
        raise ValueError(f"inner dimensions differ: A is {M}x{K} but B is {K2}x{N} (B must have {K} rows)")
    if C is not None and tuple(C.shape) != (M, N):
        raise ValueError(f"C must have shape ({M}, {N}) for A {tuple(A.shape)} @ B {tuple(B.shape)}, "
                         f"got {tuple(C.shape)}")
    if min(M, N, K) < 1:
        raise ValueError(f"every dimension must be >= 1, got M={M}, N={N}, K={K}")
    if max(M * K, K * N, M * N) > max_elements:
        raise ValueError(f"a matrix has 2^31 elements or more (M={M}, N={N}, K={K}): "
                         "the kernels index with 32-bit int")
    return M, N, K


def require_int(name: str, value, low: int, high: int | None = None) -> int:
    """An int (not a bool) in [low, high]; high None: no upper bound."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {_kind(value)}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be in [{low}, {high if high is not None else 'inf'}], got {value}")
    return int(value)


def require_block_size(name: str, threads: int) -> None:
    """A block holds at most 1024 threads; use whole warps of 32."""
    if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool):
        raise TypeError(f"{name} must be an int, got {_kind(threads)}")
    if not 32 <= threads <= 1024 or threads % 32:
        raise ValueError(f"{name} must be a multiple of 32 between 32 and 1024, got {threads}")


def require_vector(name: str, x, dtype, *, lib: str):
    """A 1-D, C-contiguous device array of `dtype`; lib is "cupy" or "numba"."""
    (require_cupy_array if lib == "cupy" else require_numba_array)(name, x)
    require_dtype(name, x, dtype)
    require_ndim(name, x, 1)
    require_contiguous(name, x)
    return x


def require_vector_like(name: str, out, like_name: str, like, dtype, *, lib: str):
    """An output vector: as require_vector, with the shape of `like`."""
    require_vector(name, out, dtype, lib=lib)
    require_same_shape(name, out, like_name, like)
    return out


def require_host_vector(name: str, x, dtype=np.float32):
    """A 1-D, C-contiguous NumPy array of `dtype` in host memory (pageable
    or pinned). Numba's managed and mapped arrays are NumPy arrays too."""
    if not isinstance(x, np.ndarray):
        hint = (" (a device array: copy it to the host first)"
                if hasattr(x, "__cuda_array_interface__") else "")
        raise TypeError(f"{name} must be a numpy.ndarray in host memory, got {_kind(x)}{hint}")
    require_dtype(name, x, dtype)
    require_ndim(name, x, 1)
    require_contiguous(name, x)
    return x


def require_no_overlap(out_name: str, out, **inputs) -> None:
    """The output must share no byte with any input. The kernels declare
    their pointers __restrict__ and read inputs that other threads' writes
    would already have overwritten: an overlap gives a silently wrong answer.
    Raises ValueError naming the output and the input."""
    for name, x in inputs.items():
        if x is not None and overlaps(out, x):
            raise ValueError(f"{out_name} must not overlap {name}: they share memory, and the kernel "
                             f"reads {name} while it writes {out_name} (write the result to a new array)")
