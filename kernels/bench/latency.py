"""Topic `latency`: how long one load takes from each level of the memory
hierarchy, by pointer chasing (kernels/memory.py): one thread, every load's
address the previous load's value, so the time per step is the latency.

Variants (CUDA C through CuPy; cycles from clock64, nanoseconds from the
global timer, median of REPEATS runs):
- shared: a 16 KB chain in shared memory;
- l1: a 16 KB chain in global memory, walked once first (L1 hits);
- l2: the same with __ldcg loads, which skip L1 (L2 hits);
- hbm: a 1 GiB chain, not walked first, __ldcg (misses in L2; includes
  TLB misses: 1 GiB spans many more pages than the TLBs cover);
- footprint: default loads through chains of 4 KiB ... 1 GiB (the plateaus
  of L1, L2 and HBM); shape = [footprint bytes].
Numba (events around a long chase, ns only): l1 and hbm.

Each record's rate is `gops`, dependent loads per ns (1 / latency); the
reference is the shared chase, so ratio = shared latency / this latency.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "latency"
ORDER = 60  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "gops": ("G 步/s", "Gsteps/s"),
    "cycles": ("周期", "cycles"),
    "ns": ("纳秒", "ns"),
    "footprint_bytes": ("链的大小", "footprint"),
    "stride": ("步长", "stride"),
}
STRIDE = 128  # one node per 128-byte line
FOOTPRINTS = [1 << p for p in range(12, 31)]  # 4 KiB ... 1 GiB
QUICK_FOOTPRINTS = [1 << 14, 1 << 22, 1 << 30]
REPEATS = 5
NAMED = {  # variant: (footprint bytes, l2_only, warm walk first)
    "l1": (16 << 10, False, True),
    "l2": (16 << 10, True, True),
    "hbm": (1 << 30, True, False),
}


def chain_end(nodes: int, seed: int, steps: int) -> int:
    """The node a chase from node 0 reaches after `steps` loads, for the
    cycle kernels.memory.random_cycle(nodes, seed) builds: succ[order[i]] =
    order[i + 1], so `steps` loads move `steps` places along `order`."""
    order = np.random.default_rng(seed).permutation(nodes)
    pos = np.empty(nodes, dtype=np.int64)
    pos[order] = np.arange(nodes)
    return int(order[(pos[0] + steps) % nodes])


def _median_run(fn, repeats: int, want_end) -> dict:
    """Median over seeds; each run's chase must end where its chain says
    (a chase that skipped or repeated a load would end elsewhere)."""
    runs = [fn(seed) for seed in range(repeats)]
    for seed, r in enumerate(runs):
        if r["end"] != want_end(r, seed):
            raise RuntimeError(f"chase ended at {r['end']}, the chain says {want_end(r, seed)}")
    return {"cycles": statistics.median(r["cycles"] for r in runs) if "cycles" in runs[0] else None,
            "ns": statistics.median(r["ns"] for r in runs)}


def _record(impl: str, variant: str, nbytes: int, lat: dict, ref_id: str | None, ref_ns: float | None,
            **extra) -> dict:
    gops = 1.0 / lat["ns"]  # dependent loads per nanosecond = G loads/s
    rec = results.record(TOPIC, impl, variant, [nbytes], "uint64", ms=lat["ns"] * 1e-6, gops=gops,
                         ref=ref_id, ratio=(ref_ns / lat["ns"]) if ref_ns else 1.0,
                         no_rel_err="pointer_chase", ns=lat["ns"], footprint_bytes=nbytes,
                         stride=STRIDE, **extra)
    if lat.get("cycles") is not None:
        rec.update(cycles=lat["cycles"], clock_ghz=lat["cycles"] / lat["ns"])
    return rec


def measure(quick: bool = False) -> list[dict]:
    from .. import memory

    repeats = 2 if quick else REPEATS
    shared = _median_run(lambda s: memory.latency_shared(steps=4096, seed=s), repeats,
                         lambda r, s: 4 * chain_end(r["nodes"], s, r["nodes"] + r["steps"]))
    ref = _record("cupy", "shared", memory.CHASE_SHARED_MAX * 4, shared, None, None)
    ref["stride"] = 4
    records = [ref]
    for variant, (nbytes, l2_only, warm) in NAMED.items():
        lat = _median_run(lambda s: memory.latency_global(nbytes, stride=STRIDE, steps=4096,
                                                          warm=None if warm else 0, l2_only=l2_only,
                                                          seed=s), repeats,
                          lambda r, s: STRIDE * chain_end(r["nodes"], s, r["warm"] + r["steps"]))
        records.append(_record("cupy", variant, nbytes, lat, ref["id"], shared["ns"], l2_only=l2_only))
    for nbytes in (QUICK_FOOTPRINTS if quick else FOOTPRINTS):
        lat = _median_run(lambda s: memory.latency_global(nbytes, stride=STRIDE, steps=4096, seed=s), repeats,
                          lambda r, s: STRIDE * chain_end(r["nodes"], s, r["warm"] + r["steps"]))
        records.append(_record("cupy", "footprint", nbytes, lat, ref["id"], shared["ns"], l2_only=False))
    for variant in ("l1", "hbm"):
        nbytes = NAMED[variant][0]
        lat = _median_run(lambda s: memory.latency_global_numba(nbytes, steps=1 << 14, stride=STRIDE,
                                                                seed=s), repeats,
                          lambda r, s: (STRIDE // 4) * chain_end(r["nodes"], s, r["steps"]))
        records.append(_record("numba", variant, nbytes, lat, ref["id"], shared["ns"]))
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'Load latency by pointer chasing': '指针追逐测得的访存延迟',
    'chase through a buffer (default loads)': '在缓冲区中追逐指针（默认加载）',
    'footprint of the chain (bytes; one node per 128-byte line)': '链的总跨度（字节；每 128 字节缓存行一个节点）',
    'latency per load (SM cycles)': '每次加载的延迟（SM 周期）',
    'cycles': '周期',
    'shared': '共享内存',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    fig, ax = plotting.new_figure(7, 4)
    pts = sorted((r["shape"][0], r["cycles"]) for r in rows if r["variant"] == "footprint")
    if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "o-", markersize=4, label="chase through a buffer (default loads)")
    by = {(r["impl"], r["variant"]): r for r in rows}
    for (variant, style) in (("shared", "C2"), ("l1", "C1"), ("l2", "C3"), ("hbm", "C4")):
        r = by.get(("cupy", variant))
        if r:
            ax.axhline(r["cycles"], ls="--", lw=0.9, color=style,
                       label=f"{variant}: {r['cycles']:.0f} cycles ({r['ns']:.0f} ns)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("footprint of the chain (bytes; one node per 128-byte line)")
    ax.set_ylabel("latency per load (SM cycles)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return plotting.save(fig, ax, TOPIC, env, out_dir, "Load latency by pointer chasing", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'impl':6} {'variant':10} {'bytes':>11} {'cycles':>8} {'ns':>8}"]
    for r in results.select(data, TOPIC):
        if r["variant"] != "footprint" or r["shape"][0] in (1 << 14, 1 << 22, 1 << 26, 1 << 30):
            cyc = f"{r['cycles']:8.0f}" if "cycles" in r else f"{'—':>8}"
            out.append(f"{r['impl']:6} {r['variant']:10} {r['shape'][0]:>11} {cyc} {r['ns']:8.1f}")
    return out


def claims(data: dict) -> None:
    """docs/memory-hierarchy*.md: "What the measurements show" and the boxes
    about latency, checked against the committed measurements."""
    lat = {(r["impl"], r["variant"], r["shape"][0]): r for r in results.select(data, TOPIC)}
    cyc = {v: next(r for (i, vv, _), r in lat.items() if i == "cupy" and vv == v)["cycles"]
           for v in ("shared", "l1", "l2", "hbm")}
    assert cyc["shared"] < cyc["l1"] < 100 < cyc["l2"] < cyc["hbm"]         # a few tens; four plateaus
    assert 5 < cyc["l2"] / cyc["l1"] < 15 and cyc["hbm"] > 2 * cyc["l2"]
    assert 200 <= cyc["l2"] <= 300 and 400 <= cyc["hbm"] <= 800             # 000's figure = L2, 002's = HBM
    foot = {n: r["cycles"] for (i, v, n), r in lat.items() if v == "footprint"}
    assert foot[1 << 30] > foot[1 << 26] > 2 * cyc["l2"]                     # past L2: towards HBM, creeping
    assert foot[1 << 14] < 1.2 * cyc["l1"]
    assert lat[("numba", "l1", 16 << 10)]["ns"] > lat[("cupy", "l1", 16 << 10)]["ns"]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""

    from kernels import memory as mem

    for nbytes, l2_only in ((128, False), (16 << 10, True), (1 << 20, False)):
        mem.latency_global(nbytes, steps=100, l2_only=l2_only)
    for entries in (1, 100, mem.CHASE_SHARED_MAX):
        mem.latency_shared(entries, steps=100)
