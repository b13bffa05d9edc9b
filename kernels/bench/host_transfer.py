"""Topic `host_transfer`: the PCIe link between the host and the GPU.

(a) Copies, H2D and D2H, from pageable (NumPy) and pinned
    (cupyx.empty_pinned; Numba: cuda.pinned_array) memory, 64 KiB to 1 GiB.
    Each copy is synchronous and timed with the host's clock (see
    time_copy below for why not events); GB/s = bytes / time. The
    ref of a pageable record is the pinned record of the same size and
    direction (ratio < 1: pageable is slower); a pinned record is its own.
(b) The chunked pipeline, H2D -> poly_chunk -> D2H per chunk, 256 MiB in 8
    chunks, on 1 (pipeline_serial), 2 and 4 streams. iters is calibrated so
    that a chunk's kernel lasts as long as its copy in. GB/s counts the
    useful bytes over the link, 4n in + 4n out, per wall-clock call; ref:
    the serial record. The CuPy records carry the timeline of one run
    ([stream, kind, start_ms, end_ms] per operation) for the Gantt plot.
(c) A kernel reading n float32 (256 MiB) that the host has just written:
    explicit copy (the ref), managed memory with and without prefetch,
    zero-copy, and the two-pass variants (zero_copy_twice's ref is
    explicit_copy_twice: the same computation). GB/s = 4n (the input
    crossing the link once) / time, CUDA events around the transfer and
    kernel, after the host rewrote the input (untimed).

Energy ((b) and (c)): NVML's total-energy counter over >= 2 s loops. It is
the GPU board's energy only: the CPU, host memory and PCIe root complex
that do half of every transfer are not in it. In (c) each call includes
the host's rewrite of the input (the same in every mode) while the board
idles; energy_j_above_idle subtracts the idle power measured in this run.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from .. import checks, harness, results
from ..host_transfer import _check_copy, _cp, copy_h2d, is_pinned, pinned_like
from ..managed_memory import (SCALE, center_cupy, host_view, managed_array_numba, managed_empty,
                              prefetch_to_gpu, scale_cupy, scale_numba, zero_copy_view)
from ..transfer_pipeline import poly_cupy
from . import plotting

TOPIC = "host_transfer"
ORDER = 100  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "energy_j_above_idle": ("高出空闲部分 (J)", "above idle (J)"),
    "chunks": ("分块数", "chunks"),
}
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
COPY_BYTES = [64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB]
QUICK_COPY_BYTES = [64 * KIB, 16 * MIB, 256 * MIB]
PIPELINE_BYTES, QUICK_PIPELINE_BYTES = 256 * MIB, 64 * MIB
READ_BYTES, QUICK_READ_BYTES = 256 * MIB, 64 * MIB  # both > the 60 MiB L2 of an H200
CHUNKS = 8
STREAMS = (1, 2, 4)
KIND_COLORS = {"h2d": "C0", "kernel": "C2", "d2h": "C1"}


# ---------------------------------------------- what times the transfers --

HOST_READ_MODES = ("explicit_copy", "explicit_copy_twice", "managed", "managed_prefetch",
                   "zero_copy", "zero_copy_twice")


NUMBA_HOST_READ_MODES = ("explicit_copy", "managed", "zero_copy")  # no prefetch in Numba


def time_copy(host, dev, direction: str, *, samples: int = 15, min_sample_ms: float = 2.0,
              max_seconds: float | None = None) -> dict:
    """Median time of one synchronous copy (enqueue, then wait for the
    stream, as cudaMemcpy does) between `host` and `dev`, in milliseconds,
    and its bandwidth host.nbytes / time in GB/s.

    Timed with the host's clock (time.perf_counter), not with CUDA events:
    from pageable memory part of a copy is the CPU's work (staging through a
    pinned buffer) and part of that happens before the copy reaches the
    stream, so events around it on the stream would miss it. The host clock
    sees everything the program waits for; pinned copies are timed the same
    way so that the two compare fairly. The wait after each copy (~10 us)
    is part of the cost of a synchronous copy; it dominates small copies.
    The first copies (warm-up: first touch of pageable pages, the driver's
    staging buffers) are not timed.
    """
    cp = _cp()
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    _check_copy(host, dev)
    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    if direction == "h2d":
        dst, src, kind = dev.data.ptr, host.ctypes.data, rt.memcpyHostToDevice
    else:
        dst, src, kind = host.ctypes.data, dev.data.ptr, rt.memcpyDeviceToHost

    def one():  # the bare runtime call: no Python checks inside the timed loop
        rt.memcpyAsync(dst, src, host.nbytes, kind, stream.ptr)
        stream.synchronize()

    cp.cuda.Device().synchronize()
    t = harness.time_host(one, samples=samples, min_sample_ms=min_sample_ms, max_seconds=max_seconds)
    t.update(gbps=host.nbytes / (t["ms"] * 1e-3) / 1e9, pinned=is_pinned(host))
    return t


def balance_iters(chunk_n: int, *, threads: int = 256, probe_iters: int = 256,
                  max_iters: int = 1 << 16) -> dict:
    """The iters for which poly_chunk on chunk_n elements lasts about as
    long as copying chunk_n float32 in from pinned memory (when the three
    stages of the pipeline take equal time, overlap gains the most: up to
    3x with many chunks). The kernel's time is affine in iters, t0 + iters
    * t1 (t0: reading and writing the chunk in HBM), so two probes give it.
    """
    cp = _cp()

    checks.require_int("chunk_n", chunk_n, 1, 2**31 - 1)
    x_pin = pinned_like(np.random.default_rng(0).random(chunk_n, dtype=np.float32))
    x = cp.empty(chunk_n, dtype=cp.float32)
    out = cp.empty_like(x)
    t_copy = harness.time_gpu(lambda: copy_h2d(x_pin, x), warmup=3, samples=10)["ms"]
    t_zero = harness.time_gpu(lambda: poly_cupy(x, out, iters=0, threads=threads), warmup=3, samples=10)["ms"]
    t_probe = harness.time_gpu(lambda: poly_cupy(x, out, iters=probe_iters, threads=threads),
                               warmup=3, samples=10)["ms"]
    per_iter = max((t_probe - t_zero) / probe_iters, 1e-9)
    # Tiny chunks: both times are launch overhead and the ratio means little.
    iters = min(max_iters, max(1, round((t_copy - t_zero) / per_iter)))
    return {"iters": int(iters), "copy_ms": t_copy, "kernel_ms_per_iter": per_iter, "kernel_ms_0": t_zero}


class HostRead:
    """n float32 that the host has just written, read on the GPU by scale_once
    (out = 2x) or, for the "_twice" modes, by center (out = x - mean, two
    passes over x). `mode` is one of HOST_READ_MODES:

    - explicit_copy: the host writes a pinned buffer; cudaMemcpyAsync copies
      it to device memory; the kernel reads device memory (the baseline);
    - explicit_copy_twice: the same copy, then both passes read device memory;
    - managed: the host writes managed memory; the kernel reads it and the
      GPU's page faults migrate it;
    - managed_prefetch: the same, with cudaMemPrefetchAsync before the kernel;
    - zero_copy: the kernel reads the pinned host buffer itself;
    - zero_copy_twice: both passes read the pinned host buffer.

    reset() waits for the GPU and has the host rewrite the input from src:
    every run starts from the same state, the data in host memory (for
    managed memory the CPU's writes fault its pages back to the host).
    run(stream) enqueues the copy or prefetch and the kernel(s); returns
    the device output. impl="numba" has the modes of NUMBA_HOST_READ_MODES
    (cuda.pinned_array, cuda.managed_array, cuda.mapped_array).
    """

    def __init__(self, mode: str, src, *, impl: str = "cupy", threads: int = 256):
        modes = HOST_READ_MODES if impl == "cupy" else NUMBA_HOST_READ_MODES
        if impl not in ("cupy", "numba"):
            raise ValueError(f"impl must be 'cupy' or 'numba', got {impl!r}")
        if mode not in modes:
            raise ValueError(f"mode must be one of {modes} for impl {impl!r}, got {mode!r}")
        checks.require_host_vector("src", src)
        if src.size == 0:
            raise ValueError("src must hold at least one element")
        checks.require_block_size("threads", threads)
        self.mode, self.impl, self.src, self.threads = mode, impl, src, threads
        self.n = src.size
        self.twice = mode.endswith("_twice")
        self.link_bytes = 4 * self.n  # the input must cross the link once
        if impl == "cupy":
            self._setup_cupy()
        else:
            self._setup_numba()
        self.reset()

    def _setup_cupy(self):
        import cupyx

        cp = _cp()
        self.out = cp.empty(self.n, dtype=cp.float32)
        if self.mode.startswith("managed"):
            self.dev = managed_empty(self.n)
            self.host = host_view(self.dev)  # the same memory, seen from the CPU
        else:
            self.host = cupyx.empty_pinned(self.n, dtype=np.float32)
            if self.mode.startswith("zero_copy"):
                self.dev = zero_copy_view(self.host)
            else:
                self.dev = cp.empty(self.n, dtype=cp.float32)

    def _setup_numba(self):
        from numba import cuda

        self.out = cuda.device_array(self.n, dtype=np.float32)
        if self.mode == "managed":
            self.dev = self.host = managed_array_numba(self.n)
        elif self.mode == "zero_copy":
            self.dev = self.host = cuda.mapped_array(self.n, dtype=np.float32)
        else:
            self.host = cuda.pinned_array(self.n, dtype=np.float32)
            self.dev = cuda.device_array(self.n, dtype=np.float32)

    def reset(self) -> None:
        # The GPU must be done with the buffer before the CPU rewrites it.
        if self.impl == "cupy":
            _cp().cuda.Device().synchronize()
        else:
            from numba import cuda

            cuda.synchronize()
        self.host[:] = self.src

    def run(self, stream=None):
        if self.impl == "numba":
            if self.mode == "explicit_copy":
                self.dev.copy_to_device(self.host)
            return scale_numba(self.dev, self.out, threads=self.threads)
        cp = _cp()
        stream = cp.cuda.get_current_stream() if stream is None else stream
        with stream:
            if self.mode.startswith("explicit_copy"):
                copy_h2d(self.host, self.dev, stream=stream)
            elif self.mode == "managed_prefetch":
                prefetch_to_gpu(self.dev, stream)
            if self.twice:
                return center_cupy(self.dev, self.out, threads=self.threads)
            return scale_cupy(self.dev, self.out, threads=self.threads)

    def result(self) -> np.ndarray:
        """The output, copied to the host."""
        if self.impl == "numba":
            return self.out.copy_to_host()
        return _cp().asnumpy(self.out)

    def expected(self) -> np.ndarray:
        """The float64 reference of the output."""
        x = self.src.astype(np.float64)
        return x - x.mean() if self.twice else SCALE * x


def time_host_read(case: HostRead, *, samples: int = 10, warmup: int = 2) -> dict:
    """Median GPU time of case.run(), after a fresh case.reset() each time,
    in ms: CUDA events around run() only, on the current stream. The
    host's rewrite of the input is not timed (it is the same in every
    mode); page faults, prefetches and copies all happen between the events.
    """
    cp = _cp()
    stream = cp.cuda.get_current_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for k in range(warmup + samples):
        case.reset()
        start.record(stream)
        case.run(stream)
        end.record(stream)
        end.synchronize()
        if k >= warmup:
            times.append(cp.cuda.get_elapsed_time(start, end))
    times.sort()
    return {"ms": statistics.median(times), "ms_min": times[0], "ms_max": times[-1], "samples": samples}


def _variant_of(streams: int) -> str:
    return "pipeline_serial" if streams == 1 else f"pipeline_streams{streams}"


def _record(impl, variant, n, ms, gbps, ref_variant, rel_err, **extra) -> dict:
    return results.record(TOPIC, impl, variant, [n], "float32", ms=ms, gbps=gbps,
                          ref=results.record_id(TOPIC, impl, ref_variant, [n], "float32"), rel_err=rel_err,
                          **extra)


def _energy(fn, quick: bool) -> dict:
    from .. import harness

    e = harness.measure_energy(fn, min_seconds=0.5 if quick else 2.0)
    return {**harness.energy_fields(e), "energy_calls": e["calls"]}


def _free_pools() -> None:
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


# ------------------------------------------------------------ (a) copies --

def _measure_copies(quick: bool) -> list[dict]:
    records = []
    for nbytes in (QUICK_COPY_BYTES if quick else COPY_BYTES):
        records += _copies_of(nbytes, max_seconds=0.5 if quick else 2.0)
        _free_pools()  # the buffers of this size died with _copies_of
    return records


def _copies_of(nbytes: int, max_seconds: float) -> list[dict]:
    """The eight copy records (2 directions x pageable/pinned x CuPy/Numba) of one size."""
    import cupy as cp
    import cupyx
    from numba import cuda

    from .. import harness
    from .. import host_transfer as ht

    records = []
    n = nbytes // 4
    x = np.random.default_rng(n).random(n, dtype=np.float32)  # pageable
    x_pin = ht.pinned_like(x)
    back, back_pin = np.empty_like(x), cupyx.empty_pinned(n, dtype=np.float32)
    nb_pin, nb_back_pin = cuda.pinned_array(n, dtype=np.float32), cuda.pinned_array(n, dtype=np.float32)
    nb_pin[:] = x
    dev = cp.empty(n, dtype=cp.float32)
    nb_dev = cuda.as_cuda_array(dev)  # Numba's view of the same device memory
    stream = cuda.stream()

    def nb_h2d(host):
        nb_dev.copy_to_device(host, stream=stream)
        stream.synchronize()

    def nb_d2h(host):
        nb_dev.copy_to_host(host, stream=stream)
        stream.synchronize()

    hosts = {("cuda_memcpy", "h2d"): x_pin, ("cuda_memcpy", "d2h"): back_pin,
             ("numba", "h2d"): nb_pin, ("numba", "d2h"): nb_back_pin}
    for direction in ("h2d", "d2h"):
        for mem in ("pinned", "pageable"):  # pinned first: it is the ref
            variant = f"{direction}_{mem}"
            for impl in ("cuda_memcpy", "numba"):
                if mem == "pinned":
                    host = hosts[impl, direction]
                else:
                    host = x if direction == "h2d" else back
                # The start: NaN wherever the copy writes (device for h2d, host for d2h).
                if direction == "h2d":
                    dev.fill(cp.nan)
                else:
                    ht.copy_h2d(x_pin, dev)
                    host[:] = np.nan
                cp.cuda.Device().synchronize()
                if impl == "cuda_memcpy":
                    t = time_copy(host, dev, direction, max_seconds=max_seconds)
                    if t["pinned"] != (mem == "pinned"):
                        raise RuntimeError(f"{variant}: the host buffer's pinned={t['pinned']}")
                else:
                    fn = (lambda h=host: nb_h2d(h)) if direction == "h2d" else (lambda h=host: nb_d2h(h))
                    t = harness.time_host(fn, max_seconds=max_seconds)
                got = cp.asnumpy(dev) if direction == "h2d" else host
                if not np.array_equal(got, x):  # copies are exact, bit for bit
                    raise RuntimeError(f"{impl} {variant} {nbytes} B: the copy is not exact")
                records.append(_record(impl, variant, n, t["ms"], nbytes / (t["ms"] * 1e-3) / 1e9,
                                       f"{direction}_pinned", harness.rel_err(got, x), ms_min=t["ms_min"], bytes=nbytes,
                                       samples=t["samples"], batch=t["batch"]))
    return records


# ---------------------------------------------------------- (b) pipeline --

def _measure_pipeline(quick: bool) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import harness
    from .. import host_transfer as ht, transfer_pipeline as tp

    n = (QUICK_PIPELINE_BYTES if quick else PIPELINE_BYTES) // 4
    balance = balance_iters(n // CHUNKS)
    iters = balance["iters"]
    x = ht.pinned_like(np.random.default_rng(1).random(n, dtype=np.float32) + np.float32(0.5))
    out = ht.pinned_like(np.full(n, np.nan, dtype=np.float32))
    ref = tp.poly_reference(x, iters)
    work = (cp.empty(n, dtype=cp.float32), cp.empty(n, dtype=cp.float32))
    nb_x, nb_out = cuda.pinned_array(n, dtype=np.float32), cuda.pinned_array(n, dtype=np.float32)
    nb_x[:] = x
    nb_work = (cuda.device_array(n, dtype=np.float32), cuda.device_array(n, dtype=np.float32))
    common = dict(bytes=8 * n, chunks=CHUNKS, iters=iters, chunk_copy_ms=balance["copy_ms"],
                  kernel_ms_per_iter=balance["kernel_ms_per_iter"])
    records = []
    for impl in ("cupy", "numba"):
        for streams in STREAMS:
            if impl == "cupy":
                def run(s=streams, timeline=False):
                    return tp.pipeline(x, out, chunks=CHUNKS, streams=s, iters=iters, work=work, timeline=timeline)
                host_out = out
            else:
                def run(s=streams):
                    return tp.pipeline_numba(nb_x, nb_out, chunks=CHUNKS, streams=s, iters=iters, work=nb_work)
                host_out = nb_out
            host_out[:] = np.nan  # poison
            run()
            err = harness.rel_err(host_out, ref)
            if not err <= 1e-6:  # also catches NaN
                raise RuntimeError(f"{impl} pipeline streams={streams}: rel_err {err}")
            # Wall clock per call: the pipeline returns when its last copy is done.
            t = harness.time_host(run, samples=10 if quick else 20, max_seconds=1.0 if quick else 4.0)
            rec = _record(impl, _variant_of(streams), n, t["ms"], 8 * n / (t["ms"] * 1e-3) / 1e9,
                          "pipeline_serial", err, ms_min=t["ms_min"], streams=streams, **common)
            if impl == "cupy":
                rec["timeline"] = [[k, kind, round(a, 4), round(b, 4)] for k, kind, a, b in run(timeline=True)]
            rec.update(_energy(run, quick))
            records.append(rec)
    return records


# -------------------------------------- (c) managed memory and zero-copy --

READ_REFS = {"explicit_copy_twice": "explicit_copy", "zero_copy_twice": "explicit_copy_twice"}


def _measure_host_read(quick: bool) -> list[dict]:
    from .. import harness

    n = (QUICK_READ_BYTES if quick else READ_BYTES) // 4
    src = np.random.default_rng(2).random(n, dtype=np.float32) + np.float32(0.5)
    idle = harness.idle_power_w()
    records = []
    for impl, modes in (("cupy", HOST_READ_MODES), ("numba", NUMBA_HOST_READ_MODES)):
        for mode in modes:
            case = HostRead(mode, src, impl=impl)
            case.run()
            err = harness.rel_err(case.result(), case.expected())
            if not err <= (1e-5 if case.twice else 0.0):  # 2x is exact; NaN fails
                raise RuntimeError(f"{impl} {mode}: rel_err {err}")
            t = time_host_read(case, samples=5 if quick else 10)
            rec = _record(impl, mode, n, t["ms"], case.link_bytes / (t["ms"] * 1e-3) / 1e9,
                          READ_REFS.get(mode, "explicit_copy"), err, ms_min=t["ms_min"], ms_max=t["ms_max"],
                          bytes=case.link_bytes)
            rec.update(_energy(lambda c=case: (c.reset(), c.run()), quick))
            per_call_s = rec["energy_seconds"] / rec["energy_calls"]
            rec.update(seconds_per_call=per_call_s, idle_power_w=idle,
                       energy_j_above_idle=rec["energy_j_per_call"] - idle * per_call_s)
            records.append(rec)
            case = None  # free its buffers before the next mode allocates
            _free_pools()
    return records


def measure(quick: bool = False) -> list[dict]:
    records = []
    for part in (_measure_copies, _measure_pipeline, _measure_host_read):
        records += part(quick)
        _free_pools()
    by_id = {r["id"]: r for r in records}
    for r in records:
        r["ratio"] = r["gbps"] / by_id[r["ref"]]["gbps"]
    return records


# ------------------------------------------------------------------ plots --

# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    '; a bar starts when its stream reaches it': '；条形在其所在流执行到它时开始',
    'Host <-> device copies, pageable vs pinned': '主机与设备间拷贝：可分页内存与锁页内存',
    'bytes per copy (synchronous copy, host clock)': '每次拷贝的字节数（同步拷贝，主机计时）',
    'pageable': '可分页',
    'pinned': '锁页',
    'Copy/compute overlap: H2D, kernel, D2H per chunk': '拷贝与计算重叠：每块依次 H2D、kernel、D2H',
    'serial': '串行',
    'streams': '个流',
    'stream': '流',
    'ms from the first event': '距第一个事件的 ms',
    'chunks of': '块，每块',
    'A kernel reading': 'kernel 读取主机写入的',
    'MiB the host wrote': 'MiB 数据',
    'time per read of the input (ms)': '每读一遍输入的时间 (ms)',
    'board energy per call (J)': '每次调用的整卡能耗 (J)',
    'of which above idle (J)': '其中高出空闲功耗的部分 (J)',
    "board energy per call, incl. the host's rewrite (J)": '每次调用的整卡能耗，含主机重写 (J)',
    'explicit': '显式',
    'copy': '拷贝',
    'copy_twice': '拷贝两遍',
    'managed': '统一内存',
    'prefetch': '预取',
    'zero': '零',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    paths = []
    # 1. Copy bandwidth against size, pinned and pageable, both directions.
    fig, ax = plotting.new_figure(7, 4)
    styles = {("h2d", "pinned"): ("C0", "-"), ("h2d", "pageable"): ("C0", "--"),
              ("d2h", "pinned"): ("C1", "-"), ("d2h", "pageable"): ("C1", "--")}
    for (direction, mem), (color, ls) in styles.items():
        for impl, marker, alpha in (("cuda_memcpy", "o", 1.0), ("numba", "x", 0.5)):
            pts = sorted((r["bytes"], r["gbps"]) for r in rows
                         if r["impl"] == impl and r["variant"] == f"{direction}_{mem}")
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, ls=ls, marker=marker, color=color, alpha=alpha, markersize=4,
                        label=f"{direction} {mem}" + (" (numba)" if impl == "numba" else ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per copy (synchronous copy, host clock)")
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    paths += plotting.save(fig, ax, TOPIC, env, out_dir, "Host <-> device copies, pageable vs pinned", words=PLOT_WORDS)
    # 2. Timeline (Gantt) of the serial pipeline and of 4 streams.
    timed = {r["variant"]: r for r in rows if r["impl"] == "cupy" and "timeline" in r}
    shown = [v for v in ("pipeline_serial", "pipeline_streams4") if v in timed]
    if shown:
        fig, ax = plotting.new_figure(8, 3.6)
        labels, row = [], 0
        for variant in shown:
            rec = timed[variant]
            for k in range(rec["streams"]):
                for kind, color in KIND_COLORS.items():
                    bars = [(a, b - a) for s, kd, a, b in rec["timeline"] if s == k and kd == kind]
                    ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=color, edgecolor="white", linewidth=0.3,
                                   alpha=0.85, label=kind if row == 0 else None)
                labels.append(f"{'serial' if rec['streams'] == 1 else '4 streams'}: stream {k}")
                row += 1
        ax.set_yticks(range(row), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"ms from the first event ({timed[shown[0]]['chunks']} chunks of "
                      f"{timed[shown[0]]['bytes'] // 2 // timed[shown[0]]['chunks'] / 2**20:.0f} MiB; "
                      f"a bar starts when its stream reaches it)")
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        paths += plotting.save(fig, ax, f"{TOPIC}_timeline", env, out_dir,
                               "Copy/compute overlap: H2D, kernel, D2H per chunk", words=PLOT_WORDS)
    # 3. Reading host-written data: time and board energy per mode.
    reads = [r for r in rows if r["impl"] == "cupy" and "energy_j_above_idle" in r]
    if reads:
        order = {m: i for i, m in enumerate(HOST_READ_MODES)}
        reads.sort(key=lambda r: order.get(r["variant"], 99))
        fig, ax = plotting.new_figure(8, 4)
        xs = np.arange(len(reads))
        ax.bar(xs - 0.2, [r["ms"] for r in reads], 0.4, color="C0", label="time (ms)")
        ax.set_ylabel("time per read of the input (ms)")
        ax2 = ax.twinx()
        ax2.bar(xs + 0.2, [r["energy_j_per_call"] for r in reads], 0.4, color="C3", alpha=0.5,
                label="board energy per call (J)")
        ax2.bar(xs + 0.2, [r["energy_j_above_idle"] for r in reads], 0.4, color="C3",
                label="of which above idle (J)")
        ax2.set_ylabel("board energy per call, incl. the host's rewrite (J)")
        ax.set_xticks(xs, [r["variant"].replace("_", "\n", 1) for r in reads], fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        handles = ax.get_legend_handles_labels()
        handles2 = ax2.get_legend_handles_labels()
        ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], fontsize=7, loc="best")
        n = reads[0]["shape"][0]
        paths += plotting.save(fig, ax, f"{TOPIC}_host_read", env, out_dir,
                               f"A kernel reading {4 * n / 2**20:.0f} MiB the host wrote", words=PLOT_WORDS)
    return paths


def summary(data: dict) -> list[str]:
    out = [f"{'impl':11} {'variant':20} {'n':>10} {'ms':>9} {'GB/s':>7} {'ratio':>6} {'J/call':>8} "
           f"{'J>idle':>8} {'rel_err':>8}"]
    for r in results.select(data, TOPIC):
        out.append(f"{r['impl']:11} {r['variant']:20} {r['shape'][0]:>10} {r['ms']:9.3f} {r['gbps']:7.2f} "
                   f"{r['ratio']:6.3f} {r.get('energy_j_per_call', float('nan')):8.3f} "
                   f"{r.get('energy_j_above_idle', float('nan')):8.3f} {r['rel_err']:8.1e}")
    return out


def claims(data: dict) -> None:
    """docs/memory-hierarchy*.md: "What the measurements show" and the boxes
    about host <-> device transfers (pageable and pinned copies, streams,
    managed and zero-copy memory), checked against the committed
    measurements."""
    ht = {(r["impl"], r["variant"], r["shape"][0]): r for r in results.select(data, TOPIC)}
    sizes = sorted({n for (i, v, n) in ht if i == "cuda_memcpy"})
    small, large = sizes[0], sizes[-1]
    for d in ("h2d", "d2h"):
        assert ht[("cuda_memcpy", f"{d}_pageable", large)]["ratio"] < 1 / 3, d  # several times, not 2-3x
        assert 0.4 < ht[("cuda_memcpy", f"{d}_pageable", small)]["ratio"] < 0.65, d  # about twice at the smallest
    pin = [ht[("cuda_memcpy", f"{d}_pinned", large)]["gbps"] for d in ("h2d", "d2h")]
    assert abs(pin[0] - pin[1]) < 0.05 * pin[1]
    cu = {v: r for (i, v, n), r in ht.items() if i == "cupy"}
    assert cu["pipeline_streams2"]["ms"] < 0.6 * cu["pipeline_serial"]["ms"]
    assert cu["pipeline_streams4"]["ms"] < cu["pipeline_streams2"]["ms"]
    assert cu["managed"]["ratio"] < 0.3 and cu["managed_prefetch"]["ratio"] > 0.85
    assert cu["zero_copy"]["ratio"] > 0.85 and cu["zero_copy_twice"]["ratio"] < 0.6
    once = ("explicit_copy", "managed", "managed_prefetch", "zero_copy")
    assert min(once, key=lambda v: cu[v]["energy_j_per_call"]) == "explicit_copy"
    assert max(once, key=lambda v: cu[v]["energy_j_per_call"]) == "managed"
    nb = {v: r for (i, v, n), r in ht.items() if i == "numba"}
    assert nb["pipeline_streams4"]["ratio"] < cu["pipeline_streams4"]["ratio"]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import numpy as np

    from kernels import host_transfer as ht, transfer_pipeline as tp

    for n in (1, 1000, 2**16 + 3):
        x = ht.pinned_like(np.random.default_rng(n).random(n, dtype=np.float32))
        out = ht.pinned_like(np.full(n, np.nan, dtype=np.float32))
        for chunks, streams in ((1, 1), (3, 2), (7, 4)):
            tp.pipeline(x, out, chunks=min(chunks, n), streams=streams, iters=8)
            np.testing.assert_allclose(out, tp.poly_reference(x, 8), rtol=1e-6)
        for mode in HOST_READ_MODES:
            case = HostRead(mode, np.random.default_rng(n).random(n, dtype=np.float32))
            case.reset()
            case.run()
            np.testing.assert_allclose(case.result(), case.expected(), rtol=1e-5, atol=1e-6)
