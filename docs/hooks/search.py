"""MkDocs hook: the search index as readers meet it.

The i18n plugin builds each language in turn into one site with one search
index (search/search_index.json), and the pages of the language built
first reach the index twice. Material's highlighter keeps one table of
word positions per location; two entries for one location give each word
two positions, and a <mark> is then inserted inside another <mark>: result
titles read "ark>内存…" or "k>共享内存". Here each location is kept once
(the last written).

Inline math reaches the index as TeX between \\( and \\) and would show in
the snippets as it is written; it is turned into plain text (A, 2MNK,
a × b).

Which language's pages come first is decided in the browser
(docs/javascripts/search-language.js): one index serves both languages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority

MATH = re.compile(r"\\\((.+?)\\\)", re.S)
SYMBOLS = {r"\times": "×", r"\cdot": "·", r"\le": "≤", r"\leq": "≤", r"\ge": "≥", r"\geq": "≥",
           r"\approx": "≈", r"\ne": "≠", r"\neq": "≠", r"\to": "→", r"\infty": "∞", r"\sum": "∑",
           r"\alpha": "α", r"\beta": "β", r"\mu": "μ", r"\sqrt": "√", r"\ldots": "…", r"\dots": "…",
           r"\pm": "±", r"\%": "%", r"\,": " ", r"\;": " ", r"\ ": " "}
COMMAND = re.compile(r"\\[A-Za-z]+|\\.")


def plain_math(tex: str) -> str:
    """TeX of an inline formula as plain text: symbols for the common
    commands, the rest of the commands and the braces dropped."""
    out = COMMAND.sub(lambda m: SYMBOLS.get(m.group(0), " " if m.group(0).startswith("\\") and len(m.group(0)) > 2
                                           else ""), tex)
    out = out.replace("{", "").replace("}", "").replace("^", "").replace("_", "")
    return re.sub(r"\s+", " ", out).strip()


def clean(index: dict) -> dict:
    """The index with each entry once and inline math as text."""
    last = {doc["location"]: k for k, doc in enumerate(index["docs"])}  # a location is one section
    docs = [doc for k, doc in enumerate(index["docs"]) if last[doc["location"]] == k]
    for doc in docs:
        for field in ("title", "text"):
            doc[field] = MATH.sub(lambda m: plain_math(m.group(1)), doc[field])
    return dict(index, docs=docs)


@event_priority(-200)  # after the i18n plugin (-100) has built every language and written the index
def on_post_build(config):
    path = Path(config["site_dir"]) / "search" / "search_index.json"
    if path.is_file():
        path.write_text(json.dumps(clean(json.loads(path.read_text())), ensure_ascii=False, separators=(",", ":")))

