"""The pages: twins, structure, includes, and proof that their code runs.

pytest collects every page's code blocks itself (conftest.py: includes
expanded, then pytest-codeblocks). These tests guard that pipeline:
- every page has its twin in the other language, with the same structure;
- every include resolves, and expands as pymdownx.snippets expands it;
- no fence that looks runnable escapes collection (`py`, `python title=…`,
  `shell`), and no block hides code behind `if __name__ == "__main__":`;
- a fault planted in a kernel file makes the page tests fail end to end
  (tests/test_page_code.py plants faults in every function a page shows).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pages as P

ALL = P.pages()
ZH = [p for p in ALL if not p.name.endswith(".en.md")]
EN = [p for p in ALL if p.name.endswith(".en.md")]
ids = lambda p: str(p.relative_to(P.DOCS))  # noqa: E731


# ---------------------------------------------------------------- twins --

@pytest.mark.parametrize("page", ALL, ids=ids)
def test_page_has_twin(page):
    assert P.twin(page).exists(), f"{ids(page)} has no twin {P.twin(page).name}"


@pytest.mark.parametrize("zh", ZH, ids=ids)
def test_twins_have_same_structure(zh):
    en = P.twin(zh)
    a, b = P.structure(zh.read_text()), P.structure(en.read_text())
    for field in ("headings", "fences", "images", "directives", "admonitions", "mermaid"):
        assert getattr(a, field) == getattr(b, field), f"{field} differ between {zh.name} and {en.name}"


@pytest.mark.parametrize("page", ALL, ids=ids)
def test_headings_have_explicit_ids(page):
    hs = P.structure(page.read_text()).headings
    assert hs and hs[0][0] == 1, "a page starts with one H1"
    assert [lvl for lvl, _ in hs].count(1) == 1, "one H1 per page"
    missing = [lvl for lvl, hid in hs if lvl > 1 and hid is None]
    assert not missing, "every heading below H1 needs an explicit {#id} (Chinese slugs are unstable)"
    hids = [hid for _, hid in hs if hid]
    assert len(hids) == len(set(hids)), "duplicate heading ids"


# The notebook pages (docs/notebooks/*.md) are written by docs/hooks/notebooks.py; their
# translation is checked cell by cell against the English (examples/zh/).
@pytest.mark.parametrize("en", [p for p in EN if p.parent != P.DOCS / "notebooks"], ids=ids)
def test_translation_says_which_revision_it_matches(en):
    meta, _ = P.split_front_matter(en.read_text())
    zh = P.twin(en)
    rel = zh.relative_to(P.DOCS).as_posix()
    assert meta.get("translation_of") in (rel, zh.name), f"{en.name}: translation_of must name {rel}"
    want = P.source_sha(zh)
    assert meta.get("source_sha") == want, (
        f"{en.name} was last checked against another revision of {zh.name} "
        f"(source_sha {meta.get('source_sha')}, now {want}): review the translation, "
        f"then run `python -m tests.pages stamp`")


def test_stamp_leaves_the_notebook_pages_alone(monkeypatch, tmp_path):
    """`stamp divergence.md` names English pages by file name: a notebook page
    of the same name (written by make notebooks, no translation_of) keeps its
    text, which `make notebooks --check` compares."""
    docs = tmp_path / "docs"
    (docs / "notebooks").mkdir(parents=True)
    (docs / "divergence.md").write_text("# 分化\n")
    (docs / "divergence.en.md").write_text("---\ntranslation_of: divergence.md\n---\n# Divergence\n")
    stub = "---\nsearch:\n  boost: 0.2\n---\n\n# Notebook: divergence\n"
    (docs / "notebooks" / "divergence.md").write_text("# 笔记本\n")
    (docs / "notebooks" / "divergence.en.md").write_text(stub)
    monkeypatch.setattr(P, "DOCS", docs)
    monkeypatch.setattr(P, "ROOT", tmp_path)
    P.stamp(["divergence.md"])
    assert P.split_front_matter((docs / "divergence.en.md").read_text())[0]["source_sha"] == \
        P.source_sha(docs / "divergence.md")
    assert (docs / "notebooks" / "divergence.en.md").read_text() == stub


# ------------------------------------------------------------- includes --

def page_includes():
    out = []
    for page in ALL:
        for f in P.fences(P.split_front_matter(page.read_text())[1]):
            for target in f.includes:
                out.append((page, f, target))
    return out


@pytest.mark.parametrize("page", ALL, ids=ids)
def test_includes_resolve(page):
    P.expand(page.read_text())  # raises SnippetError on a missing file or section


def test_pages_embed_kernels_and_examples():
    targets = {t for _, _, t in page_includes()}
    assert any(t.startswith("kernels/") for t in targets)
    assert any(t.startswith("examples/") for t in targets)


@pytest.mark.parametrize("page", ALL, ids=ids)
def test_expansion_agrees_with_pymdownx(page):
    md = pytest.importorskip("markdown", reason="site tooling not installed (runs on the CPU side)")
    pytest.importorskip("pymdownx", reason="site tooling not installed (runs on the CPU side)")
    conv = md.Markdown(extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": {
        "base_path": [str(P.ROOT)], "check_paths": True, "dedent_subsections": True}})
    text = page.read_text()
    theirs = conv.preprocessors["snippet"].run(text.splitlines())
    assert "\n".join(theirs).rstrip() == P.expand(text).rstrip()


# ----------------------------------------------------------- collection --

@pytest.mark.parametrize("page", ALL, ids=ids)
def test_no_runnable_looking_fence_escapes_collection(page):
    for f in P.fences(P.split_front_matter(page.read_text())[1]):
        if f.info in P.EXECUTED:
            continue
        assert not P.RUNNABLE_LOOKING.match(f.info), (
            f"{ids(page)}:{f.lineno}: fence ```{f.info} is not run by pytest-codeblocks "
            "(only exactly python/sh/bash are); use ```python, or ```console for commands shown, not run")
        if f.info.split()[:1] in (["python"], ["sh"], ["bash"]):
            pytest.fail(f"{ids(page)}:{f.lineno}: attributes after the language hide the block from pytest-codeblocks")


@pytest.mark.parametrize("page", ALL, ids=ids)
def test_no_main_guard_in_page_code(page):
    expanded = P.expand(page.read_text())
    from pytest_codeblocks import extract_from_buffer

    for block in extract_from_buffer(io.StringIO(expanded)):
        assert "__main__" not in block.code, (
            f"{ids(page)}: a block guarded by __name__ == '__main__' never runs under pytest-codeblocks")


@pytest.mark.parametrize("page", ALL, ids=ids)
def test_every_executable_fence_runs_in_its_own_language(page):
    """Each python/sh/bash fence of the expanded page ends up in a collected
    block of the same language. (`cont` joins a fence to the previous fence
    of any language: after a ```cuda fence, python code would be glued to
    the CUDA block and never run.)"""
    from pytest_codeblocks import extract_from_buffer

    expanded = P.expand(page.read_text())
    blocks = extract_from_buffer(io.StringIO(expanded))
    for f in P.fences(expanded):
        if f.info not in P.EXECUTED:
            continue
        body = squeeze(fence_body(expanded, f))
        assert any(b.syntax == f.info and body in squeeze(b.code) for b in blocks), (
            f"{ids(page)}: the {f.info} fence at expanded line {f.lineno} is not run as {f.info}")


def squeeze(code: str) -> str:
    """Drop blank lines (pytest-codeblocks drops unindented blank lines in
    indented fences; they never change what Python runs)."""
    return "\n".join(ln for ln in code.splitlines() if ln.strip())


def fence_body(text: str, f: P.Fence) -> str:
    lines = text.splitlines()[f.lineno:]
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    out = []
    for ln in lines:
        if ln.strip().startswith("```"):
            break
        out.append(ln[min(indent, len(ln) - len(ln.lstrip())):])
    return "\n".join(out)


# --------------------------------------------------------- planted faults --

def _copy_tree(dst: Path) -> None:
    for name in ("kernels", "examples", "docs", "tests"):
        shutil.copytree(P.ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "notebooks"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(P.ROOT / name, dst / name)


def _run_page_tests(root: Path, pages: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *pages],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)


MUTATIONS = [
    pytest.param("kernels/vector_add.py", "out[i] = a[i] + b[i]", "out[i] = a[i] - b[i]", id="numba-kernel"),
    pytest.param("examples/vector_add.py", "blocks = (n + threads - 1) // threads", "blocks = n // threads",
                 id="example-grid-rounding"),
    pytest.param("kernels/cuda/vector_add.cu", "out[i] = a[i] + b[i];", "out[i] = a[i] * b[i];",
                 id="cuda-kernel", marks=pytest.mark.gpu),
]
CHAPTER = ["docs/programming-model.md"]  # its English twin runs the same blocks (test_page_code)


@pytest.mark.slow  # make check, with the planted faults below
def test_unmutated_copy_passes(tmp_path):
    """Control for the next test: the copied tree passes as it is."""
    _copy_tree(tmp_path)
    proc = _run_page_tests(tmp_path, CHAPTER)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("path,old,new", MUTATIONS)
def test_fault_planted_in_file_fails_the_page_tests(tmp_path, path, old, new):
    _copy_tree(tmp_path)
    f = tmp_path / path
    text = f.read_text()
    assert text.count(old) >= 1, f"{old!r} not in {path}"
    f.write_text(text.replace(old, new))
    proc = _run_page_tests(tmp_path, CHAPTER)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "failed" in proc.stdout


@pytest.mark.parametrize("page", ALL, ids=ids)
def test_a_page_speaks_of_its_own_aims_not_of_an_issue(page):
    """The reader never saw our issue tracker: a goal on a page is the page's own."""
    found = re.findall(r"议题|the issue's|issue's goal", page.read_text())
    assert not found, f"{ids(page)} speaks of an issue: {found}"
