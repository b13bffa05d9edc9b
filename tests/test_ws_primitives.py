"""Warp specialization's primitives (kernels/ws_primitives.py, kernels/cuda/ws_primitives.cu).

On the GPU: every kernel against a NumPy reference, output poisoned with NaN
first, at sizes that leave a partial tile, block or box (and several tiles
per block, so that rings wrap and barrier phases flip); the broken pipeline
(its reads do not wait for the copy) gives a wrong answer where its twin
gives the right one; the module really is sm_90a on an H100/H200; bad input
refused with an error naming the argument. On the CPU: the refusal of a GPU
without what a kernel needs (faked capabilities), the compile options, the
tensor map's argument checks (before cuda.bindings is imported), that every
kernel the wrappers name is in the .cu file, and the SASS: the instructions
each kernel is about are there, and no register spills.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from kernels import sass
from kernels import ws_primitives as ws

gpu = pytest.mark.gpu
needs_sass = pytest.mark.skipif(not sass.available(), reason="needs nvcc, cuobjdump and nvdisasm")
SRC = ws.CUDA_SOURCE.name


# --- CPU: what a GPU must have ----------------------------------------------------

GPUS = {"Tesla T4": (7, 5), "NVIDIA A100-SXM4-80GB": (8, 0), "NVIDIA H200": (9, 0), "NVIDIA B200": (10, 0)}
ACCEPTS = {  # requirement -> the GPUs it lets through
    "sm_80": {"NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA B200"},
    "sm_90": {"NVIDIA H200", "NVIDIA B200"},
    "sm_90a": {"NVIDIA H200"},
}


@pytest.mark.parametrize("need", sorted(ACCEPTS))
def test_a_gpu_without_the_feature_is_refused_naming_it_and_the_need(need):
    require = ws.REQUIRE[need]
    for name, cc in GPUS.items():
        if name in ACCEPTS[need]:
            require(name, cc)
        else:
            with pytest.raises(RuntimeError, match=rf"needs {need}\b.*{re.escape(name)} is {cc[0]}\.{cc[1]}"):
                require(name, cc)


def test_the_sm90a_refusal_says_which_gpus_have_it():
    with pytest.raises(RuntimeError, match=r"sm_90a \(compute capability 9\.0: H100/H200\)"):
        ws.require_sm90a("NVIDIA A100", (8, 0))
    with pytest.raises(RuntimeError, match="sm_90a"):
        ws.require_sm90a("NVIDIA B200", (10, 0))  # newer is not enough: sm_90a code runs on 9.0 only


def test_every_kernel_has_a_requirement_and_options_follow_the_gpu():
    assert set(ws.NEEDS.values()) <= set(ws.REQUIRE)
    assert ws.compile_options((9, 0)) == ("-arch=sm_90a", "--std=c++17")
    for cc in ((8, 0), (8, 6), (8, 9), (10, 0), (12, 0)):
        opts = ws.compile_options(cc)
        assert not any(o.startswith("-arch") for o in opts), (cc, opts)  # CuPy adds the device's own


def _source_kernels() -> list[str]:
    """The extern "C" kernels of ws_primitives.cu, attributes and
    preprocessor lines dropped (cluster_dsmem's __cluster_dims__ sits
    between #if and #endif)."""
    text = ws.CUDA_SOURCE.read_text()
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"(?m)^\s*#.*$", "", text)
    text = re.sub(r"__\w+__\s*\([^)]*\)", "", text)
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(', text)


def test_every_kernel_the_wrappers_name_is_in_the_source():
    found = _source_kernels()
    assert sorted(found) == sorted(ws.KERNELS), found
    assert len(found) == len(set(found))


def test_every_snippet_section_is_closed_and_the_page_sections_exist():
    text = ws.CUDA_SOURCE.read_text()
    starts = re.findall(r"--8<-- \[start:(\w+)\]", text)
    ends = re.findall(r"--8<-- \[end:(\w+)\]", text)
    assert starts == ends and len(starts) == len(set(starts)), (starts, ends)
    for name in ("pipeline_copy", "barrier_split", "mbarrier_ptx", "mbarrier_bulk_copy", "broken_pipeline",
                 "tma_tile_2d", "cluster_dsmem", "setmaxnreg_roles"):
        assert name in starts, name


def test_the_constants_agree_with_the_source():
    text = ws.CUDA_SOURCE.read_text()
    assert "constexpr int TILE = 1024, STAGES = 2;" in text and ws.PIPE_TILE == 1024
    assert "constexpr int TILE = 1024;  // floats: 4 KB per copy" in text and ws.BULK_TILE == 1024
    assert f"constexpr int COLS = {ws.ROLE_COLS}, KMAX = {ws.ROLE_KMAX};" in text
    assert f"__maxnreg__({ws.ROLE_MAXNREG})" in text
    assert text.count(f"__shared__ float vals[{ws.BLOCK_SMEM_FLOATS}];") == 2


# --- CPU: the NumPy references on cases small enough to write out ---------------------

def test_references_by_hand():
    x = np.arange(1, 7, dtype=np.float32)  # two blocks of 4 threads, the second one short
    np.testing.assert_array_equal(ws.barrier_split_reference(x, threads=4),
                                  [2 + 1, 3 + 4, 4 + 9, 1 + 16, 6 + 25, 0 + 36])
    np.testing.assert_array_equal(ws.cluster_dsmem_reference(x, threads=2),  # blocks (1 2)(3 4) | (5 6)(- -)
                                  [1 + 3, 2 + 4, 3 + 1, 4 + 2, 5 + 0, 6 + 0])
    X = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ws.tma_tile_2d_reference(X, 4, 2),
                                  [[0, 3, 0, 0], [1, 4, 0, 0], [2, 5, 0, 0], [0, 0, 0, 0]])


# --- CPU: the tensor map's checks, before the driver ----------------------------------

class FakeDeviceArray:
    """Just a __cuda_array_interface__: no GPU and no CuPy needed."""

    def __init__(self, shape, dtype=np.float32, ptr=1 << 20, strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (ptr, False), "strides": strides, "version": 3}


@pytest.fixture
def no_driver(monkeypatch):
    """Fail the test if tensor_map_2d gets as far as importing cuda.bindings."""
    def refuse():
        raise AssertionError("cuda.bindings was imported before the arguments were checked")

    monkeypatch.setattr(ws, "_driver", refuse)


@pytest.mark.parametrize("args, error, match", [
    ((np.zeros((8, 8), np.float32), 8, 8), TypeError, "X must be a device array.*host array"),
    ((FakeDeviceArray((8, 8), np.float64), 8, 8), TypeError, "float32 or float16, got float64"),
    ((FakeDeviceArray((64,)), 8, 8), ValueError, r"X must be 2-D, got shape \(64,\)"),
    ((FakeDeviceArray((8, 8, 8)), 8, 8), ValueError, "X must be 2-D"),
    ((FakeDeviceArray((0, 8)), 8, 8), ValueError, "must not be empty"),
    ((FakeDeviceArray((8, 8), strides=(64, 8)), 8, 8), ValueError, "C-contiguous"),
    ((FakeDeviceArray((8, 6)), 8, 4), ValueError, "multiple of 16 bytes.*multiple of 4 columns"),
    ((FakeDeviceArray((8, 12), np.float16), 8, 8), ValueError, "multiple of 8 columns"),
    ((FakeDeviceArray((8, 8), ptr=(1 << 20) + 4), 8, 8), ValueError, "16-byte boundary"),
    ((FakeDeviceArray((8, 8)), 0, 8), ValueError, "box_rows"),
    ((FakeDeviceArray((8, 8)), 8, 257), ValueError, "box_cols"),
    ((FakeDeviceArray((8, 8)), 8.0, 8), TypeError, "box_rows must be an int"),
    ((FakeDeviceArray((8, 8)), 8, 6), ValueError, "box_cols must make the box's rows a multiple of 16 bytes"),
    ((FakeDeviceArray((8, 64)), 8, 64, "128B"), ValueError, "128B swizzle .* 128 bytes, got 64 x 4 = 256"),
    ((FakeDeviceArray((8, 64), np.float16), 8, 32, "32B"), ValueError, "32B swizzle"),
    ((FakeDeviceArray((8, 8)), 8, 8, "256B"), ValueError, "swizzle must be one of"),
])
def test_tensor_map_arguments_are_checked_before_the_driver(no_driver, args, error, match):
    with pytest.raises(error, match=match):
        ws.tensor_map_2d(*args)


def test_good_tensor_map_arguments_reach_the_driver(no_driver):
    for args in ((FakeDeviceArray((100, 36)), 32, 4), (FakeDeviceArray((3, 64), np.float16), 256, 64, "128B"),
                 (FakeDeviceArray((1, 8)), 1, 8, "32B")):
        with pytest.raises(AssertionError, match="cuda.bindings was imported"):
            ws.tensor_map_2d(*args)


def test_the_encoder_accepts_our_argument_types():
    """cuda.bindings converts every list element before it calls the driver
    (a plain int in boxDim raises "Cannot convert int to cuuint32_t"): with
    no driver the call fails at the driver (RuntimeError), with one it
    encodes a map for the fake address (the encoder does not read memory).
    Never a TypeError."""
    pytest.importorskip("cuda.bindings.driver")
    try:
        tmap = ws.tensor_map_2d(FakeDeviceArray((100, 36)), 32, 4)
    except RuntimeError as e:  # no driver, or a driver not yet initialised
        assert "Cannot convert" not in str(e), e
    else:
        assert tmap.dtype == ws.TMAP and tmap.dtype.itemsize == 128


# --- CPU: the SASS ------------------------------------------------------------------------

EXPECT_SASS = {  # kernel -> opcodes (prefixes) it must contain at sm_90a
    "pipeline_copy": ("LDGSTS", "ARRIVES.LDGSTSBAR", "SYNCS.PHASECHK"),
    "barrier_split": ("SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK"),
    "mbarrier_bulk_copy": ("SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "UBLKCP.S.G", "SYNCS.PHASECHK",
                           "FENCE.VIEW.ASYNC.S"),
    "mbarrier_bulk_copy_nowait": ("UBLKCP.S.G", "SYNCS.PHASECHK"),
    "tma_tile_2d": ("UTMALDG.2D", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK"),
    "cluster_dsmem": ("UCGABAR_ARV", "UCGABAR_WAIT"),
    "setmaxnreg_roles": ("USETMAXREG.DEALLOC", "USETMAXREG.TRY_ALLOC"),
}


def _ops(kernel: str) -> list[str]:
    return [sass.opcode(ln) for ln in sass.sass(SRC, kernel, arch="sm_90a")]


@needs_sass
@pytest.mark.parametrize("kernel", sorted(EXPECT_SASS))
def test_sass_has_the_instructions_each_kernel_is_about(kernel):
    ops = _ops(kernel)
    for want in EXPECT_SASS[kernel]:
        assert any(op.startswith(want) for op in ops), (kernel, want, sorted(set(ops)))
    assert not any(op.startswith(("STL", "LDL")) for op in ops), "local memory: a spill"


@needs_sass
def test_the_broken_twin_reads_shared_memory_before_it_waits():
    """Same instructions, another order: in mbarrier_bulk_copy the wait
    (SYNCS.PHASECHK) comes before the tile is read (LDS); in the nowait twin
    the read comes first."""
    def first(ops, prefix):
        return next(i for i, op in enumerate(ops) if op.startswith(prefix))

    good, bad = _ops("mbarrier_bulk_copy"), _ops("mbarrier_bulk_copy_nowait")
    assert first(good, "SYNCS.PHASECHK") < first(good, "LDS")
    assert first(bad, "LDS") < first(bad, "SYNCS.PHASECHK")


@needs_sass
def test_sm90a_build_has_no_spills_and_setmaxnreg_starts_at_maxnreg(tmp_path):
    """ptxas -v for sm_90a: no kernel spills, and setmaxnreg_roles is
    allocated its __maxnreg__ (136) at launch although its consumer holds
    160 accumulators: the rest comes from setmaxnreg.inc."""
    proc = subprocess.run([sass.tool("nvcc"), "-arch=sm_90a", "-std=c++17", "-Xptxas", "-v", "-Werror",
                           "all-warnings", "-c", str(ws.CUDA_SOURCE), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=300)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "warning" not in report.lower(), report
    props = dict(re.findall(r"Function properties for (\w+)\s*\n\s*\d+ bytes stack frame, "
                            r"(\d+ bytes spill stores, \d+ bytes spill loads)", report))
    assert set(props) == set(ws.KERNELS), props
    assert all(v == "0 bytes spill stores, 0 bytes spill loads" for v in props.values()), props
    used = dict(re.findall(r"Compiling entry function '(\w+)' for 'sm_90a'\s*\n.*?\n.*?\n"
                           r"ptxas info\s*: Used (\d+) registers", report))
    assert used.get("setmaxnreg_roles") == str(ws.ROLE_MAXNREG), used


# --- GPU ------------------------------------------------------------------------------------

def _device_cc() -> tuple[int, int]:
    import cupy as cp

    from kernels.device import device_info

    return device_info(cp.cuda.Device().id)["cc"]


def _skip_unless(need: str) -> None:
    cc = _device_cc()
    ok = {"sm_80": cc >= (8, 0), "sm_90": cc >= (9, 0), "sm_90a": cc == (9, 0)}[need]
    if not ok:
        pytest.skip(f"needs {need}; this GPU is {cc[0]}.{cc[1]} (the refusal is tested on the CPU)")


def _random(n, seed=0):
    import cupy as cp

    return cp.asarray(np.random.default_rng(seed).standard_normal(n).astype(np.float32))


def _nan(shape):
    import cupy as cp

    return cp.full(shape, cp.nan, dtype=cp.float32)


def _close(out, ref, rtol=1e-6, atol=1e-6):
    import cupy as cp

    got = cp.asnumpy(out)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements left unwritten (NaN)"
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


@gpu
def test_module_is_built_for_sm90a_on_a_hopper_gpu():
    _skip_unless("sm_90a")
    assert ws.compiled_arch() == (900, True)


@gpu
@pytest.mark.parametrize("n", [1, 1023, 1024, 1025, 5000, 100_003])
@pytest.mark.parametrize("blocks, threads", [(None, 256), (1, 256), (3, 96)])
def test_pipeline_copy(n, blocks, threads):
    _skip_unless("sm_80")
    x = _random(n)
    out = _nan(n)
    assert ws.pipeline_copy(x, out, blocks=blocks, threads=threads) is out
    _close(out, ws.pipeline_copy_reference(x.get()))


@gpu
@pytest.mark.parametrize("n", [1, 255, 256, 1000, 65_537])
@pytest.mark.parametrize("threads", [32, 256, 1024])
def test_barrier_split(n, threads):
    _skip_unless("sm_80")
    x = _random(n)
    out = _nan(n)
    ws.barrier_split(x, out, threads=threads)
    # x[j] + x[i]^2 may cancel: x[i]^2 rounded (if not fused) is off by up to
    # half an ulp of x[i]^2, about 1e-6 for |x| near 5
    _close(out, ws.barrier_split_reference(x.get(), threads), rtol=1e-6, atol=1e-5)


@gpu
@pytest.mark.parametrize("n", [4, 1020, 1024, 4100, 100_004])
@pytest.mark.parametrize("blocks, threads", [(None, 128), (1, 128), (3, 32)])
def test_mbarrier_bulk_copy(n, blocks, threads):
    """blocks=1: one block copies every tile through one barrier, whose
    parity flips tile after tile."""
    _skip_unless("sm_90")
    x = _random(n)
    out = _nan(n)
    ws.mbarrier_bulk_copy(x, out, blocks=blocks, threads=threads)
    _close(out, ws.bulk_copy_reference(x.get()))


@gpu
def test_a_missing_wait_is_caught():
    """The broken pipeline: the same copies with the reads before the wait.
    Its output is wrong (mostly the NaN poison); the waiting kernel's is right."""
    import cupy as cp

    _skip_unless("sm_90")
    n = 1 << 20
    x = _random(n, seed=1)
    ref = ws.bulk_copy_reference(x.get())
    for blocks in (None, 1):
        out = ws.mbarrier_bulk_copy_nowait(x, _nan(n), blocks=blocks)
        wrong = ~np.isclose(cp.asnumpy(out), ref, rtol=1e-6, atol=1e-6)
        assert wrong.sum() > 0, "the kernel that reads before the copy has landed gave the right answer"
        _close(ws.mbarrier_bulk_copy(x, _nan(n), blocks=blocks), ref)


@gpu
@pytest.mark.parametrize("shape, box", [
    ((1, 4), (32, 32)), ((33, 36), (32, 32)), ((100, 260), (8, 16)),
    ((257, 64), (64, 4)), ((70, 300), (16, 128)), ((5, 8), (256, 8)),
])
def test_tma_tile_2d(shape, box):
    """Every box in and around the matrix: coordinates (the transpose) and
    TMA's zero fill past the right and bottom edges."""
    _skip_unless("sm_90")
    rows, cols = shape
    X = _random(rows * cols).reshape(rows, cols)
    ref = ws.tma_tile_2d_reference(X.get(), *box)
    out = _nan(ref.shape)
    assert ws.tma_tile_2d(X, out, box_rows=box[0], box_cols=box[1]) is out
    np.testing.assert_array_equal(out.get(), ref.astype(np.float32))  # a copy: bit for bit


@gpu
def test_tensor_maps_encode_on_the_gpu():
    import cupy as cp

    _skip_unless("sm_90")
    for dtype, box_cols, swizzle in ((cp.float32, 32, "128B"), (cp.float16, 64, "128B"), (cp.float16, 8, "none")):
        X = cp.zeros((100, 64), dtype=dtype)
        tmap = ws.tensor_map_2d(X, 16, box_cols, swizzle)
        assert tmap.dtype == ws.TMAP and tmap.tobytes() != bytes(128)


@gpu
@pytest.mark.parametrize("n", [1, 256, 257, 511, 512, 100_001])
@pytest.mark.parametrize("threads", [128, 256, 1024])
def test_cluster_dsmem(n, threads):
    _skip_unless("sm_90")
    x = _random(n)
    out = _nan(n)
    ws.cluster_dsmem(x, out, threads=threads)
    _close(out, ws.cluster_dsmem_reference(x.get(), threads))


@gpu
@pytest.mark.parametrize("M, K", [(1, 1), (127, 64), (129, 17), (1000, 33)])
def test_setmaxnreg_roles(M, K):
    import cupy as cp

    _skip_unless("sm_90a")
    rng = np.random.default_rng(M + K)
    W = rng.standard_normal((M, K)).astype(np.float32)
    X = rng.standard_normal((K, ws.ROLE_COLS)).astype(np.float32)
    out = _nan((M, ws.ROLE_COLS))
    ws.setmaxnreg_roles(cp.asarray(W), cp.asarray(X), out)
    got = out.get()
    assert not np.isnan(got).any(), "a row was left unwritten (NaN)"
    ref = W.astype(np.float64) @ X.astype(np.float64)
    bound = K * 2.0**-23 * (np.abs(W.astype(np.float64)) @ np.abs(X.astype(np.float64))) + 1e-30
    assert float((np.abs(got - ref) / bound).max()) <= 1.0  # FP32 accumulation of K products


@gpu
def test_setmaxnreg_roles_launches_with_its_maxnreg_and_no_local_memory():
    from kernels.device import kernel_attributes

    _skip_unless("sm_90a")
    a = kernel_attributes(ws.kernel("setmaxnreg_roles"))
    assert a["regs"] == ws.ROLE_MAXNREG and a["local_bytes"] == 0, a


@gpu
def test_bad_input_is_refused_naming_the_argument():
    import cupy as cp

    x = _random(1024)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        ws.pipeline_copy(x.astype(cp.float64))
    with pytest.raises(TypeError, match="x must be a cupy.ndarray.*host array"):
        ws.barrier_split(x.get())
    with pytest.raises(ValueError, match="x must be 1-D"):
        ws.cluster_dsmem(x.reshape(32, 32))
    with pytest.raises(ValueError, match="x must have 1 to 2"):
        ws.pipeline_copy(cp.zeros(0, cp.float32))
    with pytest.raises(ValueError, match="out must have the shape of x"):
        ws.barrier_split(x, cp.empty(1000, cp.float32))
    with pytest.raises(ValueError, match="out must not overlap x"):
        ws.pipeline_copy(x, x)
    with pytest.raises(ValueError, match="threads must be a multiple of 32"):
        ws.barrier_split(x, threads=100)
    with pytest.raises(ValueError, match="blocks must be in"):
        ws.pipeline_copy(x, blocks=0)
    with pytest.raises(ValueError, match="x.size must be a multiple of 4"):
        ws.mbarrier_bulk_copy(_random(1022))
    with pytest.raises(ValueError, match="x must start on a 16-byte boundary"):
        ws.mbarrier_bulk_copy(_random(1028)[1:1025])
    X = _random(64 * 64).reshape(64, 64)
    with pytest.raises(TypeError, match="X must have dtype float32"):
        ws.tma_tile_2d(X.astype(cp.float16))
    with pytest.raises(ValueError, match="X's rows must be a multiple of 16 bytes"):
        ws.tma_tile_2d(_random(64 * 30).reshape(64, 30))
    with pytest.raises(ValueError, match="box_cols must make the box's rows"):
        ws.tma_tile_2d(X, box_cols=6)
    with pytest.raises(ValueError, match="box_rows x box_cols must fit"):
        ws.tma_tile_2d(X, box_rows=256, box_cols=64)
    with pytest.raises(ValueError, match=r"out must have shape \(64, 64\)"):
        ws.tma_tile_2d(X, cp.empty((64, 32), cp.float32))
    W, Xr = _random(10 * 8).reshape(10, 8), _random(8 * ws.ROLE_COLS).reshape(8, ws.ROLE_COLS)
    with pytest.raises(ValueError, match="X must have 160 columns"):
        ws.setmaxnreg_roles(W, _random(8 * 128).reshape(8, 128))
    with pytest.raises(ValueError, match="X must have 8 rows"):
        ws.setmaxnreg_roles(W, Xr[:4])
    with pytest.raises(ValueError, match=r"K must be in \[1, 64\]"):
        ws.setmaxnreg_roles(_random(10 * 65).reshape(10, 65), _random(65 * ws.ROLE_COLS).reshape(65, ws.ROLE_COLS))
    with pytest.raises(TypeError, match="W must be a cupy.ndarray"):
        ws.setmaxnreg_roles(W.get(), Xr)
    with pytest.raises(ValueError, match="kernel must be one of"):
        ws.kernel("pipeline_cpy")


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).


def overlap_cases() -> list:
    """The primitives' wrappers take an output: each must refuse one that
    overlaps an input (tests/test_overlap.py). Bulk copies and TMA move
    16-byte pieces: the shifted views stay 16-byte aligned."""
    from tests.overlap import N, SIDE, cupy_case

    vec = {"inputs": {"x": (N,)}, "out_shape": (N,)}
    return [
        cupy_case("pipeline_copy", shift=4, call=lambda i, out: ws.pipeline_copy(i["x"], out), **vec),
        cupy_case("barrier_split", call=lambda i, out: ws.barrier_split(i["x"], out), **vec),
        cupy_case("mbarrier_bulk_copy", shift=4, call=lambda i, out: ws.mbarrier_bulk_copy(i["x"], out), **vec),
        cupy_case("cluster_dsmem", call=lambda i, out: ws.cluster_dsmem(i["x"], out), **vec),
        cupy_case("tma_tile_2d", shift=4, call=lambda i, out: ws.tma_tile_2d(i["X"], out),
                  inputs={"X": (SIDE, SIDE)}, out_shape=(SIDE, SIDE)),
        # 128 rows per block: 8 blocks
        cupy_case("setmaxnreg_roles", call=lambda i, out: ws.setmaxnreg_roles(i["W"], i["X"], out),
                  inputs={"W": (SIDE, ws.ROLE_KMAX), "X": (ws.ROLE_KMAX, ws.ROLE_COLS)},
                  out_shape=(SIDE, ws.ROLE_COLS)),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "mbarrier_bulk_copy_nowait": "the lesson's race: it reads shared memory before the bulk copy lands, so its "
                                 "output differs run to run and cannot be compared; it refuses an overlapping out "
                                 "through the same check as mbarrier_bulk_copy (_vector_pair)",
}
