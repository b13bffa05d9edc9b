from __future__ import annotations

import argparse
import sys
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
    p.add_argument("--plots-only", metavar="GPU_SLUG",
                   help="measure nothing: redraw the plots of --topics from the committed results file "
                        "of that GPU (e.g. nvidia-h200); works without a GPU")
    args = p.parse_args(argv)
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
    from .. import harness

    env = harness.env_stamp()
    env["idle_power_w"] = round(harness.idle_power_w(), 1)
    path = results.results_path(env["gpu_slug"]) if args.out is None else Path(args.out)
    data = results.load(path)
    records = []
    for name in args.topics:
        t0 = time.perf_counter()
        recs = TOPICS[name].measure(quick=args.quick)
        print(f"[bench] {name}: {len(recs)} records in {time.perf_counter() - t0:.1f} s", flush=True)
        records += recs
    sources = {name: results.topic_sources(TOPICS[name].__file__) for name in args.topics}
    data = results.merge(data, env, records, sources)
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


if __name__ == "__main__":
    sys.exit(main())
