"""The 5 x 5 convolution of the four-step method (kernels/stencil.py)
against a float64 NumPy reference: every step at shapes that are no
multiple of any tile, output poisoned with NaN, relative norm < 1e-5.
Numba runs in the CUDA simulator at small shapes; CuPy needs a GPU."""

import numpy as np
import pytest

from kernels import stencil as st
from kernels.device import numba_simulator

SHAPES = [(1, 1), (5, 7), (33, 65), (130, 47), (1000, 1013)]


def data(H, W, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((H, W), dtype=np.float32), rng.standard_normal((st.KW, st.KW), dtype=np.float32)


def rel(out, ref):
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def test_reference_is_a_convolution():
    x = np.zeros((7, 9), np.float32)
    x[3, 4] = 1.0  # an impulse returns the flipped filter around it
    w = np.arange(25, dtype=np.float32).reshape(5, 5)
    out = st.reference(x, w)
    np.testing.assert_array_equal(out[1:6, 2:7], w[::-1, ::-1])
    assert out.sum() == w.sum()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", st.VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_cupy_steps(shape, variant):
    import cupy as cp

    x, w = data(*shape, seed=shape[0])
    out = cp.full(shape, cp.nan, dtype=cp.float32)
    res = st.conv2d_cupy(cp.asarray(x), cp.asarray(w), out, variant=variant)
    assert res is out
    assert rel(cp.asnumpy(out), st.reference(x, w)) < 1e-5


@pytest.mark.gpu
def test_cupy_constant_filter_follows_each_call():
    """Step 4 reads the filter from __constant__ memory: a second call with
    another filter must not see the first."""
    import cupy as cp

    x, w1 = data(40, 50, seed=1)
    w2 = -2 * w1
    a = st.conv2d_cupy(cp.asarray(x), cp.asarray(w1), variant="tuned")
    b = st.conv2d_cupy(cp.asarray(x), cp.asarray(w2), variant="tuned")
    assert rel(cp.asnumpy(a), st.reference(x, w1)) < 1e-5
    assert rel(cp.asnumpy(b), st.reference(x, w2)) < 1e-5


@pytest.mark.gpu
def test_cupy_rejects_bad_input():
    import cupy as cp

    x = cp.zeros((8, 8), cp.float32)
    w = cp.zeros((5, 5), cp.float32)
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        st.conv2d_cupy(np.zeros((8, 8), np.float32), w)
    with pytest.raises(TypeError, match="dtype float32"):
        st.conv2d_cupy(x.astype(cp.float64), w)
    with pytest.raises(ValueError, match="w must have shape"):
        st.conv2d_cupy(x, cp.zeros((3, 3), cp.float32))
    with pytest.raises(ValueError, match="out must have the shape"):
        st.conv2d_cupy(x, w, cp.zeros((8, 9), cp.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        st.conv2d_cupy(cp.zeros((8, 16), cp.float32)[:, ::2], w)
    with pytest.raises(ValueError, match="variant"):
        st.conv2d_cupy(x, w, variant="fastest")


@pytest.mark.parametrize("variant", st.NUMBA_VARIANTS)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (20, 35)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_numba_steps(shape, variant):
    from numba import cuda

    if not numba_simulator():
        shape = (shape[0] * 37, shape[1] * 29)
    x, w = data(*shape, seed=3)
    out = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
    st.conv2d_numba(cuda.to_device(x), cuda.to_device(w), out, variant=variant)
    assert rel(out.copy_to_host(), st.reference(x, w)) < 1e-5


def test_numba_rejects_bad_input():
    from numba import cuda

    w = cuda.to_device(np.zeros((5, 5), np.float32))
    with pytest.raises(TypeError, match="CUDA device array"):
        st.conv2d_numba(np.zeros((4, 4), np.float32), w)
    with pytest.raises(ValueError, match="variant"):
        st.conv2d_numba(cuda.to_device(np.zeros((4, 4), np.float32)), w, variant="naive")


def test_flops_counts_two_per_tap():
    assert st.flops(10, 20) == 2 * 25 * 200


# ------------------------------------------------ the example's launcher --

def example():
    """examples/stencil.py as a module (what the four-step page embeds)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "stencil.py"
    spec = importlib.util.spec_from_file_location("stencil_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_launches_the_library_grid():
    """The example's self-contained launcher uses the library's steps and
    block shapes (kernels/stencil.py), so the page shows what is measured."""
    ex = example()
    assert ex.VARIANTS == st.VARIANTS
    assert ex.TILED == st._TILED and ex.FLAT_THREADS == st.FLAT_THREADS
    assert (ex.R, ex.KW) == (st.R, st.KW)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (33, 65), (130, 47)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_example_cupy_launcher(shape):
    import cupy as cp

    ex = example()
    x, w = data(*shape, seed=7)
    for variant in ex.VARIANTS:
        out = cp.full(shape, cp.nan, dtype=cp.float32)
        assert ex.conv2d_cupy(cp.asarray(x), cp.asarray(w), out, variant) is out
        assert rel(cp.asnumpy(out), st.reference(x, w)) < 1e-5, variant
    with pytest.raises(ValueError, match="variant"):
        ex.conv2d_cupy(cp.asarray(x), cp.asarray(w), out, "fastest")
    with pytest.raises(TypeError, match="out must be"):
        ex.conv2d_cupy(cp.asarray(x), cp.asarray(w), cp.zeros(shape, cp.float64))
    with pytest.raises(ValueError, match="non-empty"):
        ex.conv2d_cupy(cp.zeros((0, 4), cp.float32), cp.asarray(w), cp.zeros((0, 4), cp.float32))


def test_example_numba_steps_catch_an_unwritten_pixel(monkeypatch):
    """numba_steps fails on a NaN pixel (what `max(worst, err)` let through)."""
    ex = example()
    assert ex.numba_steps(5, 7) < 1e-4
    real = ex.conv_tiled_numba

    class SkipsLastColumn:  # launches the real kernel, then un-writes one pixel
        __name__ = "skips_last_column"

        def __getitem__(self, config):
            def launch(x, w, out):
                real[config](x, w, out)
                host = out.copy_to_host()
                host[:, -1] = np.nan
                out.copy_to_device(host)
            return launch

    monkeypatch.setattr(ex, "conv_tiled_numba", SkipsLastColumn())
    with pytest.raises(AssertionError):
        ex.numba_steps(5, 7)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/stencil.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("stencil.py", "if row < H and col < W:", "if row < H and col < W - 1:", "numba"),
    ("stencil.cu", "if (y < H && x < W) {", "if (y < H && x < W - 1) {", "cupy"),
    ("stencil.cu",
     "acc += w[(dy + R) * KW + dx + R] * pixel(in, H, W, y + dy, x + dx);",
     "acc -= w[(dy + R) * KW + dx + R] * pixel(in, H, W, y + dy, x + dx);",
     "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "examples/stencil.py:numba_kernels:conv_tiled_numba": (
        "acc += w[i, j] * tile[ty + i, tx + j]", "acc -= w[i, j] * tile[ty + i, tx + j]",
        "the first + is in the tile-load loop's start, which only re-writes a few halo cells"),
}


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import stencil as st
    from tests.overlap import cupy_case, numba_case, ex, SQ, IMAGE

    return [
        cupy_case("conv2d_cupy", call=lambda i, out: st.conv2d_cupy(i["x"], i["w"], out, variant="tiled16"),
            inputs={"x": SQ, "w": (st.KW, st.KW)}, out_shape=SQ),
        cupy_case("examples/stencil.conv2d_cupy", call=lambda i, out: ex("stencil.conv2d_cupy")(i["x"], i["w"], out, "tiled16"),
            inputs={"x": SQ, "w": (st.KW, st.KW)}, out_shape=SQ),
        numba_case("conv2d_numba", call=lambda i, out: st.conv2d_numba(i["x"], i["w"], out, variant="tiled16"),
            inputs={"x": IMAGE, "w": (st.KW, st.KW)}, out_shape=IMAGE),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "check_operands": "the argument check the wrappers above call",
}
