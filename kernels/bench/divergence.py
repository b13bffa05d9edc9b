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
    "split": ("走路径 A 的通道数", "lanes on path A"),
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


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'cost of a split warp': 'warp 分歧的代价',
    'lanes per warp on path A (split); the rest take path B': '每个 warp 中走路径 A 的通道数（split），其余走路径 B',
}


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
    return plotting.save(fig, ax, TOPIC, env, out_dir, "cost of a split warp", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    return [f"{r['variant']:32} {r['ms']:8.4f} ms  ratio {r['ratio']:.3f}" for r in results.select(data, TOPIC)]


def claims(data: dict) -> None:
    """docs/divergence*.md, "Three things to read off" and the seed example,
    checked against the committed measurements (and the committed listings)."""
    rows = {r["variant"]: r for r in results.select(data, TOPIC)}
    long_ = {int(v.split("split")[1]): r["ms"] for v, r in rows.items() if v.startswith("branch_long/")}
    short = {int(v.split("split")[1]): r["ms"] for v, r in rows.items() if v.startswith("branch_short/")}
    uniform = max(long_[0], long_[32])
    assert abs(long_[0] - long_[32]) <= 0.05 * uniform                       # agreeing warps pay nothing
    assert all(long_[s] >= 1.8 * uniform for s in long_ if 0 < s < 32)      # a split warp pays both paths
    assert max(short.values()) <= 1.05 * min(short.values())                # predication: no split cost
    assert min(short.values()) > uniform                                    # ... but both paths always
    assert all(short[s] > long_[s] for s in short if 0 < s < 32)            # slower than diverging, even
    # why, from the committed listings: the predicated loop issues more instructions per iteration
    # than the diverged branch_long's two loops together
    import re
    sass_dir = Path(results.__file__).resolve().parent.parent / "docs" / "assets" / "sass"

    def per_iteration(kernel, ffma_per_iteration):
        """(instructions / iterations) of each loop of the listing (a backward BRA closes one)."""
        sass = (sass_dir / f"{kernel}.sass").read_text()
        code = [(int(m[1], 16), m[2]) for m in re.finditer(r"/\*([0-9a-f]{4})\*/ (.*)", sass)]
        loops = []
        for addr, ins in code:
            m = re.search(r"BRA 0x([0-9a-f]+)", ins)
            if m and int(m[1], 16) < addr:
                body = [i for a, i in code if int(m[1], 16) <= a <= addr]
                ffma = sum("FFMA" in i for i in body)
                if ffma:
                    loops.append((ffma, len(body) / (ffma / ffma_per_iteration)))
        return [cost for _, cost in sorted(loops, reverse=True)]
    short_loop = per_iteration("branch_short", 2)[0]                       # main unrolled loop
    long_loops = per_iteration("branch_long", 1)[:2]                       # path A's and path B's
    assert "@P1 MOV" in (sass_dir / "branch_short.sass").read_text()           # the reloaded multipliers
    assert short_loop > sum(long_loops), (short_loop, long_loops)
    for kind in ("seed_if_else", "seed_ternary"):                           # the 31/1 example: no penalty
        assert rows[f"{kind}/31_of_32_above"]["ms"] <= 1.1 * rows[f"{kind}/all_above"]["ms"]


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
