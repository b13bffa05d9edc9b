"""Topic `reduction`: FP32 sum of 2^28 elements, every step of the ladder,
against the device-to-device copy ceiling and cupy.sum (CUB), measured in the
same run. Bandwidth counts the 4 bytes read per element (the partial sums
are a rounding error of that); `ratio` is to the copy ceiling (which counts
read + write), `ratio_to_cp_sum` to cupy.sum's bandwidth.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting
from .ceilings import copy_ceiling_record

TOPIC = "reduction"
ORDER = 20  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "ratio_to_cp_sum": ("相对 cupy.sum", "ratio to cupy.sum"),
}
N = 1 << 28
THREADS = 256


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import harness, reduction as red

    n = N
    x = cp.random.default_rng(7).random(n, dtype=cp.float32)  # uniform [0, 1): never zeros
    ref = float(cp.sum(x, dtype=cp.float64))
    ceiling, _ = copy_ceiling_record(TOPIC)
    ceil_id = ceiling["id"]
    records = [ceiling]

    def add(impl, variant, fn, value):
        err = abs(value - ref) / abs(ref)
        if not err < 1e-5:
            raise RuntimeError(f"{impl} {variant}: rel_err {err}")
        t = harness.time_gpu(fn, samples=20)
        gbps = 4 * n / (t["ms"] * 1e-3) / 1e9
        rec = results.record(TOPIC, impl, variant, [n], "float32", ms=t["ms"], gbps=gbps, ref=ceil_id,
                             ratio=gbps / ceiling["gbps"], rel_err=err, bytes=4 * n)
        if not quick and (variant == "single_pass" or impl == "cub"):
            e = harness.measure_energy(fn)
            rec.update(harness.energy_fields(e, nbytes=4 * n))
        records.append(rec)
        return rec

    cub = add("cub", "cupy_sum", lambda: cp.sum(x), float(cp.sum(x)))
    for variant in red.VARIANTS:  # the ladder, each step with its default launch
        fn = lambda v=variant: red.reduce_sum_cupy(x, variant=v)  # noqa: E731
        rec = add("cupy", variant, fn, float(fn()))
        rec["threads"] = red.SINGLE_PASS_THREADS if variant == "single_pass" else 256
    # Step 7 tuned: threads per block x blocks per SM, and two kernel experiments.
    for kernel in ("single_pass",) + red.TUNING:
        for threads, bps in ((256, 4), (256, 8), (512, 2), (512, 4), (1024, 2)):
            fn = lambda k=kernel, t=threads, b=bps: red.reduce_sum_cupy(x, variant=k, threads=t, blocks_per_sm=b)  # noqa: E731
            rec = add("cupy", f"{kernel}/t{threads}b{bps}", fn, float(fn()))
            rec.update(threads=threads, blocks_per_sm=bps, tuning=True)
    xn = cuda.as_cuda_array(x)
    for variant in red.NUMBA_KERNELS:
        fn = lambda v=variant: red.reduce_sum_numba(xn, variant=v, threads=THREADS)  # noqa: E731
        rec = add("numba", variant, fn, float(fn().copy_to_host()[0]))
        rec["threads"] = THREADS
    for r in records:
        if r["variant"] != "ceiling":
            r["ratio_to_cp_sum"] = r["gbps"] / cub["gbps"]
    # the ratios the page sets against cp.sum (single pass "within about two percent", its best
    # configuration "matches"): in paired rounds beside cp.sum (kernels.harness.paired_rounds)
    best = max((r for r in records if r["impl"] == "cupy" and r.get("tuning")), key=lambda r: r["ratio_to_cp_sum"])
    kernel, _, launch = best["variant"].partition("/")
    threads, bps = best["threads"], best["blocks_per_sm"]
    cases = {"cub/cupy_sum": (lambda: cp.sum(x), ((),)),
             "cupy/single_pass": (lambda: red.reduce_sum_cupy(x, variant="single_pass"), ((),)),
             f"cupy/{best['variant']}": (lambda: red.reduce_sum_cupy(x, variant=kernel, threads=threads,
                                                                    blocks_per_sm=bps), ((),))}
    paired = harness.paired_rounds(cases, "cub/cupy_sum", rounds=2 if quick else 7, samples=10)
    for r in records:
        p = paired.get(f"{r['impl']}/{r['variant']}")
        if p is not None:
            r.update(harness.paired_fields(p, cub["id"]))
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'FP32 sum of 2^28 elements': '2^28 个 FP32 元素求和',
    'first\nadd': '首次\n相加',
    'grid\nstride': 'grid\nstride',
    'interleaved\nmodulo': '交错\n取模',
    'interleaved\nstrided': '交错\n跨步',
    'sequential': '顺序',
    'single\npass': '单趟',
    'vectorized': '向量化',
    'warp\nshuffle': 'warp\nshuffle',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    from .. import reduction as red

    rows = {(r["impl"], r["variant"]): r for r in results.select(data, TOPIC)}
    env = data["topics"][TOPIC]["env"]
    fig, ax = plotting.new_figure(7.5, 4)
    labels, cupy_vals, numba_vals = [], [], []
    for v in red.VARIANTS:
        labels.append(v.replace("_", "\n", 1))
        cupy_vals.append(rows[("cupy", v)]["ratio"])
        numba_vals.append(rows[("numba", v)]["ratio"] if ("numba", v) in rows else np.nan)
    xs = np.arange(len(labels))
    ax.bar(xs - 0.2, cupy_vals, 0.4, label="CuPy (CUDA C)")
    ax.bar(xs + 0.2, numba_vals, 0.4, label="Numba")
    ax.axhline(rows[("cub", "cupy_sum")]["ratio"], color="k", ls="--", lw=1, label="cupy.sum (CUB)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel("fraction of copy ceiling")
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "FP32 sum of 2^28 elements", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'impl':6} {'variant':20} {'ms':>8} {'GB/s':>7} {'ratio':>6} {'vs cub':>6} {'rel_err':>8}"]
    for r in results.select(data, TOPIC):
        out.append(f"{r['impl']:6} {r['variant']:20} {r['ms']:8.4f} {r['gbps']:7.0f} {r['ratio']:6.3f} "
                   f"{r.get('ratio_to_cp_sum', float('nan')):6.3f} {r['rel_err']:8.1e}")
    return out


def claims(data: dict) -> None:
    """docs/divergence*.md, "What each step bought"; the issue's goals,
    checked against the committed measurements."""
    rows = results.select(data, TOPIC)
    cupy = {r["variant"]: r for r in rows if r["impl"] == "cupy" and not r.get("tuning")}
    numba = {r["variant"]: r for r in rows if r["impl"] == "numba"}
    ladder = ["interleaved_modulo", "interleaved_strided", "sequential", "first_add", "warp_shuffle",
              "grid_stride", "vectorized", "single_pass"]
    ratios = [cupy[v]["ratio"] for v in ladder]
    assert ratios == sorted(ratios), ratios                                 # every step helps
    assert all(cupy[v]["ratio"] < 0.25 for v in ladder[:3])                 # steps 0-2 far below
    assert cupy["grid_stride"]["ratio"] > 1.5 * cupy["warp_shuffle"]["ratio"]  # step 5: the big jump
    assert cupy["vectorized"]["ratio"] >= 1.0 and cupy["single_pass"]["ratio"] >= 1.0
    from .. import harness

    # beside cp.sum in paired rounds: single pass within about two percent, its best configuration level
    assert harness.against(cupy["single_pass"], 0.98) == "above"
    best = [r for r in rows if r["impl"] == "cupy" and r.get("tuning") and "paired_ratio" in r]
    assert len(best) == 1 and harness.against(best[0], 1.0) in ("level", "above"), best
    assert max(r["ratio"] for r in rows if r["impl"] == "cupy") >= 0.90     # issue goal: >= 0.90 x copy
    assert all(numba[v]["gbps"] < cupy[v]["gbps"] for v in numba)            # Numba slower at every step


# On the roofline: 1 FLOP per 4 bytes (each element read once, one add),
# every kernel at the largest size.
ROOFLINE = ("v", 1)


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    rows = [r for r in results.select(data, TOPIC) if r["impl"] != "cuda_memcpy" and "gbps" in r]
    big = max((r["shape"][0] for r in rows), default=None)
    return [(f"{r['impl']} {r['variant']}", 1 / 4, r["gbps"] / 4) for r in rows if r["shape"][0] == big]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import cupy as cp

    from kernels import reduction as red

    for n in (1, 31, 33, 2**20 + 7):
        for variant in red.VARIANTS + red.TUNING:
            for threads in (64, 256, 1024):
                x = cp.random.random(n, dtype=cp.float32)
                got = float(red.reduce_sum_cupy(x, variant=variant, threads=threads))
                want = float(cp.sum(x, dtype=cp.float64))
                assert abs(got - want) <= 1e-5 * want, (n, variant, threads, got, want)
