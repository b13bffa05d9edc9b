"""The transpose ladder (kernels/transpose.py, kernels/cuda/transpose.cu)
against NumPy.

A transpose moves values without arithmetic: the result must equal x.T
exactly. Inputs are standard normal (never zeros) and the output is
poisoned with NaN before each launch, so an element left unwritten fails.
Shapes: 1x1, 33x65, 65x33 (tails of every tile), 1000x1013 (odd width:
the scalar load path), 4097x31 (thinner than a tile) and 260x196 (float4
interior tiles and scalar edge tiles) on the GPU, 8192x8192 for the
default step; the simulator runs the Numba steps at 1x1, 33x65 and 5x40.
"""

import functools
import re
import subprocess

import numpy as np
import pytest

from kernels import transpose as tr
from kernels.device import numba_simulator

SHAPES = [(1, 1), (33, 65), (65, 33), (1000, 1013), (4097, 31), (260, 196)]
SIM_SHAPES = [(1, 1), (33, 65), (5, 40)]  # the simulator runs a Python thread per GPU thread
CONFIGS = list(dict.fromkeys(tr.TUNING + (tr.COARSENED,)))


def shape_id(shape):
    return "x".join(map(str, shape))


def matrix(rows, cols, seed=0):
    rng = np.random.default_rng(seed + rows + 7 * cols)
    return rng.standard_normal((rows, cols), dtype=np.float32)


# --------------------------------------------------------------- Numba --

@pytest.mark.parametrize("variant", tr.NUMBA_VARIANTS)
@pytest.mark.parametrize("shape", SIM_SHAPES, ids=shape_id)
def test_numba_ladder(shape, variant):
    from numba import cuda

    x = matrix(*shape)
    out = cuda.to_device(np.full(shape[::-1], np.nan, dtype=np.float32))
    assert tr.transpose_numba(cuda.to_device(x), out, variant=variant) is out
    np.testing.assert_array_equal(out.copy_to_host(), x.T)


@pytest.mark.parametrize("variant", tr.NUMBA_VARIANTS)
@pytest.mark.parametrize("shape", [(1000, 1013), (4097, 31), (2048, 2048)], ids=shape_id)
def test_numba_large(shape, variant):
    if numba_simulator():
        pytest.skip("a million threads is too slow for the CUDA simulator; runs on the GPU")
    from numba import cuda

    x = matrix(*shape)
    out = cuda.to_device(np.full(shape[::-1], np.nan, dtype=np.float32))
    tr.transpose_numba(cuda.to_device(x), out, variant=variant)
    np.testing.assert_array_equal(out.copy_to_host(), x.T)


def test_numba_allocates_out():
    from numba import cuda

    x = matrix(5, 40)
    out = tr.transpose_numba(cuda.to_device(x), variant="coarsened")
    assert out.shape == (40, 5)
    np.testing.assert_array_equal(out.copy_to_host(), x.T)


def test_bad_inputs_numba():
    from numba import cuda

    x = cuda.to_device(matrix(8, 6))
    out = cuda.device_array((6, 8), dtype=np.float32)
    with pytest.raises(TypeError, match="x .*host"):
        tr.transpose_numba(matrix(8, 6), out)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        tr.transpose_numba(cuda.to_device(np.ones((8, 6))), out)
    with pytest.raises(ValueError, match="x must be 2-D"):
        tr.transpose_numba(cuda.to_device(np.ones(48, dtype=np.float32)), out)
    with pytest.raises(ValueError, match="x must be C-contiguous"):  # a strided view of device memory
        tr.transpose_numba(cuda.to_device(matrix(8, 12))[:, ::2], out)
    with pytest.raises(ValueError, match=r"out must have the shape of x.T, \(6, 8\)"):
        tr.transpose_numba(x, cuda.device_array((8, 6), dtype=np.float32))
    with pytest.raises(TypeError, match="out must have dtype float32"):
        tr.transpose_numba(x, cuda.to_device(np.ones((6, 8))))
    with pytest.raises(ValueError, match="variant"):
        tr.transpose_numba(x, out, variant="smem")


# ---------------------------------------------------------------- CuPy --

@functools.cache
def gpu_matrix(shape):
    import cupy as cp

    return cp.asarray(matrix(*shape))


def check_transpose(fn, shape):
    """fn(x, out) on a NaN-poisoned out; the result must be x.T exactly."""
    import cupy as cp

    x = gpu_matrix(shape)
    out = cp.full(shape[::-1], cp.nan, dtype=cp.float32)
    assert fn(x, out) is out
    assert bool(cp.array_equal(out, x.T)), shape


@pytest.mark.gpu
@pytest.mark.parametrize("variant", tr.VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cupy_ladder(shape, variant):
    check_transpose(lambda x, out: tr.transpose_cupy(x, out, variant=variant), shape)


@pytest.mark.gpu
def test_cupy_default_8192():
    check_transpose(tr.transpose_cupy, (8192, 8192))


@pytest.mark.gpu
@pytest.mark.parametrize("config", tr.TUNING, ids=tr.config_name)
def test_tuning_configs(config):
    """Every configuration the bench sweeps, transpose and copy, at every shape."""
    import cupy as cp

    for shape in SHAPES:
        check_transpose(lambda x, out: tr.transpose_cupy(x, out, config=config), shape)
        x = gpu_matrix(shape)
        out = cp.full(shape, cp.nan, dtype=cp.float32)
        assert tr.copy_tiled_cupy(x, out, config=config) is out
        assert bool(cp.array_equal(out, x)), (shape, config)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES + [(8192, 8192)], ids=shape_id)
def test_copy_tiled(shape):
    import cupy as cp

    x = gpu_matrix(shape)
    out = cp.full(shape, cp.nan, dtype=cp.float32)
    assert tr.copy_tiled_cupy(x, out) is out
    assert bool(cp.array_equal(out, x))


@pytest.mark.gpu
def test_misaligned_views_take_the_scalar_path():
    """Views starting one float into their buffers are C-contiguous but not
    16-byte aligned: step 4 must fall back to scalar accesses."""
    import cupy as cp

    rows, cols = 256, 192
    x0 = matrix(rows, cols)
    x = cp.asarray(np.concatenate([[1.0], x0.ravel()]).astype(np.float32))[1:].reshape(rows, cols)
    out = cp.full(rows * cols + 1, cp.nan, dtype=cp.float32)[1:].reshape(cols, rows)
    assert x.data.ptr % 16 and out.data.ptr % 16
    for config in tr.TUNING:
        out.fill(cp.nan)
        tr.transpose_cupy(x, out, config=config)
        np.testing.assert_array_equal(out.get(), x0.T)


@pytest.mark.gpu
def test_cupy_allocates_out_and_handles_empty():
    import cupy as cp

    x = gpu_matrix((65, 33))
    for variant in tr.VARIANTS:
        out = tr.transpose_cupy(x, variant=variant)
        assert out.shape == (33, 65) and out.dtype == cp.float32
        assert bool(cp.array_equal(out, x.T))
    assert tr.transpose_cupy(cp.empty((0, 5), dtype=cp.float32)).shape == (5, 0)
    assert tr.copy_tiled_cupy(x).shape == (65, 33)


@pytest.mark.gpu
def test_bad_inputs_cupy():
    import cupy as cp

    x = cp.asarray(matrix(8, 6))
    out = cp.empty((6, 8), dtype=cp.float32)
    with pytest.raises(TypeError, match="x .*host"):
        tr.transpose_cupy(matrix(8, 6), out)
    with pytest.raises(TypeError, match="out .*host"):
        tr.transpose_cupy(x, np.empty((6, 8), dtype=np.float32))
    with pytest.raises(TypeError, match="x must have dtype float32"):
        tr.transpose_cupy(x.astype(cp.float64), out)
    with pytest.raises(ValueError, match="x must be 2-D"):
        tr.transpose_cupy(x.ravel(), out)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        tr.transpose_cupy(cp.asarray(matrix(6, 8)).T, out)
    with pytest.raises(ValueError, match=r"out must have the shape of x.T, \(6, 8\)"):
        tr.transpose_cupy(x, cp.empty((8, 6), dtype=cp.float32))
    with pytest.raises(TypeError, match="out must have dtype float32"):
        tr.transpose_cupy(x, cp.empty((6, 8), dtype=cp.float64))
    square = cp.asarray(matrix(8, 8))
    with pytest.raises(ValueError, match="overlap"):
        tr.transpose_cupy(square, square)
    with pytest.raises(ValueError, match="variant"):
        tr.transpose_cupy(x, out, variant="fastest")
    with pytest.raises(ValueError, match="config"):
        tr.transpose_cupy(x, out, variant="padded", config=(64, 16, 4))
    with pytest.raises(ValueError, match="config"):
        tr.transpose_cupy(x, out, config=(64, 16, 3))
    with pytest.raises(ValueError, match=r"out must have the shape of x, \(8, 6\)"):
        tr.copy_tiled_cupy(x, out)


# ------------------------------------------------- without a GPU, any machine --

def test_bad_configs():
    for cfg in CONFIGS:
        assert tr.check_config(cfg) == cfg
    for bad in [(128, 16, 4),   # 64 KB of static shared memory
                (48, 8, 4),     # TILE not a multiple of 32
                (64, 16, 3),    # VEC
                (64, 5, 4),     # RY does not divide TILE / VEC
                (32, 2, 4),     # 16 threads: not a whole warp
                (64, 32, 1)]:   # 2048 threads
        with pytest.raises(ValueError, match="config"):
            tr.check_config(bad)
    with pytest.raises(TypeError, match="config"):
        tr.check_config(64)


def test_grid_covers_x():
    """One block per tile: the grid covers x, with no block wholly outside."""
    rows, cols = 1000, 1013
    cases = [("naive", None, tr.NAIVE_BLOCK), ("smem", None, (tr.TILE, tr.TILE)),
             ("padded", None, (tr.TILE, tr.TILE))]
    for config in [None] + CONFIGS:
        tile = (tr.COARSENED if config is None else config)[0]
        cases += [("coarsened", config, (tile, tile)), ("copy_tiled", config, (tile, tile))]
    for variant, config, (tile_x, tile_y) in cases:
        (gx, gy), (bx, by) = tr.grid(variant, rows, cols, config)
        assert (gx - 1) * tile_x < cols <= gx * tile_x, (variant, config)
        assert (gy - 1) * tile_y < rows <= gy * tile_y, (variant, config)
        assert bx * by % 32 == 0 and bx * by <= 1024, (variant, config)
    for variant, (tile_x, tile_y) in (("naive", tr.NAIVE_BLOCK), ("padded", (32, 32)), ("coarsened", (32, 32))):
        (gx, gy), _ = tr.numba_grid(variant, rows, cols)
        assert (gx - 1) * tile_x < cols <= gx * tile_x and (gy - 1) * tile_y < rows <= gy * tile_y, variant


def test_dimension_limits():
    """Shapes are checked before anything touches the device."""

    class Fake:  # only what check_operands reads of a device array
        dtype = np.float32
        flags = {"C_CONTIGUOUS": True}
        strides = ()

        def __init__(self, *shape):
            self.shape = shape
            self.size = int(np.prod(shape))

    with pytest.raises(ValueError, match="2\\^31"):
        tr.check_operands(Fake(1 << 16, 1 << 15), Fake(1 << 15, 1 << 16), lib=None)
    with pytest.raises(ValueError, match="65535"):
        tr.grid("naive", 1 << 20, 4)
    with pytest.raises(ValueError, match="65535"):
        tr.numba_grid("coarsened", 1 << 22, 4)
    assert tr.check_operands(Fake(3, 5), Fake(5, 3), lib=None) == (3, 5)


def test_default_config_matches_the_cuda_source():
    """COARSENED (Python) is the shape of the extern "C" transpose_coarsened."""
    src = tr.CUDA_SOURCE.read_text()
    m = re.search(r"namespace co \{\s*constexpr int TILE = (\d+), RY = (\d+), VEC = (\d+);", src)
    assert m, "namespace co not found in transpose.cu"
    assert tuple(int(v) for v in m.groups()) == tr.COARSENED
    assert tr.COARSENED in tr.TUNING


def test_swizzle_is_bank_conflict_free():
    """A model of tile_move's shared accesses (transpose.cu): for every
    warp instruction, the lanes of each 128-byte pass (32 / VEC lanes for
    VEC-wide accesses) hit distinct banks with the XOR swizzle, and do
    not without it. Steps 2 and 3: a column of tile[32][32] is 32-way, of
    tile[32][33] conflict-free."""

    def worst_way(addrs, vec):  # addrs: first float of each lane's access
        per = 32 // vec
        way = 1
        for p in range(0, 32, per):
            banks = {}
            for a in addrs[p:p + per]:
                for e in range(vec):
                    banks.setdefault((a + e) % 32, set()).add(a + e)
            way = max(way, max(len(s) for s in banks.values()))
        return way

    def tile_move_way(tile, ry, vec, swizzled=True, transpose=True):
        def swz(q, chunk):
            return chunk ^ ((q // vec) % (32 // vec)) if swizzled else chunk
        tx_n = tile // vec
        way = 1
        for warp in range(tx_n * ry // 32):
            lanes = [(t % tx_n, t // tx_n) for t in range(32 * warp, 32 * warp + 32)]
            for k in range(tx_n // ry):
                for w in range(vec):
                    store, load = [], []
                    for tx, ty in lanes:
                        q, chunk = (vec * tx + w, ty + k * ry) if transpose else (vec * (ty + k * ry) + w, tx)
                        store.append(q * tile + vec * swz(q, chunk))
                        q = vec * (ty + k * ry) + w
                        load.append(q * tile + vec * swz(q, tx))
                    way = max(way, worst_way(store, vec), worst_way(load, vec))
        return way

    for cfg in CONFIGS:
        assert tile_move_way(*cfg) == 1, cfg
        assert tile_move_way(*cfg, transpose=False) == 1, cfg
        assert tile_move_way(*cfg, swizzled=False) == 32 // cfg[2], cfg
    assert worst_way([i * 32 for i in range(32)], 1) == 32
    assert worst_way([i * 33 for i in range(32)], 1) == 1


def test_tuning_configs_compile_for_sm90_without_spills(tmp_path):
    """tests/test_cuda_compile.py compiles the extern "C" kernels; the
    template shapes the bench sweeps are instantiated here, from TUNING, and
    must compile as cleanly: no warnings, no spills, <= 48 KB shared."""
    from tests.test_cuda_compile import PROPS, nvcc

    if nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit)")
    lines = [f'#include "{tr.CUDA_SOURCE}"']
    for cfg in tr.TUNING:
        args = ", ".join(map(str, cfg))
        for kernel in ("transpose_coarsened_t", "copy_tiled_t"):
            lines.append(f"template __global__ void {kernel}<{args}>(const float* __restrict__, "
                         "float* __restrict__, int, int);")
    src = tmp_path / "tuning.cu"
    src.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([nvcc(), "-arch=sm_90", "-std=c++17", "-Xptxas", "-v", "-Werror", "all-warnings",
                           "-c", str(src), "-o", str(tmp_path / "t.o")],
                          capture_output=True, text=True, timeout=300)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    props = {m.group(1): (m.group(2), m.group(3)) for m in PROPS.finditer(report)}
    templates = [n for n in props if "transpose_coarsened_t" in n or "copy_tiled_t" in n]
    assert len(templates) == 2 * len(tr.TUNING), report
    assert all(spill == ("0", "0") for spill in props.values()), report
    smem = [int(s) for s in re.findall(r"(\d+) bytes smem", report)]
    assert smem and max(smem) <= 48 * 1024, report
    assert "warning" not in report.lower(), report


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/transpose.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("transpose.py", "out[r, c] = tile[tx, ty]  # a column", "out[r, c] = tile[ty, tx]  # a column", "numba"),
    ("transpose.cu", "out[c * rows + r] = in[r * cols + c];", "out[c * rows + r] = in[r * cols + c] + 1.0f;", "cupy"),
]


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import transpose as tr
    from tests.overlap import cupy_case, numba_case, ex, SQ, SQ_NUMBA

    return [
        cupy_case("transpose_cupy", call=lambda i, out: tr.transpose_cupy(i["x"], out), inputs={"x": SQ}, out_shape=SQ),
        cupy_case("copy_tiled_cupy", call=lambda i, out: tr.copy_tiled_cupy(i["x"], out), inputs={"x": SQ}, out_shape=SQ),
        cupy_case("examples/transpose.transpose_cupy", call=lambda i, out: ex("transpose.transpose_cupy")(i["x"], out),
            inputs={"x": SQ}, out_shape=SQ),
        cupy_case("examples/transpose.transpose_coarsened_config",
            call=lambda i, out: ex("transpose.transpose_coarsened_config")(i["x"], out, (32, 8, 4)),
            inputs={"x": SQ}, out_shape=SQ),
        numba_case("transpose_numba", call=lambda i, out: tr.transpose_numba(i["x"], out, variant="coarsened"),
            inputs={"x": SQ_NUMBA}, out_shape=SQ_NUMBA),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "check_operands": "the argument check the wrappers above call",
}
