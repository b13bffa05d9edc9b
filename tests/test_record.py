"""The GPU test record (tests/record.py): what it hashes, what a page shows
from it, and the committed record itself."""

from __future__ import annotations

import shutil

import pytest

from tests import pages as P
from tests import record as R

ENV = {"gpu": "NVIDIA H200", "gpu_slug": "nvidia-h200", "driver": "580.1", "cupy": "14.2.0", "numba_cuda": "0.30.4",
       "date": "2026-12-01T10:00:00Z", "commit": "0123456789abcdef"}
# Site-side tests need mkdocs, Node or Chromium, which the GPU machine lacks: they
# may skip there. No kernel, example or page-block test may.
WRITES = "on a GPU this run writes the record"
# a GPU planted-fault proof whose every answer the ledger holds for the same code (tests/fault_ledger.py)
REUSED = "HANDBOOK_FAULTS=all runs them again"
SITE_SIDE = {"tests/test_site.py", "tests/test_browser.py", "tests/test_pages.py", "tests/test_workflows.py"}


def _page(tmp_path, monkeypatch, body: str):
    """A page in a copy of docs/ and examples/ (record.ROOT pointed at the copy)."""
    for d in ("examples", "kernels/cuda"):
        shutil.copytree(P.ROOT / d, tmp_path / d)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "p.md"
    page.write_text(body)
    monkeypatch.setattr(P, "ROOT", tmp_path)
    monkeypatch.setattr(R, "ROOT", tmp_path)
    monkeypatch.setattr(R, "code_pages", lambda: [page])
    return page


BODY = "# 标题\n\n```python\n--8<-- \"examples/vector_add.py:numba_kernel\"\n\nprint(load_cuda('vector_add.cu'))\n```\n"


def test_page_sources_follow_the_code_not_its_comments(tmp_path, monkeypatch):
    page = _page(tmp_path, monkeypatch, BODY)
    before = R.page_sources(page)
    assert set(before) == {"block 1 (python)", "cuda/vector_add.cu"}
    ex = tmp_path / "examples" / "vector_add.py"
    text = ex.read_text()
    ex.write_text(text.replace("# --8<-- [start:numba_kernel]", "# --8<-- [start:numba_kernel]\n# a new comment"))
    assert R.page_sources(page) == before  # a comment is no change of code
    ex.write_text(text.replace("out[i] = a[i] + b[i]", "out[i] = a[i] - b[i]"))
    assert R.page_sources(page)["block 1 (python)"] != before["block 1 (python)"]
    cu = tmp_path / "kernels" / "cuda" / "vector_add.cu"
    cu.write_text(cu.read_text() + "\n__device__ int planted;\n")
    assert R.page_sources(page)["cuda/vector_add.cu"] != before["cuda/vector_add.cu"]


def _run(page, outcomes):
    return {"schema": R.SCHEMA, "runs": {"test": R.make_run(ENV, "test", [], outcomes)}}


def test_a_page_shows_its_line_and_refuses_a_stale_or_failed_run(tmp_path, monkeypatch):
    page = _page(tmp_path, monkeypatch, BODY)
    ok = {"docs/p.md::line 3": ("passed", ""), "docs/p.md::line 9": ("skipped", "needs a CUDA GPU"),
          "tests/test_x.py::test_a": ("passed", "")}
    data = _run(page, ok)
    assert data["runs"]["test"]["files"]["docs/p.md"] == {"passed": 1, "failed": 0, "skipped": 1,
                                                          "skips": ["needs a CUDA GPU"]}
    zh, en = R.page_line(data, page, "zh"), R.page_line(data, page, "en")
    assert "NVIDIA H200" in zh and "`0123456`" in zh and "1 个通过，0 个失败，1 个跳过" in zh
    assert not any(w in zh for w in ("passed", "failed", "commit", "driver"))  # no English left on a Chinese page
    assert "1 passed, 0 failed, 1 skipped" in en
    failed = _run(page, {**ok, "docs/p.md::line 3": ("failed", "")})
    with pytest.raises(ValueError, match="failed in the GPU test run"):
        R.page_line(failed, page, "zh")
    page.write_text(BODY.replace("print(", "print(1, "))
    with pytest.raises(ValueError, match=r"its code changed after the GPU test run .*block 1"):
        R.page_line(data, page, "zh")
    with pytest.raises(ValueError, match="no GPU test run covers this page"):
        R.page_line({"schema": 1, "runs": {}}, page, "zh")


def test_the_newest_run_is_shown():
    old = {"env": {**ENV, "date": "2026-11-01T00:00:00Z"}}
    new = {"env": {**ENV, "date": "2026-12-01T00:00:00Z"}}
    assert R.latest({"runs": {"check": old, "test": new}}) is new


def test_the_committed_record_ran_every_kernel_and_page_test():
    """The record the pages show (written by make test on the GPU, never by
    hand): its newest run failed nothing and skipped no kernel, example or
    page-block test; it covers every page with code."""
    from kernels.device import has_gpu

    if has_gpu():
        pytest.skip(WRITES)
    data = R.load("nvidia-h200")
    run = R.latest(data)
    assert run is not None, "no GPU test record: run `make test` on the H200 and commit it"
    assert run["totals"]["failed"] == 0
    skipped = {f: [r for r in c["skips"] if r not in (WRITES, R.NO_HISTORY) and REUSED not in r]
               for f, c in run["files"].items()
               if c["skipped"] and f not in SITE_SIDE}
    skipped = {f: r for f, r in skipped.items() if r}
    assert not skipped, skipped
    assert {p.relative_to(P.ROOT).as_posix() for p in R.code_pages()} <= set(run["pages"])
    assert run["totals"]["passed"] > 1500
