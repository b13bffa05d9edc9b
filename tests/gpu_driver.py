"""Launch every CUDA C kernel of the project once, at odd sizes, and check
the results: the program that `make sanitize` runs under compute-sanitizer
(memcheck, racecheck). Exit code 0 only when every result is right.

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m tests.gpu_driver [matmul ...]
"""

import sys

import numpy as np


def vector_add() -> None:
    import cupy as cp

    from kernels.vector_add import CUPY_VARIANTS, TUNING, vector_add_cupy

    for n in (1, 5, 1000, 2**20 + 3):
        for variant in CUPY_VARIANTS + TUNING:
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
    for n in (32, 96):  # source 001's kernels: square, N a multiple of 32 (they check no bounds)
        A = cp.random.standard_normal((n, n), dtype=cp.float32)
        B = cp.random.standard_normal((n, n), dtype=cp.float32)
        ref = A.astype(cp.float64) @ B.astype(cp.float64)
        for kernel in mm.SOURCE_001:
            C = cp.full((n, n), cp.nan, dtype=cp.float32)
            mm.matmul_source001(A, B, C, kernel=kernel)
            err = harness.rel_err(C, ref)
            assert err < 1e-5, (n, kernel, err)


def memory() -> None:
    import cupy as cp

    from kernels import memory as mem

    for nbytes, l2_only in ((128, False), (16 << 10, True), (1 << 20, False)):
        mem.latency_global(nbytes, steps=100, l2_only=l2_only)
    for entries in (1, 100, mem.CHASE_SHARED_MAX):
        mem.latency_shared(entries, steps=100)
    out = cp.full(3 * 64, cp.nan, dtype=cp.float32)
    mem.read_global_cupy(cp.random.random(4 * 1024, dtype=cp.float32), 2, out, blocks=3, threads=64)
    mem.read_shared_cupy(cp.random.random(4 * mem.READ_SHARED_F4, dtype=cp.float32), 50, out, blocks=3,
                         threads=64)
    mem.fma_registers_cupy(100, out, blocks=3, threads=64)
    assert not bool(cp.isnan(out).any())
    for n in (1, 1000, 4099):
        for stride in (1, 3, 32):
            x = cp.random.random((n - 1) * stride + 1, dtype=cp.float32)
            out = cp.full(n, cp.nan, dtype=cp.float32)
            assert bool(cp.array_equal(mem.copy_strided_cupy(x, out, stride), x[::stride]))
        for offset in (0, 1, 31):
            x = cp.random.random(n + offset, dtype=cp.float32)
            out = cp.full(n, cp.nan, dtype=cp.float32)
            assert bool(cp.array_equal(mem.copy_offset_cupy(x, out, offset), x[offset:]))
        aos = cp.random.standard_normal((n, 3), dtype=cp.float32)
        for layout, p in (("aos", aos), ("soa", cp.ascontiguousarray(aos.T))):
            assert bool(cp.allclose(mem.norm_cupy(p, layout), cp.linalg.norm(aos, axis=1), rtol=1e-6))
            assert bool(cp.array_equal(mem.scale_x_cupy(p, layout), 2 * aos[:, 0]))


def host_transfer() -> None:
    import numpy as np

    from kernels import host_transfer as ht

    for n in (1, 1000, 2**16 + 3):
        x = ht.pinned_like(np.random.default_rng(n).random(n, dtype=np.float32))
        out = ht.pinned_like(np.full(n, np.nan, dtype=np.float32))
        for chunks, streams in ((1, 1), (3, 2), (7, 4)):
            ht.pipeline(x, out, chunks=min(chunks, n), streams=streams, iters=8)
            np.testing.assert_allclose(out, ht.poly_reference(x, 8), rtol=1e-6)
        for mode in ht.HOST_READ_MODES:
            case = ht.HostRead(mode, np.random.default_rng(n).random(n, dtype=np.float32))
            case.reset()
            case.run()
            np.testing.assert_allclose(case.result(), case.expected(), rtol=1e-5, atol=1e-6)


def transpose() -> None:
    import cupy as cp

    from kernels import transpose as tr

    for rows, cols in ((1, 1), (33, 65), (257, 131), (260, 196)):
        x = cp.random.random((rows, cols), dtype=cp.float32)
        for variant in tr.VARIANTS:
            assert bool(cp.array_equal(tr.transpose_cupy(x, variant=variant), x.T)), (variant, rows, cols)
        for config in tr.TUNING:
            assert bool(cp.array_equal(tr.transpose_cupy(x, config=config), x.T)), (config, rows, cols)
        assert bool(cp.array_equal(tr.copy_tiled_cupy(x), x))


def stencil() -> None:
    import cupy as cp
    import numpy as np

    from kernels import stencil as st

    for H, W in ((1, 1), (5, 7), (33, 65), (130, 47)):
        x = cp.random.standard_normal((H, W), dtype=cp.float32)
        w = cp.random.standard_normal((st.KW, st.KW), dtype=cp.float32)
        ref = st.reference(cp.asnumpy(x), cp.asnumpy(w))
        for variant in st.VARIANTS:
            out = st.conv2d_cupy(x, w, variant=variant)
            assert np.allclose(cp.asnumpy(out), ref, rtol=1e-4, atol=1e-4), (variant, H, W)


DRIVERS = [vector_add, reduction, divergence, ilp, matmul, memory, host_transfer, transpose, stencil]


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
