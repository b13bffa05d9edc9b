"""The plots: every one drawn in English and in Chinese, and the Chinese
copy has no English left in it but the terms a Chinese GPU engineer writes
in English and the code names of what was measured.

The plots are drawn afresh from the committed results files (no GPU needed),
into a temporary folder, so the test sees what the code draws today."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernels import results
from kernels.bench import TOPICS, plotting, roofline

# Written in English on Chinese pages too (the glossary keeps them): units,
# hardware, libraries, formats.
KEPT = {
    "GB", "s", "TFLOP", "GFLOP", "FLOP", "B", "ms", "ns", "pJ", "J", "MiB", "nm", "SM", "L1", "L2", "HBM",
    "DRAM", "FMA", "FP32", "float32", "float", "float4", "warp", "kernel", "cuBLAS", "CuPy", "Numba", "CUDA",
    "C", "CUB", "NVIDIA", "H200", "Horowitz", "Roofline", "AoS", "SoA", "ILP", "H2D", "D2H", "x", "n",
    "grid", "stride", "shuffle", "split", "min", "__launch_bounds__", "out", "i", "A",
    "Tensor", "Core",  # Tensor Core: what the Chinese pages call it after its first mention
    # number formats and the letters of a GEMM's shapes and formulas
    "FP64", "TF32", "BF16", "FP16", "FP8", "E4M3", "E5M2", "INT8", "TOP", "float64", "GEMM", "M", "N", "K", "AB", "U",
}


def drawn(tmp: Path) -> list[Path]:
    paths = []
    for name, gpu_file in ((n, f) for f in sorted(results.RESULTS_DIR.glob("*.json")) for n in sorted(TOPICS)):
        data = results.load(gpu_file)
        if name in data.get("topics", {}):
            paths += TOPICS[name].plot(data, tmp)
    for gpu_file in sorted(results.RESULTS_DIR.glob("*.json")):
        paths += roofline.plot(results.load(gpu_file), tmp)
    return paths


@pytest.fixture(scope="module")
def plots(tmp_path_factory):
    return drawn(tmp_path_factory.mktemp("plots"))


def texts(svg: Path) -> list[str]:
    return ["".join(el.itertext()).strip() for el in ET.parse(svg).iter() if el.tag.endswith("}text")]


def code_names() -> set[str]:
    """The words of what the results files name: topics, impls, variants."""
    names = set(TOPICS)
    for f in results.RESULTS_DIR.glob("*.json"):
        for r in results.load(f)["records"]:
            names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f"{r['impl']} {r['variant']} {r['topic']}"))
            names.update(re.split(r"[_\s]+", r["variant"]))
    return names


def test_every_plot_is_drawn_in_both_languages(plots):
    en = {p.name for p in plots if not p.name.endswith("-zh.svg")}
    zh = {p.name.replace("-zh.svg", ".svg") for p in plots if p.name.endswith("-zh.svg")}
    assert en and en == zh
    committed = {p.name for p in results.RESULTS_DIR.glob("*.svg")}
    assert {p.name for p in plots} <= committed, \
        f"plots not committed (python -m kernels.bench --plots-only <gpu>): {sorted({p.name for p in plots} - committed)}"


def test_chinese_plots_have_no_english_left(plots):
    allowed = KEPT | code_names()
    left = {}
    for svg in (p for p in plots if p.name.endswith("-zh.svg")):
        for t in texts(svg):
            t = re.sub(r"\$.*?\$", "", t)  # mathtext tick labels: 10^2
            words = [w for w in re.findall(r"(?<![0-9A-Za-z_])[A-Za-z_][A-Za-z0-9_]*", t) if w not in allowed]
            if words:
                left.setdefault(svg.name, []).append((t, words))
    assert not left, f"English left in Chinese plots (add to the topic's PLOT_WORDS): {left}"
    for svg in (p for p in plots if p.name.endswith("-zh.svg")):
        assert any(re.search(r"[\u4e00-\u9fff]", t) for t in texts(svg)), svg.name


def test_the_chinese_page_shows_the_chinese_plot():
    from tests import pages

    hook = pages.hook("results")
    zh = hook.render("<!-- results-plot topic=vector_add alt=x -->", "programming-model.md", "zh", "nvidia-h200")
    en = hook.render("<!-- results-plot topic=vector_add alt=x -->", "programming-model.md", "en", "nvidia-h200")
    assert "vector_add-nvidia-h200-zh.svg" in zh and "vector_add-nvidia-h200.svg" in en and "-zh" not in en


def test_translator_replaces_whole_words_longest_first():
    tr = plotting.translator({"copy": "拷贝", "copy_twice": "拷贝两遍", "explicit": "显式"})
    assert tr("explicit\ncopy_twice") == "显式\n拷贝两遍"
    assert tr("copy of the source's figure") == "拷贝 of 原文的数字"
    assert tr("copyright") == "copyright"
    assert plotting.translator({"; a bar": "；条形"})("32 MiB; a bar") == "32 MiB；条形"
