"""Run a page's GPU blocks against planted faults (for tests/test_page_code.py).

    python -m tests.fault_driver spec.json    # cwd: a copy of the tree

spec.json: {"page": "docs/X.md", "blocks": "gpu" or "cpu", "mutants": [{"id", "what", "lang", "target",
"text"}, ...]}. A python mutant replaces the section's text on the page; a
cuda mutant replaces the whole .cu file in the copy (cwd/kernels/cuda/...),
whose GPU blocks load it from there. Prints one JSON line per mutant:
{"id", "what", "failed", "blocks", "error"}. Stops early (exit 3) when a
fault leaves the CUDA context unusable; the test starts it again on the rest.
With "blocks": "cpu" it runs the page's CPU blocks (the test sets the
simulator up: on a GPU machine, Numba's faults are proven in the simulator
too, where a planted fault cannot break a CUDA context).
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

from tests import pages as P
from tests.mutants import PlantedFault


def page_blocks(page_text: str, gpu: bool, replace=None) -> list:
    from pytest_codeblocks import extract_from_buffer

    text = P.expand(page_text, replace=replace)
    return [b for b in extract_from_buffer(io.StringIO(text))
            if b.syntax == "python" and any("gpu" in m for m in b.marks) == gpu]


def context_ok() -> bool:
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and os.environ.get("HANDBOOK_FORCE_CPU") == "1":
        return True  # the CPU blocks, in the simulator
    import cupy as cp

    try:
        cp.cuda.runtime.deviceSynchronize()
        cp.cuda.runtime.getLastError()
        return True
    except Exception:
        return False


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    page_text = (P.ROOT / spec["page"]).read_text()
    gpu = spec.get("blocks", "gpu") == "gpu"
    base = page_blocks(page_text, gpu)
    for mut in spec["mutants"]:
        if mut["lang"] == "python":
            after = page_blocks(page_text, gpu, replace=(mut["target"], mut["text"]))
            run = [b for a, b in zip(base, after) if a.code != b.code]
            need_all = True  # every block holding the function must fail
            restore = None
        else:
            file = Path.cwd() / mut["target"].split(":")[0]
            restore = file.read_text()
            file.write_text(mut["text"])
            run = [b for b in base if Path(file).name in b.code]
            need_all = False  # some block that loads the file must fail
        failures, errors, crashed = 0, [], False
        for b in run:
            try:
                with redirect_stdout(io.StringIO()):
                    exec(b.code, {"__MODULE__": "__main__", "PlantedFault": PlantedFault})
            except Exception as e:  # noqa: BLE001 (any failure of the block counts)
                failures += 1
                errors.append(f"line {b.lineno}: {type(e).__name__}: {str(e)[:200]}")
            if not context_ok():
                crashed = True  # the fault broke the CUDA context: the block failed
                break
        if restore is not None:
            file.write_text(restore)
        failed = bool(run) and (crashed or (failures == len(run) if need_all else failures > 0))
        print(json.dumps({"id": mut["id"], "what": mut["what"], "failed": failed,
                          "blocks": [b.lineno for b in run], "error": errors[:2]}), flush=True)
        if not context_ok():
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
