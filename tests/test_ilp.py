"""ILP kernels: results, register reports, and the integer-division SASS;
and the self-contained launchers of examples/ilp.py that docs/ilp*.md show."""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from kernels import ilp, sass

needs_sass = pytest.mark.skipif(not sass.available(), reason="needs nvcc, cuobjdump and nvdisasm")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ilp.FMA_KERNELS)
def test_fma_kernels(kernel):
    import cupy as cp

    chains = 1 if kernel == "ilp_chain_unrolled" else int(kernel.split("_")[2])
    x = np.random.default_rng(0).random(4096, dtype=np.float32) * 0.5 + 0.25
    out = cp.full(4096, cp.nan, dtype=cp.float32)
    ilp.fma_chains_cupy(cp.asarray(x), out, kernel=kernel, iters=2048)
    np.testing.assert_allclose(cp.asnumpy(out), ilp.fma_reference(x, chains, 2048), rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ilp.INT_KERNELS)
def test_int_kernels(kernel):
    import cupy as cp

    x = np.random.default_rng(0).integers(0, 2**31, 4096, dtype=np.uint32)
    out = ilp.int_cupy(cp.asarray(x), kernel=kernel, divisor_log2=5, iters=100)
    np.testing.assert_array_equal(cp.asnumpy(out), ilp.int_reference(x, 5, 100))


@pytest.mark.gpu
def test_bad_inputs():
    import cupy as cp

    x = cp.ones(64, dtype=cp.float32)
    with pytest.raises(ValueError, match="multiple of 32"):
        ilp.fma_chains_cupy(x, iters=100)
    with pytest.raises(ValueError, match="threads"):
        ilp.fma_chains_cupy(cp.ones(50, dtype=cp.float32))
    with pytest.raises(TypeError, match="uint32"):
        ilp.int_cupy(x)
    with pytest.raises(ValueError, match="kernel"):
        ilp.fma_chains_cupy(x, kernel="ilp_chains_3")


@needs_sass
def test_register_pressure_and_the_capped_spill():
    res = sass.resources("ilp.cu")
    regs = [res[f"ilp_chains_{k}"]["registers"] for k in ilp.CHAINS]
    assert regs == sorted(regs) and regs[-1] > regs[0], regs  # more chains, more registers
    assert all(res[f"ilp_chains_{k}"]["spill_stores"] == 0 for k in ilp.CHAINS)
    capped = res["ilp_chains_32_capped"]
    assert capped["registers"] <= 32 and capped["spill_stores"] > 0, capped


@needs_sass
def test_division_is_a_sequence_and_shifts_are_not():
    div = sass.opcodes(sass.sass("ilp.cu", "int_div_mod"))
    shift = sass.opcodes(sass.sass("ilp.cu", "int_shift_mask"))
    assert div["MUFU"] >= 1 and div["IMAD"] > shift["IMAD"], (div, shift)  # reciprocal, then IMAD.HI
    assert shift["MUFU"] == 0 and (shift["SHF"] + shift["LOP3"]) > 0, shift
    assert sum(div.values()) > sum(shift.values())


@needs_sass
def test_four_chain_loop_is_unrolled_further_than_eight():
    """docs/ilp*.md: "the SASS has 116 FFMA against 40"."""
    f4 = sass.opcodes(sass.sass("ilp.cu", "ilp_chains_4"))["FFMA"]
    f8 = sass.opcodes(sass.sass("ilp.cu", "ilp_chains_8"))["FFMA"]
    assert (f4, f8) == (116, 40), (f4, f8)


# ------------------------------------------- the example's own launchers --
# docs/ilp*.md show the launchers and checks of examples/ilp.py (no
# `kernels` import there): same kernels, same references as the library.

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def example():
    """examples/ilp.py as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location("ilp_example", ROOT / "examples" / "ilp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_has_the_library_kernels_and_references():
    ex = example()
    assert ex.FMA_KERNELS == ilp.FMA_KERNELS and ex.INT_KERNELS == ilp.INT_KERNELS
    x = np.random.default_rng(1).uniform(0.25, 0.75, 64).astype(np.float32)
    for k in ilp.CHAINS:
        np.testing.assert_array_equal(ex.fma_reference(x, k, 128), ilp.fma_reference(x, k, 128))
    xi = np.random.default_rng(2).integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    for s in (1, 5, 31):
        np.testing.assert_array_equal(ex.int_reference(xi, s, 50), ilp.int_reference(xi, s, 50))


def test_example_int_reference_is_the_kernels_arithmetic():
    """v / d + v % d + i in 32-bit unsigned arithmetic, checked step by step."""
    xi = np.array([0, 1, 31, 32, 2**32 - 1], dtype=np.uint32)
    v = [int(a) for a in xi]
    for i in range(7):
        v = [(a // 32 + a % 32 + i) % 2**32 for a in v]
    np.testing.assert_array_equal(example().int_reference(xi, 5, 7), np.array(v, dtype=np.uint32))


@pytest.mark.gpu
def test_example_checks_every_kernel():
    ex = example()
    for name in ex.FMA_KERNELS:
        ex.check_fma(name)
    for name in ex.INT_KERNELS:
        ex.check_int(name)


@pytest.mark.gpu
def test_example_chains_demo_checks_what_it_times():
    example().chains_demo(iters=2048, kernels=("ilp_chains_1", "ilp_chains_32_capped"))
    example().chains_demo(iters=2048, kernels=("ilp_chains_8",), threads=256, blocks_per_sm=8)


@pytest.mark.gpu
def test_example_rejects_bad_input():
    import cupy as cp

    ex = example()
    x = cp.ones(64, dtype=cp.float32)
    cases = [
        (lambda: ex.fma_chains_cupy(x, iters=100), ValueError, "multiple of 32"),
        (lambda: ex.fma_chains_cupy(cp.ones(50, dtype=cp.float32)), ValueError, "multiple of threads"),
        (lambda: ex.fma_chains_cupy(x, threads=48), ValueError, "threads"),
        (lambda: ex.fma_chains_cupy(x, kernel="ilp_chains_3"), ValueError, "kernel"),
        (lambda: ex.fma_chains_cupy(np.ones(64, dtype=np.float32)), TypeError, "cupy.ndarray"),
        (lambda: ex.fma_chains_cupy(x, cp.ones(32, dtype=cp.float32)), ValueError, "out"),
        (lambda: ex.int_cupy(x), TypeError, "uint32"),
        (lambda: ex.int_cupy(cp.ones(256, dtype=cp.uint32), divisor_log2=32), ValueError, "divisor_log2"),
        (lambda: ex.int_cupy(cp.ones(256, dtype=cp.uint32), kernel="int_div"), ValueError, "kernel"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_capped_kernel_refuses_a_gpu_whose_sm_holds_fewer_than_2048_threads():
    """Faked device attributes (no GPU needed): Turing (1024 threads per SM)
    and consumer Ampere/Ada (1536) cannot keep __launch_bounds__(1024, 2)."""
    from kernels import ilp as k

    for gpu, held in (("NVIDIA GeForce RTX 2080", 1024), ("NVIDIA GeForce RTX 4090", 1536)):
        with pytest.raises(RuntimeError, match=f"2048 threads.*{gpu} holds {held}"):
            k.require_threads_per_sm("ilp_chains_32_capped", gpu, held)
    k.require_threads_per_sm("ilp_chains_32_capped", "NVIDIA H200", 2048)   # Hopper: fine
    k.require_threads_per_sm("ilp_chains_32", "NVIDIA GeForce RTX 2080", 1024)  # uncapped: any GPU


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/ilp.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("ilp.cu", "for (int k = 0; k < K; ++k) s += acc[k];", "for (int k = 0; k < K; ++k) s -= acc[k];", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/ilp.py:fma_launcher:fma_chains_cupy": (
        "get_function(kernel)((blocks,), (threads,)", "get_function(kernel)((blocks - 1,), (threads,)",
        "its first comparison, held < 2048, cannot change on an SM that holds exactly 2048 threads; "
        "one block too few leaves the last outputs unwritten"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import ilp
    from tests.overlap import cupy_case, ex, N

    return [
        cupy_case("fma_chains_cupy", call=lambda i, out: ilp.fma_chains_cupy(i["x"], out, kernel="ilp_chains_4", iters=64),
            inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("int_cupy", call=lambda i, out: ilp.int_cupy(i["x"], out, iters=8),
            inputs={"x": (N,)}, out_shape=(N,), dtype=np.uint32),
        cupy_case("examples/ilp.fma_chains_cupy",
            call=lambda i, out: ex("ilp.fma_chains_cupy")(i["x"], out, kernel="ilp_chains_4", iters=64),
            inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("examples/ilp.int_cupy", call=lambda i, out: ex("ilp.int_cupy")(i["x"], out, iters=8),
            inputs={"x": (N,)}, out_shape=(N,), dtype=np.uint32),
    ]
