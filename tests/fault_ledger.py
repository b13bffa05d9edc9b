"""The planted faults already proven on a GPU, so `make check` there proves only what changed.

A page's GPU planted-fault proof (tests/test_page_code.py) compiles a mutated
.cu file and runs the page's GPU blocks once per mutant: several hundred
mutants, hours of process time on one GPU. Its answer for one mutant
depends only on the code it runs: the page's GPU blocks that hold the
mutant (or load its .cu file), the CUDA C files those blocks load with
their #includes (mutant_inputs; comments and layout do not count, as in
the topics' freshness stamps) and the mutant's own text. So each answer is
kept, keyed by a hash of exactly that, in
docs/assets/results/test-runs/faults/<gpu>.json:

    {"schema": 1,
     "pages": {"docs/x.md": {KEY: {"id", "caught": bool, "seconds", "commit", "date", "error"}}}}

On the next run a mutant whose KEY is there as caught, on the same GPU, is
not run again: the test says how many it reused and from which commits, and
when it reuses every one, it is reported as skipped with that reason, never
as passed. A survivor is never reused: it runs again, and fails the test
again. Change a block, or a kernel it loads, and the keys of the mutants
that run that block change: those run again, the rest stand.
`HANDBOOK_FAULTS=all` ignores the ledger.

Answers are written one by one as each mutant finishes (under a file lock:
xdist workers share the file), so a run cut short keeps what it proved, and
the next run goes on with the rest. Nothing writes this file but a test run
on a GPU; commit it with the test record.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path

from tests import record

SCHEMA = 1
DIR = record.RECORD_DIR / "faults"


def path(gpu_slug: str) -> Path:
    return DIR / f"{gpu_slug}.json"


def mutant_key(inputs: dict[str, str], mutant_id: str, text: str) -> str:
    """What a mutant's answer depends on (mutant_inputs: the code of the
    blocks it runs and of the CUDA C files they load) and the mutant's text."""
    h = hashlib.sha256()
    h.update(json.dumps(inputs, sort_keys=True).encode())
    h.update(b"\0" + mutant_id.encode() + b"\0" + text.encode())
    return h.hexdigest()[:20]


def mutant_inputs(page_text: str, spec: dict) -> dict[str, str]:
    """{what: code hash} of everything the fault driver runs for one GPU
    mutant: the page's GPU blocks it touches (tests/fault_driver.touched_blocks,
    as they are without the fault) and the kernels/cuda files they load
    (tests/record.cuda_sources). A change anywhere else on the page leaves
    the answer standing."""
    from kernels import results
    from tests import fault_driver

    run = [a for a, _ in fault_driver.touched_blocks(page_text, spec, True)]
    out = {f"block {k}": results.code_hash("x.py", b.code) for k, b in enumerate(run)}
    out.update(record.cuda_sources(b.code for b in run))
    return out


def load(gpu_slug: str) -> dict:
    p = path(gpu_slug)
    return json.loads(p.read_text()) if p.is_file() else {"schema": SCHEMA, "pages": {}}


@contextlib.contextmanager
def _locked(gpu_slug: str):
    DIR.mkdir(parents=True, exist_ok=True)
    with open(DIR / f".{gpu_slug}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = load(gpu_slug)
            yield data
            tmp = path(gpu_slug).with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, path(gpu_slug))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def reusable(gpu_slug: str, page: str, keys: dict[str, str]) -> dict[str, dict]:
    """{mutant id: entry} for the mutants (id -> key) proven caught before
    with the same key. Empty with HANDBOOK_FAULTS=all."""
    if os.environ.get("HANDBOOK_FAULTS") == "all":
        return {}
    known = load(gpu_slug).get("pages", {}).get(page, {})
    return {mid: known[key] for mid, key in keys.items() if key in known and known[key].get("caught")}


def add(gpu_slug: str, page: str, key: str, entry: dict) -> None:
    with _locked(gpu_slug) as data:
        data["schema"] = SCHEMA
        data.setdefault("pages", {}).setdefault(page, {})[key] = entry


def keep_only(gpu_slug: str, page: str, keys: set[str]) -> None:
    """Drop the page's answers for code it no longer has."""
    with _locked(gpu_slug) as data:
        known = data.setdefault("pages", {}).get(page, {})
        data["pages"][page] = {k: v for k, v in known.items() if k in keys}
