"""What the overlap cases are made of (tests/test_overlap.py runs them).

Each chapter's tests/test_<topic>.py declares its cases in `overlap_cases()`
(tests/chapters.py finds them): a `Case` names a wrapper that takes an
output, the shapes of its array inputs and its output, and how to call it.
The sizes below make many blocks (at least 8), so that without the check
the kernel really would go wrong: 2^20 elements or 1024 x 1024 on a GPU; in
Numba's CUDA simulator a few hundred elements in blocks of 32 threads.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from kernels.device import numba_simulator

ROOT = Path(__file__).resolve().parent.parent
N = 1 << 20    # 1-D on the GPU: 4096 blocks of 256 threads
SIDE = 1024    # 2-D on the GPU
SIM = numba_simulator()
N_SIM = 293    # one element per thread, 32-thread blocks: 10 blocks
N_SIM4 = 9 * 128  # 4 elements per thread (memory.PER_THREAD), 32-thread blocks: 9 blocks

# Numba cases: in the simulator on the CPU, at GPU sizes on a GPU
N1 = N_SIM if SIM else N
N4 = N_SIM4 if SIM else N
SQ = (SIDE, SIDE)
SQ_NUMBA = (96, 96) if SIM else SQ  # coarsened transpose: 32 x 32 tiles, 9 blocks in the simulator
IMAGE = (32, 64) if SIM else SQ     # tiled16: 16 x 16 tiles, 8 blocks in the simulator
ROWS = 8 * 128 if SIM else N        # spmv: rows of the matrix
WIDE = (16, 40) if SIM else SQ      # fusion: a few rows in the simulator


@functools.cache
def example(name: str):
    """examples/<name>.py as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location(f"{name}_example_overlap", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Case:
    id: str
    lib: str                 # arrays: "cupy", "numba" (device arrays) or "host" (NumPy)
    gpu: bool                # needs a CUDA GPU (CuPy somewhere in the call)
    call: Callable           # call(inputs: dict name -> array, out)
    inputs: dict             # name -> shape of every array input
    out_shape: tuple
    dtype: type = np.float32
    out_name: str = "out"
    shift: int = 1           # elements between the input's start and the overlapping out's
    input_kept: bool = True  # False: the wrapper writes that input too (a work buffer)


cupy_case = functools.partial(Case, lib="cupy", gpu=True)
numba_case = functools.partial(Case, lib="numba", gpu=False)


def ex(name: str):
    """The function "module.fn" of examples/module.py (the cases call this at
    test time, so collecting the tests loads no example)."""
    module, _, fn = name.partition(".")
    return getattr(example(module), fn)


def pipeline_host(n):
    """Host input and output of a pipeline whose work buffers are the case."""
    x = np.random.default_rng(5).uniform(0.25, 0.75, n).astype(np.float32)
    return x, np.full(n, np.nan, dtype=np.float32)


def spmv_lengths(n_rows: int) -> np.ndarray:
    """Row lengths of the spmv cases' n_rows x n_rows matrix: 1 to 8 nonzeros."""
    return np.arange(n_rows) % 8 + 1


def spmv_structure(n_rows: int, lib: str):
    """indptr and indices of the spmv cases' matrix, in `lib`'s arrays (data
    and x are the cases' float32 inputs)."""
    indptr = np.concatenate([[0], np.cumsum(spmv_lengths(n_rows))]).astype(np.int32)
    indices = (np.arange(indptr[-1]) * 7919 % n_rows).astype(np.int32)
    return to_lib(indptr, lib), to_lib(indices, lib)


# ------------------------------------------------------------- arrays --

def values(rng, shape, dtype) -> np.ndarray:
    """Random, never zero, small enough for every kernel's arithmetic."""
    if np.dtype(dtype) == np.uint32:
        return rng.integers(1, 2**32, size=shape, dtype=np.uint32)
    return rng.uniform(0.25, 0.75, shape).astype(dtype)


def poison(n: int, dtype) -> np.ndarray:
    """What an output holds before the launch: NaN (uint32: all ones)."""
    return np.full(n, np.iinfo(np.uint32).max if np.dtype(dtype) == np.uint32 else np.nan, dtype=dtype)


def to_lib(host: np.ndarray, lib: str):
    if lib == "cupy":
        import cupy as cp

        return cp.asarray(host)
    if lib == "numba":
        from numba import cuda

        return cuda.to_device(host)
    return host.copy()


def to_host(a, lib: str) -> np.ndarray:
    if lib == "cupy":
        import cupy as cp

        return cp.asnumpy(a)
    if lib == "numba":
        return a.copy_to_host()
    return np.array(a)


def view(buf, lo: int, shape: tuple):
    """prod(shape) elements of the 1-D buffer from element lo, as `shape`."""
    return buf[lo:lo + math.prod(shape)].reshape(shape)
