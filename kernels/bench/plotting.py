"""What every plot of `make bench` shares: a headless backend, stable SVG
ids, text kept as text, the GPU and date in the title, and two files per
plot: <name>-<gpu>.svg (English) and <name>-<gpu>-zh.svg (Chinese).

The Chinese copy is the same figure with its words replaced: each topic
gives a table PLOT_WORDS {English phrase: Chinese} beside COMMON below, and
phrases are matched as whole words, longest first. Tick labels are
translated through their formatter, so categorical axes change too. Text is
written as SVG text (svg.fonttype "none"), so the reader's browser draws the
Chinese with its own CJK font; a CJK font installed where the plots are
drawn (e.g. fonts-wqy-microhei) only makes the layout measure it right.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

# Words every plot shares. Terms a Chinese GPU engineer writes in English
# (warp, SM, L2, HBM, FMA, GB/s, TFLOP/s, CuPy, cuBLAS, ...) stay as they are.
COMMON = {
    "time (ms)": "时间 (ms)",
    "board energy": "整卡能耗",
    "above idle": "高出空闲功耗的部分",
    "fraction of copy ceiling": "占拷贝上限的比例",
    "fraction of the copy ceiling": "占拷贝上限的比例",
    "useful bandwidth / copy bandwidth": "有效带宽 / 拷贝带宽",
    "measured": "实测",
    "naive": "朴素版",
    "coalesced": "合并访问",
    "the source's figure": "原文的数字",
}

SANS = ["DejaVu Sans", "Noto Sans CJK SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
        "PingFang SC", "Microsoft YaHei", "sans-serif"]


def new_figure(width: float, height: float, nrows: int = 1):
    """A figure of `nrows` panels stacked vertically (side by side they
    shrink to half the page's width, and their legends with them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "gpu-handbook"  # stable SVG ids between runs
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: the browser's CJK font draws Chinese
    plt.rcParams["font.family"] = "sans-serif"
    plt.rcParams["font.sans-serif"] = SANS
    return plt.subplots(nrows, 1, figsize=(width, height))


def translator(words: dict[str, str]):
    """A function English text -> Chinese text: every phrase of `words` and
    COMMON replaced where it stands as whole words, longest phrase first."""
    table = {**COMMON, **words}
    phrases = sorted(table, key=len, reverse=True)
    if not phrases:
        return lambda s: s
    def whole(p):  # a phrase that starts (ends) with a letter must not start (end) inside a word
        return (r"(?<![\w'])" if re.match(r"\w", p) else "") + re.escape(p) + \
            (r"(?![\w'])" if re.search(r"\w$", p) else "")

    pattern = re.compile("|".join(whole(p) for p in phrases))
    return lambda s: pattern.sub(lambda m: table[m.group(0)], s)


def save(fig, ax, name: str, env: dict, out_dir: Path, title: str, fontsize: int = 10,
         words: dict[str, str] | None = None) -> list[Path]:
    """Write <name>-<gpu>.svg, then translate the figure's text and write
    <name>-<gpu>-zh.svg. Returns both paths."""
    import matplotlib.pyplot as plt
    import matplotlib.text

    ax.set_title(f"{title}, {env['gpu']}, {env['date'][:10]}", fontsize=fontsize)
    fig.tight_layout()
    base = Path(out_dir) / f"{name}-{env['gpu_slug']}"
    paths = [base.with_name(base.name + ".svg"), base.with_name(base.name + "-zh.svg")]
    fig.savefig(paths[0], metadata={"Date": None})

    tr = translator(words or {})
    for axis in (a for one in fig.axes for a in (one.xaxis, one.yaxis)):
        axis.set_major_formatter(_Translated(axis.get_major_formatter(), tr))
        axis.set_minor_formatter(_Translated(axis.get_minor_formatter(), tr))
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_text():
            text.set_text(tr(text.get_text()))
    ax.set_title(f"{tr(title)}，{env['gpu']}，{env['date'][:10]}", fontsize=fontsize)
    with warnings.catch_warnings():  # no CJK font here: glyphs measured with the fallback's width
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.tight_layout()
        fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def _Translated(inner, tr):
    """`inner` (an axis's tick formatter) with `tr` applied to what it writes."""
    from matplotlib.ticker import Formatter

    class Translated(Formatter):
        def set_axis(self, axis):
            super().set_axis(axis)
            inner.set_axis(axis)

        def set_locs(self, locs):
            inner.set_locs(locs)

        def __call__(self, x, pos=None):
            return tr(inner(x, pos))

        def format_ticks(self, values):
            return [tr(s) for s in inner.format_ticks(values)]

        def get_offset(self):
            return tr(inner.get_offset())

    return Translated()
