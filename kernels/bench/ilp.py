"""Topic `ilp`: independent accumulators vs unrolling, and integer division.

FMA kernels run latency-bound: 4 warps per SM (one per scheduler), each
thread `ITERS` FMAs split over K chains. Rate: 2 FLOP per FMA; `ratio` to
one chain. The same kernels at full occupancy (64 warps per SM) show what
occupancy does instead. Registers and local memory per thread come from the
compiled kernels. Integer kernels: iters steps of v / d + v % d (run-time d)
or its shift/mask form, at full occupancy; rate in steps per second (gops).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results, sass
from . import plotting

TOPIC = "ilp"
ORDER = 40  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "gops": ("G 步/s", "Gsteps/s"),
    "registers": ("寄存器", "registers"),
    "chains": ("累加器数", "accumulators"),
}
ITERS = 1 << 16
INT_ITERS = 1 << 12


# The SASS listings and the instruction counts the ILP page embeds.
LISTINGS = {**{f"{k}.sass": (lambda k=k: sass.listing_text("ilp.cu", k)) for k in ("int_div_mod", "int_shift_mask")},
            "int_counts.table": lambda: sass.counts_table("ilp.cu", ("int_div_mod", "int_shift_mask"))}


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, ilp

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    configs = {"latency_bound": (sms * 4, 32), "full_occupancy": (sms * 8, 256)}
    records = []
    ref_id = results.record_id(TOPIC, "cupy", "ilp_chains_1/latency_bound", [sms * 4 * 32, ITERS], "float32")
    for cfg, (blocks, threads) in configs.items():
        n = blocks * threads
        x = cp.random.default_rng(1).random(n, dtype=cp.float32) * 0.5 + 0.25
        out = cp.empty_like(x)
        kernels = ilp.FMA_KERNELS if cfg == "latency_bound" else ("ilp_chains_1", "ilp_chains_8")
        for name in kernels:
            chains = 1 if name == "ilp_chain_unrolled" else int(name.split("_")[2])
            check_iters = 64 * 32  # a short run checked against float64
            out.fill(cp.nan)
            ilp.fma_chains_cupy(x[:1024], out[:1024], kernel=name, iters=check_iters, threads=32)
            want = ilp.fma_reference(cp.asnumpy(x[:1024]), chains, check_iters)
            err = harness.rel_err(out[:1024], want)
            if not err < 1e-4:
                raise RuntimeError(f"{name}: rel_err {err}")
            t = harness.time_gpu(lambda k=name: ilp.fma_chains_cupy(x, out, kernel=k, iters=ITERS, threads=threads),
                                 samples=20)
            records.append(results.record(
                TOPIC, "cupy", f"{name}/{cfg}", [n, ITERS], "float32", ms=t["ms"], ref=ref_id, rel_err=err,
                kernel=name, config=cfg, chains=chains, tflops=2 * n * ITERS / (t["ms"] * 1e-3) / 1e12,
                **ilp.resources(name)))
    n = sms * 2048
    xi = cp.random.default_rng(2).integers(0, 2**31, n, dtype=cp.uint32)
    outi = cp.empty_like(xi)
    int_ref = results.record_id(TOPIC, "cupy", "int_div_mod", [n, INT_ITERS], "uint32")
    for name in ilp.INT_KERNELS:
        ilp.int_cupy(xi[:4096], outi[:4096], kernel=name, divisor_log2=5, iters=64)
        want = ilp.int_reference(cp.asnumpy(xi[:4096]), 5, 64)
        exact = bool(np.array_equal(cp.asnumpy(outi[:4096]), want))
        err = harness.rel_err(cp.asnumpy(outi[:4096]), want)  # integers: 0.0 when exact
        if not exact:
            raise RuntimeError(f"{name}: wrong result")
        t = harness.time_gpu(lambda k=name: ilp.int_cupy(xi, outi, kernel=k, divisor_log2=5, iters=INT_ITERS),
                             samples=20)
        records.append(results.record(
            TOPIC, "cupy", name, [n, INT_ITERS], "uint32", ms=t["ms"], ref=int_ref, rel_err=err, kernel=name,
            gops=n * INT_ITERS / (t["ms"] * 1e-3) / 1e9, **ilp.resources(name)))
    by_id = {r["id"]: r for r in records}
    for r in records:
        unit = "tflops" if "tflops" in r else "gops"
        r["ratio"] = r[unit] / by_id[r["ref"]][unit]
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'one warp per scheduler: ILP from independent chains': '每个调度器一个 warp：独立依赖链带来的 ILP',
    'reg': '寄存器',
    'local': '局部内存',
    'chains': '条链',
    'chain': '链',
    'unrolled': '展开',
    'capped': '限制寄存器',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = [r for r in results.select(data, TOPIC) if r.get("config") == "latency_bound"]
    env = data["topics"][TOPIC]["env"]
    order = [f"ilp_chains_{k}" for k in (1, 2, 4, 8, 16, 32)] + ["ilp_chain_unrolled", "ilp_chains_32_capped"]
    by = {r["kernel"]: r for r in rows}
    names = [k for k in order if k in by]
    fig, ax = plotting.new_figure(7.5, 3.8)
    colors = ["tab:blue"] * 6 + ["tab:orange", "tab:red"]
    ax.bar(range(len(names)), [by[k]["tflops"] for k in names], color=colors[: len(names)])
    for i, k in enumerate(names):
        ax.text(i, by[k]["tflops"], f"{by[k]['registers']} reg" + (f"\n{by[k]['local_bytes']} B local" if by[k]["local_bytes"] else ""),
                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), [k.replace("ilp_", "").replace("_", "\n") for k in names], fontsize=8)
    ax.set_ylabel("TFLOP/s (FP32 FMA)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.margins(y=0.15)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "one warp per scheduler: ILP from independent chains", fontsize=9, words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        rate = f"{r['tflops']:.2f} TFLOP/s" if "tflops" in r else f"{r['gops']:.0f} Gsteps/s"
        out.append(f"{r['variant']:36} {r['ms']:8.4f} ms  {rate:>16}  ratio {r['ratio']:.2f}  "
                   f"{r['registers']} reg {r['local_bytes']} B local")
    return out


def claims(data: dict) -> None:
    """docs/ilp*.md, "What the table shows" and the integer-division
    paragraph, checked against the committed measurements."""
    rows = {r["variant"]: r for r in results.select(data, TOPIC)}
    lat = {r["kernel"]: r for r in rows.values() if r.get("config") == "latency_bound"}
    t = {k: r["tflops"] for k, r in lat.items()}
    assert 1.7 <= t["ilp_chains_2"] / t["ilp_chains_1"] <= 2.3             # about twice
    assert t["ilp_chains_4"] >= 3 * t["ilp_chains_1"]                       # more than three times
    assert t["ilp_chain_unrolled"] <= 1.15 * t["ilp_chains_1"]              # unrolling alone: no gain
    assert t["ilp_chains_32"] <= 1.25 * t["ilp_chains_4"]                   # little beyond four
    assert t["ilp_chains_8"] < t["ilp_chains_4"]                            # eight ran slower than four
    assert t["ilp_chains_32_capped"] < t["ilp_chains_1"] / 2 and lat["ilp_chains_32_capped"]["local_bytes"] > 0
    regs = [lat[f"ilp_chains_{k}"]["registers"] for k in (1, 2, 4, 8, 16, 32)]
    assert regs == sorted(regs)
    full = {r["kernel"]: r["tflops"] for r in rows.values() if r.get("config") == "full_occupancy"}
    assert full["ilp_chains_1"] > max(t["ilp_chains_1"], t["ilp_chain_unrolled"])
    assert full["ilp_chains_8"] >= 0.95 * max(list(t.values()) + list(full.values()))
    assert rows["int_shift_mask"]["gops"] >= 2 * rows["int_div_mod"]["gops"]  # more than twice as fast


# On the roofline: the FMA chains, 2 * iters FLOP per 8 bytes (x read, out
# written); the latency-bound capped run and the integer kernels are not on it.
ROOFLINE = ("^", 4)


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    return [(f"{r['impl']} {r['variant']}", 2 * r["shape"][1] / 8, r["tflops"] * 1e3)
            for r in results.select(data, TOPIC)
            if "tflops" in r and not r["variant"].endswith("capped/latency_bound")]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import cupy as cp

    from kernels import ilp as k

    x = cp.random.random(1024, dtype=cp.float32)
    for name in k.FMA_KERNELS:
        out = cp.full(1024, cp.nan, dtype=cp.float32)
        k.fma_chains_cupy(x, out, kernel=name, iters=64)
        assert not bool(cp.isnan(out).any()), name
    xi = cp.arange(1024, dtype=cp.uint32)
    for name in k.INT_KERNELS:
        k.int_cupy(xi, kernel=name, iters=8)
