"""The roofline of every kernel the handbook measures that does floating-
point work, drawn from the results file (no measurement of its own):
`make bench` redraws it after every run, `--plots-only` without a GPU.

x: arithmetic intensity, FLOP per byte of DRAM traffic the kernel is
counted to need; y: its measured GFLOP/s. Each topic that has points on it
says how it counts them (`roofline_points`, `ROOFLINE` = marker and color
in its kernels/bench module); the roofs min(peak, intensity x bandwidth)
come from the topics that measure them (`roof`: the device copy's
bandwidth, the FP32 FMA kernel's throughput). The roof is the device copy
(read + write); kernels that only read can stream a little faster than it.
Topics that move bytes without arithmetic, and integer kernels, have no
place on a FLOP roofline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import plotting

NAME = "roofline"


def _topics():
    from . import TOPICS

    return TOPICS


def points(data: dict) -> list[dict]:
    """One point per kernel: topic, label, intensity (FLOP/B), gflops."""
    return [{"topic": t, "label": label, "intensity": x, "gflops": y}
            for t, m in _topics().items() if hasattr(m, "roofline_points") and t in data.get("topics", {})
            for label, x, y in m.roofline_points(data)]


def roofs(data: dict) -> dict:
    """The measured ceilings: copy bandwidth (GB/s) and FP32 FMA peak (GFLOP/s)."""
    out = {"gbps": None, "gflops": None}
    for m in _topics().values():
        if hasattr(m, "roof"):
            out.update(m.roof(data))
    return out


def _roof_env(data: dict) -> dict | None:
    """The stamp of the topic that measured the bandwidth roof."""
    return next((data["topics"][t]["env"] for t, m in _topics().items()
                 if hasattr(m, "roof") and "gbps" in m.roof(data)), None)


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'roof:': '屋顶：',
    "Roofline of the handbook's kernels": '本手册各 kernel 的 Roofline',
    'GFLOP/s (measured)': 'GFLOP/s（实测）',
    'arithmetic intensity (FLOP per byte of DRAM traffic, counted)': '算术强度（每字节 DRAM 流量的 FLOP 数，按代码计数）',
    'ridge': '拐点',
    'copy': '拷贝',
    'FP32 FMA': 'FP32 FMA',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    roof = roofs(data)
    pts = points(data)
    env = _roof_env(data)
    if not pts or None in roof.values() or env is None:
        return []
    fig, ax = plotting.new_figure(8, 5)
    xs = np.logspace(-2, 5.5, 200)
    ax.plot(xs, np.minimum(roof["gflops"], xs * roof["gbps"]), "k-", lw=1.5,
            label=f"roof: {roof['gbps']:.0f} GB/s copy, {roof['gflops'] / 1e3:.1f} TFLOP/s FP32 FMA")
    ridge = roof["gflops"] / roof["gbps"]
    ax.axvline(ridge, color="grey", lw=0.8, ls=":")
    ax.text(ridge * 1.1, roof["gflops"] * 0.02, f"ridge {ridge:.0f} FLOP/B", fontsize=7, color="grey")
    styles = sorted((m.ROOFLINE[1], t, m.ROOFLINE[0]) for t, m in _topics().items() if hasattr(m, "ROOFLINE"))
    for color, topic, marker in styles:
        sel = [p for p in pts if p["topic"] == topic]
        if sel:
            ax.scatter([p["intensity"] for p in sel], [p["gflops"] for p in sel], marker=marker,
                       s=22, color=f"C{color}", label=topic, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic, counted)")
    ax.set_ylabel("GFLOP/s (measured)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    return plotting.save(fig, ax, NAME, env, out_dir, "Roofline of the handbook's kernels", words=PLOT_WORDS)
