"""Checked exercises: a grader that tells a reader whether their kernel is
right, and on a GPU how fast and how frugal it is.

    python -m kernels.exercises list
    python -m kernels.exercises check TASK [FILE]     # FILE: the reader's copy of the starter
    python -m kernels.exercises board                 # best time and energy per task, this GPU

Each task (kernels/exercise_tasks.py) names the function the reader's file defines and how to
call it. The check runs it at adversarial sizes (1 element, odd sizes, one
past a block or a tile, large ones on a GPU) against a float64 reference,
with the output poisoned with NaN first and the call made twice (a race
shows as two different answers), and says which size failed, the first
wrong index, and the expected and actual values. Without a GPU the Numba
tasks run in Numba's CUDA simulator (small sizes), which also catches reads
and writes past the end of an array; CUDA C tasks need a GPU. On a GPU the
check then times the reader's kernel and its energy per useful byte or
FLOP (NVML, >= 2 s) beside the chapter's own kernel and the vendor's, as
`make bench` measures, and appends the result to a local leaderboard
(.exercises/<gpu>.json, which git ignores).

Starters: examples/exercises/<task>.py; reference solutions:
examples/exercises/solutions/<task>.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.util
import json
import math
import sys
import traceback
from pathlib import Path
from typing import Callable

import numpy as np

from .device import device_info, has_gpu, select_numba_target

select_numba_target()  # before anything imports numba

ROOT = Path(__file__).resolve().parent.parent
STARTERS = ROOT / "examples" / "exercises"
SOLUTIONS = STARTERS / "solutions"
BOARD = ROOT / ".exercises"


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    chapter: str                      # the page whose exercises state it (docs/<chapter>.md)
    kind: str                         # "numba" (simulator or GPU) or "cuda" (CUDA C through CuPy: GPU only)
    entry: str                        # the function the reader's file defines
    inputs: Callable                  # (size, rng) -> dict of host arrays, in the order entry takes them
    out_shape: Callable               # size -> shape of the float32 output
    reference: Callable               # host inputs -> float64 result
    sizes_cpu: tuple                  # the simulator's sizes (small: it runs a thread at a time)
    sizes_gpu: tuple
    bench_size: object                # the size timed on a GPU
    work: Callable                    # size -> ("bytes" or "flop", count): the useful work, for rates and energy
    rtol: float = 1e-6                # |out - ref| <= rtol * max(|ref|, scale): float32 arithmetic
    scale: Callable | None = None     # inputs -> the magnitude errors are measured against (default |ref|)
    chapter_kernel: Callable | None = None  # the handbook's kernel for this job: (*device inputs, out)
    vendor: Callable | None = None          # the library's way: (*device inputs, out)
    vendor_name: str = ""
    deterministic: bool = True        # False: two runs may differ in rounding (atomics), not beyond rtol
    goal: tuple | None = None         # (reference label, ratio): on a GPU, at least this share of its speed
    hint: str = ""                    # one line the grader adds to a failure


def tasks() -> dict:
    """{name: Task}: every task (kernels/exercise_tasks.py), by name."""
    from . import exercise_tasks

    return exercise_tasks.TASKS


# ---------------------------------------------------------------- checking --

class Failure(Exception):
    """The reader's kernel gave a wrong answer (the message says where)."""


@dataclasses.dataclass
class Report:
    task: str
    ok: bool
    lines: list

    def __str__(self):
        return "\n".join(self.lines)


def load(path: Path):
    """The reader's file as a module (its own name, so that Numba caches apart)."""
    path = Path(path).resolve()
    name = f"exercise_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


CANARY = 64  # elements after every input and the output: NaN after a float input, so that a read past
             # its end turns the answer to NaN; OUT_CANARY after the output, so that any write past its end
             # shows, a NaN computed from the inputs' NaN canaries too (a GPU does not check indices; the
             # simulator does)
OUT_CANARY = np.float32(-1.2345e38)  # a value no task writes


def _padded(values: np.ndarray, fill: float, lib):
    """A device copy of `values` followed by CANARY elements of `fill`,
    and the view of its first values.size elements in values' shape."""
    flat = np.concatenate([values.ravel(), np.full(CANARY, fill, dtype=values.dtype)])
    dev = lib(flat)
    return dev, dev[:values.size].reshape(values.shape)


def _canary(dtype):
    """NaN after a float array; 0 after an integer one (a valid index: a read past the end of an index
    array then loads element 0 of the array it indexes instead of faulting, and the NaN after that
    array's own values still marks the answer)."""
    return np.nan if np.issubdtype(dtype, np.floating) else 0


def _device(task: Task, host: dict, shape):
    """Device inputs, each followed by its canaries, and a NaN-poisoned
    output followed by OUT_CANARY: ([input views], output view, output
    with its canaries)."""
    if task.kind == "cuda":
        import cupy as cp

        lib = cp.asarray
    else:
        from numba import cuda

        lib = cuda.to_device
    views = [_padded(v, _canary(v.dtype), lib)[1] for v in host.values()]
    whole, out = _padded(np.full(shape, np.nan, dtype=np.float32), OUT_CANARY, lib)
    return views, out, whole


def _host(x):
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def _size_text(size) -> str:
    return "x".join(map(str, size)) if isinstance(size, tuple) else str(size)


def compare(got: np.ndarray, want: np.ndarray, rtol: float, scale=None) -> str | None:
    """None when got matches want; else what is wrong, at the first wrong index."""
    got64 = got.astype(np.float64)
    tol = rtol * np.maximum(np.abs(want), 0 if scale is None else np.abs(scale))
    bad = ~(np.abs(got64 - want) <= tol)  # NaN compares False: an unwritten element is bad
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = f"out[{', '.join(map(str, idx))}]"
    g, w = got[idx], want[idx]
    count = int(bad.sum())
    if math.isnan(g):
        why = ("NaN: never written (the output was poisoned with NaN first), or computed from a read past the "
               "end of an input (NaN follows every input)")
    else:
        why = "a wrong value"
    return f"{where} = {float(g)!r}, expected {float(w)!r} ({why}; {count} of {got.size} elements wrong)"


def check_size(task: Task, fn: Callable, size, rng) -> None:
    """One size: two calls, each into a fresh NaN-poisoned output; raises
    Failure with a message naming the size."""
    host = task.inputs(size, rng)
    want = task.reference(*host.values())
    scale = task.scale(*host.values()) if task.scale else None
    results = []
    for run in range(2):
        args, out, whole = _device(task, host, task.out_shape(size))
        try:
            fn(*args, out)
            if task.kind == "cuda":
                import cupy as cp

                cp.cuda.Device().synchronize()
        except IndexError as exc:  # the simulator checks every index
            raise Failure(f"size {_size_text(size)}: reads or writes past the end of an array "
                          f"(Numba's simulator: {exc})") from None
        except Failure:
            raise
        except Exception as exc:
            raise Failure(f"size {_size_text(size)}: the call raised {type(exc).__name__}: {exc}") from None
        everything = _host(whole.copy_to_host() if hasattr(whole, "copy_to_host") else whole)
        got = everything[:-CANARY].reshape(want.shape)
        past = np.flatnonzero(everything[-CANARY:] != OUT_CANARY)  # NaN != anything: a NaN written shows
        if past.size:
            raise Failure(f"size {_size_text(size)}: wrote past the end of the output (element "
                          f"{got.size + int(past[0])} of an output of {got.size}): a missing bounds guard?")
        wrong = compare(got, want, task.rtol, scale)
        if wrong:
            raise Failure(f"size {_size_text(size)}, run {run + 1}: {wrong}"
                          + (f". Hint: {task.hint}" if task.hint else ""))
        results.append(got)
    if not task.deterministic:
        return
    if not np.array_equal(results[0], results[1], equal_nan=True):
        i = tuple(int(j) for j in np.argwhere(results[0] != results[1])[0])
        raise Failure(f"size {_size_text(size)}: two runs gave different answers at {i} "
                      f"({results[0][i]!r}, then {results[1][i]!r}): a race (threads read what others "
                      f"have not yet written; a missing barrier?)")


def check(name: str, path: Path | None = None, time: bool | None = None, sizes=None) -> Report:
    """Check the reader's file (default: the starter) for task `name`."""
    task = tasks()[name]
    path = Path(path) if path else STARTERS / f"{name}.py"
    gpu = has_gpu()
    lines = [f"task {name} ({task.chapter}), file {path}"]
    if task.kind == "cuda" and not gpu:
        lines.append("not checked: a CUDA C task needs a GPU (Numba's simulator runs only Numba kernels)")
        return Report(name, False, lines)
    try:
        fn = getattr(load(path), task.entry)
    except Exception as exc:
        lines.append(f"FAILED: the file does not load or has no {task.entry}(): "
                     f"{''.join(traceback.format_exception_only(exc)).strip()}")
        return Report(name, False, lines)
    rng = np.random.default_rng(12345)
    sizes = sizes or (task.sizes_gpu if gpu else task.sizes_cpu)
    for size in sizes:
        try:
            check_size(task, fn, size, rng)
        except Failure as exc:
            lines.append(f"FAILED: {exc}")
            return Report(name, False, lines)
    where = "on the GPU" if gpu else "in Numba's CUDA simulator (small sizes; run it on a GPU for the large ones)"
    lines.append(f"correct at every size {where}: "
                 + ", ".join(_size_text(s) for s in sizes))
    if task.goal and not gpu:
        lines.append(f"speed goal (at least {task.goal[1]} of {task.goal[0]}'s speed): checked on a GPU")
    if gpu and (time if time is not None else True):
        more, met = measure(task, fn, path)
        return Report(name, met, lines + more)
    return Report(name, True, lines)


# ---------------------------------------------------------------- on a GPU --

def measure(task: Task, fn: Callable, path: Path) -> tuple[list[str], bool]:
    """Time and energy per useful unit of the reader's kernel beside the
    chapter's and the vendor's, at the task's bench size (harness.time_gpu
    in >= 20 ms batches; NVML energy over >= 2 s), and the leaderboard entry."""
    import cupy as cp

    from . import harness

    size = task.bench_size
    host = task.inputs(size, np.random.default_rng(7))
    shape = task.out_shape(size)
    unit, amount = task.work(size)
    cupy_in = [cp.asarray(v) for v in host.values()]
    cupy_out = cp.empty(shape, dtype=cp.float32)
    if task.kind == "cuda":
        mine = (lambda: fn(*cupy_in, cupy_out))
    else:
        from numba import cuda

        nb_in = [cuda.as_cuda_array(v) for v in cupy_in]
        nb_out = cuda.as_cuda_array(cupy_out)
        mine = (lambda: fn(*nb_in, nb_out))
    runs = {"yours": mine}
    if task.chapter_kernel:
        runs["chapter"] = lambda: task.chapter_kernel(*cupy_in, cupy_out)
    if task.vendor:
        runs[task.vendor_name] = lambda: task.vendor(*cupy_in, cupy_out)
    rows = {}
    for label, f in runs.items():
        t = harness.time_gpu(f, warmup=2, samples=15, min_sample_ms=20.0, max_seconds=2.0)
        e = harness.measure_energy(f, min_seconds=2.0)
        rate = amount / (t["ms"] * 1e-3) / 1e9
        rows[label] = {"ms": t["ms"], "rate": rate, "energy_per_unit": e["j_per_call"] / amount}
    name = {"bytes": ("GB/s", "pJ/B", 1e12), "flop": ("GFLOP/s", "pJ/FLOP", 1e12)}[unit]
    lines = [f"on {gpu_name()}, size {_size_text(size)}:"]
    for label, r in rows.items():
        lines.append(f"  {label:28s} {r['ms']:9.4f} ms  {r['rate']:9.1f} {name[0]}  "
                     f"{r['energy_per_unit'] * name[2]:8.2f} {name[1]}")
    mine_row = rows["yours"]
    for label in rows:
        if label != "yours":
            lines.append(f"  yours / {label}: {rows[label]['ms'] / mine_row['ms']:.3f} x the speed, "
                         f"{mine_row['energy_per_unit'] / rows[label]['energy_per_unit']:.3f} x the energy")
    record(task, path, size, mine_row, {k: v for k, v in rows.items() if k != "yours"})
    met = True
    if task.goal:
        label, want = task.goal
        got = rows[label]["ms"] / mine_row["ms"]
        met = got >= want
        lines.append(f"FAILED: correct, but {got:.2f} of {label}'s speed; the goal is {want}"
                     + (f". Hint: {task.hint}" if task.hint else "") if not met else
                     f"goal met: {got:.2f} of {label}'s speed (at least {want})")
    return lines, met


def gpu_name() -> str:
    """The current GPU's name (kernels.device.device_info, asked once per process)."""
    import cupy as cp

    return device_info(cp.cuda.Device().id)["name"]


def record(task: Task, path: Path, size, mine: dict, others: dict, board: Path | None = None) -> Path:
    """Append one graded run to the leaderboard of this GPU."""
    gpu = gpu_name()
    target = (board or BOARD) / f"{gpu.lower().replace(' ', '-')}.json"  # named as the results files are
    target.parent.mkdir(parents=True, exist_ok=True)
    entries = json.loads(target.read_text()) if target.is_file() else []
    entries.append({"task": task.name, "file": str(path), "sha": hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12],
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "gpu": gpu, "size": _size_text(size), **{k: mine[k] for k in ("ms", "rate", "energy_per_unit")},
                    "vs": {k: {"speed": v["ms"] / mine["ms"], "energy": mine["energy_per_unit"] / v["energy_per_unit"]}
                           for k, v in others.items()}})
    target.write_text(json.dumps(entries, indent=1) + "\n")
    return target


def board_lines(board: Path | None = None) -> list[str]:
    """Per GPU and task: the best time and the best energy recorded."""
    lines = []
    for f in sorted((board or BOARD).glob("*.json")):
        entries = json.loads(f.read_text())
        lines.append(f"{f.stem}:")
        for name in sorted({e["task"] for e in entries}):
            mine = [e for e in entries if e["task"] == name]
            fast = min(mine, key=lambda e: e["ms"])
            frugal = min(mine, key=lambda e: e["energy_per_unit"])
            lines.append(f"  {name:26s} best time {fast['ms']:.4f} ms ({fast['file']}, {fast['date'][:10]}); "
                         f"best energy {frugal['energy_per_unit'] * 1e12:.2f} pJ/unit ({frugal['file']})")
    return lines or ["no graded run yet: `python -m kernels.exercises check TASK FILE` on a GPU adds one"]


# ---------------------------------------------------------------- command --

def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args[0] == "list":
        for t in tasks().values():
            print(f"{t.name:26s} {t.chapter:20s} {'CUDA C (GPU)' if t.kind == 'cuda' else 'Numba'}  "
                  f"examples/exercises/{t.name}.py")
        return 0
    if args[0] == "board":
        print("\n".join(board_lines()))
        return 0
    if args[0] == "check" and len(args) in (2, 3):
        if args[1] not in tasks():
            print(f"unknown task {args[1]!r}; `python -m kernels.exercises list` names them")
            return 2
        report = check(args[1], Path(args[2]) if len(args) == 3 else None)
        print(report)
        return 0 if report.ok else 1
    print(__doc__)
    return 2


if __name__ == "__main__":  # through the package's module, which exercise_tasks imports too
    from kernels import exercises

    sys.exit(exercises.main())
