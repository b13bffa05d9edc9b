"""make bench: measure topics on the GPU, write the results file and plots.

    python -m kernels.bench --topics matmul reduction   # those topics, on this GPU
    python -m kernels.bench --gpus 0,1                  # every topic, spread over two GPUs of one host

With --gpus, each GPU measures whole topics, one invocation per topic, the
longest first (by the time each took last, from its stamp); each topic's
references are measured in its own run, on its GPU. The topics are then
merged into the results file and the plots redrawn.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .. import has_gpu, results
from . import TOPICS, roofline


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.bench",
                                description="Measure on the GPU; write the results file and plots.")
    p.add_argument("--topics", nargs="*", default=sorted(TOPICS), choices=sorted(TOPICS))
    p.add_argument("--quick", action="store_true", help="fewer sizes and shorter loops (a smoke run)")
    p.add_argument("--out", default=None, help="results file (default docs/assets/results/<gpu>.json)")
    p.add_argument("--gpus", default=None,
                   help="comma-separated device numbers (e.g. 0,1): measure the topics in parallel, "
                        "whole topics per GPU, and merge them")
    p.add_argument("--restamp", metavar="REASON",
                   help="measure nothing: record today's code stamp for --topics (with --plots-only's "
                        "GPU_SLUG), for a refactor that changed no measured code; the stamp keeps the "
                        "reason and the definitions that changed")
    p.add_argument("--plots-only", metavar="GPU_SLUG",
                   help="measure nothing: redraw the plots of --topics from the committed results file "
                        "of that GPU (e.g. nvidia-h200); works without a GPU")
    args = p.parse_args(argv)
    if args.restamp:
        if not args.plots_only:
            p.error("--restamp needs the results file's GPU: --plots-only GPU_SLUG")
        path = results.results_path(args.plots_only) if args.out is None else Path(args.out)
        data = results.load(path)
        for name in args.topics:
            changed = results.restamp(data, name, results.topic_sources(TOPICS[name].__file__), args.restamp)
            print(f"[bench] restamped {name}: {', '.join(changed) or 'nothing changed'}")
        results.save(path, data)
        return 0
    if args.plots_only:
        path = results.results_path(args.plots_only) if args.out is None else Path(args.out)
        data = results.load(path)
        for name in args.topics:
            if name in data.get("topics", {}):
                for plot in TOPICS[name].plot(data, path.parent):
                    print(f"[bench] redrew {plot}")
        for plot in roofline.plot(data, path.parent):
            print(f"[bench] redrew {plot}")
        return 0
    if not has_gpu():
        print("make bench needs a CUDA GPU and found none (the CUDA driver reports no device). "
              "Run it on a GPU machine; `make test` works without one.", file=sys.stderr)
        return 2
    if args.gpus:
        return _parallel(args)
    from .. import harness

    env = harness.env_stamp()
    env["idle_power_w"] = round(harness.idle_power_w(), 1)
    path = results.results_path(env["gpu_slug"]) if args.out is None else Path(args.out)
    data = results.load(path)
    records, per_topic = [], {}
    for name in args.topics:
        t0 = time.perf_counter()
        recs = TOPICS[name].measure(quick=args.quick)
        seconds = time.perf_counter() - t0
        print(f"[bench] {name}: {len(recs)} records in {seconds:.1f} s", flush=True)
        records += recs
        per_topic[name] = {"sources": results.topic_sources(TOPICS[name].__file__), "seconds": round(seconds, 1)}
    data = results.merge(data, env, records, per_topic)
    results.save(path, data)
    plots = []
    for name in args.topics:
        plots += TOPICS[name].plot(data, path.parent)
    plots += roofline.plot(data, path.parent)  # every topic's kernels, from the whole file
    print(f"[bench] wrote {path} and {len(plots)} plot(s)")
    for name in args.topics:
        for line in TOPICS[name].summary(data):
            print(line)
    return 0


def schedule(topics: list[str], data: dict) -> list[str]:
    """Longest first, by the seconds each topic took in its last run (its
    stamp), else by how many records it has: the GPUs then finish together."""
    def weight(t):
        env = data.get("topics", {}).get(t, {}).get("env", {})
        return env.get("seconds") or sum(r["topic"] == t for r in data.get("records", []))
    return sorted(topics, key=weight, reverse=True)


def _parallel(args) -> int:
    """One worker per GPU takes the next topic from a queue and measures it
    in a process of its own (CUDA_VISIBLE_DEVICES), writing a file of its
    own; the topics are merged into the results file at the end."""
    from .. import harness

    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    slug = harness.env_stamp()["gpu_slug"]
    path = results.results_path(slug) if args.out is None else Path(args.out)
    base = results.load(path)
    todo: queue.Queue = queue.Queue()
    for t in schedule(list(args.topics), base):
        todo.put(t)
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    done: dict[str, Path] = {}
    failed: list[str] = []
    lock = threading.Lock()

    def worker(gpu: str) -> None:
        out = work / f"gpu{gpu}" / path.name
        out.parent.mkdir(parents=True)
        out.write_text(json.dumps(base))
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
        while True:
            try:
                t = todo.get_nowait()
            except queue.Empty:
                return
            cmd = [sys.executable, "-m", "kernels.bench", "--topics", t, "--out", str(out)]
            if args.quick:
                cmd.append("--quick")
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[bench] " + t)]
            print(f"[bench] GPU {gpu}: " + (lines[0][8:] if lines else t), flush=True)
            with lock:
                if proc.returncode == 0:
                    done[t] = out
                else:
                    failed.append(t)
                    print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)

    threads = [threading.Thread(target=worker, args=(g,)) for g in gpus]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    data = base
    for t, out in done.items():
        data = results.take_topics(data, results.load(out), [t])
    if done:
        results.save(path, data)
        plots = [p for t in done for p in TOPICS[t].plot(data, path.parent)] + roofline.plot(data, path.parent)
        print(f"[bench] wrote {path} ({len(done)} topics from {len(gpus)} GPUs) and {len(plots)} plot(s)")
    shutil.rmtree(work, ignore_errors=True)
    if failed:
        print(f"[bench] failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
