"""The measuring harness every chapter uses (GPU only; imports CuPy lazily).

- `time_gpu`: CUDA events around batches of calls, after a warm-up; the
  median over many samples. Rotate among several argument sets so that the
  working set is larger than the L2 cache (60 MiB on an H200).
- `measure_energy`: NVML's total-energy counter (millijoules since the
  driver loaded) read before and after a loop of at least two seconds; the
  counter only moves every 20-100 ms, so shorter loops are mostly noise.
  This is board energy: it includes the idle power of the whole card.
- `copy_ceiling`, `sgemm_ceiling`: the device's own ceilings, measured in
  the same run as the kernels compared with them.
- `env_stamp`: what the numbers were measured on.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import math
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent


def _cp():
    import cupy as cp

    return cp


def l2_bytes() -> int:
    return int(_cp().cuda.Device().attributes["L2CacheSize"])


def rotation(set_bytes: int, factor: float = 3.0, most: int = 256) -> int:
    """How many argument sets to rotate among so that together they exceed
    `factor` times the L2 cache: each call then reads memory, not L2."""
    return max(1, min(most, math.ceil(factor * l2_bytes() / max(1, set_bytes))))


def _median_of_batches(batch_ms: Callable[[int], float], *, warmup: int, samples: int,
                       min_sample_ms: float, max_seconds: float | None) -> dict:
    """The sampling both timers share. batch_ms(count) runs `count` calls
    and returns their elapsed milliseconds, measured however the caller
    measures; each sample is a batch long enough (>= min_sample_ms) for the
    clock's resolution not to matter, sized from one timed trial call."""
    batch_ms(warmup)
    one = max(batch_ms(1), 1e-4)
    batch = max(1, min(10_000, math.ceil(min_sample_ms / one)))
    if max_seconds is not None:
        samples = max(3, min(samples, int(max_seconds * 1e3 / (one * batch))))
    times = sorted(batch_ms(batch) / batch for _ in range(samples))
    return {
        "ms": statistics.median(times),
        "ms_min": times[0],
        "ms_p90": times[int(0.9 * (len(times) - 1))],
        "samples": samples,
        "batch": batch,
    }


def time_gpu(fn: Callable, arg_sets: Sequence[tuple] = ((),), *, warmup: int = 5,
             samples: int = 30, min_sample_ms: float = 1.0, max_seconds: float | None = None) -> dict:
    """Median time of one call of fn(*args), in milliseconds.

    Each sample is a batch of calls between two CUDA events, the batch long
    enough (>= min_sample_ms) for the event resolution (~0.5 us) not to
    matter; calls cycle through arg_sets. Launch overhead on the host is
    part of the time when the host cannot keep ahead of the GPU (tiny
    kernels): that is the real cost of such a call. max_seconds caps the
    sampling of slow calls (at least 3 samples are taken).
    """
    cp = _cp()
    k = 0
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def batch_ms(count: int) -> float:
        nonlocal k
        start.record()
        for _ in range(count):
            fn(*arg_sets[k % len(arg_sets)])
            k += 1
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end)

    return _median_of_batches(batch_ms, warmup=warmup, samples=samples, min_sample_ms=min_sample_ms,
                              max_seconds=max_seconds)


def time_host(fn: Callable, *, warmup: int = 2, samples: int = 15, min_sample_ms: float = 2.0,
              max_seconds: float | None = None) -> dict:
    """The same sampling with the host's clock (time.perf_counter), for a
    fn() that returns only when its work is done (it synchronizes), such as
    a copy from pageable memory, part of which the CPU does before the
    stream sees it (CUDA events would miss that part)."""

    def batch_ms(count: int) -> float:
        t0 = time.perf_counter()
        for _ in range(count):
            fn()
        return (time.perf_counter() - t0) * 1e3

    return _median_of_batches(batch_ms, warmup=warmup, samples=samples, min_sample_ms=min_sample_ms,
                              max_seconds=max_seconds)


def paired_rounds(cases: dict[str, tuple[Callable, Sequence[tuple]]], ref: str, *, rounds: int = 5,
                  work_per_call: dict[str, float] | None = None, timer: Callable | None = None,
                  **timer_args) -> dict[str, dict]:
    """Time several implementations of one job in paired rounds, and each
    one's speed against `ref` with its spread: the one way a ratio that a
    page compares with a goal or with 1.0 is measured.

    cases: name -> (fn, arg_sets). Every round times every case once, one
    after the other (the order reversed every other round, so that a clock
    drifting with heat favours none), so that each case is timed beside the
    reference at nearly the same clock; a case's ratio in a round is the
    reference's time over its own in that round. Returns name -> {"ms":
    median of its rounds, "paired_ratio": median of its per-round ratios,
    "ratio_min", "ratio_max" (their spread), "rounds", "ms_rounds"}.
    timer(fn, arg_sets, **timer_args) -> {"ms": ...}: time_gpu by default
    (time_host for a fn that synchronizes). work_per_call: name -> the useful work
    of one call (bytes, FLOPs), when the cases do different amounts (a
    kernel against a copy of another size): the ratio is then of rates,
    (work / ms) over the reference's (work / ms)."""
    if ref not in cases:
        raise ValueError(f"the reference {ref!r} is not among the cases {sorted(cases)}")
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    timer = time_gpu if timer is None else timer
    names = list(cases)
    ms: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            fn, arg_sets = cases[name]
            ms[name].append(float(timer(fn, arg_sets, **timer_args)["ms"]))
    out = {}
    for name in names:
        scale = 1.0 if work_per_call is None else work_per_call[name] / work_per_call[ref]
        ratios = [scale * a / b for a, b in zip(ms[ref], ms[name])]
        out[name] = {"ms": statistics.median(ms[name]), "paired_ratio": statistics.median(ratios),
                     "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": rounds,
                     "ms_rounds": ms[name]}
    return out


def paired_fields(p: dict, ref_id: str) -> dict:
    """What a record keeps of one case of paired_rounds: the paired ratio,
    its spread, the number of rounds and the id of the reference's record."""
    return {"paired_ratio": p["paired_ratio"], "ratio_min": p["ratio_min"], "ratio_max": p["ratio_max"],
            "rounds": p["rounds"], "paired_ref": ref_id}


def against(record: dict, line: float) -> str:
    """How a paired ratio stands against a line (a goal, or 1.0): "above"
    when its whole spread is above it, "below" when wholly below, else
    "level" -- what a page may say: beats / falls short / level with."""
    if record["ratio_min"] > line:
        return "above"
    if record["ratio_max"] < line:
        return "below"
    return "level"


def _nvml_handle():
    import pynvml  # provided by the nvidia-ml-py package

    pynvml.nvmlInit()
    cp = _cp()
    bus_id = cp.cuda.Device().pci_bus_id
    return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)


def measure_energy(fn: Callable, arg_sets: Sequence[tuple] = ((),), *,
                   min_seconds: float = 2.0) -> dict:
    """Board energy of one call of fn(*args), from NVML, over >= min_seconds."""
    cp = _cp()
    pynvml, handle = _nvml_handle()
    k = 0
    calls = 0
    dev = cp.cuda.Device()
    for args in arg_sets[:2]:  # warm-up
        fn(*args)
    dev.synchronize()
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # mJ
    t0 = time.perf_counter()
    batch = 1
    while True:
        for _ in range(batch):
            fn(*arg_sets[k % len(arg_sets)])
            k += 1
        calls += batch
        dev.synchronize()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            break
        batch = min(batch * 2, 1 << 16)
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    joules = (e1 - e0) / 1000.0
    return {
        "energy_j": joules,
        "seconds": elapsed,
        "calls": calls,
        "j_per_call": joules / calls,
        "avg_power_w": joules / elapsed,
    }


class ClockSampler:
    """NVML's SM clock (MHz) and board power (W) read every `period` seconds
    on a thread while the `with` block runs: what the card ran at, beside
    the energy counter's average. .summary() -> medians and extremes."""

    def __init__(self, period: float = 0.02):
        import threading

        self.period, self.clocks, self.powers = period, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        pynvml, handle = _nvml_handle()
        while not self._stop.is_set():
            self.clocks.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            self.powers.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        import statistics

        if not self.clocks:
            return {}
        return {"sm_clock_mhz": statistics.median(self.clocks), "sm_clock_min_mhz": min(self.clocks),
                "power_w_median": statistics.median(self.powers), "power_w_max": max(self.powers),
                "clock_samples": len(self.clocks)}


# Counters every profile topic reads (record key -> ncu metric), the warp
# stall reasons as warps stalled per issued instruction, and their labels.
NCU_COMMON = {
    "warps_active": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "issue_active": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "duration_ns": "gpu__time_duration.sum",
}
NCU_PERCENT = ("warps_active", "issue_active")
NCU_LABELS = {
    "warps_active": ("驻留 warp（占峰值）", "warps resident (of peak)"),
    "issue_active": ("发射槽占用", "issue slots used"),
    "top_stall": ("最主要的停顿原因", "top stall reason"),
}


def ncu_stall_metrics(stalls: Sequence[str]) -> dict[str, str]:
    """{"stall_<reason>": ncu's metric of warps stalled for it per issued instruction}."""
    return {f"stall_{s}": f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in stalls}


def ncu_fields(measured: dict, percent: Sequence[str], stalls: Sequence[str]) -> dict:
    """A record's fields from one kernel's counters: percentages as
    fractions, the time left out (the record's ms), the largest stall named
    in top_stall."""
    fields = {k: (v / 100 if k in percent else v) for k, v in measured.items() if k not in ("err", "duration_ns")}
    fields["top_stall"] = max(stalls, key=lambda s: measured[f"stall_{s}"])
    fields["profiler"] = "ncu --clock-control none"
    return fields


def ncu_metrics(metrics: Sequence[str], kernel_regex: str, child: Sequence[str], *, need: str,
                timeout: float = 600) -> tuple[list[tuple[str, str, float]], list[str]]:
    """Profile `python -m <child...>` with Nsight Compute, clocks left alone
    (--clock-control none), on the kernels whose names match kernel_regex.
    Returns ([(kernel name, metric name, value)], the child's own output
    lines). `need` says who asks, in the error raised when ncu is missing."""
    import csv
    import shutil
    import sys

    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError(f"{need}: put ncu on PATH")
    cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(metrics), "--csv", "-k", f"regex:{kernel_regex}",
           sys.executable, "-m", *child]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.splitlines()
    rows = list(csv.reader(line for line in lines if line.startswith('"')))
    if proc.returncode or not rows:
        raise RuntimeError(f"ncu failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    name, metric, value = (rows[0].index(k) for k in ("Kernel Name", "Metric Name", "Metric Value"))
    found = [(r[name], r[metric], float(r[value].replace(",", ""))) for r in rows[1:]]
    return found, [line for line in lines if not line.startswith('"')]


def ncu_launches(rows: Sequence[tuple[str, str, float]], metrics: dict[str, str]) -> list[tuple[str, dict]]:
    """ncu_metrics' rows regrouped by launch: [(kernel name, {key: value})],
    in launch order, keys from metrics = {key: ncu metric name}. ncu prints
    one row per (launch, metric) with a launch's rows together, so a new
    launch starts where the kernel name changes or a metric comes again (the
    same kernel launched twice in a row)."""
    by_metric = {v: k for k, v in metrics.items()}
    launches: list[tuple[str, dict]] = []
    for kernel, metric, value in rows:
        if not launches or launches[-1][0] != kernel or by_metric.get(metric) in launches[-1][1]:
            launches.append((kernel, {}))
        if metric in by_metric:
            launches[-1][1][by_metric[metric]] = value
    return launches


def energy_fields(e: dict, *, nbytes: int | None = None, gflop: float | None = None) -> dict:
    """A record's energy fields from measure_energy's result: J per call,
    average power, seconds measured, and pJ per byte moved (nbytes per call)
    or J per GFLOP (gflop per call)."""
    out = {"energy_j_per_call": e["j_per_call"], "avg_power_w": e["avg_power_w"], "energy_seconds": e["seconds"]}
    if nbytes is not None:
        out["energy_pj_per_byte"] = e["j_per_call"] / nbytes * 1e12
    if gflop is not None:
        out["energy_j_per_gflop"] = e["j_per_call"] / gflop
    return out


def idle_power_w(seconds: float = 1.0) -> float:
    """Board power with nothing launched, from the same energy counter."""
    pynvml, handle = _nvml_handle()
    _cp().cuda.Device().synchronize()
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    t0 = time.perf_counter()
    time.sleep(seconds)
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    return (e1 - e0) / 1000.0 / (time.perf_counter() - t0)


def device_copy(nbytes: int, seed: int | None = None):
    """A device-to-device copy (cudaMemcpyAsync) of nbytes of random float32
    from src to dst: (copy, dst, src), copy() launching it on the current
    stream. It reads nbytes and writes nbytes: the memory system's ceiling for
    a kernel that moves 2 * nbytes. dst starts as NaN."""
    cp = _cp()
    src = cp.random.default_rng(seed).random(max(1, nbytes // 4), dtype=cp.float32)
    dst = cp.full_like(src, cp.nan)
    rt = cp.cuda.runtime
    stream = cp.cuda.get_current_stream().ptr

    def copy():
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, stream)

    return copy, dst, src


def copy_ceiling(nbytes: int = 1 << 30) -> dict:
    """Device-to-device copy (cudaMemcpyAsync) of nbytes; bandwidth counts
    bytes read plus bytes written, 2 * nbytes."""
    cp = _cp()
    copy, dst, src = device_copy(nbytes)
    t = time_gpu(copy, ((),) * 1, warmup=3, samples=20)
    exact = bool(cp.array_equal(dst, src))
    t.update(gbps=2 * src.nbytes / (t["ms"] * 1e-3) / 1e9, nbytes=src.nbytes, exact=exact,
             rel_err=rel_err(dst, src))
    return t


def sgemm_ceiling(n: int = 4096) -> dict:
    """cuBLAS SGEMM through cupy.matmul, FP32 with TF32 off: 2*n^3 / t."""
    cp = _cp()
    if os.environ.get("CUPY_TF32", "0") != "0":
        raise RuntimeError("CUPY_TF32 is set: the FP32 ceiling must be measured with TF32 off")
    a = cp.random.random((n, n), dtype=cp.float32)
    b = cp.random.random((n, n), dtype=cp.float32)
    c = cp.empty((n, n), dtype=cp.float32)
    t = time_gpu(lambda: cp.matmul(a, b, out=c), warmup=3, samples=20)
    t.update(tflops=2 * n**3 / (t["ms"] * 1e-3) / 1e12, n=n)
    return t


def _version(dist: str) -> str | None:
    try:
        return _md.version(dist)
    except _md.PackageNotFoundError:
        return None


def git_commit() -> str:
    """HANDBOOK_COMMIT when set (a copy of the tree whose .git is not the
    one the code came from, as on a remote GPU machine), else HEAD."""
    if os.environ.get("HANDBOOK_COMMIT"):
        return os.environ["HANDBOOK_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
            return out.stdout.strip() + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def env_stamp() -> dict:
    """GPU, driver, CUDA and library versions, date and commit of a run."""
    cp = _cp()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    pynvml, handle = _nvml_handle()
    driver = pynvml.nvmlSystemGetDriverVersion()
    if isinstance(driver, bytes):
        driver = driver.decode()

    def cuda_version(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    return {
        "gpu": name,
        "gpu_slug": name.lower().replace(" ", "-"),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": int(props["multiProcessorCount"]),
        "l2_bytes": int(props["l2CacheSize"]),
        "driver": driver,
        "cuda_runtime": cuda_version(cp.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": cuda_version(cp.cuda.runtime.driverGetVersion()),
        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        "cupy": cp.__version__,
        "numba": _version("numba"),
        "numba_cuda": _version("numba-cuda"),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": git_commit(),
    }


def rel_err(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN anywhere gives NaN)."""
    cp = _cp()
    xp = cp.get_array_module(out)
    o = xp.asarray(out, dtype=xp.float64)
    r = xp.asarray(ref, dtype=xp.float64)
    den = float(xp.linalg.norm(r))
    num = float(xp.linalg.norm(o - r))
    return num / den if den else num
