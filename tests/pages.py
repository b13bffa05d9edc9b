"""The pages as the tests see them: snippet expansion, fences, structure.

`expand` does what pymdownx.snippets does for the one form the pages use,
a line `--8<-- "path"` or `--8<-- "path:section"` (sections are the lines
between `--8<-- [start:section]` and `--8<-- [end:section]` in the file,
dedented); tests/test_pages.py checks that it agrees with pymdownx itself.
`code_blocks` gives the blocks pytest-codeblocks runs, and can include a
mutated copy of one section instead of the file's (tests/test_page_code.py).

    python -m tests.pages stamp [PAGE ...]  # after reviewing a translation: record
                                            # which revision of its twin it matches
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

INCLUDE = re.compile(r'^(?P<indent>[ \t]*)--8<--[ \t]+"(?P<target>[^"]+)"[ \t]*$')
MARKER = re.compile(r"--8<--[ \t]+\[[ \t]*(?P<kind>start|end)[ \t]*:[ \t]*(?P<name>[a-z][-_0-9a-z]*)[ \t]*\]")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<info>[^`\n]*)$")
HEADING = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.*?)[ \t]*$")
HEADING_ID = re.compile(r"\{[^}]*#(?P<id>[A-Za-z0-9_-]+)[^}]*\}\s*$")
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<src>[^)\s]+)")
DIRECTIVE = re.compile(r"<!--\s*results-(?P<kind>table|plot|stamp)\s+(?P<args>.*?)\s*-->")
ADMONITION = re.compile(r"^[ \t]*(!!!|\?\?\?\+?)[ \t]+\w+")
EXECUTED = ("python", "sh", "bash")  # what pytest-codeblocks runs (exact info string)
RUNNABLE_LOOKING = re.compile(r"^(py|python\d?|pycon|ipython|sh|bash|shell|zsh)\b", re.I)


class SnippetError(LookupError):
    pass


@functools.cache
def hook(name: str):
    """docs/hooks/<name>.py, loaded as MkDocs loads a hook (by path), once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_hook", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts
                  and not p.is_relative_to(DOCS / "notebooks" / "text"))  # the notebooks' Chinese, not pages


def read_section(target: str) -> list[str]:
    """Lines of `path` or `path:section`, as pymdownx.snippets includes them."""
    path, _, section = target.partition(":")
    file = ROOT / path
    if not file.is_file():
        raise SnippetError(f"snippet file not found: {path}")
    text = file.read_text()
    lines = text.splitlines()
    if not section:  # a whole file, as pymdownx includes it: its final newline gives a blank line
        return [ln for ln in lines if not MARKER.search(ln)] + ([""] if text.endswith("\n") else [])
    out, inside, found = [], False, False
    for ln in lines:
        m = MARKER.search(ln)
        if m and m.group("name") == section:
            if m.group("kind") == "start":
                inside, found = True, True
            else:
                inside = False
            continue
        if m:
            continue  # markers of other sections are not shown
        if inside:
            out.append(ln)
    if not found:
        raise SnippetError(f"section {section!r} not found in {path}")
    return textwrap.dedent("\n".join(out)).splitlines()


def expand(text: str, replace: tuple[str, str] | None = None) -> str:
    """Replace each include line by the lines it names, indented like it.

    replace=(target, text): include `text` (a mutated copy) instead of `target`.
    """
    out = []
    for ln in text.splitlines():
        m = INCLUDE.match(ln)
        if not m:
            out.append(ln)
            continue
        body = read_section(m.group("target"))
        if replace and replace[0] == m.group("target"):
            body = replace[1].splitlines()
        out.extend(m.group("indent") + b for b in body)
    return "\n".join(out) + "\n"


def code_blocks(text: str, replace: tuple[str, str] | None = None) -> list:
    """The blocks pytest-codeblocks runs from a page's text: includes expanded,
    `cont` fences joined; python, sh and bash only."""
    import io

    from pytest_codeblocks import extract_from_buffer

    return [b for b in extract_from_buffer(io.StringIO(expand(text, replace=replace))) if b.syntax in EXECUTED]


def is_gpu(block) -> bool:
    """Marked `<!--pytest.mark.gpu-->`."""
    return any("gpu" in m for m in block.marks)


@dataclass
class Fence:
    info: str
    lineno: int
    includes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the lines between the fence's marks

    @property
    def body(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass
class Structure:
    headings: list[tuple[int, str | None]]
    fences: list[tuple[str, tuple[str, ...]]]
    images: list[str]
    directives: list[str]
    admonitions: int
    mermaid: int


def split_front_matter(text: str) -> tuple[dict, str]:
    if not text.startswith("---\n"):
        return {}, text
    end = text.index("\n---\n", 4)
    meta = {}
    for ln in text[4:end].splitlines():
        key, _, value = ln.partition(":")
        meta[key.strip()] = value.strip()
    return meta, text[end + 5:]


def fences(text: str) -> list[Fence]:
    """Code fences of a page (unexpanded, or expanded by `expand`), with
    their lines and the files each includes."""
    out, current, ticks = [], None, ""
    for i, ln in enumerate(text.splitlines(), 1):
        m = FENCE.match(ln)
        if current is None and m:
            current, ticks = Fence(m.group("info").strip(), i), m.group("ticks")
            continue
        if current is not None:
            if ln.strip() == ticks:
                out.append(current)
                current = None
                continue
            current.lines.append(ln)
            if INCLUDE.match(ln):
                current.includes.append(INCLUDE.match(ln).group("target"))
    return out


def structure(text: str) -> Structure:
    _, body = split_front_matter(text)
    headings, in_fence = [], False
    for ln in body.splitlines():
        if FENCE.match(ln):
            in_fence = not in_fence
            continue
        m = HEADING.match(ln)
        if m and not in_fence:
            idm = HEADING_ID.search(m.group("text"))
            headings.append((len(m.group("hashes")), idm.group("id") if idm else None))
    fs = fences(body)
    return Structure(
        headings=headings,
        fences=[(f.info.split()[0] if f.info else "", tuple(f.includes)) for f in fs],
        images=IMAGE.findall(body),
        # a plot's alt text is in the page's language; the rest must agree
        directives=[re.sub(r'\s*\balt="[^"]*"', "", " ".join(d)) for d in DIRECTIVE.findall(body)],
        admonitions=sum(1 for ln in body.splitlines() if ADMONITION.match(ln)),
        mermaid=sum(1 for f in fs if f.info.startswith("mermaid")),
    )


def twin(page: Path) -> Path:
    if page.name.endswith(".en.md"):
        return page.with_name(page.name[: -len(".en.md")] + ".md")
    return page.with_name(page.name[: -len(".md")] + ".en.md")


def source_sha(zh_page: Path) -> str:
    return hashlib.sha256(zh_page.read_bytes()).hexdigest()[:12]


def stamp(only: list[str] | None = None) -> None:
    """Record in each English page (or those named) the revision of its Chinese twin it matches."""
    names = {Path(o).name for o in only or []}
    names |= {n[: -len(".md")] + ".en.md" for n in names if not n.endswith(".en.md")}
    unknown = {n for n in names if n.endswith(".en.md")} - {p.name for p in pages()}
    if unknown:
        raise SystemExit(f"no such page: {sorted(unknown)}")
    for en in (p for p in pages() if p.name.endswith(".en.md")):
        if only and en.name not in names:
            continue
        text = en.read_text()
        meta, body = split_front_matter(text)
        if "translation_of" not in meta:  # not a translation: a notebook page that `make notebooks` writes
            continue
        meta["source_sha"] = source_sha(twin(en))
        head = "".join(f"{k}: {v}\n" for k, v in meta.items())
        new = f"---\n{head}---\n{body}"
        if new != text:
            en.write_text(new)
            print(f"stamped {en.relative_to(ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["stamp"]:
        stamp(sys.argv[2:] or None)
    else:
        print(__doc__)


def build_site(out: Path, **env: str) -> str:
    """mkdocs build --strict into `out` (extra environment variables, e.g.
    SITE_URL; the caller's own SITE_URL and REPO_URL are not passed on, so the
    default build is the one without addresses); fails on an error or a
    warning; returns the build log."""
    import os
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "REPO_URL")}
    env = dict(base, NO_MKDOCS_2_WARNING="1", **env)  # an end-of-life banner, not a build warning
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    warnings = [ln for ln in log.splitlines() if "WARNING" in ln]
    assert not warnings, "\n".join(warnings)
    return log
