"""Launch every CUDA C kernel of the project once, at odd sizes, and check
the results: the program that `make sanitize` runs under compute-sanitizer
(memcheck, racecheck). Exit code 0 only when every result is right.

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m tests.gpu_driver
"""

import sys

import numpy as np


def vector_add() -> None:
    import cupy as cp

    from kernels.vector_add import VARIANTS, vector_add_cupy

    for n in (1, 1000, 2**20 + 3):
        for variant in VARIANTS:
            for threads in (32, 256, 1024):
                a = cp.random.standard_normal(n, dtype=cp.float32)
                b = cp.random.standard_normal(n, dtype=cp.float32)
                out = cp.full(n, cp.nan, dtype=cp.float32)
                vector_add_cupy(a, b, out, threads=threads, variant=variant)
                ref = a.astype(cp.float64) + b.astype(cp.float64)
                assert cp.allclose(out, ref, rtol=1e-6, atol=1e-7), (n, variant, threads)


DRIVERS = [vector_add]


def main() -> int:
    import kernels  # noqa: F401

    for drive in DRIVERS:
        drive()
        print(f"{drive.__name__}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
