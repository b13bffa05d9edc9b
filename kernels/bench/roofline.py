"""The roofline of every kernel the handbook measures that does floating-
point work, drawn from the results file (no measurement of its own):
`make bench` redraws it after every run, `--plots-only` without a GPU.

x: arithmetic intensity, FLOP per byte of DRAM traffic the kernel is
counted to need; y: its measured GFLOP/s. The roofs: the device copy's
bandwidth (topic ceilings) and the FP32 FMA kernel's throughput (topic
energy, `fma`): min(peak, intensity x bandwidth). Counting, per topic:
- vector_add: 1 FLOP per 12 bytes (two loads, one store);
- reduction: 1 FLOP per 4 bytes (each element read once, one add);
- matmul (every step and cuBLAS, at 4096^3): the compulsory 2N^3 FLOP per
  3 * 4N^2 bytes = N / 6 (the bytes a step *requests* are many more, but
  L1 and L2 serve most of them; the matmul chapter's `intensity` column
  counts requests);
- four_step: 2 * 25 FLOP per 8 bytes (each pixel read and written once);
- ilp (FMA chains): 2 * ITERS FLOP per 8 bytes (x read, out written);
- energy `fma`: 16 * iters FLOP per 4 bytes (out written).
The roof is the device copy (read + write); kernels that only read can
stream a little faster than it (the reduction). Topics that move bytes
without arithmetic (copy, transpose, coalescing,
transfers) and the integer kernels have no place on a FLOP roofline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting

NAME = "roofline"


def _largest(rows):
    big = max(r["shape"][0] for r in rows)
    return [r for r in rows if r["shape"][0] == big]


def points(data: dict) -> list[dict]:
    """One point per kernel: topic, label, intensity (FLOP/B), gflops."""
    out = []

    def add(topic, r, intensity, gflops):
        out.append({"topic": topic, "label": f"{r['impl']} {r['variant']}", "intensity": intensity,
                    "gflops": gflops})

    rows = [r for r in results.select(data, "vector_add") if r["impl"] != "cuda_memcpy"]
    for r in _largest(rows) if rows else []:
        add("vector_add", r, 1 / 12, r["gbps"] / 12)
    rows = [r for r in results.select(data, "reduction") if r["impl"] != "cuda_memcpy" and "gbps" in r]
    for r in _largest(rows) if rows else []:
        add("reduction", r, 1 / 4, r["gbps"] / 4)
    for r in results.select(data, "matmul"):
        if r["shape"][0] != 4096 or r.get("tuning"):
            continue
        add("matmul", r, r["shape"][0] / 6, r["tflops"] * 1e3)
    for r in results.select(data, "four_step"):
        add("four_step", r, 50 / 8, r["tflops"] * 1e3)
    for r in results.select(data, "ilp"):
        if "tflops" in r and not r["variant"].endswith("capped/latency_bound"):
            add("ilp", r, 2 * r["shape"][1] / 8, r["tflops"] * 1e3)
    for r in results.select(data, "energy"):
        if r["variant"] == "fma":
            add("energy", r, 16 * r["shape"][2] / 4, r["tflops"] * 1e3)
    return out


def roofs(data: dict) -> dict:
    """The measured ceilings: copy bandwidth (GB/s) and FP32 FMA peak (GFLOP/s)."""
    bw = next((r["gbps"] for r in results.select(data, "ceilings") if r["impl"] == "cuda_memcpy"), None)
    peak = next((r["tflops"] * 1e3 for r in results.select(data, "energy") if r["variant"] == "fma"), None)
    return {"gbps": bw, "gflops": peak}


def plot(data: dict, out_dir: Path) -> list[Path]:
    roof = roofs(data)
    pts = points(data)
    if not pts or None in roof.values() or "ceilings" not in data.get("topics", {}):
        return []
    env = data["topics"]["ceilings"]["env"]
    fig, ax = plotting.new_figure(8, 5)
    xs = np.logspace(-2, 5.5, 200)
    ax.plot(xs, np.minimum(roof["gflops"], xs * roof["gbps"]), "k-", lw=1.5,
            label=f"roof: {roof['gbps']:.0f} GB/s copy, {roof['gflops'] / 1e3:.1f} TFLOP/s FP32 FMA")
    ridge = roof["gflops"] / roof["gbps"]
    ax.axvline(ridge, color="grey", lw=0.8, ls=":")
    ax.text(ridge * 1.1, roof["gflops"] * 0.02, f"ridge {ridge:.0f} FLOP/B", fontsize=7, color="grey")
    markers = {"vector_add": "o", "reduction": "v", "matmul": "s", "four_step": "D", "ilp": "^", "energy": "*"}
    for i, topic in enumerate(markers):
        sel = [p for p in pts if p["topic"] == topic]
        if sel:
            ax.scatter([p["intensity"] for p in sel], [p["gflops"] for p in sel], marker=markers[topic],
                       s=22, color=f"C{i}", label=topic, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic, counted)")
    ax.set_ylabel("GFLOP/s (measured)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    return plotting.save(fig, ax, NAME, env, out_dir, "Roofline of the handbook's kernels")
