"""Topic `energy`: board energy per operation at each level of the memory
hierarchy, from NVML's total-energy counter over >= 2 s of calls.

- hbm: stream 1 GiB from HBM (read_global, one pass; __ldcg, no L1);
- l2: stream an 8 MiB buffer (L2-resident) REPS_L2 times;
- shared: every block reads 16 KB of shared memory REPS_SHARED times
  (128-bit loads, no bank conflicts);
- fma: FP32 FMAs on registers only (8 independent chains per thread).

Per record: pJ per byte (memory) or per FMA, board total and "dynamic"
(the same minus the idle power measured at the start of the topic times
the time); pJ per 32-bit word or FMA, and that relative to the FMA: the
scale of the source's 1x / 10x / 50x / 100x figure. The rate is GB/s or
TFLOP/s; ref is the FMA record and ratio = (pJ per FMA) / (pJ per word of
this level): how many times cheaper the FMA is than a word from here.

The kernels' own work is counted in: each 16 bytes loaded also costs 4
FADDs and an address, which matters for shared memory (see the page).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "energy"
ORDER = 70  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "energy_pj_per_op": ("能耗 (pJ/字或 FMA)", "energy (pJ/word or FMA)"),
    "energy_dynamic_pj_per_op": ("高出空闲部分 (pJ)", "above idle (pJ)"),
    "relative_energy": ("相对 FMA", "× FMA"),
    "relative_energy_dynamic": ("相对 FMA（高出空闲）", "× FMA (above idle)"),
}
THREADS = 256
BLOCKS_PER_SM = 8  # 2048 threads per SM: full occupancy for these kernels
HBM_BYTES = 1 << 30
L2_BYTES = 8 << 20
REPS_L2 = 512
REPS_SHARED = 8192
FMA_ITERS = 16384

# Horowitz, "Computing's energy problem (and what we can do about it)",
# ISSCC 2014, 45 nm, 0.9 V: pJ per operation (memory per 64-bit access).
HOROWITZ_45NM_PJ = {
    "fp32_add": 0.9, "fp32_mul": 3.7,
    "sram_8kb_64bit": 10.0, "sram_32kb_64bit": 20.0, "sram_1mb_64bit": 100.0,
    "dram_64bit_low": 1300.0, "dram_64bit_high": 2600.0,
}
# The source's figure (000, "GPU memory hierarchy and energy"): relative
# energy per access of register, shared memory, L2, DRAM.
SOURCE_RELATIVE = {"fma": 1.0, "shared": 10.0, "l2": 50.0, "hbm": 100.0}
LEVELS = ("fma", "shared", "l2", "hbm")


def horowitz_pj_per_word() -> dict:
    """The 45 nm figures per 32-bit word (half a 64-bit access) or per FMA
    (one add + one multiply), for the same four levels."""
    h = HOROWITZ_45NM_PJ
    return {"fma": h["fp32_add"] + h["fp32_mul"], "shared": h["sram_8kb_64bit"] / 2,
            "l2": h["sram_1mb_64bit"] / 2, "hbm": (h["dram_64bit_low"] / 2, h["dram_64bit_high"] / 2)}


def shared_reference(x, reps: int, blocks: int):
    """What read_shared writes per thread, in float64: thread t sums the
    float4 s[(t + 32 r) mod 1024] over r < reps (the index repeats every 32 reps)."""
    import numpy as np

    f4 = x.reshape(-1, 4).astype(np.float64).sum(axis=1)  # one value per float4
    counts = np.full(32, reps // 32) + (np.arange(32) < reps % 32)
    t = np.arange(THREADS)[:, None]
    per_thread = (f4[(t + 32 * np.arange(32)) % len(f4)] * counts).sum(axis=1)
    return np.tile(per_thread, blocks)


def fma_reference(iters: int, blocks: int, a: float = 0.999, b: float = 0.001):
    """What fma_registers writes per thread, in float64: x_k = t + k, then
    x <- a x + b `iters` times (x_n = a^n x_0 + b (1 - a^n) / (1 - a)), summed over k < 8."""
    import numpy as np

    t = np.arange(THREADS, dtype=np.float64)[:, None] + np.arange(8)
    an = a ** iters
    per_thread = (an * t + b * (1 - an) / (1 - a)).sum(axis=1)
    return np.tile(per_thread, blocks)


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, memory

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks = sms * BLOCKS_PER_SM
    out = cp.empty(blocks * THREADS, dtype=cp.float32)
    idle = harness.idle_power_w(2.0)
    rng = cp.random.default_rng(0)
    seconds = 1.0 if quick else 2.0

    def work(level):
        """(launch, bytes or FMAs per call, unit, check) for one level."""
        if level == "hbm":
            x = rng.random(HBM_BYTES // 4, dtype=cp.float32)
            want = float(cp.sum(x, dtype=cp.float64))
            return (lambda: memory.read_global_cupy(x, 1, out, blocks=blocks, threads=THREADS)), \
                HBM_BYTES, "byte", want
        if level == "l2":
            x = rng.random(L2_BYTES // 4, dtype=cp.float32)
            want = REPS_L2 * float(cp.sum(x, dtype=cp.float64))
            return (lambda: memory.read_global_cupy(x, REPS_L2, out, blocks=blocks, threads=THREADS)), \
                L2_BYTES * REPS_L2, "byte", want
        if level == "shared":
            x = rng.random(4 * memory.READ_SHARED_F4, dtype=cp.float32)
            return (lambda: memory.read_shared_cupy(x, REPS_SHARED, out, blocks=blocks, threads=THREADS)), \
                blocks * THREADS * REPS_SHARED * 16, "byte", shared_reference(cp.asnumpy(x), REPS_SHARED, blocks)
        return (lambda: memory.fma_registers_cupy(FMA_ITERS, out, blocks=blocks, threads=THREADS)), \
            blocks * THREADS * 8 * FMA_ITERS, "fma", fma_reference(FMA_ITERS, blocks)

    raw = {}
    for level in LEVELS:
        launch, count, unit, want = work(level)
        out.fill(cp.nan)
        launch()
        if isinstance(want, float):  # the streaming kernels must have summed everything
            got = float(cp.sum(out, dtype=cp.float64))
            err = abs(got - want) / want
            if not err < 1e-4:
                raise RuntimeError(f"{level}: sum {got} != {want}")
        else:  # one value per thread, against float64 on the host (NaN fails)
            err = harness.rel_err(cp.asnumpy(out), want)
            if not err < 1e-3:
                raise RuntimeError(f"{level}: rel_err {err}")
        t = harness.time_gpu(launch, samples=10 if quick else 30)
        e = harness.measure_energy(launch, min_seconds=seconds)
        call_s = e["seconds"] / e["calls"]
        raw[level] = dict(t=t, e=e, count=count, unit=unit, err=err,
                          pj=e["j_per_call"] / count * 1e12,
                          pj_dyn=(e["j_per_call"] - idle * call_s) / count * 1e12)
    records = []
    fma_id = results.record_id(TOPIC, "cupy", "fma", [blocks, THREADS, FMA_ITERS], "float32")
    per_word = {lv: raw[lv]["pj"] * (1 if lv == "fma" else 4) for lv in LEVELS}
    per_word_dyn = {lv: raw[lv]["pj_dyn"] * (1 if lv == "fma" else 4) for lv in LEVELS}
    for level in LEVELS:
        r = raw[level]
        shape = {"hbm": [HBM_BYTES], "l2": [L2_BYTES, REPS_L2], "shared": [blocks, THREADS, REPS_SHARED],
                 "fma": [blocks, THREADS, FMA_ITERS]}[level]
        rec = results.record(TOPIC, "cupy", level, shape, "float32", ms=r["t"]["ms"], ref=fma_id,
                             rel_err=r["err"])
        rec.update({"ms_min": r["t"]["ms_min"], "ratio": per_word["fma"] / per_word[level],
               "energy_j_per_call": r["e"]["j_per_call"], "avg_power_w": r["e"]["avg_power_w"],
               "energy_seconds": r["e"]["seconds"], "idle_power_w": idle,
               "energy_pj_per_op": per_word[level], "energy_dynamic_pj_per_op": per_word_dyn[level],
               "relative_energy": per_word[level] / per_word["fma"],
               "relative_energy_dynamic": per_word_dyn[level] / per_word_dyn["fma"],
               "op": "fma" if level == "fma" else "32-bit word"})
        if r["unit"] == "byte":
            rec.update(gbps=r["count"] / (r["t"]["ms"] * 1e-3) / 1e9, bytes=r["count"],
                       energy_pj_per_byte=r["pj"], energy_dynamic_pj_per_byte=r["pj_dyn"])
        else:
            rec.update(tflops=2 * r["count"] / (r["t"]["ms"] * 1e-3) / 1e12, fmas=r["count"],
                       energy_pj_per_fma=r["pj"], energy_dynamic_pj_per_fma=r["pj_dyn"])
        records.append(rec)
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'Energy per operation': '每次操作的能耗',
    'pJ per 32-bit word (or per FMA)': '每个 32 位字（或每次 FMA）的 pJ',
    'relative to one FMA': '相对一次 FMA',
    'board total': '整卡总能耗',
    'Horowitz 2014, 45 nm': 'Horowitz 2014，45 nm',
    'registers': '寄存器',
    'shared': '共享内存',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = {r["variant"]: r for r in results.select(data, TOPIC)}
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    fig, (ax, ax2) = plotting.new_figure(7, 7.5, nrows=2)
    labels = ["FMA\n(registers)", "shared", "L2", "HBM"]
    xs = np.arange(len(LEVELS))
    h = horowitz_pj_per_word()
    h_mid = [h[lv] if lv != "hbm" else sum(h[lv]) / 2 for lv in LEVELS]
    ours = [rows[lv]["energy_pj_per_op"] for lv in LEVELS]
    dyn = [rows[lv]["energy_dynamic_pj_per_op"] for lv in LEVELS]
    w = 0.27
    ax.bar(xs - w, ours, w, label=f"H200 board total ({env['gpu']})")
    ax.bar(xs, dyn, w, label="H200 above idle")
    ax.bar(xs + w, h_mid, w, label="Horowitz 2014, 45 nm", color="grey")
    lo, hi = h["hbm"]
    ax.errorbar([xs[-1] + w], [(lo + hi) / 2], yerr=[[(hi - lo) / 2]], fmt="none", ecolor="k", capsize=3)
    ax.set_yscale("log")
    ax.set_xticks(xs, labels)
    ax.set_ylabel("pJ per 32-bit word (or per FMA)")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    src = [SOURCE_RELATIVE[lv] for lv in LEVELS]
    rel = [rows[lv]["relative_energy"] for lv in LEVELS]
    rel_dyn = [rows[lv]["relative_energy_dynamic"] for lv in LEVELS]
    rel_h = [v / h_mid[0] for v in h_mid]
    ax2.bar(xs - 1.5 * w * 0.75, src, w * 0.75, label="the source's figure", color="C3")
    ax2.bar(xs - 0.5 * w * 0.75, rel, w * 0.75, label="H200 board total", color="C0")
    ax2.bar(xs + 0.5 * w * 0.75, rel_dyn, w * 0.75, label="H200 above idle", color="C1")
    ax2.bar(xs + 1.5 * w * 0.75, rel_h, w * 0.75, label="Horowitz 45 nm", color="grey")
    ax2.set_yscale("log")
    ax2.set_xticks(xs, labels)
    ax2.set_ylabel("relative to one FMA")
    ax2.legend(fontsize=7)
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "Energy per operation", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'level':8} {'rate':>14} {'pJ/op':>9} {'dyn pJ/op':>10} {'x FMA':>7} {'W':>6}"]
    for r in results.select(data, TOPIC):
        rate = f"{r['gbps']:.0f} GB/s" if "gbps" in r else f"{r['tflops']:.1f} TFLOP/s"
        out.append(f"{r['variant']:8} {rate:>14} {r['energy_pj_per_op']:9.2f} "
                   f"{r['energy_dynamic_pj_per_op']:10.2f} {r['relative_energy']:7.1f} {r['avg_power_w']:6.0f}")
    return out


def claims(data: dict) -> None:
    """docs/memory-hierarchy*.md: "What the measurements show" and the boxes
    about energy per operation and power, checked against the committed
    measurements."""
    en = {r["variant"]: r for r in results.select(data, TOPIC)}
    levels = ("fma", "shared", "l2", "hbm")
    for key in ("energy_pj_per_op", "energy_dynamic_pj_per_op"):
        vals = [en[v][key] for v in levels]
        assert vals == sorted(vals), key                                     # the source's order
    rel = {v: en[v]["relative_energy"] for v in levels}
    assert 2 < rel["shared"] < 8 and 12 < rel["l2"] < 35 and 35 < rel["hbm"] < 80  # few / dozens / ~50
    assert rel["shared"] < 10 and rel["l2"] < 50 and rel["hbm"] < 100        # below the source's figure
    h = horowitz_pj_per_word()
    assert rel["hbm"] < h["hbm"][0] / h["fma"]                               # below Horowitz's DRAM ratio
    assert [round(h["shared"] / h["fma"], 1), round(h["l2"] / h["fma"])] == [1.1, 11]
    assert [round(x / h["fma"], -1) for x in h["hbm"]] == [140, 280]
    for v in levels:
        assert 1 / 6 - 0.02 < en[v]["idle_power_w"] / en[v]["avg_power_w"] < 1 / 3 + 0.05, v
    env = data["topics"][TOPIC]["env"]
    assert 0.85 * env["power_limit_w"] <= en["hbm"]["avg_power_w"] <= 1.02 * env["power_limit_w"]  # close to the limit
    assert max(en, key=lambda v: en[v]["avg_power_w"]) == "hbm"
    assert en["fma"]["energy_pj_per_op"] / en["shared"]["energy_pj_per_op"] > 0.15  # the FADDs count


# On the roofline: the FMA kernel, 16 * iters FLOP per 4 bytes (out written);
# its throughput is also the roofline's compute ceiling.
ROOFLINE = ("*", 5)


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    return [(f"{r['impl']} {r['variant']}", 16 * r["shape"][2] / 4, r["tflops"] * 1e3)
            for r in results.select(data, TOPIC) if r["variant"] == "fma"]


def roof(data: dict) -> dict:
    """The roofline's compute ceiling: the FP32 FMA kernel's GFLOP/s."""
    peak = next((r["tflops"] * 1e3 for r in results.select(data, TOPIC) if r["variant"] == "fma"), None)
    return {} if peak is None else {"gflops": peak}


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""

    import cupy as cp

    from kernels import memory as mem

    out = cp.full(3 * 64, cp.nan, dtype=cp.float32)
    mem.read_global_cupy(cp.random.random(4 * 1024, dtype=cp.float32), 2, out, blocks=3, threads=64)
    mem.read_shared_cupy(cp.random.random(4 * mem.READ_SHARED_F4, dtype=cp.float32), 50, out, blocks=3,
                         threads=64)
    mem.fma_registers_cupy(100, out, blocks=3, threads=64)
    assert not bool(cp.isnan(out).any())
