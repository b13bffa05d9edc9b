"""One text per kernel: the sections an example shares with the library.

An example must run when copied alone (with the .cu files its docstring
names) into an empty folder, so it carries its own copy of the code it
shows. The library holds the master copy:

- a section of `examples/X.py` whose name also marks a section in
  `kernels/X.py` (the topic's module: Numba kernels, …) is a copy of it;
- a section named like one in `kernels/standalone.py` (`pick_target`,
  `load_cuda`) is a copy of that.

    python -m tests.sync          # rewrite every example's copies from the masters
    python -m tests.sync --check  # list the copies that differ (exit 1 if any)

tests/test_examples.py runs the check. The CUDA C is never copied: the
example reads the .cu file itself (beside it, or in kernels/cuda/).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.pages import MARKER, ROOT

EXAMPLES = ROOT / "examples"
STANDALONE = ROOT / "kernels" / "standalone.py"


def sections(path: Path) -> dict[str, tuple[int, int, str]]:
    """name -> (first body line, end marker line, dedented body) of each section."""
    lines = path.read_text().splitlines()
    out, open_ = {}, {}
    for i, ln in enumerate(lines):
        m = MARKER.search(ln)
        if not m:
            continue
        if m.group("kind") == "start":
            open_[m.group("name")] = i + 1
        elif m.group("name") in open_:
            start = open_.pop(m.group("name"))
            out[m.group("name")] = (start, i, textwrap.dedent("\n".join(lines[start:i])))
    return out


def masters(example: Path) -> dict[str, Path]:
    """section name -> the library file holding its master copy: standalone.py,
    then kernels/<example name>, then the one other kernels/*.py module that
    has a section of that name (a topic split over modules, as host_transfer:
    its pipeline lives in kernels/transfer_pipeline.py)."""
    out = {}
    for lib in (STANDALONE, ROOT / "kernels" / example.name):
        if lib.is_file():
            for name in sections(lib):
                out.setdefault(name, lib)
    others: dict[str, list[Path]] = {}
    for lib in sorted((ROOT / "kernels").glob("*.py")):
        if lib not in (STANDALONE, ROOT / "kernels" / example.name):
            for name in sections(lib):
                others.setdefault(name, []).append(lib)
    for name in sections(example):
        if name not in out and len(others.get(name, [])) == 1:
            out[name] = others[name][0]
    return out


def drift() -> list[tuple[Path, str, Path]]:
    """(example, section, master file) for every copy that differs."""
    bad = []
    for ex in sorted(EXAMPLES.glob("*.py")):
        mine = sections(ex)
        for name, lib in masters(ex).items():
            if name in mine and mine[name][2] != sections(lib)[name][2]:
                bad.append((ex, name, lib))
    return bad


def shared() -> list[tuple[Path, str, Path]]:
    """(example, section, master file) for every shared section."""
    return [(ex, name, lib) for ex in sorted(EXAMPLES.glob("*.py"))
            for name, lib in masters(ex).items() if name in sections(ex)]


def write() -> None:
    for ex, name, lib in drift():
        lines = ex.read_text().splitlines()
        start, end, _ = sections(ex)[name]
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())] if start < end else ""
        body = [indent + ln if ln else ln for ln in sections(lib)[name][2].splitlines()]
        ex.write_text("\n".join(lines[:start] + body + lines[end:]) + "\n")
        print(f"{ex.relative_to(ROOT)}:{name} <- {lib.relative_to(ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        bad = drift()
        for ex, name, lib in bad:
            print(f"{ex.relative_to(ROOT)}:{name} differs from {lib.relative_to(ROOT)}")
        sys.exit(1 if bad else 0)
    write()
