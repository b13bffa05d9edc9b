"""Divergence kernels: results against a host reference, and their SASS."""

import numpy as np
import pytest

from kernels import divergence as dv
from kernels import sass

SPLITS = [0, 1, 16, 31, 32]


def x_of(n, seed=0):
    return np.random.default_rng(seed).random(n, dtype=np.float32) + np.float32(0.5)


@pytest.mark.parametrize("split", SPLITS)
def test_numba_branch_long(split):
    from numba import cuda

    x = x_of(1000, split)
    out = dv.branch_numba(cuda.to_device(x), split=split, iters=16, threads=64)
    np.testing.assert_allclose(out.copy_to_host(), dv.reference(x, split, 16), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", dv.BRANCHES)
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("n", [1, 1000, 2**20 + 3])
def test_cupy_branches(n, split, kind):
    import cupy as cp

    x = x_of(n, n + split)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    dv.branch_cupy(cp.asarray(x), out, split=split, iters=64, kind=kind)
    np.testing.assert_allclose(cp.asnumpy(out), dv.reference(x, split, 64), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", dv.SEED)
def test_seed_example(kind):
    import cupy as cp

    h = np.random.default_rng(1).uniform(0, 200, 4099).astype(np.float32)
    d = dv.seed_cupy(cp.asarray(h), 100.0, kind=kind)
    np.testing.assert_array_equal(cp.asnumpy(d), np.where(h > 100, h * 2, h / 2))


def test_bad_inputs():
    from numba import cuda

    x = cuda.to_device(np.ones(64, dtype=np.float32))
    with pytest.raises(ValueError, match="split"):
        dv.branch_numba(x, split=33, iters=1)
    with pytest.raises(ValueError, match="iters"):
        dv.branch_numba(x, split=1, iters=-1)
    with pytest.raises(TypeError, match="host"):
        dv.branch_numba(np.ones(64, dtype=np.float32), split=1, iters=1)


needs_sass = pytest.mark.skipif(not sass.available(), reason="needs nvcc, cuobjdump and nvdisasm")


@needs_sass
@pytest.mark.parametrize("kernel", ["seed_if_else", "seed_ternary"])
def test_seed_example_has_no_branch(kernel):
    """The source's 31/1 example compiles to predicated code: no BRA at all."""
    lines = sass.sass("divergence.cu", kernel)
    ops = sass.opcodes(lines)
    assert ops["BRA"] == 0, ops
    predicated = [ln for ln in lines if "*/ @" in ln and "EXIT" not in ln]
    assert predicated or ops["FSEL"], "expected predicated instructions or a select (FSEL)"


@needs_sass
def test_short_branch_is_predicated_and_long_branch_branches():
    short = sass.sass("divergence.cu", "branch_short")
    pred_ffma = [ln for ln in short if "FFMA" in ln and "@" in ln]
    assert pred_ffma, "the short branch's FMAs should be predicated"
    long_ = sass.sass("divergence.cu", "branch_long")
    assert not [ln for ln in long_ if "FFMA" in ln and "@" in ln], "the long branch's FMAs are not predicated"
    assert sass.opcodes(long_)["BRA"] >= 2


@needs_sass
def test_committed_listings_are_current():
    """Every listing a topic declares (LISTINGS) is committed as it compiles today."""
    from kernels.bench.listings import listings

    found = listings()
    assert {"seed_if_else.sass", "int_counts.table", "autotuned_launch_bounds.ptxas"} <= set(found)
    for name, make in found.items():
        path = sass.LISTINGS / name
        assert path.read_text() == make(), f"run python -m kernels.bench.listings ({name})"


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/divergence.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("divergence.py", "v = v * float32(1.001) - float32(0.001)", "v = v * float32(1.001) + float32(0.001)", "numba"),
    ("divergence.cu",
     "for (int k = 0; k < iters; ++k) v = fmaf(v, 1.001f, -0.001f);",
     "for (int k = 0; k < iters; ++k) v = fmaf(v, 1.001f, 0.001f);",
     "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/divergence.py:seed_launch:seed_cupy": (
        "(n + threads - 1) // threads", "n // threads", "+ -> - in the rounding only adds an idle block"),
    "examples/divergence.py:cupy_launch:branch_cupy": (
        "(n + threads - 1) // threads", "n // threads", "as seed_cupy"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import divergence as dv
    from tests.overlap import cupy_case, numba_case, ex, N, N1

    return [
        cupy_case("branch_cupy", call=lambda i, out: dv.branch_cupy(i["x"], out, split=16, iters=8),
            inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("examples/divergence.branch_cupy", call=lambda i, out: ex("divergence.branch_cupy")(i["x"], out, 16, 8),
            inputs={"x": (N,)}, out_shape=(N,)),
        numba_case("branch_numba", call=lambda i, out: dv.branch_numba(i["x"], out, split=16, iters=4, threads=32),
            inputs={"x": (N1,)}, out_shape=(N1,)),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "seed_cupy": "in place by design: data is the input and the output",
}
