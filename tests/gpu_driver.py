"""Launch every CUDA C kernel of the project once, at odd sizes, and check
the results: the program that `make sanitize` runs under compute-sanitizer
(memcheck, racecheck). Exit code 0 only when every result is right.

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m tests.gpu_driver [matmul ...]
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


def reduction() -> None:
    import cupy as cp

    from kernels import reduction as red

    for n in (1, 31, 33, 2**20 + 7):
        for variant in red.VARIANTS + red.TUNING:
            for threads in (64, 256, 1024):
                x = cp.random.random(n, dtype=cp.float32)
                got = float(red.reduce_sum_cupy(x, variant=variant, threads=threads))
                want = float(cp.sum(x, dtype=cp.float64))
                assert abs(got - want) <= 1e-5 * want, (n, variant, threads, got, want)


def divergence() -> None:
    import cupy as cp

    from kernels import divergence as dv

    for n in (1, 1000, 2**16 + 3):
        x = cp.random.random(n, dtype=cp.float32) + 0.5
        for kind in dv.BRANCHES:
            for split in (0, 1, 16, 32):
                out = cp.full(n, cp.nan, dtype=cp.float32)
                dv.branch_cupy(x, out, split=split, iters=8, kind=kind)
                assert not bool(cp.isnan(out).any())
        for kind in dv.SEED:
            dv.seed_cupy(x.copy(), 1.0, kind=kind)


def ilp() -> None:
    import cupy as cp

    from kernels import ilp as k

    x = cp.random.random(1024, dtype=cp.float32)
    for name in k.FMA_KERNELS:
        out = cp.full(1024, cp.nan, dtype=cp.float32)
        k.fma_chains_cupy(x, out, kernel=name, iters=64)
        assert not bool(cp.isnan(out).any()), name
    xi = cp.arange(1024, dtype=cp.uint32)
    for name in k.INT_KERNELS:
        k.int_cupy(xi, kernel=name, iters=8)


def matmul() -> None:
    import cupy as cp

    from kernels import harness, matmul as mm
    from kernels.bench.matmul import CONFIGS

    for M, N, K in ((1, 1, 1), (33, 65, 17), (257, 131, 67)):
        A = cp.random.standard_normal((M, K), dtype=cp.float32)
        B = cp.random.standard_normal((K, N), dtype=cp.float32)
        ref = A.astype(cp.float64) @ B.astype(cp.float64)
        runs = [(v, lambda C, v=v: mm.matmul_cupy(A, B, C, variant=v)) for v in mm.VARIANTS]
        runs += [(mm.config_name(c), lambda C, c=c: mm.matmul_warptiled_config(A, B, C, c))
                 for c in CONFIGS]
        for name, launch in runs:
            C = cp.full((M, N), cp.nan, dtype=cp.float32)
            launch(C)
            err = harness.rel_err(C, ref)
            assert err < 1e-5, (M, N, K, name, err)


DRIVERS = [vector_add, reduction, divergence, ilp, matmul]


def main(argv=None) -> int:
    """Run every driver, or those named on the command line."""
    import kernels  # noqa: F401

    names = sys.argv[1:] if argv is None else argv
    unknown = set(names) - {d.__name__ for d in DRIVERS}
    if unknown:
        print(f"unknown drivers {sorted(unknown)}; choose from {[d.__name__ for d in DRIVERS]}")
        return 2
    for drive in DRIVERS:
        if names and drive.__name__ not in names:
            continue
        drive()
        print(f"{drive.__name__}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
