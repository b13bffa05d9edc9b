"""The GPU test record: what `make test` / `make check` ran on a GPU, and how it went.

On a machine with a CUDA GPU, a whole run of either command (conftest.py:
HANDBOOK_SUITE set by the Makefile, no -k, no file or test named, not
stopped early) writes docs/assets/results/test-runs/<gpu>.json:

    {"schema": 1,
     "runs": {"test": RUN, "check": RUN}}      # the latest run of each command

    RUN = {"env": {...kernels.harness.env_stamp(): GPU, driver, CUDA and
                   library versions, date, commit...},
           "suite": "test" | "check", "pytest_args": [...],
           "totals": {"passed": n, "failed": n, "skipped": n},
           "files": {"tests/test_x.py" or "docs/x.md":
                     {"passed": n, "failed": n, "skipped": n, "skips": [reasons]}},
           "pages": {"docs/x.md": {"sources": {...page_sources...}}},
           "sources": {"kernels/x.py": hash, ...}}

Each chapter page shows its line of the newest run ("every code block on
this page ran on NVIDIA H200 at commit ..."), and the site build fails when
the page's code changed after that run, or when a block failed in it
(docs/hooks/results.py). The hashes are kernels.results.code_hash, as in
the topics' freshness stamps. Nothing writes this file but a test run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# The one skip outside the site tooling the record accepts: a test that reads the
# repository's history cannot on the GPU machine, whose copy of the tree lacks it.
NO_HISTORY = "not a git checkout (a copy of the tree without its history)"

from kernels import results
from tests import pages as P

ROOT = P.ROOT
RECORD_DIR = results.RESULTS_DIR / "test-runs"
SCHEMA = 1
CU_NAME = re.compile(r"\b(\w+\.cuh?)\b")


def record_path(gpu_slug: str) -> Path:
    return RECORD_DIR / f"{gpu_slug}.json"


def load(gpu_slug: str) -> dict:
    path = record_path(gpu_slug)
    return json.loads(path.read_text()) if path.is_file() else {"schema": SCHEMA, "runs": {}}


def page_sources(page: Path) -> dict[str, str]:
    """{what: code hash} of the code a page shows and runs: its code fences
    with their includes expanded (the Chinese page; its English twin holds
    the same blocks), and every kernels/cuda file that code names (a block
    that loads it runs it), with the files those #include. Comments,
    docstrings and layout do not count."""
    _, body = P.split_front_matter(page.read_text())
    fences = [(f.info, f.body) for f in P.fences(P.expand(body))]
    out = {}
    for k, (info, code) in enumerate(fences):
        lang = info.split()[0] if info else ""
        name = "x.py" if lang == "python" else "x.cu" if lang == "cuda" else "x.txt"
        try:
            out[f"block {k + 1} ({lang or 'text'})"] = results.code_hash(name, code)
        except SyntaxError:  # a fragment that is not a module on its own
            out[f"block {k + 1} ({lang or 'text'})"] = results.code_hash("x.txt", code)
    out.update(cuda_sources(code for _, code in fences))
    return out


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def cuda_sources(codes) -> dict[str, str]:
    """{"cuda/x.cu": code hash} of every kernels/cuda file the code names
    (a block that loads it runs it), and the files those #include."""
    out: dict[str, str] = {}
    todo = sorted({c for code in codes for c in CU_NAME.findall(code)}, reverse=True)
    while todo:
        cu = todo.pop()
        path = ROOT / "kernels" / "cuda" / cu
        if f"cuda/{cu}" in out or not path.is_file():
            continue
        text = path.read_text()
        out[f"cuda/{cu}"] = results.code_hash(cu, text)
        todo += [Path(inc).name for inc in INCLUDE.findall(text)]
    return dict(sorted(out.items()))


def code_pages() -> list[Path]:
    """The Chinese pages that have blocks pytest-codeblocks runs."""
    return [p for p in P.pages() if not p.name.endswith(".en.md")
            and any((f.info.split()[0] if f.info else "") in P.EXECUTED for f in P.fences(p.read_text()))]


def library_sources() -> dict[str, str]:
    """{file: code hash} of the library, the examples and the tests."""
    files = [*sorted((ROOT / "kernels").rglob("*.py")), *sorted((ROOT / "kernels" / "cuda").glob("*.cu*")),
             *sorted((ROOT / "examples").rglob("*")), *sorted((ROOT / "tests").glob("*.py")), ROOT / "conftest.py"]
    return {f.relative_to(ROOT).as_posix(): results.code_hash(f.name if f.suffix == ".py" else "x.cu", f.read_text())
            for f in files if f.is_file() and "__pycache__" not in f.parts}


def make_run(env: dict, suite: str, args: list[str], outcomes: dict[str, tuple[str, str]]) -> dict:
    """A RUN from the outcome of every test: nodeid -> (passed | failed |
    skipped, skip reason)."""
    files: dict[str, dict] = {}
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for nodeid, (outcome, reason) in sorted(outcomes.items()):
        f = files.setdefault(nodeid.split("::")[0], {"passed": 0, "failed": 0, "skipped": 0, "skips": []})
        f[outcome] += 1
        totals[outcome] += 1
        if outcome == "skipped" and reason not in f["skips"]:
            f["skips"].append(reason)
    return {"env": env, "suite": suite, "pytest_args": args, "totals": totals, "files": files,
            "pages": {p.relative_to(ROOT).as_posix(): {"sources": page_sources(p)} for p in code_pages()},
            "sources": library_sources()}


def save(gpu_slug: str, run: dict) -> Path:
    data = load(gpu_slug)
    data["schema"] = SCHEMA
    data.setdefault("runs", {})[run["suite"]] = run
    path = record_path(gpu_slug)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    return path


def latest(data: dict) -> dict | None:
    """The newest run of the record (by its date)."""
    runs = list(data.get("runs", {}).values())
    return max(runs, key=lambda r: r["env"]["date"]) if runs else None


def page_line(data: dict, page: Path, lang: str) -> str:
    """The line a page shows from the newest run. Raises ValueError when the
    page's code changed after it, a block of the page failed in it, or the
    run has no word of the page (the build fails on that)."""
    run = latest(data)
    rel = page.relative_to(ROOT).as_posix()
    if run is None or rel not in run["pages"] or rel not in run["files"]:
        raise ValueError(f"{rel}: no GPU test run covers this page: run `make test` on a GPU and commit "
                         "docs/assets/results/test-runs/")
    then, now = run["pages"][rel]["sources"], page_sources(page)
    changed = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
    if changed:
        raise ValueError(f"{rel}: its code changed after the GPU test run of {run['env']['commit'][:12]} "
                         f"({', '.join(changed[:6])}): run `make test` on a GPU and commit the record")
    counts = run["files"][rel]
    if counts["failed"]:
        raise ValueError(f"{rel}: {counts['failed']} code block(s) failed in the GPU test run of "
                         f"{run['env']['commit'][:12]}")
    env = run["env"]
    date, commit, cmd = env["date"][:10], env["commit"][:7], f"make {run['suite']}"
    if lang == "zh":
        text = (f"本页的每个代码块都在 {env['gpu']} 上运行过（`{cmd}`，提交 `{commit}`，{date}，"
                f"驱动 {env['driver']}，CuPy {env['cupy']}，Numba CUDA {env['numba_cuda']}）："
                f"{counts['passed']} 个通过，0 个失败，{counts['skipped']} 个跳过。")
        return f'!!! success "在 GPU 上运行过"\n    {text}\n'
    text = (f"Every code block on this page ran on {env['gpu']} (`{cmd}`, commit `{commit}`, {date}, "
            f"driver {env['driver']}, CuPy {env['cupy']}, Numba CUDA {env['numba_cuda']}): "
            f"{counts['passed']} passed, 0 failed, {counts['skipped']} skipped.")
    return f'!!! success "Ran on a GPU"\n    {text}\n'
