"""A chapter's tests beside the chapter: what each tests/test_<topic>.py
declares for the proofs that every chapter shares, found by scanning (as
kernels/bench finds the bench topics), so that adding a chapter edits no
shared test file (tests/test_topics.py proves it).

    EXAMPLE_FAULTS    [(file in the copy, old, new, impl)]: wrong results
                      planted in a copy of examples/<topic>.py, which must
                      then exit non-zero (tests/test_examples.py) and fail
                      its notebook (tests/test_notebooks.py)
    MUTANT_OVERRIDES  {"file:section:function": (old, new, why)}: a page's
                      planted fault given by hand (tests/mutants.py); one
                      that no page uses fails (tests/test_page_code.py)
    overlap_cases()   -> [tests.overlap.Case]: wrappers that must refuse an
                      output overlapping an input (tests/test_overlap.py)
    OVERLAP_EXEMPT    {function: why}: wrappers taking an output that need
                      no overlap case

Each is optional. A name declared twice (two modules, one override key or
one overlap case id) is an error.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

TESTS = Path(__file__).resolve().parent


DECLARED = ("EXAMPLE_FAULTS", "MUTANT_OVERRIDES", "def overlap_cases", "OVERLAP_EXEMPT")


@functools.cache
def modules() -> tuple:
    """The tests/test_*.py modules that declare any of the above (found by
    their text: the others, such as the site's tests, are not imported),
    imported under the name pytest gives them (tests.test_<topic>), so a test
    run imports each once."""
    return tuple(importlib.import_module(f"{__package__}.{p.stem}") for p in sorted(TESTS.glob("test_*.py"))
                 if any(d in p.read_text() for d in DECLARED))


def _topic(module) -> str:
    return module.__name__.rsplit(".", 1)[-1].removeprefix("test_")


@functools.cache
def example_faults() -> dict[str, list[tuple[str, str, str, str]]]:
    """examples/<topic>.py name -> its planted faults."""
    return {f"{_topic(m)}.py": list(m.EXAMPLE_FAULTS) for m in modules() if hasattr(m, "EXAMPLE_FAULTS")}


@functools.cache
def mutant_overrides() -> dict[str, tuple[str, str, str]]:
    out: dict[str, tuple[str, str, str]] = {}
    for m in modules():
        for key, value in getattr(m, "MUTANT_OVERRIDES", {}).items():
            if key in out:
                raise ValueError(f"{key}: two mutant overrides ({m.__name__} and another)")
            out[key] = value
    return out


@functools.cache
def overlap_cases() -> list:
    out, seen = [], set()
    for m in modules():
        for case in (m.overlap_cases() if hasattr(m, "overlap_cases") else []):
            if case.id in seen:
                raise ValueError(f"overlap case {case.id} declared twice ({m.__name__} and another)")
            seen.add(case.id)
            out.append(case)
    return out


@functools.cache
def overlap_exempt() -> dict[str, str]:
    out: dict[str, str] = {}
    for m in modules():
        out.update(getattr(m, "OVERLAP_EXEMPT", {}))
    return out
