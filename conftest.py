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
- On a GPU, a whole `make test` or `make check` writes the GPU test record
  (tests/record.py), which the pages show.
- Tests that build the site share one worker under pytest-xdist
  (`--dist loadgroup`, group "site"), so the site is built once.
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


def pytest_configure(config):
    """HANDBOOK_TIMES: this process (the controller under xdist) writes the
    tests' times; the workers and any pytest a test starts do not."""
    import os

    if os.environ.get("HANDBOOK_TIMES") and not hasattr(config, "workerinput"):
        os.environ.setdefault("HANDBOOK_TIMES_OWNER", str(os.getpid()))


# The slow proofs that take minutes each start first, so that under xdist
# they run beside the many short tests rather than after them.
LONG_FIRST = ("test_planted_faults_fail_the_gpu_blocks", "test_planted_faults_fail_the_cpu_blocks",
              "test_compiles_for_every_architecture_a_reader_may_have", "test_example_exits_nonzero_on_a_planted_fault")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = getattr(item, "originalname", None) or item.name
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
    for item in items:
        if "built_site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("site"))
    if has_gpu():
        return
    skip = pytest.mark.skip(reason=NEEDS_GPU)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# ------------------------------------------------------ the GPU test record --
SUITES = {"test": "not slow", "check": ""}  # HANDBOOK_SUITE (the Makefile) -> the -m it runs with
_outcomes: dict[str, tuple[str, str]] = {}


def pytest_runtest_logreport(report):
    """Each test's outcome (under xdist the workers' reports reach the controller);
    with HANDBOOK_TIMES=path, each test's time and outcome appended to that
    file as it ends (to see where a run's minutes go, even one cut short)."""
    import os

    log = os.environ.get("HANDBOOK_TIMES")
    if (log and os.environ.get("HANDBOOK_TIMES_OWNER") == str(os.getpid())
            and (report.when == "call" or report.failed or report.skipped)):
        with open(log, "a") as f:
            f.write(f"{report.duration:8.2f} {report.when:8} {report.outcome:7} {report.nodeid}\n")
    prev = _outcomes.get(report.nodeid, ("passed", ""))
    if report.failed:
        _outcomes[report.nodeid] = ("failed", "")
    elif report.skipped and prev[0] != "failed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _outcomes[report.nodeid] = ("skipped", reason.removeprefix("Skipped: "))
    elif report.when == "call" and report.passed and prev[0] == "passed":
        _outcomes[report.nodeid] = ("passed", "")


def _whole_suite(config) -> str | None:
    """The suite this run is, when it is a whole one: HANDBOOK_SUITE, its
    marker expression, no -k, no test named, every test path."""
    import os

    suite = os.environ.get("HANDBOOK_SUITE")
    if suite not in SUITES or (config.option.markexpr or "") != SUITES[suite] or config.option.keyword:
        return None
    if config.args and sorted(config.args) != sorted(config.getini("testpaths")):
        return None
    return suite


def pytest_sessionfinish(session, exitstatus):
    import os

    if hasattr(session.config, "workerinput") or not has_gpu() or os.environ.get("HANDBOOK_FORCE_CPU") == "1":
        return
    suite = _whole_suite(session.config)
    if suite is None or session.shouldstop or exitstatus not in (0, 1) or not _outcomes:
        return
    from kernels.harness import env_stamp
    from tests import record

    env = env_stamp()
    run = record.make_run(env, suite, list(session.config.invocation_params.args), _outcomes)
    path = record.save(env["gpu_slug"], run)
    t = run["totals"]
    print(f"\nGPU test record: {path.relative_to(record.ROOT)} ({suite}: {t['passed']} passed, "
          f"{t['failed']} failed, {t['skipped']} skipped)")


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
