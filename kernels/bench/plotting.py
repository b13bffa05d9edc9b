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

No legend covers data: before each file is written, `place_legends` checks
every legend's box against what the figure's axes draw (lines, their
markers and the segments between them, bars and other patches, scatter and
bar collections, text), all in display coordinates after a draw; a legend
that touches any of it moves to a clear corner of its axes, or else out of
the axes (below, else to the right), and the file is then saved with
bbox_inches="tight". A legend that finds no clear place is an error.
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
    fig.savefig(paths[0], metadata={"Date": None}, **_tight_if(place_legends(fig)))

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
        fig.savefig(paths[1], metadata={"Date": None}, **_tight_if(place_legends(fig)))
    plt.close(fig)
    return paths


def _tight_if(outside: bool) -> dict:
    """savefig's arguments: a legend outside its axes is kept whole."""
    return {"bbox_inches": "tight", "pad_inches": 0.05} if outside else {}


# ------------------------------------------------------------- legends --

# Where a legend inside its axes may go, in the order they are tried (after
# the place its plot asked for): corners, then the middles of the sides.
INSIDE = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
          "upper center", "lower center")


def data_boxes(fig, renderer=None):
    """What the figure's axes draw as data, in display pixels: (points, radii)
    of each line's vertices and of its segments (sampled every 2 px) and of
    scatter markers, and a list of (x0, y0, x1, y1) boxes of patches (bars,
    spans), of other collections' paths and of text. Points and boxes are
    cut to their axes where the artist is clipped to it; legends are not data."""
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection

    renderer = renderer or fig.canvas.get_renderer()
    px = fig.dpi / 72.0
    pts, radii, boxes = [], [], []

    def add_points(xy, r, clip):
        xy = np.asarray(xy, float).reshape(-1, 2)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if clip is not None:
            inside = ((xy[:, 0] >= clip.x0 - r) & (xy[:, 0] <= clip.x1 + r)
                      & (xy[:, 1] >= clip.y0 - r) & (xy[:, 1] <= clip.y1 + r))
            xy = xy[inside]
        pts.append(xy)
        radii.append(np.full(len(xy), float(r)))

    def add_polyline(xy, r, clip, joined=True):
        xy = np.asarray(xy, float).reshape(-1, 2)
        add_points(xy, r, clip)
        if not joined or len(xy) < 2:
            return
        for a, b in zip(xy[:-1], xy[1:]):
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                continue
            steps = int(np.ceil(np.hypot(*(b - a)) / 2.0))
            if steps > 1:
                t = np.linspace(0.0, 1.0, steps + 1)[1:-1, None]
                add_points(a + t * (b - a), r, clip)

    def add_box(bb, clip):
        if clip is not None:
            bb = bb.__class__.intersection(bb, clip)
            if bb is None:
                return
        if np.isfinite([bb.x0, bb.y0, bb.x1, bb.y1]).all():
            boxes.append((bb.x0, bb.y0, bb.x1, bb.y1))

    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_visible():
                continue
            clip = ax.bbox if line.get_clip_on() else None
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
            marker = line.get_marker() not in (None, "None", "none", "", " ")
            r = max(line.get_linewidth() * px / 2, line.get_markersize() * px / 2 if marker else 0.0)
            add_polyline(xy, r, clip, joined=line.get_linestyle() not in ("None", "none", "", " "))
        for patch in ax.patches:
            if patch.get_visible():
                add_box(patch.get_window_extent(renderer), ax.bbox if patch.get_clip_on() else None)
        for coll in ax.collections:
            if not coll.get_visible():
                continue
            clip = ax.bbox if coll.get_clip_on() else None
            offsets = coll.get_offsets()
            if isinstance(coll, PathCollection) and len(offsets):  # scatter: a marker at each offset
                xy = coll.get_offset_transform().transform(np.asarray(offsets, float))
                sizes = coll.get_sizes()
                r = (np.sqrt(sizes.max()) if len(sizes) else 6.0) * px / 2
                add_points(xy, r, clip)
                continue
            trans = coll.get_transform()
            lw = coll.get_linewidths()
            r = (max(lw) if len(lw) else 1.0) * px / 2
            for path in coll.get_paths():
                verts = trans.transform(path.vertices)
                if isinstance(coll, LineCollection):
                    add_polyline(verts, r, clip)
                elif len(verts):
                    from matplotlib.transforms import Bbox

                    add_box(Bbox.from_extents(*verts.min(axis=0), *verts.max(axis=0)), clip)
        for text in ax.texts:
            if text.get_visible() and text.get_text():
                add_box(text.get_window_extent(renderer), None)
                if getattr(text, "arrow_patch", None) is not None:
                    add_box(text.arrow_patch.get_window_extent(renderer), None)
    points = np.concatenate(pts) if pts else np.zeros((0, 2))
    return (points, np.concatenate(radii) if radii else np.zeros(0)), boxes


def legend_overlaps(fig, legend, renderer=None) -> bool:
    """Whether the legend's box touches any of the figure's data (data_boxes)."""
    import numpy as np

    renderer = renderer or fig.canvas.get_renderer()
    lb = legend.get_window_extent(renderer)
    (xy, r), boxes = data_boxes(fig, renderer)
    if len(xy) and np.any((xy[:, 0] + r > lb.x0) & (xy[:, 0] - r < lb.x1)
                          & (xy[:, 1] + r > lb.y0) & (xy[:, 1] - r < lb.y1)):
        return True
    return any(x1 > lb.x0 and x0 < lb.x1 and y1 > lb.y0 and y0 < lb.y1 for x0, y0, x1, y1 in boxes)


def _legends(fig):
    return [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]


def _relegend(ax, old, **kw):
    """The axes' legend made again with the same entries, font sizes and
    title, and `kw` (loc, ncols, bbox_to_anchor, ...)."""
    texts = old.get_texts()
    title = old.get_title()
    props = {"fontsize": texts[0].get_fontsize() if texts else None, "ncols": old._ncols,
             "title": title.get_text() or None, "title_fontsize": title.get_fontsize()}
    props.update(kw)
    return ax.legend(old.legend_handles, [t.get_text() for t in texts], **props)


def _twins(fig, ax):
    """The axes drawn over the same box as `ax` (itself and its twins)."""
    return [other for other in fig.axes if other.bbox.bounds == ax.bbox.bounds]


def _layout_box(fig, ax, legend, renderer):
    """The box of `ax` and its twins with their tick labels and axis labels,
    the legend left out."""
    from matplotlib.transforms import Bbox

    legend.set_in_layout(False)
    box = Bbox.union([other.get_tightbbox(renderer, for_layout_only=True) for other in _twins(fig, ax)])
    legend.set_in_layout(True)
    return box


def _below(fig, ax, legend, renderer, centre_on_figure=False):
    """(anchor, transform): under the axes' tick labels and x label, centred
    on the axes (or on the figure, where that leaves it room)."""
    from matplotlib.transforms import blended_transform_factory, offset_copy

    gap = (ax.bbox.y0 - _layout_box(fig, ax, legend, renderer).y0) / (fig.dpi / 72.0) + 4  # points
    trans = offset_copy(ax.transAxes, fig=fig, y=-gap, units="points")
    if centre_on_figure:
        trans = blended_transform_factory(fig.transFigure, trans)
    return (0.5, 0.0), trans


def _right(fig, ax, legend, renderer):
    """(anchor, transform): right of the axes and of any twin's tick labels."""
    from matplotlib.transforms import offset_copy

    gap = (_layout_box(fig, ax, legend, renderer).x1 - ax.bbox.x1) / (fig.dpi / 72.0) + 4
    return (1.0, 1.0), offset_copy(ax.transAxes, fig=fig, x=gap, units="points")


def _within_width(fig, legend, renderer) -> bool:
    box = legend.get_window_extent(renderer)
    return box.x0 >= fig.bbox.x0 and box.x1 <= fig.bbox.x1


def _outside(fig, ax, legend, renderer):
    """The legend below its axes, in as many columns as fit the figure's
    width (whole columns where that costs at most one row more), else one
    column right of the axes. Returns it once clear of the data after the
    figure is laid out again, else None."""
    import math
    import warnings

    n = max(1, len(legend.get_texts()))

    def below(ncols):
        for centre in (False, True):
            anchor, trans = _below(fig, ax, legend, renderer, centre)
            new = _relegend(ax, legend, loc="upper center", ncols=ncols, bbox_to_anchor=anchor,
                            bbox_transform=trans)
            fig.canvas.draw()
            if _within_width(fig, new, renderer):
                return new
        return new

    tries = []
    for ncols in range(n, 0, -1):
        legend = below(ncols)
        if _within_width(fig, legend, renderer) or ncols == 1:
            whole = [d for d in range(ncols - 1, 0, -1)
                     if n % d == 0 and math.ceil(n / d) <= math.ceil(n / ncols) + 1]
            if n % ncols and whole:
                legend = below(whole[0])
            break
    tries.append(legend)
    anchor, trans = _right(fig, ax, legend, renderer)
    tries.append(dict(loc="upper left", ncols=1, bbox_to_anchor=anchor, bbox_transform=trans))
    for attempt in tries:
        if isinstance(attempt, dict):
            legend = _relegend(ax, legend, **attempt)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            fig.tight_layout()
        fig.canvas.draw()
        if not legend_overlaps(fig, legend, renderer):
            return legend
    return None


def place_legends(fig) -> bool:
    """Move every legend of `fig` that touches data (legend_overlaps) to the
    first clear place: where it was asked for, then INSIDE, then below its
    axes, then right of it (_outside). Lays the figure out again after a
    move out of the axes. Returns whether a legend sits outside its axes
    (save it with bbox_inches="tight"); raises ValueError when a legend
    finds no clear place."""
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    for ax, legend in _legends(fig):
        if not legend_overlaps(fig, legend, renderer):
            continue
        asked = legend._loc if legend._bbox_to_anchor is None else None
        for loc in ([asked] if isinstance(asked, int) and asked else []) + list(INSIDE):
            legend = _relegend(ax, legend, loc=loc)
            fig.canvas.draw()
            if not legend_overlaps(fig, legend, renderer):
                break
        else:
            if _outside(fig, ax, legend, renderer) is None:
                raise ValueError(f"no place for the legend of {ax.get_title()!r} clear of its data")
    outside = False
    for ax, legend in _legends(fig):  # a move lays the figure out again: every legend still clear
        if legend_overlaps(fig, legend, renderer):
            raise ValueError(f"the legend of {ax.get_title()!r} covers data after the layout changed")
        box = legend.get_window_extent(renderer)
        outside |= not (box.x0 >= ax.bbox.x0 - 1 and box.x1 <= ax.bbox.x1 + 1
                        and box.y0 >= ax.bbox.y0 - 1 and box.y1 <= ax.bbox.y1 + 1)
    return outside


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
