"""Topic `divergence`: cost of a split warp, long branch vs short branch.

branch_long / branch_short with split = 0, 1, 8, 16, 31, 32 lanes on path A
(n = 2^22 threads, iters FMAs per thread). Rate: useful FMAs (2 FLOP each)
per second; `ratio` is to the long branch with split = 0 (no divergence).
Also the source's if/else example on data where 31 lanes of 32 go one way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results, sass
from . import plotting

TOPIC = "divergence"
ORDER = 30  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "split": ("路径 A 的 lane 数", "lanes on path A"),
}
N = 1 << 22
ITERS = 1024
SPLITS = (0, 1, 8, 16, 31, 32)


# The SASS listings the divergence page embeds (docs/assets/sass/;
# python -m kernels.bench.listings rewrites them, a test keeps them current).
LISTINGS = {f"{k}.sass": (lambda k=k: sass.listing_text("divergence.cu", k))
            for k in ("seed_if_else", "seed_ternary", "branch_short", "branch_long")}


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import divergence as dv, harness

    x = cp.random.default_rng(3).random(N, dtype=cp.float32) + 0.5
    out = cp.empty_like(x)
    host_x = cp.asnumpy(x[:4096])
    records, ref_id = [], results.record_id(TOPIC, "cupy", "branch_long/split0", [N, ITERS], "float32")
    for kind in ("branch_long", "branch_short"):
        for split in SPLITS:
            out.fill(cp.nan)
            dv.branch_cupy(x, out, split=split, iters=ITERS, kind=kind)
            want = dv.reference(host_x, split, ITERS)
            err = harness.rel_err(out[:4096], want)
            if not err < 1e-5:
                raise RuntimeError(f"{kind} split={split}: rel_err {err}")
            t = harness.time_gpu(lambda k=kind, s=split: dv.branch_cupy(x, out, split=s, iters=ITERS, kind=k))
            records.append(results.record(
                TOPIC, "cupy", f"{kind}/split{split}", [N, ITERS], "float32", ms=t["ms"], ref=ref_id,
                rel_err=err, kernel=kind, split=split, tflops=2 * N * ITERS / (t["ms"] * 1e-3) / 1e12))
    # The source's example, in place: 31 of 32 lanes above the threshold, or
    # all of them. Rotate among 32 buffers (512 MiB, > L2) so that each sees
    # few enough calls that its values stay finite and normal (x2 or /2 per call).
    pattern = (np.arange(N) % 32 == 0)
    for name, data in (("all_above", np.full(N, 200.0, np.float32)),
                       ("31_of_32_above", np.where(pattern, 50.0, 200.0).astype(np.float32))):
        for kind in dv.SEED:
            bufs = [cp.asarray(data) for _ in range(32)]
            dv.seed_cupy(bufs[0], 100.0, kind=kind)
            want = np.where(data > 100.0, data * 2, data / 2)
            err = harness.rel_err(bufs[0], want)
            t = harness.time_gpu(lambda d, k=kind: dv.seed_cupy(d, 100.0, kind=k), [(b,) for b in bufs],
                                 samples=10)
            calls = t["samples"] * t["batch"] + 10
            if calls / len(bufs) > 100:  # 200 * 2**100 overflows float32 past ~2**120
                raise RuntimeError(f"{calls} calls over {len(bufs)} buffers: values would overflow")
            records.append(results.record(
                TOPIC, "cupy", f"{kind}/{name}", [N], "float32", ms=t["ms"],
                ref=results.record_id(TOPIC, "cupy", "seed_if_else/all_above", [N], "float32"),
                rel_err=err, kernel=kind, gbps=8 * N / (t["ms"] * 1e-3) / 1e9))
            del bufs
    by_id = {r["id"]: r for r in records}
    for r in records:
        ref = by_id[r["ref"]]
        unit = "tflops" if "tflops" in r else "gbps"
        r["ratio"] = r[unit] / ref[unit]
    return records


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    env = data["topics"][TOPIC]["env"]
    fig, ax = plotting.new_figure(7, 3.8)
    for kind, style in (("branch_long", "o-"), ("branch_short", "s--")):
        by_split = {r["split"]: r["ms"] for r in rows if r.get("kernel") == kind}
        ax.plot(range(len(SPLITS)), [by_split[s] for s in SPLITS], style, label=kind)
    ax.set_xticks(range(len(SPLITS)), [str(s) for s in SPLITS])  # evenly spaced: 31 and 32 stay apart
    ax.set_xlabel("lanes per warp on path A (split); the rest take path B")
    ax.set_ylabel("time (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "cost of a split warp")


def summary(data: dict) -> list[str]:
    return [f"{r['variant']:32} {r['ms']:8.4f} ms  ratio {r['ratio']:.3f}" for r in results.select(data, TOPIC)]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import cupy as cp

    from kernels import divergence as dv

    for n in (1, 1000, 2**16 + 3):
        x = cp.random.random(n, dtype=cp.float32) + 0.5
        for kind in dv.BRANCHES:
            for split in (0, 1, 16, 32):
                out = cp.full(n, cp.nan, dtype=cp.float32)
                dv.branch_cupy(x, out, split=split, iters=8, kind=kind)
                assert not bool(cp.isnan(out).any())
        for kind in dv.SEED:
            dv.seed_cupy(x.copy(), 1.0, kind=kind)
