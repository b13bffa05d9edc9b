"""Host <-> device transfers (kernels/host_transfer.py, kernels/cuda/host_transfer.cu).

The chunked pipeline at odd sizes, with chunk counts that do not divide n
and 1, 2 or 4 streams, output poisoned with NaN, against NumPy in float64;
its timeline (every operation ends after it starts, one stream's operations
never overlap and run h2d -> kernel -> d2h per chunk); pageable and pinned
copies round-trip exactly; managed memory with and without prefetch and
zero-copy give NumPy's result; bad inputs raise. Numba runs in the CUDA
simulator at tiny sizes without a GPU; the CuPy tests need a GPU.
"""

import numpy as np
import pytest

from kernels import host_transfer as ht
from kernels import managed_memory as mg
from kernels import transfer_pipeline as tp
from kernels.bench import host_transfer as bht
from kernels.device import numba_simulator

SIZES = [1, 1000, 2**20 + 3]
CHUNKS = [1, 3, 7]
STREAMS = [1, 2, 4]
ITERS = 8
RTOL = 1e-6  # poly_chunk: each FMA rounds once and halves the error so far: <= ~1 ulp


def inputs(n, seed):
    return np.random.default_rng(seed).random(n, dtype=np.float32) + np.float32(0.5)  # never zero


# ------------------------------------------------------------ host only --

def test_chunk_bounds_cover_the_range_without_gaps():
    for n in (0, 1, 2, 10, 1000, 2**20 + 3):
        for chunks in (1, 3, 7, 64):
            b = tp.chunk_bounds(n, chunks)
            assert len(b) == min(n, chunks)
            assert all(hi > lo for lo, hi in b)
            if not b:
                continue
            assert [lo for lo, _ in b] == [0] + [hi for _, hi in b[:-1]]  # no gaps
            assert b[-1][1] == n
            sizes = [hi - lo for lo, hi in b]
            assert max(sizes) - min(sizes) <= 1


def test_poly_reference_is_the_recurrence():
    x = inputs(100, seed=1).astype(np.float64)
    v = x.copy()
    for _ in range(20):
        v = 0.5 * v + x
    np.testing.assert_allclose(tp.poly_reference(x, 20), v, rtol=1e-14)


# -------------------------------------------------------------- Numba --

def slow_in_simulator(n):
    # The simulator runs one Python thread per GPU thread: a million
    # elements take minutes. The GPU runs that size.
    return numba_simulator() and n > 10_000


@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("n", SIZES)
def test_numba_pipeline_matches_numpy(n, chunks, streams):
    if slow_in_simulator(n):
        pytest.skip("n > 10^4 is too slow for the CUDA simulator; runs on the GPU")
    from numba import cuda

    x = cuda.pinned_array(n, dtype=np.float32)
    x[:] = inputs(n, seed=n + chunks)
    out = cuda.pinned_array(n, dtype=np.float32)
    out[:] = np.nan  # poison: an unwritten element fails
    res = tp.pipeline_numba(x, out, chunks=chunks, streams=streams, iters=ITERS, threads=32)
    assert res is out
    np.testing.assert_allclose(out, tp.poly_reference(x, ITERS), rtol=RTOL)


@pytest.mark.parametrize("n", [1, 1000])
def test_numba_roundtrip_is_exact(n):
    from numba import cuda

    x = inputs(n, seed=3)
    np.testing.assert_array_equal(ht.roundtrip_numba(x), x)  # pageable in, pinned out
    pinned = cuda.pinned_array(n, dtype=np.float32)
    pinned[:] = x
    out = np.full(n, np.nan, dtype=np.float32)
    assert ht.roundtrip_numba(pinned, out) is out
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("mode", bht.NUMBA_HOST_READ_MODES)
def test_numba_host_read_matches_numpy(mode):
    case = bht.HostRead(mode, inputs(1000, seed=4), impl="numba", threads=32)
    for _ in range(2):  # a second run starts from the host again
        case.reset()
        case.run()
        np.testing.assert_array_equal(case.result(), case.expected())  # 2x: exact


def test_numba_managed_array_is_host_writable_and_kernel_readable():
    m = mg.managed_array_numba(100)
    m[:] = inputs(100, seed=5)
    out = mg.scale_numba(m, threads=32).copy_to_host()
    np.testing.assert_array_equal(out, 2 * inputs(100, seed=5))


# ------------------------------------------------------------ bad inputs --

def pipeline_bad_calls(wrap, pinned):
    """(call, exception, words the message must contain)."""
    x, out = pinned(8), pinned(8)

    def run(x=x, out=out, **kw):
        args = dict(chunks=2, streams=2, iters=2, threads=32)
        args.update(kw)
        return wrap(x, out, **args)

    return [
        (lambda: run(x=[1.0] * 8), TypeError, ["x_host", "numpy"]),
        (lambda: run(x=np.ones(8)), TypeError, ["x_host", "float32", "float64"]),
        (lambda: run(out=np.ones(8, dtype=np.int32)), TypeError, ["out_host", "float32"]),
        (lambda: run(x=np.ones((2, 4), dtype=np.float32)), ValueError, ["x_host", "1-D"]),
        (lambda: run(x=np.ones(16, dtype=np.float32)[::2]), ValueError, ["x_host", "contiguous"]),
        (lambda: run(out=np.ones(9, dtype=np.float32)), ValueError, ["out_host", "shape"]),
        (lambda: run(chunks=0), ValueError, ["chunks"]),
        (lambda: run(chunks=2.0), TypeError, ["chunks", "int"]),
        (lambda: run(streams=0), ValueError, ["streams"]),
        (lambda: run(iters=-1), ValueError, ["iters"]),
        (lambda: run(threads=100), ValueError, ["threads", "32"]),
    ]


def check_bad(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


@pytest.mark.parametrize("case", range(11))
def test_numba_pipeline_rejects_bad_input(case):
    from numba import cuda

    check_bad(*pipeline_bad_calls(tp.pipeline_numba, lambda n: cuda.pinned_array(n, dtype=np.float32))[case])


def test_numba_scale_and_host_read_reject_bad_input():
    from numba import cuda

    check_bad(lambda: mg.scale_numba(np.ones(8, dtype=np.float32)), TypeError, ["x", "host"])
    check_bad(lambda: mg.scale_numba(cuda.to_device(np.ones(8))), TypeError, ["x", "float32"])
    check_bad(lambda: mg.scale_numba(cuda.to_device(np.ones(8, dtype=np.float32)),
                                     cuda.device_array(7, dtype=np.float32)), ValueError, ["out", "shape"])
    check_bad(lambda: bht.HostRead("managed_prefetch", np.ones(8, dtype=np.float32), impl="numba"),
              ValueError, ["mode"])
    check_bad(lambda: bht.HostRead("managed", np.ones(8, dtype=np.float32), impl="torch"), ValueError, ["impl"])
    check_bad(lambda: bht.HostRead("managed", np.ones(0, dtype=np.float32), impl="numba"), ValueError, ["src"])
    check_bad(lambda: ht.roundtrip_numba(cuda.to_device(np.ones(8, dtype=np.float32))), TypeError,
              ["x_host", "device"])


# --------------------------------------------------------------- CuPy --

def pinned(n, seed=None):
    import cupyx

    x = cupyx.empty_pinned(n, dtype=np.float32)
    x[:] = np.nan if seed is None else inputs(n, seed)
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("n", SIZES)
def test_cupy_pipeline_matches_numpy(n, chunks, streams):
    x, out = pinned(n, seed=n + streams), pinned(n)  # out poisoned with NaN
    assert ht.is_pinned(x) and ht.is_pinned(out)
    assert tp.pipeline(x, out, chunks=chunks, streams=streams, iters=ITERS, threads=256) is None
    np.testing.assert_allclose(out, tp.poly_reference(x, ITERS), rtol=RTOL)


@pytest.mark.gpu
def test_cupy_pipeline_pageable_and_reused_work_buffers():
    """Pageable buffers give the same result (no overlap, but correct); work
    buffers are reused; iters = 0 copies x through."""
    import cupy as cp

    n = 4099
    x = inputs(n, seed=6)
    out = np.full(n, np.nan, dtype=np.float32)
    assert not ht.is_pinned(x)
    work = (cp.full(n, cp.nan, dtype=cp.float32), cp.full(n, cp.nan, dtype=cp.float32))
    for iters in (0, 5, 3000):
        out[:] = np.nan
        tp.pipeline(x, out, chunks=5, streams=2, iters=iters, work=work)
        np.testing.assert_allclose(out, tp.poly_reference(x, iters), rtol=RTOL)


@pytest.mark.gpu
@pytest.mark.parametrize("streams", STREAMS)
def test_cupy_pipeline_timeline(streams):
    n, chunks = 2**22 + 5, 7
    x, out = pinned(n, seed=7), pinned(n)
    tl = tp.pipeline(x, out, chunks=chunks, streams=streams, iters=ITERS, timeline=True)
    np.testing.assert_allclose(out, tp.poly_reference(x, ITERS), rtol=RTOL)
    assert len(tl) == 3 * chunks
    eps = 1e-3  # ms: event resolution is ~0.5 us
    for k, kind, start, end in tl:
        assert 0 <= k < streams and kind in ("h2d", "kernel", "d2h")
        assert start >= -eps and end >= start - eps
    for c in range(chunks):  # issue order: per chunk h2d, kernel, d2h on stream c % streams
        assert [op[1] for op in tl[3 * c:3 * c + 3]] == ["h2d", "kernel", "d2h"]
        assert {op[0] for op in tl[3 * c:3 * c + 3]} == {c % streams}
    for k in range(streams):  # one stream's operations run one after another
        ops = [op for op in tl if op[0] == k]
        for prev, nxt in zip(ops, ops[1:]):
            assert nxt[2] >= prev[3] - eps, (prev, nxt)
    if streams == 1:  # serial: nothing overlaps at all
        for prev, nxt in zip(tl, tl[1:]):
            assert nxt[2] >= prev[3] - eps


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 2**20 + 3])
def test_cupy_copies_round_trip_exactly(n):
    import cupy as cp

    for make in (lambda: inputs(n, seed=8), lambda: pinned(n, seed=8)):
        x = make()
        back = np.full(n, np.nan, dtype=np.float32)
        dev = cp.full(n, cp.nan, dtype=cp.float32)
        ht.copy_h2d(x, dev)
        ht.copy_d2h(dev, back)
        cp.cuda.get_current_stream().synchronize()
        np.testing.assert_array_equal(back, x)
        np.testing.assert_array_equal(cp.asnumpy(dev), x)
    assert ht.is_pinned(ht.pinned_like(x)) and not ht.is_pinned(np.ones(4))


@pytest.mark.gpu
def test_cupy_time_copy_reports_a_rate():
    import cupy as cp

    x = pinned(1 << 20, seed=9)
    dev = cp.empty(1 << 20, dtype=cp.float32)
    for direction in ("h2d", "d2h"):
        t = bht.time_copy(x, dev, direction, samples=3, min_sample_ms=0.5)
        assert t["ms"] > 0 and t["gbps"] > 0.1 and t["pinned"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", bht.HOST_READ_MODES)
@pytest.mark.parametrize("n", [1, 1000, 2**20 + 3])
def test_cupy_host_read_matches_numpy(mode, n):
    case = bht.HostRead(mode, inputs(n, seed=n))
    for _ in range(2):  # the second run starts from host memory again
        case.reset()
        case.out.fill(np.nan)
        case.run()
        if case.twice:  # a float32 sum (double atomics) and a subtraction
            np.testing.assert_allclose(case.result(), case.expected(), rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(case.result(), case.expected())  # 2x: exact


@pytest.mark.gpu
def test_cupy_managed_and_zero_copy_see_host_writes():
    """A kernel sees what the host wrote to managed memory and to pinned
    memory through the zero-copy view, and the host sees the kernel's writes."""
    import cupy as cp

    x = inputs(4099, seed=10)
    m = mg.managed_empty(x.size)
    assert ht.memory_type(m) == ht.MEMORY_MANAGED
    h = mg.host_view(m)
    h[:] = x
    np.testing.assert_array_equal(cp.asnumpy(mg.scale_cupy(mg.prefetch_to_gpu(m))), 2 * x)
    m2 = mg.managed_empty(x.size)
    mg.scale_cupy(m, m2)  # managed to managed, on the GPU
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(mg.host_view(m2), 2 * x)
    p = pinned(x.size, seed=10)
    p2 = pinned(x.size, seed=11)
    mg.scale_cupy(mg.zero_copy_view(p), mg.zero_copy_view(p2))  # the kernel reads and writes host memory
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(p2, 2 * x)


@pytest.mark.gpu
def test_cupy_balance_iters():
    b = bht.balance_iters(1 << 20)
    assert b["iters"] >= 1 and b["copy_ms"] > 0 and b["kernel_ms_per_iter"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("mode", bht.NUMBA_HOST_READ_MODES)
def test_numba_host_read_on_gpu_large(mode):
    case = bht.HostRead(mode, inputs(2**20 + 3, seed=11), impl="numba")
    case.run()
    np.testing.assert_array_equal(case.result(), case.expected())


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(11))
def test_cupy_pipeline_rejects_bad_input(case):
    check_bad(*pipeline_bad_calls(tp.pipeline, pinned)[case])


@pytest.mark.gpu
def test_cupy_wrappers_reject_bad_input():
    import cupy as cp

    host = np.ones(8, dtype=np.float32)
    dev = cp.ones(8, dtype=cp.float32)
    check_bad(lambda: ht.copy_h2d(dev, dev), TypeError, ["host", "numpy"])
    check_bad(lambda: ht.copy_h2d(host, host), TypeError, ["dev", "host"])
    check_bad(lambda: ht.copy_h2d(host, cp.ones(9, dtype=cp.float32)), ValueError, ["dev", "shape"])
    check_bad(lambda: ht.copy_d2h(cp.ones(8), host), TypeError, ["dev", "float32"])
    check_bad(lambda: bht.time_copy(host, dev, "h2h"), ValueError, ["direction"])
    check_bad(lambda: mg.scale_cupy(host), TypeError, ["x", "host"])
    check_bad(lambda: mg.center_cupy(cp.ones(8)), TypeError, ["x", "float32"])
    check_bad(lambda: tp.poly_cupy(dev, iters=-1), ValueError, ["iters"])
    check_bad(lambda: mg.zero_copy_view(host), ValueError, ["x_pinned", "pageable"])
    check_bad(lambda: mg.zero_copy_view(dev), TypeError, ["x_pinned"])
    check_bad(lambda: mg.prefetch_to_gpu(dev), TypeError, ["x_managed"])
    check_bad(lambda: mg.prefetch_to_gpu(mg.managed_empty(8)[2:]), ValueError, ["x_managed", "whole"])
    check_bad(lambda: mg.host_view(dev), ValueError, ["x_managed"])
    check_bad(lambda: bht.HostRead("prefetch", host), ValueError, ["mode"])
    check_bad(lambda: ht.cupy_kernel("vector_add"), ValueError, ["name"])
    check_bad(lambda: tp.pipeline(host, host.copy(), chunks=2, streams=1, work=(dev, dev[:4])),
              ValueError, ["work"])


# ---------------------------------------------------------------- bench --

def synthetic_records():
    """Records of the form kernels/bench/host_transfer.py writes, numbers made up."""
    from kernels import results
    from kernels.bench import host_transfer as bench

    def rec(impl, variant, n, gbps, ref, **extra):
        return {"id": results.record_id(bench.TOPIC, impl, variant, [n], "float32"), "topic": bench.TOPIC,
                "impl": impl, "variant": variant, "shape": [n], "dtype": "float32", "ms": 4 * n / gbps / 1e6,
                "gbps": gbps, "ref": results.record_id(bench.TOPIC, impl, ref, [n], "float32"),
                "rel_err": 0.0, **extra}

    records = []
    for nbytes in bench.QUICK_COPY_BYTES:
        for impl in ("cuda_memcpy", "numba"):
            for d in ("h2d", "d2h"):
                records.append(rec(impl, f"{d}_pinned", nbytes // 4, 50.0, f"{d}_pinned", bytes=nbytes))
                records.append(rec(impl, f"{d}_pageable", nbytes // 4, 20.0, f"{d}_pinned", bytes=nbytes))
    n = 1 << 24
    for streams in bench.STREAMS:
        tl = [[c % streams, kind, 3.0 * c + j, 3.0 * c + j + 1] for c in range(bench.CHUNKS)
              for j, kind in enumerate(("h2d", "kernel", "d2h"))]
        records.append(rec("cupy", bench._variant_of(streams), n, 10.0 * streams, "pipeline_serial",
                           streams=streams, chunks=bench.CHUNKS, bytes=8 * n, timeline=tl, energy_j_per_call=1.0))
    for mode in bht.HOST_READ_MODES:
        records.append(rec("cupy", mode, n, 30.0, bench.READ_REFS.get(mode, "explicit_copy"),
                           energy_j_per_call=2.0, energy_j_above_idle=0.5))
    by_id = {r["id"]: r for r in records}
    for r in records:
        r["ratio"] = r["gbps"] / by_id[r["ref"]]["gbps"]
    return records


def test_bench_records_validate_plot_and_summarize(tmp_path):
    pytest.importorskip("matplotlib")
    from kernels import results
    from kernels.bench import host_transfer as bench

    env = {"gpu": "Test GPU", "gpu_slug": "test-gpu", "compute_capability": "9.0", "driver": "1",
           "cuda_runtime": "13.0", "cupy": "14", "numba": "0.68", "numba_cuda": "0.30", "date": "2026-01-01",
           "commit": "abc"}
    data = results.merge(results.load(tmp_path / "none.json"), env, synthetic_records())
    assert results.validate(data) == []
    paths = bench.plot(data, tmp_path)
    names = ["host_transfer-test-gpu", "host_transfer_host_read-test-gpu", "host_transfer_timeline-test-gpu"]
    assert sorted(p.name for p in paths) == sorted(f"{n}{lang}.svg" for n in names for lang in ("", "-zh"))
    assert all(p.stat().st_size > 1000 for p in paths)
    assert len(bench.summary(data)) == 1 + len(data["records"])


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/host_transfer.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
EXAMPLE_FAULTS = [
    ("host_transfer.py", "v = v * float32(0.5) + xi", "v = v * float32(0.5) - xi", "numba"),
    ("host_transfer.cu", "v = fmaf(v, 0.5f, xi);", "v = fmaf(v, 0.5f, -xi);", "cupy"),
]


def overlap_cases() -> list:
    """This chapter's wrappers that take an output: each must refuse one
    that overlaps an input (tests/test_overlap.py)."""
    from kernels import managed_memory as mg
    from kernels import transfer_pipeline as tp
    from tests.overlap import Case, cupy_case, numba_case, ex, N, N1, N4, pipeline_host

    return [
        cupy_case("poly_cupy", call=lambda i, out: tp.poly_cupy(i["x"], out, iters=8), inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("scale_cupy", call=lambda i, out: mg.scale_cupy(i["x"], out), inputs={"x": (N,)}, out_shape=(N,)),
        cupy_case("center_cupy", call=lambda i, out: mg.center_cupy(i["x"], out), inputs={"x": (N,)}, out_shape=(N,)),
        Case("pipeline", lib="host", gpu=True, out_name="out_host",
             call=lambda i, out: tp.pipeline(i["x_host"], out, chunks=8, streams=2, iters=4),
             inputs={"x_host": (N,)}, out_shape=(N,)),
        cupy_case("pipeline_work", out_name="work[1]", input_kept=False,
            call=lambda i, out: tp.pipeline(*pipeline_host(N), chunks=8, streams=2, iters=4, work=(i["work[0]"], out)),
            inputs={"work[0]": (N,)}, out_shape=(N,)),
        cupy_case("examples/host_transfer.scale_cupy", call=lambda i, out: ex("host_transfer.scale_cupy")(i["x"], out),
            inputs={"x": (N,)}, out_shape=(N,)),
        Case("examples/host_transfer.pipeline", lib="host", gpu=True, out_name="out_host",
             call=lambda i, out: ex("host_transfer.pipeline")(i["x_host"], out, chunks=8, streams=2, iters=4),
             inputs={"x_host": (N,)}, out_shape=(N,)),
        numba_case("scale_numba", call=lambda i, out: mg.scale_numba(i["x"], out, threads=32),
            inputs={"x": (N1,)}, out_shape=(N1,)),
        Case("pipeline_numba", lib="host", gpu=False, out_name="out_host",
             call=lambda i, out: tp.pipeline_numba(i["x_host"], out, chunks=4, streams=2, iters=4, threads=32),
             inputs={"x_host": (N4,)}, out_shape=(N4,)),
        numba_case("pipeline_numba_work", out_name="work[1]", input_kept=False,
            call=lambda i, out: tp.pipeline_numba(*pipeline_host(N4), chunks=4, streams=2, iters=4, threads=32,
                                                work=(i["work[0]"], out)),
            inputs={"work[0]": (N4,)}, out_shape=(N4,)),
        Case("examples/host_transfer.pipeline_numba", lib="host", gpu=False, out_name="out_host",
             call=lambda i, out: ex("host_transfer.pipeline_numba")(i["x_host"], out, chunks=4, streams=2, iters=4,
                                                                   threads=32),
             inputs={"x_host": (4 * 256,)}, out_shape=(4 * 256,)),
    ]


# Functions taking an output that need no overlap case, and why.
OVERLAP_EXEMPT = {
    "time_copy": "a cudaMemcpy, not a kernel launch",
    "roundtrip_numba": "two copies on one stream: the whole input is copied before out is written",
}
