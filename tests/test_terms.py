"""The Chinese pages' words: one term for one thing, no wrap artefacts, no
English alt text.

The terms come from the glossary's usage table (docs/appendix/glossary.md,
"用语约定"): its second column lists the forms a Chinese page must not use.
Code (fenced and inline) and HTML comments other than plot directives are
not prose and are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import pages as P

GLOSSARY = P.DOCS / "appendix" / "glossary.md"
ZH = [p for p in P.pages() if not p.name.endswith(".en.md")]
CJK = "\u4e00-\u9fff"


def ids(p: Path) -> str:
    return p.relative_to(P.DOCS).as_posix()


def usage_table(text: str) -> list[tuple[str, list[str]]]:
    """(preferred, [avoided forms]) from the glossary's usage section."""
    section = text.split("{#usage}", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and line.startswith("|") and not set(cells[0]) <= set("-") and cells[0] != "用":
            rows.append((cells[0], [f.strip() for f in cells[1].split("、") if f.strip()]))
    return rows


def prose(text: str) -> str:
    """The page's text with code and comments blanked (line numbers kept);
    the glossary's usage table, which names the avoided forms, goes too."""
    text = text.split("## 用语约定", 1)[0] if "{#usage}" in text else text
    blank = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731
    text = re.sub(r"^([ \t]*)(`{3,}).*?^\1\2[ \t]*$", blank, text, flags=re.S | re.M)
    text = re.sub(r"<!--(?!\s*results-plot).*?-->", blank, text, flags=re.S)
    return re.sub(r"`[^`\n]+`", "CODE", text)  # a Latin word where the code was


def test_the_usage_table_is_read():
    rows = usage_table(GLOSSARY.read_text())
    assert len(rows) >= 5 and all(avoided for _, avoided in rows), rows
    assert ("屏障", ["栅栏"]) in rows


@pytest.mark.parametrize("zh", ZH, ids=ids)
def test_no_avoided_term(zh):
    rows = usage_table(GLOSSARY.read_text())
    text = prose(zh.read_text())
    found = [f"line {text.count(chr(10), 0, m.start()) + 1}: {form} (use {use})"
             for use, forms in rows for form in forms for m in re.finditer(re.escape(form), text)]
    assert not found, f"{ids(zh)}:\n" + "\n".join(found)


CJK_WRAP = re.compile(r"[\u4e00-\u9fff\uff0c\u3002\uff1b\uff1a]\n[\u4e00-\u9fff]")


@pytest.mark.parametrize("zh", ZH, ids=ids)
def test_no_chinese_paragraph_is_wrapped_mid_sentence(zh):
    """A line break inside a Chinese paragraph renders as a space between two
    characters: a Chinese paragraph is one line."""
    text = prose(zh.read_text())
    found = [text.count("\n", 0, m.start()) + 1 for m in CJK_WRAP.finditer(text)]
    assert not found, f"{ids(zh)}: a Chinese paragraph wrapped at line(s) {found}"


@pytest.mark.parametrize("zh", ZH, ids=ids)
def test_no_space_between_two_chinese_characters(zh):
    """A space between two Chinese characters is a wrap or typing artefact
    (STYLE.md: spaces go between Chinese and Latin text, never between two
    Chinese characters)."""
    text = prose(zh.read_text())
    found = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
             for m in re.finditer(rf"[{CJK}][ \t]+[{CJK}]", text)]
    assert not found, f"{ids(zh)}:\n" + "\n".join(found)


ALT = re.compile(r'!\[(?P<md>[^\]]*)\]\(|results-plot[^>]*?\balt="(?P<dir>[^"]*)"')


@pytest.mark.parametrize("zh", ZH, ids=ids)
def test_pictures_on_a_chinese_page_are_described_in_chinese(zh):
    found = [alt for m in ALT.finditer(prose(zh.read_text()))
             if not re.search(f"[{CJK}]", alt := (m.group("md") or m.group("dir") or ""))]
    assert not found, f"{ids(zh)}: alt text in English: {found}"


def test_the_checks_can_fail():
    """Each check on a made-up page with one fault of its kind."""
    rows = usage_table(GLOSSARY.read_text())
    bad = prose("这里有 bank 冲突。\n```python\nx = '栅栏'\n```\n两个字 之间。\n![a plot](x.png)\n")
    assert any(form in bad for _, forms in rows for form in forms)
    assert "栅栏" not in bad  # code is not prose
    assert re.search(rf"[{CJK}][ \t]+[{CJK}]", bad)
    assert CJK_WRAP.search(prose("一段中文\n被折行了。\n"))
    assert [m for m in ALT.finditer(bad) if not re.search(f"[{CJK}]", m.group("md") or "")]
