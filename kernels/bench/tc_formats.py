"""Topic `tc_formats`: what each format costs in accuracy (kernels/gemm_formats.py).

1. Error growth with K: C = A @ B with M = N = 1024 and K from 256 to
   65536, A and B drawn from N(0, 1) ("normal") or from N(0, 1) times
   2^U(-12, 12) ("wide": 24 octaves of magnitude), stored in each format
   and multiplied by cuBLAS; rel_err = ||C - A @ B|| / ||A @ B|| against the
   float64 product of the original float64 A and B, so it counts the
   rounding of the inputs and of the sums together. Records `error/<format>/<dist>`,
   with the GEMM's time and its speed over fp32's (ratio; for FP8, FP16's).
   A format that overflows (inf or NaN in C) records the fraction of
   non-finite entries instead (no_rel_err "nonfinite").
2. One layer, calibrated ("mixed precision in practice"): Y = X @ W with X
   (16384 x 4096) the ReLU of N(0, 1) activations and W (4096 x 4096) of
   N(0, 1/4096) weights, in fp32, tf32, bf16, fp16 and int8; INT8 takes
   its activation scale from a separate calibration batch (max |x| of
   it: values beyond saturate) and a scale per output column of W.
   Records `layer/<format>`: time of the GEMM (operands already stored in
   the format), error against float64, board energy per useful GFLOP over
   >= 2 s, ratio = fp32's time over this one's.
FP8 rows are emulated on the FP16 Tensor Cores (gemm_formats says how):
their errors are FP8's, their times are not, and no layer row is FP8.
"""

from __future__ import annotations

from pathlib import Path

from .. import results
from . import plotting

TOPIC = "tc_formats"
ORDER = 43
KS = (256, 1024, 4096, 16384, 65536)
MN = 1024
DISTS = ("normal", "wide")
ERROR_FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp16_acc16", "int8", "fp8_e4m3", "fp8_e5m2")
LAYER = (16384, 4096, 4096)
LAYER_FORMATS = ("fp32", "tf32", "bf16", "fp16", "int8")
LABELS = {
    "nonfinite": ("非有限值比例", "non-finite fraction"),
    "emulated": ("模拟", "emulated"),
    "dist": ("分布", "distribution"),
    "fmt": ("格式", "format"),
}
WORDS = {"dist": {"normal": ("正态", "normal"), "wide": ("宽动态范围", "wide range")}}
NAMES = {"fp32": "FP32", "tf32": "TF32", "bf16": "BF16", "fp16": "FP16", "fp16_acc16": "FP16, FP16 accumulation",
         "int8": "INT8", "fp8_e4m3": "FP8 E4M3 (emulated)", "fp8_e5m2": "FP8 E5M2 (emulated)"}
PLOT_WORDS = {
    "GEMM error against float64, M = N = 1024": "GEMM 相对 float64 的误差，M = N = 1024",
    "inputs N(0, 1)": "输入 N(0, 1)",
    "inputs N(0, 1) x 2^U(-12, 12)": "输入 N(0, 1) × 2^U(-12, 12)",
    "relative error ||C - AB|| / ||AB||": "相对误差 ||C − AB|| / ||AB||",
    "FP16, FP16 accumulation": "FP16，FP16 累加",
    "(emulated)": "（模拟）",
    "overflow": "溢出",
}


def _draw(rng, shape, dist):
    import cupy as cp

    x = rng.standard_normal(shape)
    if dist == "wide":
        x *= cp.exp2(rng.uniform(-12, 12, shape))
    return x


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import gemm_formats as gf, harness

    ks = (256, 1024) if quick else KS
    records = []
    for dist in DISTS:
        for k in ks:
            shape = [MN, MN, k]
            rng = cp.random.default_rng(k + (1 if dist == "wide" else 0))
            A, B = _draw(rng, (MN, k), dist), _draw(rng, (k, MN), dist)
            exact = A @ B
            ref_id = results.record_id(TOPIC, "cublas", f"error/fp32/{dist}", shape, "fp32")
            for fmt in ERROR_FORMATS:
                q = gf.quantize(A, B, fmt)
                C = gf.matmul(q)
                t = harness.time_gpu(lambda: gf.matmul(q, C), warmup=1, samples=5, max_seconds=0.3)
                R = gf.dequantize(q, C)
                bad = int((~cp.isfinite(R)).sum())
                fields = dict(fmt=fmt, dist=dist, emulated=fmt in gf.EMULATED,
                              tflops=2 * MN * MN * k / (t["ms"] * 1e-3) / 1e12)  # emulated: FP16's rate
                if bad:
                    rec = results.record(TOPIC, "cublas", f"error/{fmt}/{dist}", shape, fmt, ms=t["ms"], ref=ref_id,
                                         no_rel_err="nonfinite", nonfinite=bad / R.size, **fields)
                else:
                    rec = results.record(TOPIC, "cublas", f"error/{fmt}/{dist}", shape, fmt, ms=t["ms"], ref=ref_id,
                                         rel_err=harness.rel_err(R, exact), **fields)
                records.append(rec)
            del A, B, exact
            cp.get_default_memory_pool().free_all_blocks()
    for r in records:  # speed over fp32's at the same K and distribution (the page shows errors)
        base = next(b for b in records if b["id"] == r["ref"])
        r["ratio"] = r["tflops"] / base["tflops"]
    records += _layer(quick)
    return records


def _layer(quick: bool) -> list[dict]:
    import cupy as cp

    from .. import gemm_formats as gf, harness

    M, N, K = (2048, 1024, 1024) if quick else LAYER
    shape = [M, N, K]
    rng = cp.random.default_rng(7)
    X = cp.maximum(rng.standard_normal((M, K)), 0)
    calib = cp.maximum(rng.standard_normal((M // 8, K)), 0)  # the calibration batch, another draw
    W = rng.standard_normal((K, N)) / K**0.5
    exact = X @ W
    ref_id = results.record_id(TOPIC, "cublas", "layer/fp32", shape, "fp32")
    out = []
    for fmt in LAYER_FORMATS:
        if fmt == "int8":
            q = calibrated_int8(X, W, calib)
        else:
            q = gf.quantize(X, W, fmt)
        C = gf.matmul(q)
        err = harness.rel_err(gf.dequantize(q, C), exact)
        t = harness.time_gpu(lambda: gf.matmul(q, C), warmup=2, samples=15, max_seconds=0.5 if quick else 1.5)
        e = harness.measure_energy(lambda: gf.matmul(q, C), min_seconds=0.5 if quick else 2.0)
        rec = results.record(TOPIC, "cublas", f"layer/{fmt}", shape, fmt, ms=t["ms"], ref=ref_id, rel_err=err,
                             tflops=2 * M * N * K / (t["ms"] * 1e-3) / 1e12, samples=t["samples"], fmt=fmt,
                             **harness.energy_fields(e, gflop=2 * M * N * K / 1e9))
        out.append(rec)
    base = out[0]["ms"]
    for r in out:
        r["ratio"] = base / r["ms"]
    return out


def calibrated_int8(X, W, calib):
    """INT8 operands for Y = X @ W as inference stores them: W with a scale
    per output column; X with one scale found beforehand on a calibration
    batch (max |x| there -> 127), so that a value beyond it saturates."""
    import cupy as cp

    from kernels import gemm_formats as gf

    sx = float(cp.abs(calib).max()) / 127
    sw = cp.abs(W).max(axis=0).astype(cp.float32) / 127
    sw[sw == 0] = 1
    Xq = cp.clip(cp.rint(X / sx), -127, 127).astype(cp.int8)
    Wq = cp.clip(cp.rint(W / sw[None, :]), -127, 127).astype(cp.int8)
    M, K = X.shape
    return gf.Operands("int8", Xq, cp.ascontiguousarray(Wq.T), M, W.shape[1], K,
                       row_scale=cp.full(M, sx, dtype=cp.float32), col_scale=sw)


# The error a correct GEMM in each format can reach here: its inputs' rounding
# (unit roundoff 2^-(mantissa bits + 1) per operand, INT8's scale/2 relative to
# a row's largest value), with room for the wide inputs' small values and for
# FP16 sums. The error is what this topic measures; the bound catches a broken one.
REL_ERR_BOUND = {"fp32": 1e-5, "tf32": 2e-3, "bf16": 1e-2, "fp16": 2e-3, "fp16_acc16": 2e-2, "int8": 0.1,
                 "fp8_e4m3": 0.1, "fp8_e5m2": 0.2}


def rel_err_bound(record: dict) -> float:
    return REL_ERR_BOUND[record["fmt"]]


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = [r for r in results.select(data, TOPIC) if r["variant"].startswith("error/")]
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    fig, axes = plotting.new_figure(7.5, 8.5, nrows=2)
    # each format its own colour and marker (TF32 and FP16 draw the same curve: the markers tell them apart)
    styles = {"fp32": ("tab:gray", "-", "o"), "tf32": ("tab:purple", "-", "s"), "bf16": ("tab:green", "-", "D"),
              "fp16": ("tab:blue", "-", "^"), "fp16_acc16": ("tab:cyan", ":", "v"), "int8": ("tab:red", "-", "P"),
              "fp8_e4m3": ("tab:orange", "-", "h"), "fp8_e5m2": ("tab:brown", "--", "*")}
    titles = {"normal": "inputs N(0, 1)", "wide": "inputs N(0, 1) x 2^U(-12, 12)"}  # the first in the figure's title
    for ax, dist in zip(axes, DISTS):
        for fmt in ERROR_FORMATS:
            pts = sorted((r["shape"][2], r["rel_err"]) for r in rows
                         if r["fmt"] == fmt and r["dist"] == dist and r["rel_err"] is not None)
            color, ls, marker = styles[fmt]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ms=4, color=color, linestyle=ls,
                        label=NAMES[fmt])
            over = sorted(r["shape"][2] for r in rows if r["fmt"] == fmt and r["dist"] == dist and r["rel_err"] is None)
            if over:
                ax.scatter(over, [1.0] * len(over), marker="x", color=color,
                           label=f"{NAMES[fmt]}: overflow")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K")
        ax.set_ylabel("relative error ||C - AB|| / ||AB||")
        if dist != DISTS[0]:
            ax.set_title(titles[dist], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="center right")
    return plotting.save(fig, axes[0], TOPIC, env, out_dir,
                         f"GEMM error against float64, M = N = 1024, {titles[DISTS[0]]}", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        err = f"{r['rel_err']:.2e}" if r["rel_err"] is not None else f"nonfinite {r['nonfinite']:.3f}"
        extra = f" {r['tflops']:7.1f} TFLOP/s x fp32 {r['ratio']:5.2f}"
        if "energy_j_per_gflop" in r:
            extra += f" {r['energy_j_per_gflop'] * 1e3:.2f} J/TFLOP"
        out.append(f"{r['variant']:26} {'x'.join(map(str, r['shape'])):>16} {err}{extra}")
    return out


def claims(data: dict) -> None:
    """docs/tensor-cores*.md, "What a format costs": what the plot and the layer table show."""
    rows = results.select(data, TOPIC)

    def err(fmt, dist, k):
        r = next(r for r in rows if r["variant"] == f"error/{fmt}/{dist}" and r["shape"][2] == k)
        return r["rel_err"] if r["rel_err"] is not None else r["nonfinite"]

    lo, hi = KS[0], KS[-1]
    for dist in DISTS:
        for k in KS:
            assert abs(err("tf32", dist, k) / err("fp16", dist, k) - 1) < 0.05      # same 10-bit mantissa
            assert 6 < err("bf16", dist, k) / err("fp16", dist, k) < 10              # three bits fewer: ~8x
            assert 1.8 < err("fp8_e5m2", dist, k) / err("fp8_e4m3", dist, k) < 2.2  # one bit fewer: ~2x
        for fmt in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32"):
            assert abs(err(fmt, dist, hi) / err(fmt, dist, lo) - 1) < 0.1            # flat in K
        assert err("fp32", dist, hi) > 4 * err("fp32", dist, lo)                     # FP32 sums grow with K
    assert err("fp16_acc16", "normal", hi) > 4 * err("fp16_acc16", "normal", lo)     # FP16 sums grow
    assert 10 < err("fp16_acc16", "normal", hi) / err("fp16", "normal", hi) < 20     # ten-odd times
    assert all(err("fp16_acc16", "wide", k) > 0.5 for k in KS)                       # FP16 sums overflow
    assert all(r["rel_err"] is not None for r in rows if r.get("fmt") != "fp16_acc16")
    assert all(err("int8", "wide", k) > 1.5 * err("int8", "normal", k) for k in KS)  # INT8 suffers
    for k in KS:
        assert abs(err("fp16", "wide", k) / err("fp16", "normal", k) - 1) < 0.1       # FP16 inputs do not
    layer = {r["fmt"]: r for r in rows if r["variant"].startswith("layer/")}
    assert layer["fp16"]["ratio"] > 10 and layer["bf16"]["ratio"] > 10 and layer["int8"]["ratio"] > 20
    assert layer["fp32"]["energy_j_per_gflop"] / layer["fp16"]["energy_j_per_gflop"] > 10
    assert 30 < layer["int8"]["rel_err"] / layer["fp16"]["rel_err"] < 80              # some fifty times
    assert 1e-4 < layer["fp16"]["rel_err"] < 1e-3 and 1e-2 < layer["int8"]["rel_err"] < 1e-1  # orders
    assert 6 < layer["bf16"]["rel_err"] / layer["fp16"]["rel_err"] < 10              # about 8 times
