"""Run a page's blocks against planted faults (for tests/test_page_code.py).

    python -m tests.fault_driver spec.json    # cwd: a copy of the tree

spec.json: {"page": "docs/X.md", "blocks": "gpu" or "cpu", "mutants": [{"id",
"what", "lang", "target", "text"}, ...]}. A python mutant replaces the
section's text on the page; every block of the chosen kind that holds it
must fail. A cuda mutant replaces the whole .cu file in the copy
(cwd/kernels/cuda/...), whose GPU blocks load it from there; one of the
blocks that load it must fail. Prints one JSON line per mutant: {"id",
"what", "failed", "blocks", "error"}. Stops early (exit 3) when a fault
leaves the CUDA context unusable; the test starts it again on the rest.

With "blocks": "cpu" it runs the page's CPU blocks in Numba's simulator
(the test sets it up; on a GPU machine Numba's faults are proven there
too, where a planted fault cannot break a CUDA context). Without a GPU the
test calls `run_mutant` in its own process.
"""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

from tests import pages as P
from tests.mutants import PlantedFault


def python_blocks(page_text: str, gpu: bool, replace=None) -> list:
    return [b for b in P.code_blocks(page_text, replace=replace) if b.syntax == "python" and P.is_gpu(b) == gpu]


def context_ok() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and "cupy" not in sys.modules:
        return True  # CPU blocks in the simulator: no CUDA context to break
    import cupy as cp

    try:
        cp.cuda.runtime.deviceSynchronize()
        cp.cuda.runtime.getLastError()
        return True
    except Exception:
        return False


def run_block(code: str) -> None:
    """As pytest-codeblocks runs a block (output discarded)."""
    with redirect_stdout(io.StringIO()):
        exec(code, {"__MODULE__": "__main__", "PlantedFault": PlantedFault})


def run_mutant(page_text: str, mut: dict, gpu: bool, root: Path = Path(".")) -> dict:
    """Run the blocks one mutant touches; {"id", "what", "failed", "blocks", "error"}."""
    base = python_blocks(page_text, gpu)
    restore = None
    if mut["lang"] == "python":
        after = python_blocks(page_text, gpu, replace=(mut["target"], mut["text"]))
        run = [b for a, b in zip(base, after) if a.code != b.code]
        need_all = True  # every block holding the function must fail
    else:
        file = root / mut["target"].split(":")[0]
        restore = file.read_text()
        file.write_text(mut["text"])
        run = [b for b in base if file.name in b.code]
        need_all = False  # some block that loads the file must fail
    failures, errors, crashed = 0, [], False
    try:
        for b in run:
            try:
                run_block(b.code)
            except Exception as e:  # noqa: BLE001 (any failure of the block counts)
                failures += 1
                errors.append(f"line {b.lineno}: {type(e).__name__}: {str(e)[:200]}")
            if not context_ok():
                crashed = True  # the fault broke the CUDA context: the block failed
                break
    finally:
        if restore is not None:
            file.write_text(restore)
    failed = bool(run) and (crashed or (failures == len(run) if need_all else failures > 0))
    return {"id": mut["id"], "what": mut["what"], "failed": failed,
            "blocks": [b.lineno for b in run], "error": errors[:2]}


# A planted fault can deadlock a kernel (a barrier arrival removed: its
# waiters spin forever). A mutant that runs longer than this has hung: the
# page's blocks did not finish, so the fault was caught; the process reports
# it, puts the file back and exits (the CUDA context goes with it), and the
# parent starts a new process for the mutants left.
HUNG_SECONDS = float(os.environ.get("HANDBOOK_MUTANT_SECONDS", "180"))


def _watchdog(mut: dict, root: Path):
    import threading

    file = root / mut["target"].split(":")[0] if mut["lang"] != "python" else None
    original = file.read_text() if file is not None else None

    def hung():
        if file is not None:
            file.write_text(original)
        # straight to file descriptor 1: sys.stdout is run_block's StringIO while a block runs
        line = json.dumps({"id": mut["id"], "what": mut["what"], "failed": True, "blocks": [],
                           "error": [f"hung: the blocks did not finish in {HUNG_SECONDS:.0f} s"]})
        os.write(1, (line + "\n").encode())
        os._exit(4)

    timer = threading.Timer(HUNG_SECONDS, hung)
    timer.daemon = True
    return timer


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    page_text = (P.ROOT / spec["page"]).read_text()
    gpu = spec.get("blocks", "gpu") == "gpu"
    for mut in spec["mutants"]:
        timer = _watchdog(mut, Path.cwd())
        timer.start()
        result = run_mutant(page_text, mut, gpu, Path.cwd())
        timer.cancel()
        print(json.dumps(result), flush=True)
        if not context_ok():
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
