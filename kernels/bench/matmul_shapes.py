"""Topic `matmul_shapes`: the shapes readers have, not only large squares.

For every shape of SHAPES, in one run: cuBLAS SGEMM (cupy.matmul, TF32
off), the shipped step 10 (`autotuned`: one 128x128 tile, no split), and
the shape-aware dispatch (kernels.matmul.matmul: the tile and split of K
that plan() picks). Each: median time over argument sets that exceed the
L2 cache, TFLOP/s, ratio to cuBLAS, rel_err against float64 (C poisoned
first), board energy per useful GFLOP over >= 2 s; the dispatch record
also carries its plan (tile, splits), the kernel's registers and the
driver's occupancy.

The tuning records (`tuning: true`, time only): every candidate plan the
planner weighs, variant `<tile>/split<s>`, so that the page shows the
table the model was fitted to, and tests/test_results.py checks that the
plan it picks is close to the best candidate measured.
`python -m kernels.bench.matmul_shapes --fit` refits the model's rates.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from .. import results
from . import fitting, plotting

TOPIC = "matmul_shapes"
ORDER = 51
SHAPES = ((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4097, 4097, 4097), (1000, 1013, 777), (5000, 3000, 7000), (3000, 3000, 3000),
          (16384, 512, 4096), (512, 16384, 4096), (4096, 4096, 256))
QUICK_SHAPES = ((512, 512, 512), (1000, 1013, 777))
LABELS = {
    "tile": ("分块", "tile"),
    "splits": ("K 切分数", "K splits"),
    "model_us": ("模型估计 (µs)", "model (µs)"),
}


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, matmul as mm
    from ..device import kernel_attributes

    records = []
    dev = cp.cuda.Device().id
    sms, per_sm = mm.blocks_per_sm(dev)
    for M, N, K in QUICK_SHAPES if quick else SHAPES:
        shape = [M, N, K]
        gflop = 2 * M * N * K / 1e9
        rng = cp.random.default_rng(M + 3 * N + 7 * K)
        sets = [(rng.standard_normal((M, K), dtype=cp.float32), rng.standard_normal((K, N), dtype=cp.float32),
                 cp.empty((M, N), dtype=cp.float32)) for _ in range(harness.rotation(4 * (M * K + K * N + M * N)))]
        A0, B0, C0 = sets[0]
        ref = A0.astype(cp.float64) @ B0.astype(cp.float64)
        ref_id = results.record_id(TOPIC, "cublas", "sgemm", shape, "float32")

        def run(impl, variant, fn, extra=None, energy=True):
            C0.fill(cp.nan)  # an element left unwritten fails the check
            fn(A0, B0, C0)
            err = harness.rel_err(C0, ref)
            if not err < 1e-5:
                raise RuntimeError(f"{variant} {shape}: rel_err {err}")
            t = harness.time_gpu(fn, sets, warmup=2, samples=9 if energy else 7,
                                 max_seconds=0.3 if quick or not energy else 1.5)
            rec = results.record(TOPIC, impl, variant, shape, "float32", ms=t["ms"], ref=ref_id, rel_err=err,
                                 tflops=gflop / t["ms"], samples=t["samples"], **(extra or {}))
            if energy:
                e = harness.measure_energy(fn, sets, min_seconds=0.5 if quick else 2.0)
                rec.update(harness.energy_fields(e, gflop=gflop))
            records.append(rec)
            return rec

        run("cublas", "sgemm", mm.cublas_matmul)
        run("cupy", "autotuned", lambda A, B, C: mm.matmul_cupy(A, B, C, variant="autotuned"),
            kernel_attributes(mm.cupy_kernel("autotuned"), mm.threads_of("autotuned")))
        p = mm.plan_for(M, N, K, dev)
        run("cupy", "dispatch", mm.matmul,
            dict(tile=p.tile, splits=p.splits, model_us=mm.plan_cost(M, N, K, p, sms, per_sm[p.tile]),
                 **kernel_attributes(mm.general_kernel(p.tile), mm.TILES[p.tile][7])))
        for c in mm.candidate_plans(K):
            run("cupy", f"{c.tile}/split{c.splits}", lambda A, B, C, c=c: mm.matmul(A, B, C, force=(c.tile, c.splits)),
                dict(tuning=True, tile=c.tile, splits=c.splits, k_split=c.k_split, blocks_per_sm=per_sm[c.tile],
                     sms=sms, model_us=mm.plan_cost(M, N, K, c, sms, per_sm[c.tile])), energy=False)
        base = next(r for r in records if r["shape"] == shape and r["impl"] == "cublas")
        for r in records:
            if r["shape"] == shape:
                r["ratio"] = r["tflops"] / base["tflops"]
        # the goal (the dispatch >= 0.85 x cuBLAS on every shape): beside cuBLAS in paired rounds
        paired = harness.paired_rounds(
            {"cublas/sgemm": (mm.cublas_matmul, sets), "cupy/dispatch": (mm.matmul, sets),
             "cupy/autotuned": (lambda A, B, C: mm.matmul_cupy(A, B, C, variant="autotuned"), sets)},
            "cublas/sgemm", rounds=2 if quick else 5, warmup=1, samples=5, max_seconds=0.5)
        for r in records:
            p = paired.get(f"{r['impl']}/{r['variant']}")
            if r["shape"] == shape and p is not None:
                r.update(harness.paired_fields(p, base["id"]))
        del sets, ref, A0, B0, C0
        cp.get_default_memory_pool().free_all_blocks()
    return records


def shape_label(shape) -> str:
    M, N, K = shape
    return f"{M}³" if M == N == K else f"{M}×{N}×{K}"


PLOT_WORDS = {
    "FP32 GEMM across shapes, ratio to cuBLAS": "各种形状下的 FP32 GEMM（与 cuBLAS 之比）",
    "step 10 (one tile)": "第 10 步（固定分块）",
    "dispatch (tile + split-K by shape)": "按形状分派（分块 + K 切分）",
    "ratio to cuBLAS SGEMM": "与 cuBLAS FP32 GEMM 之比",
    "goal": "目标",
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    recs = [r for r in results.select(data, TOPIC) if not r.get("tuning")]
    if not recs:
        return []
    env = data["topics"][TOPIC]["env"]
    shapes = [list(s) for s in SHAPES if any(r["shape"] == list(s) for r in recs)]
    by = {(r["variant"], tuple(r["shape"])): r for r in recs}
    fig, ax = plotting.new_figure(8, 4.2)
    xs = np.arange(len(shapes))
    for i, (variant, label) in enumerate((("autotuned", "step 10 (one tile)"),
                                          ("dispatch", "dispatch (tile + split-K by shape)"))):
        vals = [by.get((variant, tuple(s)), {}).get("ratio", np.nan) for s in shapes]
        ax.bar(xs + (i - 0.5) * 0.4, vals, 0.4, label=label)
    ax.axhline(1.0, color="k", lw=1)
    ax.axhline(0.85, color="C3", ls="--", lw=1, label="goal")
    ax.set_xticks(xs, [shape_label(s) for s in shapes], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("ratio to cuBLAS SGEMM")
    top = max(r["ratio"] for r in recs if r["variant"] in ("autotuned", "dispatch"))
    ax.set_ylim(0, max(1.5, top + 0.1))
    ax.legend(fontsize=7, loc="upper right")  # above the bars of the right half (<= 1.0 there)
    ax.grid(True, axis="y", alpha=0.3)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "FP32 GEMM across shapes, ratio to cuBLAS", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'shape':>18} {'variant':18} {'ms':>9} {'TFLOP/s':>7} {'ratio':>6} {'model us':>9} {'J/GFLOP':>8}"]
    for r in results.select(data, TOPIC):
        if r.get("tuning"):
            continue
        out.append(f"{'x'.join(map(str, r['shape'])):>18} {r['variant']:18} {r['ms']:9.4f} {r['tflops']:7.2f} "
                   f"{r['ratio']:6.3f} {r.get('model_us', float('nan')):9.1f} "
                   f"{r.get('energy_j_per_gflop', float('nan')):8.4f}")
    return out


# The model estimates a kernel's time; a timed call from Python also holds the
# host's work per call (tens of microseconds through the tuning path, more on some
# runs' hosts than others), which sets the time of the shortest calls whatever
# the kernel: in the 2026-12-01 run every candidate at 512^3 took 55-92 us and
# at 1000x1013x777 0.10-0.12 ms, where the same plan called through matmul()
# took 0.075 ms. The fit uses the calls long enough for the kernel to set them.
KERNEL_BOUND_MS = 0.2


def fit(data: dict, min_ms: float = KERNEL_BOUND_MS) -> dict:
    """The model's rates (SM_GFLOPS, BLOCK_GFLOPS, SPLIT_US) that best explain
    the tuning records of calls of min_ms or longer: least squares in log
    time, by coordinate descent from the shipped values; with the loss before
    and after and the number of records used. kernels.matmul is left as it
    was."""
    from .. import matmul as mm

    recs = [r for r in results.select(data, TOPIC) if r.get("tuning") and r["ms"] >= min_ms]
    names = ("SM_GFLOPS", "BLOCK_GFLOPS", "SPLIT_US")
    shipped = {n: getattr(mm, n) for n in names}
    rates = {"SM_GFLOPS": dict(mm.SM_GFLOPS), "BLOCK_GFLOPS": dict(mm.BLOCK_GFLOPS), "SPLIT_US": mm.SPLIT_US}
    knobs = [(n, t) for n in ("SM_GFLOPS", "BLOCK_GFLOPS") for t in mm.TILES] + [("SPLIT_US", None)]

    def value(knob, v=None):
        n, t = knob
        if v is not None:
            if t is None:
                rates[n] = v
            else:
                rates[n][t] = v
        return rates[n] if t is None else rates[n][t]

    def loss():
        for n in names:
            setattr(mm, n, rates[n])
        return sum((math.log(mm.plan_cost(*r["shape"], mm.make_plan(r["shape"][2], r["tile"], r["splits"]),
                                          r["sms"], r["blocks_per_sm"])) - math.log(r["ms"] * 1e3)) ** 2
                   for r in recs) / len(recs)

    try:
        before, after = fitting.descend(loss, knobs, value, value)
    finally:
        for n, v in shipped.items():
            setattr(mm, n, v)
    return {"SM_GFLOPS": {t: round(v) for t, v in rates["SM_GFLOPS"].items()},
            "BLOCK_GFLOPS": {t: round(v) for t, v in rates["BLOCK_GFLOPS"].items()},
            "SPLIT_US": round(rates["SPLIT_US"], 1), "loss_shipped": before, "loss": after,
            "records": len(recs)}


def picks(data: dict) -> list[tuple[list, dict, dict]]:
    """Per shape: (shape, the candidate plan() picks with the shipped model,
    the fastest candidate measured), from the tuning records."""
    from .. import matmul as mm

    recs = [r for r in results.select(data, TOPIC) if r.get("tuning")]
    out = []
    for shape in sorted({tuple(r["shape"]) for r in recs}):
        cands = [r for r in recs if tuple(r["shape"]) == shape]
        sms, per_sm = cands[0]["sms"], {r["tile"]: r["blocks_per_sm"] for r in cands}
        p = mm.plan(*shape, sms, per_sm)
        picked = next(r for r in cands if (r["tile"], r["splits"]) == (p.tile, p.splits))
        out.append((list(shape), picked, max(cands, key=lambda r: r["ratio"])))
    return out


def claims(data: dict) -> None:
    """docs/matmul*.md, section "shapes": the goal (>= 0.85 x cuBLAS on every
    shape) or the shapes that miss it, and the planner's picks."""
    from .. import harness

    rows = [r for r in results.select(data, TOPIC) if not r.get("tuning")]
    disp = {tuple(r["shape"]): r for r in rows if r["variant"] == "dispatch"}
    step10 = {tuple(r["shape"]): r for r in rows if r["variant"] == "autotuned"}
    assert set(disp) == set(map(tuple, SHAPES))
    for shape, r in disp.items():  # never clearly worse than one tile (paired: both beside cuBLAS)
        assert r["paired_ratio"] >= step10[shape]["paired_ratio"] * 0.97, shape
    for shape, picked, best in picks(data):
        assert picked["ms"] <= 1.15 * best["ms"], (shape, picked["variant"], best["variant"])
    short = (1000, 1013, 777)  # a call there is short enough for the host's time to show
    # the goal, by the paired rounds: every other shape at 0.85 or more in the median of its
    # rounds and in every round, but 4097^3, level with the line (one round under it)
    assert all(r["paired_ratio"] >= 0.85 for s, r in disp.items() if s != short)
    assert {s for s, r in disp.items() if s != short and harness.against(r, 0.85) != "above"} == \
        {(4097, 4097, 4097)}
    # at the short shape a timed call (about 0.07 ms from Python) is level with cuBLAS's, while
    # its kernel, one launch under Nsight Compute (topic matmul_profile), is short of the goal
    assert harness.against(disp[short], 1.0) == "level"
    prof = {(r["impl"], r["variant"]): r for r in results.select(data, "matmul_profile")
            if tuple(r["shape"]) == short}
    assert prof["cupy", "dispatch"]["ms"] > prof["cublas", "sgemm"]["ms"] / 0.85  # its kernel: below 0.85
    cublas = {tuple(r["shape"]): r for r in rows if r["impl"] == "cublas"}
    assert cublas[short]["ms"] > 1.2 * prof["cublas", "sgemm"]["ms"]  # a timed call: its kernel and more
    assert disp[short]["paired_ratio"] > 1.5 * step10[short]["paired_ratio"]
    # its tuning calls took longer than the plan dispatch picked, called through matmul():
    # the tuning path's host work, not the kernels (so the model's fit leaves them out)
    tuned = [r for r in results.select(data, TOPIC) if r.get("tuning") and tuple(r["shape"]) == short]
    assert min(r["ms"] for r in tuned) > 1.2 * disp[short]["ms"]
    assert max(r["ms"] for r in tuned) < KERNEL_BOUND_MS
    # one tile for every shape: short of the goal on the small, odd and unlucky ones
    assert {s for s, r in step10.items() if r["paired_ratio"] < 0.85} == {
        (512, 512, 512), (1024, 1024, 1024), short, (4097, 4097, 4097), (3000, 3000, 3000)}
    # the wave-quantization cases take the 64x128 tile, the small ones split K
    assert disp[4097, 4097, 4097]["tile"] == disp[3000, 3000, 3000]["tile"] == "64x128"
    assert disp[4097, 4097, 4097]["paired_ratio"] > 0.9 * disp[4096, 4096, 4096]["paired_ratio"]  # no padding, close anyway
    assert disp[512, 512, 512]["splits"] > 1 and disp[1024, 1024, 1024]["splits"] > 1
    assert disp[4096, 4096, 4096]["splits"] == 1


def sanitize() -> None:
    """`make sanitize`: the dispatch kernel at every tile, with and without a
    split of K, at odd sizes, twice in a row (the tile counters reset)."""
    import cupy as cp

    from kernels import harness, matmul as mm

    for M, N, K in ((1, 1, 1), (33, 65, 17), (130, 67, 300)):
        A = cp.random.standard_normal((M, K), dtype=cp.float32)
        B = cp.random.standard_normal((K, N), dtype=cp.float32)
        ref = A.astype(cp.float64) @ B.astype(cp.float64)
        for tile in mm.TILES:
            for splits in (1, 2, 3):
                for _ in range(2):
                    C = cp.full((M, N), cp.nan, dtype=cp.float32)
                    mm.matmul(A, B, C, force=(tile, splits))
                    err = harness.rel_err(C, ref)
                    assert err < 1e-5, (M, N, K, tile, splits, err)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fit"]:
        path = sys.argv[2] if len(sys.argv) > 2 else results.results_path("nvidia-h200")
        print(fit(results.load(Path(path))))
