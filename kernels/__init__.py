"""The library the handbook teaches: CUDA C kernels (for CuPy's RawModule),
Numba CUDA kernels, thin launch wrappers, and the measuring harness.

Importing this package picks the Numba target before Numba is imported:
with no CUDA GPU present (and NUMBA_ENABLE_CUDASIM unset) it turns on
Numba's CUDA simulator, so every Numba example runs on any machine.
"""

from .device import has_gpu, select_numba_target

select_numba_target()

__all__ = ["has_gpu", "select_numba_target"]
