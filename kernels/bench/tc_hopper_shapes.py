"""Topic `tc_hopper_shapes`: the Hopper GEMM (kernels/hopper_gemm.py) on the
shapes a model brings, not only large squares, in FP16 and BF16.

For every shape of SHAPES and each format, in one run: cuBLAS's GEMM of the
same layout (cublasGemmEx, FP32 accumulation and out), `hopper_gemm` with
kernel="auto" (the kernel and split of K that hopper_gemm_plan picks) and,
in FP16, the one kernel the chapter builds up to (`hg_ws_persistent_256`,
no split), the planned GEMM storing C from registers instead of by TMA
(variant register_store_fp16), and the NN layout (B as it is, K x N):
the planned GEMM with layout="nn" (nn_fp16) and cuBLAS's NN GEMM
(gemmex_nn_fp16). Those are timed in paired rounds beside cuBLAS's TN GEMM (ratio = cuBLAS's
time / this one's, with its spread); rel_err against float64 (C poisoned
first); the auto record carries its plan and the model's estimate.

The tuning records (`tuning: true`, FP16, time only): every candidate plan
the planner weighs, variant `<kernel>/split<s>`, each checked against
float64 first, so that the page shows what the model was fitted to and the
claims check that the pick is close to the fastest candidate measured.
`python -m kernels.bench.tc_hopper_shapes --fit` refits the model.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from .. import results
from . import fitting, plotting
from .matmul_shapes import shape_label

TOPIC = "tc_hopper_shapes"
ORDER = 48  # after tc_hopper_gemm
SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (5000, 3000, 7000),
          (16384, 1024, 4096), (8192, 8192, 1024), (1024, 1024, 16384))
QUICK_SHAPES = ((2048, 2048, 2048), (1024, 1024, 16384))
FORMATS = {"fp16": "float16", "bf16": "bfloat16"}
BASELINE = "hg_ws_persistent_256"  # the chapter's kernel, one for every shape
REGISTER_STORE = "register_store"  # the planned GEMM with tma_store=False (FP16)
NN, CUBLAS_NN = "nn", "cublas_nn"  # B as it is, K x N (FP16): hopper_gemm(..., layout="nn") and cuBLAS's
ROUNDS = 5
# FP32 accumulation of exact products: the error grows about as sqrt(K)
# (1.9e-5 measured at K = 16384, unsplit)
REL_TOL = 1e-5
# FP8: the same products, but wgmma's FP8 accumulation keeps fewer bits than
# FP32 (measured here: rel_err against the float64 product of the same FP8
# values, in the FP8 records)
REL_TOL_FP8 = 1e-2
REL_TOL_FMT = {"fp16": REL_TOL, "bf16": REL_TOL, "fp8_e4m3": REL_TOL_FP8, "fp8_e5m2": REL_TOL_FP8}
FP8_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
LABELS = {
    "kernel": ("核函数", "kernel"),
    "splits": ("K 切分数", "K splits"),
    "model_us": ("模型估计 (µs)", "model (µs)"),
    "format": ("格式", "format"),
}


def operands(M: int, N: int, K: int, fmt: str, seed: int):
    """A (M x K), Bt (N x K) in the format (FP16, BF16 bit patterns, or FP8
    bytes with a scale each), standard normal; the values they stand for in
    float64 (for FP8: times its scale); and the scale hopper_gemm takes (the
    product of FP8's two, else 1)."""
    import cupy as cp

    from .. import hopper_gemm as hg
    from ..gemm_formats import from_bf16, to_bf16

    rng = cp.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=cp.float32)
    Bt = rng.standard_normal((N, K), dtype=cp.float32)
    if fmt.startswith("fp8"):  # bytes, and their values times the scale (returned in the float64 copies)
        (A8, sa), (B8, sb) = hg.to_fp8(A, fmt), hg.to_fp8(Bt, fmt)
        return A8, B8, fp8_values(A8, fmt) * sa, fp8_values(B8, fmt) * sb, sa * sb
    if fmt == "fp16":
        A, Bt = A.astype(cp.float16), Bt.astype(cp.float16)
        return A, Bt, A.astype(cp.float64), Bt.astype(cp.float64), 1.0
    A, Bt = to_bf16(A), to_bf16(Bt)
    return A, Bt, from_bf16(A).astype(cp.float64), from_bf16(Bt).astype(cp.float64), 1.0


def fp8_values(bits, fmt: str):
    """FP8 bytes -> their values in float64, decoded from the fields (sign,
    exponent, mantissa), independently of to_fp8's packing."""
    import cupy as cp

    from ..hopper_gemm import FP8_BITS

    man, bias = FP8_BITS[fmt]
    b = bits.astype(cp.int32)
    e, m = (b >> man) & ((1 << (7 - man)) - 1), (b & ((1 << man) - 1)).astype(cp.float64)
    mag = cp.where(e == 0, m * 2.0 ** (1 - bias - man), (1 + m / 2**man) * cp.exp2(e - bias))
    return cp.where(b & 0x80, -mag, mag)


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, hopper_gemm as hg

    records = []
    sms = hg.sm_count(cp.cuda.Device().id)
    for M, N, K in QUICK_SHAPES if quick else SHAPES:
        shape = [M, N, K]
        gflop = 2 * M * N * K / 1e9
        for fmt, dtype in FORMATS.items():
            sets = []
            for s in range(harness.rotation(2 * (M * K + N * K) + 4 * M * N)):
                A, Bt, A64, B64, _ = operands(M, N, K, fmt, seed=M + 3 * N + 7 * K + s)
                if s == 0:
                    ref = A64 @ B64.T
                    del A64, B64
                sets.append((A, Bt, cp.empty((M, N), dtype=cp.float32)))
            ref_id = results.record_id(TOPIC, "cublas", f"gemmex_tn_{fmt}", shape, dtype)

            def checked(name, fn, args=sets[0], ref=ref):
                args[2].fill(cp.nan)  # an element left unwritten fails the check
                fn(*args)
                err = harness.rel_err(args[2], ref)
                if not err < rel_err_bound({"format": fmt, "shape": shape}):
                    raise RuntimeError(f"{name} {fmt} {shape}: rel_err {err}")
                return err

            cases = {"cublas": hg.cublas_gemm_tn, "auto": hg.hopper_gemm}
            arg_sets = {}
            if fmt == "fp16":
                cases[BASELINE] = lambda A, B, C: hg.hopper_gemm(A, B, C, kernel=BASELINE)
                # the same plan with the epilogue of before: C stored from registers, not by TMA
                cases[REGISTER_STORE] = lambda A, B, C: hg.hopper_gemm(A, B, C, tma_store=False)
                # B as it is (K x N): ours (the same plan) and cuBLAS's, timed beside cuBLAS's TN
                cases[NN] = lambda A, B, C: hg.hopper_gemm(A, B, C, layout="nn")
                cases[CUBLAS_NN] = hg.cublas_gemm_nn
                nn_sets = [(A, cp.ascontiguousarray(Bt.T), C) for A, Bt, C in sets]
                arg_sets = {NN: nn_sets, CUBLAS_NN: nn_sets}
            errs = {name: checked(name, fn, arg_sets.get(name, sets)[0]) for name, fn in cases.items()}
            paired = harness.paired_rounds({name: (fn, arg_sets.get(name, sets)) for name, fn in cases.items()},
                                           "cublas", rounds=2 if quick else ROUNDS, warmup=1, samples=5,
                                           max_seconds=0.5)
            base_ms = paired["cublas"]["ms"]
            plan = hg.hopper_gemm_plan(M, N, K, sms)
            for name in cases:
                ms = paired[name]["ms"]
                fields = dict(tflops=gflop / ms, rel_err=errs[name], format=fmt, ratio=base_ms / ms,
                              **harness.paired_fields(paired[name], ref_id))
                if name == "cublas":
                    records.append(results.record(TOPIC, "cublas", f"gemmex_tn_{fmt}", shape, dtype, ms=ms,
                                                  **fields))
                    continue
                if name == CUBLAS_NN:
                    records.append(results.record(TOPIC, "cublas", f"gemmex_nn_{fmt}", shape, dtype, ms=ms, ref=ref_id,
                                                  **fields))
                    continue
                p = plan if name in ("auto", REGISTER_STORE, NN) else hg.make_plan(K, BASELINE, 1)
                records.append(results.record(TOPIC, "cupy", f"{name}_{fmt}" if name != BASELINE else name,
                                              shape, dtype, ms=ms, ref=ref_id, kernel=p.kernel, splits=p.splits,
                                              model_us=hg.plan_cost(M, N, K, p, sms), **fields))
            if fmt == "fp16":  # the tuning sweep: every candidate once, FP16 (BF16 runs the same kernels)
                for c in hg.candidate_plans(K):
                    fn = (lambda A, B, C, c=c: hg.hopper_gemm(A, B, C, kernel=c.kernel, splits=c.splits))
                    err = checked(f"{c.kernel}/split{c.splits}", fn)
                    t = harness.time_gpu(fn, sets, warmup=2, samples=5, max_seconds=0.2)
                    records.append(results.record(
                        TOPIC, "cupy", f"{c.kernel}/split{c.splits}", shape, dtype, ms=t["ms"], ref=ref_id,
                        rel_err=err, tflops=gflop / t["ms"], ratio=base_ms / t["ms"], tuning=True,
                        kernel=c.kernel, splits=c.splits, k_per=c.k_per, sms=sms, format=fmt,
                        model_us=hg.plan_cost(M, N, K, c, sms)))
            del sets, arg_sets, ref, checked
            hg.SPLIT_WORKSPACE.clear()
            cp.get_default_memory_pool().free_all_blocks()
    for shape in (QUICK_SHAPES[:1] if quick else FP8_SHAPES):
        records += measure_fp8(list(shape), quick)
    return records


def scaled_mm(A, Bt, scale: float, fmt: str, fast_accum: bool):
    """torch._scaled_mm (cuBLASLt's FP8 GEMM) on the operands hopper_gemm
    takes (FP8 bytes, A M x K and Bt N x K row-major), FP32 out, as a call
    that returns its output; None when torch does not import (an optional
    anchor, never a dependency)."""
    try:
        import torch
    except ImportError:
        return None
    t8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[fmt]
    a, b = torch.from_dlpack(A).view(t8), torch.from_dlpack(Bt).view(t8).t()  # b: K x N, column-major
    one = torch.ones((), device=a.device, dtype=torch.float32)
    s = torch.full((), scale, device=a.device, dtype=torch.float32)
    return lambda *_: torch._scaled_mm(a, b, scale_a=one, scale_b=s, out_dtype=torch.float32,
                                       use_fast_accum=fast_accum)


def measure_fp8(shape: list, quick: bool) -> list[dict]:
    """FP8 E4M3 and E5M2 at one square shape: hopper_gemm (kernel="auto",
    FP32 out) and, when torch imports, torch._scaled_mm on E4M3 (its default,
    and use_fast_accum=True), in paired rounds; rel_err of each against the
    float64 product of the same FP8 values."""
    import cupy as cp

    from .. import harness, hopper_gemm as hg

    M, N, K = shape
    gflop = 2 * M * N * K / 1e9
    records = []
    for fmt in ("fp8_e4m3", "fp8_e5m2"):
        A, Bt, A64, B64, scale = operands(M, N, K, fmt, seed=K + len(fmt))
        ref = A64 @ B64.T
        del A64, B64
        C = cp.empty((M, N), dtype=cp.float32)
        sets = [(A, Bt, C)]
        cases = {"auto": lambda A, B, C: hg.hopper_gemm(A, B, C, fmt=fmt, scale=scale)}
        for fast in (False, True):  # torch has no E5M2 x E5M2 product
            fn = scaled_mm(A, Bt, scale, fmt, fast) if fmt == "fp8_e4m3" else None
            if fn is not None:
                cases[f"scaled_mm{'_fast' if fast else ''}"] = fn
        errs = {}
        for name, fn in cases.items():
            C.fill(cp.nan)
            out = fn(A, Bt, C)
            got = C if name == "auto" else cp.from_dlpack(out)
            errs[name] = harness.rel_err(got, ref)
            if not errs[name] < REL_TOL_FP8:
                raise RuntimeError(f"{name} {fmt} {shape}: rel_err {errs[name]}")
        refname = "scaled_mm" if "scaled_mm" in cases else "auto"
        paired = harness.paired_rounds({n: (f, sets) for n, f in cases.items()}, refname,
                                       rounds=2 if quick else ROUNDS, warmup=1, samples=5, max_seconds=0.5)
        ref_id = results.record_id(TOPIC, "torch" if refname != "auto" else "cupy",
                                   f"{refname}_{fmt}", shape, fmt)
        for name in cases:
            ms = paired[name]["ms"]
            impl = "cupy" if name == "auto" else "torch"
            fields = dict(tflops=gflop / ms, rel_err=errs[name], format=fmt,
                          ratio=paired[refname]["ms"] / ms, **harness.paired_fields(paired[name], ref_id))
            if name == "auto":
                p = hg.hopper_gemm_plan(M, N, K // 2, hg.sm_count(cp.cuda.Device().id))
                fields.update(kernel=p.kernel, splits=p.splits)
            records.append(results.record(TOPIC, impl, f"{name}_{fmt}", shape, fmt, ms=ms,
                                          ref=None if name == refname else ref_id, **fields))
        del sets, ref, A, Bt, C
        cp.get_default_memory_pool().free_all_blocks()
    return records


def rel_err_bound(r: dict) -> float:
    """The error a record of this topic may have (tests/test_results.py): its
    format's, growing as sqrt(K) past K = 1024."""
    return REL_TOL_FMT[r["format"]] * max(1.0, math.sqrt(r["shape"][2] / 1024))


PLOT_WORDS = {
    "Hopper GEMM across shapes, ratio to cuBLAS": "各种形状下本章的矩阵乘法与 cuBLAS 之比",
    "one kernel (persistent, BN 256), FP16": "固定核函数（常驻，分块宽 256），FP16",
    "planned (kernel + split-K by shape), FP16": "按形状规划（核函数 + K 切分），FP16",
    "planned, BF16": "按形状规划，BF16",
    "ratio to cuBLAS (paired rounds)": "与 cuBLAS 之比（逐轮配对）",
    "cuBLAS's speed": "cuBLAS 的速度",
    "goal": "目标",
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    recs = [r for r in results.select(data, TOPIC) if not r.get("tuning") and r["impl"] == "cupy"]
    if not recs:
        return []
    env = data["topics"][TOPIC]["env"]
    shapes = [list(s) for s in SHAPES if any(r["shape"] == list(s) for r in recs)]
    by = {(r["variant"], tuple(r["shape"])): r for r in recs}
    fig, ax = plotting.new_figure(8, 4.2)
    xs = np.arange(len(shapes))
    bars = ((BASELINE, "one kernel (persistent, BN 256), FP16"),
            ("auto_fp16", "planned (kernel + split-K by shape), FP16"), ("auto_bf16", "planned, BF16"))
    for i, (variant, label) in enumerate(bars):
        vals = [by.get((variant, tuple(s)), {}).get("paired_ratio", np.nan) for s in shapes]
        ax.bar(xs + (i - 1) * 0.27, vals, 0.27, label=label)
    ax.axhline(1.0, color="k", lw=1, label="cuBLAS's speed")
    ax.axhline(0.9, color="C3", ls="--", lw=1, label="goal")
    ax.set_xticks(xs, [shape_label(s) for s in shapes], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("ratio to cuBLAS (paired rounds)")
    ax.set_ylim(0, 1.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, axis="y", alpha=0.3)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "Hopper GEMM across shapes, ratio to cuBLAS",
                         words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'shape':>18} {'variant':30} {'ms':>8} {'TFLOP/s':>7} {'ratio':>6} {'[min, max]':>13} {'model us':>8}"]
    for r in results.select(data, TOPIC):
        if r.get("tuning"):
            continue
        spread = f"[{r['ratio_min']:.3f},{r['ratio_max']:.3f}]"
        out.append(f"{'x'.join(map(str, r['shape'])):>18} {r['variant'][:30]:30} {r['ms']:8.4f} {r['tflops']:7.1f} "
                   f"{r['paired_ratio']:6.3f} {spread:>13} {r.get('model_us', float('nan')):8.1f}")
    return out


def picks(data: dict) -> list[tuple[list, dict, dict]]:
    """Per shape: (shape, the tuning record of the plan hopper_gemm_plan picks
    with the shipped model, the fastest tuning record)."""
    from .. import hopper_gemm as hg

    recs = [r for r in results.select(data, TOPIC) if r.get("tuning")]
    out = []
    for shape in sorted({tuple(r["shape"]) for r in recs}):
        cands = [r for r in recs if tuple(r["shape"]) == shape]
        p = min(hg.candidate_plans(shape[2]), key=lambda p: hg.plan_cost(*shape, p, cands[0]["sms"]))
        picked = next(r for r in cands if (r["kernel"], r["splits"]) == (p.kernel, p.splits))
        out.append((list(shape), picked, min(cands, key=lambda r: r["ms"])))
    return out


# A timed call from Python also holds the host's work per call (about 25 us for
# hopper_gemm, twice that with a split's second launch), which sets the time of
# the shortest calls whatever the kernel: the fit leaves out calls shorter than this.
KERNEL_BOUND_MS = 0.08


def fit(data: dict, min_ms: float = KERNEL_BOUND_MS) -> dict:
    """The planner's constants that best explain the tuning records, in two
    steps. (1) Per kernel, its unsplit records on rows of 128-byte lines:
    there the model is linear in KTILE_US and TILE_US (time = rounds x
    (k tiles x KTILE_US + TILE_US)), so least squares in relative error
    solves both exactly (TILE_US held at 0 if it would come out negative).
    (2) Those held, SPLIT_US, SPLIT_GBPS and UNALIGNED_ROW_US by coordinate
    descent on every record, least squares in log time. Returns the values,
    with the loss of (2) before and after; kernels.hopper_gemm is left as
    it was. (A descent over every constant at once, the fit before this one,
    left TILE_US at 0 for most kernels: the split records dominate the loss
    and the descent, one knob at a time, never moved KTILE_US and TILE_US
    together.)"""
    from .. import hopper_gemm as hg

    recs = [r for r in results.select(data, TOPIC) if r.get("tuning") and r["ms"] >= min_ms]
    scalars = ("SPLIT_US", "SPLIT_GBPS", "UNALIGNED_ROW_US")
    shipped = {n: getattr(hg, n) for n in ("KTILE_US", "TILE_US", *scalars)}
    ktile, tile = dict(hg.KTILE_US), dict(hg.TILE_US)
    for k in hg.AUTO_KERNELS:
        rows = []  # each record: rounds x k tiles / ms and rounds / ms, against 1
        for r in recs:
            M, N, K = r["shape"]
            if r["kernel"] == k and r["splits"] == 1 and K * 2 % 128 == 0:
                p = hg.make_plan(K, k, 1)
                n = hg.plan_rounds(M, N, p, r["sms"])
                rows.append([n * p.k_per / (r["ms"] * 1e3), n / (r["ms"] * 1e3)])
        if len(rows) >= 2:
            X = np.array(rows)
            a, b = np.linalg.lstsq(X, np.ones(len(X)), rcond=None)[0]
            if b < 0:
                a, b = np.linalg.lstsq(X[:, :1], np.ones(len(X)), rcond=None)[0][0], 0.0
            ktile[k], tile[k] = float(a), float(b)
    vals = {n: getattr(hg, n) for n in scalars}

    def loss():
        for n, v in vals.items():
            setattr(hg, n, v)
        return sum((math.log(hg.plan_cost(*r["shape"], hg.make_plan(r["shape"][2], r["kernel"], r["splits"]),
                                          r["sms"])) - math.log(r["ms"] * 1e3)) ** 2 for r in recs) / len(recs)

    try:
        hg.KTILE_US, hg.TILE_US = ktile, tile
        before, after = fitting.descend(loss, scalars, vals.__getitem__, vals.__setitem__,
                                        factors=(0.5, 0.7, 0.85, 0.95, 1.05, 1.15, 1.4, 2.0), floor=1e-4)
    finally:
        for n, v in shipped.items():
            setattr(hg, n, v)
    return {"KTILE_US": {k: round(v, 3) for k, v in ktile.items()},
            "TILE_US": {k: round(v, 2) for k, v in tile.items()},
            "SPLIT_US": round(vals["SPLIT_US"], 2), "SPLIT_GBPS": round(vals["SPLIT_GBPS"], -1),
            "UNALIGNED_ROW_US": round(vals["UNALIGNED_ROW_US"], 5),
            "loss_start": before, "loss": after, "records": len(recs)}


def claims(data: dict) -> None:
    """docs/warp-specialization*.md, section "gemm-shapes": the planner's
    picks, and what the table and plot show against the goals."""
    from .. import harness

    rows = [r for r in results.select(data, TOPIC) if not r.get("tuning")]
    assert {tuple(r["shape"]) for r in rows} == set(SHAPES)
    assert all(r["rel_err"] < rel_err_bound(r) for r in results.select(data, TOPIC))
    for shape, picked, best in picks(data):  # the model's pick is close to the fastest candidate
        assert picked["ms"] <= 1.15 * best["ms"], (shape, picked["variant"], best["variant"])
    # the model takes ping-pong where a tile's k loop is short (K = 1024), the persistent cluster
    # kernel on every other unsplit shape
    unsplit_picks = {tuple(s): p["kernel"] for s, p, _ in picks(data) if p["splits"] == 1}
    assert unsplit_picks.pop((8192, 8192, 1024)) == "hg_ws_pingpong_128"
    assert set(unsplit_picks.values()) == {"hg_ws_cluster_persistent_256"}, unsplit_picks
    # ping-pong against the persistent cluster kernel (tuning records, unsplit): ahead only where
    # a tile's k loop is short (K = 1024), behind on the shapes with K >= 4096 that fill the SMs
    # with tiles (1024 x 1024 x 16384 has too few for either: the planner splits K there)
    unsplit = {(tuple(r["shape"]), r["kernel"]): r["ms"] for r in results.select(data, TOPIC)
               if r.get("tuning") and r["splits"] == 1}
    pp, coop = "hg_ws_pingpong_128", "hg_ws_cluster_persistent_256"
    assert unsplit[(8192, 8192, 1024), pp] < unsplit[(8192, 8192, 1024), coop]
    assert all(unsplit[s, pp] > unsplit[s, coop] for s in SHAPES if s[2] >= 4096 and s[0] * s[1] > 2**21)
    auto = {(tuple(r["shape"]), r["format"]): r for r in rows if r["variant"].startswith("auto_")}
    one = {tuple(r["shape"]): r for r in rows if r["variant"] == BASELINE}
    for (shape, fmt), r in auto.items():
        if fmt == "fp16":  # planning never costs more than about 5 % against the one kernel (both paired)
            assert r["paired_ratio"] >= 0.95 * one[shape]["paired_ratio"], shape
    # the TMA store against the register store (the same plan, paired beside cuBLAS): it gains most
    # where a tile's k loop is shortest against its 128 KB of C (K = 1024), and costs nothing
    # measurable elsewhere
    reg = {tuple(r["shape"]): r for r in rows if r["variant"] == f"{REGISTER_STORE}_fp16"}
    gain = {s: auto[s, "fp16"]["paired_ratio"] / r["paired_ratio"] for s, r in reg.items()}
    assert set(gain) == set(SHAPES) and min(gain.values()) > 0.97, gain
    assert max(gain, key=gain.get) == (8192, 8192, 1024) and gain[8192, 8192, 1024] > 1.03, gain
    # B as it is (K x N, read transposed by wgmma): within 5 % of Bt's speed on every shape, the
    # same plan, both beside cuBLAS's TN GEMM
    nn = {tuple(r["shape"]): r for r in rows if r["variant"] == f"{NN}_fp16"}
    assert set(nn) == set(SHAPES)
    assert all(r["paired_ratio"] >= 0.95 * auto[s, "fp16"]["paired_ratio"] for s, r in nn.items()), nn
    # K long and M N small: the planner splits K and gains most there
    assert auto[(1024, 1024, 16384), "fp16"]["splits"] > 1
    assert auto[(1024, 1024, 16384), "fp16"]["paired_ratio"] > 2.5 * one[1024, 1024, 16384]["paired_ratio"]
    assert one[1024, 1024, 16384]["paired_ratio"] < 0.4  # the one kernel: about a third of cuBLAS
    # rows of 14000 bytes: a cluster kernel (multicast halves Bt's rows), far ahead of the one kernel
    odd = (5000, 3000, 7000)
    assert auto[odd, "fp16"]["kernel"] == auto[odd, "bf16"]["kernel"] == "hg_ws_cluster_persistent_256"
    tuned = [r for r in results.select(data, TOPIC) if r.get("tuning") and tuple(r["shape"]) == odd]
    fastest = {c: min(r["ms"] for r in tuned if ("cluster" in r["kernel"]) == c) for c in (True, False)}
    assert fastest[True] * 1.2 < fastest[False]
    assert auto[odd, "fp16"]["paired_ratio"] > 1.3 * one[odd]["paired_ratio"]
    # the goals: >= 0.90 x cuBLAS on every shape but that one, in both formats; the geometric
    # mean >= 0.97 (met); level with cuBLAS at 8192^3, behind at 4096^3
    for fmt in ("fp16", "bf16"):
        got = {s: r for (s, f), r in auto.items() if f == fmt}
        assert all(r["paired_ratio"] >= 0.9 for s, r in got.items() if s != odd), fmt
        assert got[odd]["paired_ratio"] < 0.9, fmt
        geomean = math.exp(sum(math.log(r["paired_ratio"]) for r in got.values()) / len(got))
        assert geomean >= 0.97, (fmt, geomean)
        assert harness.against(got[8192, 8192, 1024], 1.0) == "above" and got[8192, 8192, 1024]["paired_ratio"] > 1.1
        assert harness.against(got[8192, 8192, 8192], 1.0) == "level", fmt
        assert got[4096, 4096, 4096]["paired_ratio"] < 1.0, fmt  # the median round behind at 4096^3,
        assert harness.against(got[4096, 4096, 4096], 1.0) in ("below", "level"), fmt  # never ahead in all
    # FP8 E4M3 against torch._scaled_mm (cuBLASLt): level at 8192^3, ahead at 4096^3; our error is
    # its fast-accumulation mode's (wgmma's FP8 accumulation, never promoted to FP32), about ten
    # times the error of its default, which promotes
    fp8 = {(tuple(r["shape"]), r["variant"]): r for r in results.select(data, TOPIC) if r["format"] == "fp8_e4m3"}
    if fp8:  # torch imported in the run that measured them
        big, small = (8192,) * 3, (4096,) * 3
        assert harness.against(fp8[big, "auto_fp8_e4m3"], 1.0) == "level"
        assert harness.against(fp8[big, "auto_fp8_e4m3"], 0.9) == "above"
        assert harness.against(fp8[small, "auto_fp8_e4m3"], 1.0) == "above"
        for s in (big, small):
            ours, fast, default = (fp8[s, v]["rel_err"] for v in ("auto_fp8_e4m3", "scaled_mm_fast_fp8_e4m3",
                                                                  "scaled_mm_fp8_e4m3"))
            assert math.isclose(ours, fast, rel_tol=0.02) and ours > 10 * default, s


def sanitize() -> None:
    """`make sanitize`: every kernel the planner may pick, unsplit and split,
    in every format and layout, at small odd shapes (N a multiple of 8 for
    layout "nn"), twice in a row, checked."""
    import cupy as cp

    from kernels import harness, hopper_gemm as hg

    shapes = {"tn": ((1, 1, 16), (130, 260, 528), (300, 129, 1040)),
              "nn": ((1, 8, 16), (130, 264, 528), (300, 136, 1040))}
    for fmt, layout in hg.BUILDS:
        for M, N, K in shapes[layout]:
            A, Bt, A64, B64, scale = operands(M, N, K, fmt, seed=M + N + K)
            B = Bt if layout == "tn" else cp.ascontiguousarray(Bt.T)
            ref = A64 @ B64.T
            for kernel in hg.AUTO_KERNELS:
                for splits in (1, 3):
                    for _ in range(2):
                        C = cp.full((M, N), cp.nan, dtype=cp.float32)
                        hg.hopper_gemm(A, B, C, kernel=kernel, splits=splits, fmt=fmt, scale=scale, layout=layout)
                        assert harness.rel_err(C, ref) < REL_TOL_FMT[fmt], (kernel, splits, fmt, layout, M, N, K)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fit"]:
        path = sys.argv[2] if len(sys.argv) > 2 else results.results_path("nvidia-h200")
        print(fit(results.load(Path(path))))
