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

import contextlib
import functools
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


def touched_blocks(page_text: str, mut: dict, gpu: bool) -> list[tuple]:
    """(pristine, as run) for each block of the chosen kind that one mutant
    touches: those that hold a python mutant's section (run with the fault
    in them), or that load a CUDA C mutant's file (run as they are: the
    fault is in the file)."""
    base = python_blocks(page_text, gpu)
    if mut["lang"] == "python":
        after = python_blocks(page_text, gpu, replace=(mut["target"], mut["text"]))
        return [(a, b) for a, b in zip(base, after) if a.code != b.code]
    name = Path(mut["target"].split(":")[0]).name
    return [(b, b) for b in base if name in b.code]


def run_mutant(page_text: str, mut: dict, gpu: bool, root: Path = Path("."), watchdog=None) -> dict:
    """Run the blocks one mutant touches, until the answer is known (a python
    mutant survives when one block that holds it passes; a CUDA C one is
    caught when one block that loads its file fails); {"id", "what",
    "failed", "blocks" (those run), "error"}. watchdog(lineno), when given,
    is called as each block starts."""
    run = [b for _, b in touched_blocks(page_text, mut, gpu)]
    restore = None
    need_all = mut["lang"] == "python"  # every block holding a python function must fail; for CUDA C,
    if not need_all:                    # some block that loads the file
        file = root / mut["target"].split(":")[0]
        restore = file.read_text()
        file.write_text(mut["text"])
    failures, errors, crashed, ran = 0, [], False, 0
    try:
        for b in run:
            ran += 1
            if watchdog is not None:
                watchdog(b.lineno)  # a new block: its own time limit
            try:
                run_block(b.code)
            except Exception as e:  # noqa: BLE001 (any failure of the block counts)
                failures += 1
                errors.append(f"line {b.lineno}: {type(e).__name__}: {str(e)[:200]}")
            if not context_ok():
                crashed = True  # the fault broke the CUDA context: the block failed
                break
            if need_all and failures < ran:
                break  # a block held the fault and passed: the fault survived, whatever the rest do
            if not need_all and failures:
                break  # a block that loads the file failed: the fault is caught
    finally:
        if restore is not None:
            file.write_text(restore)
    failed = bool(run) and (crashed or (failures == ran == len(run) if need_all else failures > 0))
    return {"id": mut["id"], "what": mut["what"], "failed": failed,
            "blocks": [b.lineno for b in run[:ran]], "error": errors[:2]}


# A planted fault can deadlock a kernel (a barrier arrival removed: its
# waiters spin forever). A block that runs longer than this has hung: the
# block did not finish, so the fault was caught; the process reports it,
# puts the file back and exits (the CUDA context goes with it), and the
# parent starts a new process for the mutants left. The limit is per block,
# and the clock stops while CuPy compiles (a mutated attention.cu takes
# NVRTC 45 s alone, minutes under a loaded `make check`: slow, not hung). On
# the H200 machine the slowest page block runs about 25 s under a whole
# `make check`, so a block past 120 s of running is hung. Blocks in the
# simulator get far longer (a Python thread per GPU thread).
HUNG_SECONDS = {"gpu": float(os.environ.get("HANDBOOK_MUTANT_SECONDS", "120")), "cpu": 900.0}


class Watchdog:
    """Ends the process when one block of a mutant runs past `seconds`."""

    def __init__(self, mut: dict, root: Path, seconds: float):
        self.mut, self.seconds, self.timer, self.lineno = mut, seconds, None, 0
        self.file = root / mut["target"].split(":")[0] if mut["lang"] != "python" else None
        self.original = self.file.read_text() if self.file is not None else None

    def __call__(self, lineno: int) -> None:
        import threading

        self.cancel()
        self.lineno = lineno
        self.timer = threading.Timer(self.seconds, self._hung, (lineno,))
        self.timer.daemon = True
        self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    @contextlib.contextmanager
    def stopped(self):
        """The clock stopped (a compile); the block gets its whole limit again after."""
        running = self.timer is not None
        self.cancel()
        try:
            yield
        finally:
            if running:
                self(self.lineno)

    def _hung(self, lineno: int) -> None:
        if self.file is not None:
            self.file.write_text(self.original)
        # straight to file descriptor 1: sys.stdout is run_block's StringIO while a block runs
        line = json.dumps({"id": self.mut["id"], "what": self.mut["what"], "failed": True, "blocks": [lineno],
                           "error": [f"hung: the block at line {lineno} did not finish in {self.seconds:.0f} s"],
                           "seconds": self.seconds})
        os.write(1, (line + "\n").encode())
        os._exit(4)


COMPILING = {"watchdog": None, "seconds": 0.0}


def stop_the_clock_while_compiling() -> None:
    """Wrap CuPy's compilers (NVRTC, nvcc) so that the watchdog of the
    current mutant does not count a compile, and add up their time."""
    import time

    try:
        from cupy.cuda import compiler
    except ImportError:
        return

    def wrap(f):
        @functools.wraps(f)
        def compiling(*args, **kwargs):
            w, start = COMPILING["watchdog"], time.perf_counter()
            with (w.stopped() if w is not None else contextlib.nullcontext()):
                try:
                    return f(*args, **kwargs)
                finally:
                    COMPILING["seconds"] += time.perf_counter() - start
        return compiling

    for name in ("compile_using_nvrtc", "compile_using_nvcc"):
        if callable(getattr(compiler, name, None)):
            setattr(compiler, name, wrap(getattr(compiler, name)))


def main(spec_path: str) -> int:
    import time

    spec = json.loads(Path(spec_path).read_text())
    page_text = (P.ROOT / spec["page"]).read_text()
    blocks = spec.get("blocks", "gpu")
    if blocks == "gpu":
        stop_the_clock_while_compiling()
    for mut in spec["mutants"]:
        watchdog = Watchdog(mut, Path.cwd(), HUNG_SECONDS[blocks])
        COMPILING.update(watchdog=watchdog, seconds=0.0)
        start = time.perf_counter()
        result = run_mutant(page_text, mut, blocks == "gpu", Path.cwd(), watchdog)
        watchdog.cancel()
        COMPILING["watchdog"] = None
        result["seconds"] = round(time.perf_counter() - start, 2)
        result["compile_seconds"] = round(COMPILING["seconds"], 2)
        print(json.dumps(result), flush=True)
        if not context_ok():
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
