"""pyflakes over the library, the examples, the tests and the site's hooks
(the pages' blocks have their own check in tests/test_page_code.py).

Every message fails but these, which are how this code is written on purpose:

- an import repeated further down (an example's notebook cells and page
  sections, and the library's copies of them, each import what they use);
- an import marked `# noqa` (a re-export, or an import for its side effect);
- a name that the same scope later deletes with `del`, used in a closure
  (pyflakes reports it as undefined; the benches free GPU memory so).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([*(ROOT / "kernels").rglob("*.py"), *(ROOT / "examples").rglob("*.py"), *(ROOT / "tests").glob("*.py"),
                *(ROOT / "docs" / "hooks").glob("*.py"), ROOT / "conftest.py"])


def flakes(text: str, name: str) -> list:
    from pyflakes import api
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self):
            super().__init__(io.StringIO(), io.StringIO())
            self.found = []

        def flake(self, message):
            self.found.append(message)

        def syntaxError(self, filename, msg, lineno, offset, text):
            self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

    rep = Collect()
    api.check(text, name, rep)
    return rep.found


def allowed(message, lines: list[str], text: str) -> bool:
    from pyflakes import messages as m

    line = lines[message.lineno - 1] if 0 < message.lineno <= len(lines) else ""
    if isinstance(message, m.RedefinedWhileUnused):
        return line.lstrip().startswith(("import ", "from "))
    if isinstance(message, m.UnusedImport):
        return "# noqa" in line
    if isinstance(message, m.UndefinedName):
        return re.search(rf"^\s*del\b.*\b{re.escape(message.message_args[0])}\b", text, re.M) is not None
    return False


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_pyflakes_finds_nothing(path):
    text = path.read_text()
    lines = text.splitlines()
    found = [str(f) if isinstance(f, str) else f"{path.relative_to(ROOT)}:{f.lineno}: {f.message % f.message_args}"
             for f in flakes(text, str(path)) if isinstance(f, str) or not allowed(f, lines, text)]
    assert not found, "\n".join(found)


def test_the_check_sees_a_function_defined_twice():
    """What it would have caught: a bench module defining rel_err_bound twice."""
    text = "def rel_err_bound(r):\n    return 1\n\n\ndef rel_err_bound(r):\n    return 2\n"
    found = [f for f in flakes(text, "x.py") if not allowed(f, text.splitlines(), text)]
    assert len(found) == 1 and "redefinition" in str(found[0].message)
