"""ILP kernels: results, register reports, and the integer-division SASS."""

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
