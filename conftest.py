"""pytest setup for the whole repository.

- `import kernels` first: with no GPU it turns on Numba's CUDA simulator
  before anything imports Numba.
- Tests and page blocks marked `gpu` are skipped, with the reason
  "needs a CUDA GPU", where there is none; on a GPU machine they all run.
- Every Chinese page under docs/ (X.md, the default language) is collected:
  its English twin X.en.md holds the same blocks (tests/test_page_code.py
  checks that), so each distinct block runs once. Its `--8<--` includes are expanded
  (tests/pages.py) and its code blocks are then collected and run by
  pytest-codeblocks (fences whose info string is exactly python, sh or
  bash; `<!--pytest-codeblocks:cont-->` continues the previous block;
  `<!--pytest.mark.gpu-->` before a block marks it).
"""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (must precede any import of numba)
from kernels.device import has_gpu, numba_simulator

NEEDS_GPU = "needs a CUDA GPU"


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site, built once per test session (tests/test_site.py and
    tests/test_browser.py read and serve the same build)."""
    from tests.pages import build_site

    out = tmp_path_factory.mktemp("site")
    build_site(out)
    return out


def pytest_report_header(config):
    target = "GPU" if has_gpu() else "no GPU"
    sim = "Numba CUDA simulator" if numba_simulator() else "Numba CUDA hardware target"
    return f"gpu-handbook: {target}; {sim}"


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason=NEEDS_GPU)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collect_file(file_path, parent):
    from tests.pages import DOCS

    if (file_path.suffix == ".md" and DOCS in file_path.parents and "hooks" not in file_path.parts
            and not file_path.name.endswith(".en.md")):
        return PageFile.from_parent(parent, path=file_path)
    return None


class PageFile(pytest.File):
    """A page's code blocks, after its includes are expanded."""

    def collect(self):
        import sys

        from pytest_codeblocks.plugin import TestBlock

        from tests.pages import code_blocks

        for block in code_blocks(self.path.read_text()):
            item = TestBlock.from_parent(parent=self, name=f"line {block.lineno}")
            item.obj = block
            for mark in block.marks:
                item.add_marker(eval(mark, {"sys": sys, "pytest": pytest}))
            yield item
