"""Topic `tc_cublas`: cuBLAS through CuPy in every format (kernels/gemm_formats.py)
on square GEMMs from 256^3 to 16384^3, against FP32 with TF32 off measured
in the same run, beside the datasheet's dense peaks (DATASHEET).

Each record: time (median of CUDA-event samples, operands rotated beyond
the L2 cache), TFLOP/s (or TOP/s for int8) = 2*n^3 / t, ratio to fp32 at
the same size, rel_err against the float64 product of the same stored
operands (the arithmetic's error alone; the formats' rounding of the inputs
is topic tc_formats). At 8192^3 also: board energy per useful GFLOP from
NVML's energy counter over >= 2 s, and the SM clock and board power NVML
reported during that loop (kernels.harness.ClockSampler). fp8 is not
measured here: cuBLAS multiplies FP8 only through cuBLASLt, which CuPy does
not wrap (gemm_formats emulates FP8 on the FP16 path for its error).
`torch.matmul` at FP16 and `torch._scaled_mm` at FP8 E4M3 are recorded as
optional anchors (impl `torch`) when torch imports; the bench says when it
does not.
"""

from __future__ import annotations

from pathlib import Path

from .. import results
from . import plotting

TOPIC = "tc_cublas"
ORDER = 44  # the Tensor Core chapter: formats, cuBLAS, then the ladder (45)
SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
ENERGY_SIZE = 8192
FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "int8")
TENSOR_FORMATS = ("tf32", "bf16", "fp16", "int8", "fp8")  # peaks at the sheet's Tensor Core clock
LABELS = {
    "sm_clock_mhz": ("SM 时钟 (MHz)", "SM clock (MHz)"),
    "power_w_median": ("功率中位数 (W)", "median power (W)"),
    "j_per_tflop": ("能耗 (J/TFLOP)", "energy (J/TFLOP)"),
    "datasheet": ("数据手册峰值", "datasheet peak"),
    "loop_tflops": ("同一循环内的速率 (TFLOP/s)", "rate in that loop (TFLOP/s)"),
    "peak_share_at_clock": ("占按时钟折算峰值的比例", "share of the peak at that clock"),
}
# NVIDIA H200 Tensor Core GPU datasheet (SXM), dense rates: the datasheet's
# Tensor Core figures are "with sparsity", twice the dense rate, and are
# halved here. TFLOP/s (TOP/s for int8). fp64 and fp32 are the Tensor Core
# FP64 and the CUDA-core FP32 rates.
DATASHEET = {"NVIDIA H200": {"fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                             "fp8": 1979.0, "int8": 1979.0}}
PLOT_WORDS = {
    "cuBLAS through CuPy, square GEMMs": "经 CuPy 调用 cuBLAS，方阵 GEMM",
    "n (M = N = K)": "n（M = N = K）",
    "TFLOP/s (TOP/s for INT8)": "TFLOP/s（INT8 为 TOP/s）",
    "dashed: datasheet dense peak": "虚线：数据手册稠密峰值",
    "energy per useful TFLOP at 8192^3": "8192³ 时每有效 TFLOP 的能耗",
    "J per TFLOP (TOP for INT8)": "J/TFLOP（INT8 为 J/TOP）",
    "FP32 (TF32 off)": "FP32（关闭 TF32）",
}
NAMES = {"fp64": "FP64", "fp32": "FP32 (TF32 off)", "tf32": "TF32", "bf16": "BF16", "fp16": "FP16",
         "int8": "INT8", "fp8": "FP8 E4M3"}


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import gemm_formats as gf, harness

    sizes = (256, 1024) if quick else SIZES
    energy_size = 1024 if quick else ENERGY_SIZE
    gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    peaks = DATASHEET.get(gpu, {})
    records = []
    for n in sizes:
        shape = [n, n, n]
        rng = cp.random.default_rng(n)
        A = rng.standard_normal((n, n))
        B = rng.standard_normal((n, n))
        ref_id = results.record_id(TOPIC, "cublas", "fp32", shape, "fp32")
        base = None
        for fmt in FORMATS:
            q = gf.quantize(A, B, fmt)
            Av, Bv = gf.values(q)
            exact = Av @ Bv
            del Av, Bv
            C = gf.matmul(q)
            C.fill(0)
            gf.matmul(q, C)
            err = harness.rel_err(gf.dequantize(q, C), exact)
            del exact
            if not err < 1e-2:
                raise RuntimeError(f"{fmt} {n}: rel_err {err}")
            per = q.A.nbytes + q.B.nbytes + C.nbytes
            sets = [(q, C)] + [(gf.Operands(q.fmt, q.A.copy(), q.B.copy(), n, n, n, q.row_scale, q.col_scale),
                                cp.empty_like(C)) for _ in range(harness.rotation(per) - 1)]
            t = harness.time_gpu(gf.matmul, sets, warmup=2, samples=15, max_seconds=0.5 if quick else 1.5)
            rec = results.record(TOPIC, "cublas", fmt, shape, fmt, ms=t["ms"], ref=ref_id, rel_err=err,
                                 tflops=2 * n**3 / (t["ms"] * 1e-3) / 1e12, samples=t["samples"])
            if fmt in peaks:
                rec["datasheet"] = peaks[fmt]
            if n == energy_size:
                rec.update(_energy_window(gf.matmul, sets, n, quick, peaks.get(fmt), tensor=fmt in TENSOR_FORMATS))
            base = rec if fmt == "fp32" else base
            records.append(rec)
            del q, C, sets
            cp.get_default_memory_pool().free_all_blocks()
        for r in records:
            if r["shape"] == shape:
                r["ratio"] = r["tflops"] / base["tflops"]
        del A, B
        cp.get_default_memory_pool().free_all_blocks()
    fp32 = {tuple(r["shape"]): r["tflops"] for r in records if r["variant"] == "fp32"}
    for r in _torch_anchors(sizes, energy_size, quick, peaks):
        r["ratio"] = r["tflops"] / fp32[tuple(r["shape"])]
        records.append(r)
    return records


def sheet_clock_mhz(gpu: str = "NVIDIA H200") -> float:
    """The SM clock the datasheet's Tensor Core peak implies: BF16 dense =
    SMs x 2048 FMA per clock x 2 FLOP x clock (H200: 132 SMs, about 1830 MHz)."""
    return DATASHEET[gpu]["bf16"] * 1e12 / (132 * 2048 * 2) / 1e6


def _energy_window(fn, sets, n: int, quick: bool, peak: float | None, tensor: bool) -> dict:
    """One loop of >= 2 s measures the rate, the clock and the power together:
    board energy (NVML's counter), the SM clock and power sampled during it,
    and the loop's own rate (calls x 2n^3 / its seconds), so that the rate
    can be set against the clock it ran at. peak_share_at_clock: that rate over
    the datasheet peak scaled to the loop's median clock (the Tensor Core
    formats, whose peaks the sheet gives at one clock)."""
    from .. import harness

    with harness.ClockSampler() as clocks:
        e = harness.measure_energy(fn, sets, min_seconds=0.5 if quick else 2.0)
    out = {**harness.energy_fields(e, gflop=2 * n**3 / 1e9), **clocks.summary()}
    out["j_per_tflop"] = out["energy_j_per_gflop"] * 1e3
    out["loop_tflops"] = e["calls"] * 2 * n**3 / e["seconds"] / 1e12
    if peak is not None and tensor:
        out["peak_share_at_clock"] = out["loop_tflops"] / (peak * out["sm_clock_mhz"] / sheet_clock_mhz())
    return out


def _torch_anchors(sizes, energy_size, quick, peaks) -> list[dict]:
    """torch.matmul (FP16 in and out, FP32 accumulation) and
    torch._scaled_mm (FP8 E4M3 in, BF16 out): optional, in the same run."""
    try:
        import torch
    except ImportError:
        print("tc_cublas: torch is not importable; its FP16 and FP8 anchors are not measured")
        return []
    import cupy as cp

    from .. import harness

    out = []
    for n in sizes:
        shape = [n, n, n]
        ref_id = results.record_id(TOPIC, "cublas", "fp32", shape, "fp32")
        g = torch.Generator(device="cuda").manual_seed(n)
        a = torch.randn(n, n, device="cuda", generator=g)
        b = torch.randn(n, n, device="cuda", generator=g)
        cases = [("fp16", "fp16", a.half(), b.half(), lambda x, y: torch.matmul(x, y))]
        if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
            one = torch.ones((), device="cuda")
            cases.append(("fp8", "fp8_e4m3", a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t(),
                          lambda x, y: torch._scaled_mm(x, y, one, one, out_dtype=torch.bfloat16)))
        for fmt, dtype, x, y, fn in cases:
            try:
                c = fn(x, y)
            except Exception as exc:  # an older torch or GPU without the op: say so
                print(f"tc_cublas: torch {fmt} at {n} not measured: {exc}")
                continue
            exact = x.double() @ y.double()
            err = float(torch.linalg.norm(c.double() - exact) / torch.linalg.norm(exact))
            t = harness.time_gpu(lambda: fn(x, y), warmup=2, samples=15, max_seconds=0.5 if quick else 1.5)
            rec = results.record(TOPIC, "torch", f"{fmt}_torch", shape, dtype, ms=t["ms"], ref=ref_id, rel_err=err,
                                 tflops=2 * n**3 / (t["ms"] * 1e-3) / 1e12, samples=t["samples"],
                                 torch=torch.__version__)
            if fmt in peaks:
                rec["datasheet"] = peaks[fmt]
            if n == energy_size:
                rec.update(_energy_window(lambda: fn(x, y), ((),), n, quick, peaks.get(fmt), tensor=True))
            out.append(rec)
        del a, b, cases
        torch.cuda.empty_cache()
    cp.get_default_memory_pool().free_all_blocks()
    return out


def rel_err_bound(record: dict) -> float:
    """torch._scaled_mm writes BF16 (8 significant bits: 2^-9 relative
    rounding per element); everything else is checked to 1e-3."""
    return 2.0**-8 if record["variant"] == "fp8_torch" else 1e-3


def plot(data: dict, out_dir: Path) -> list[Path]:
    import numpy as np

    rows = results.select(data, TOPIC)
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    fig, (ax, ax2) = plotting.new_figure(7.5, 8.5, nrows=2)
    series = [("cublas", f) for f in FORMATS] + [("torch", "fp16_torch"), ("torch", "fp8_torch")]
    colors = {"fp64": "tab:brown", "fp32": "tab:gray", "tf32": "tab:purple", "bf16": "tab:green",
              "fp16": "tab:blue", "int8": "tab:red", "fp8": "tab:orange"}
    for impl, variant in series:
        pts = sorted((r["shape"][0], r["tflops"]) for r in rows if r["impl"] == impl and r["variant"] == variant)
        if not pts:
            continue
        fmt = variant.replace("_torch", "")
        label = NAMES[fmt] + (" (torch)" if impl == "torch" else "")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=colors[fmt], label=label,
                linestyle=":" if impl == "torch" else "-")
    peaks = {r["variant"].replace("_torch", ""): r["datasheet"] for r in rows if "datasheet" in r}
    for fmt, peak in peaks.items():
        ax.axhline(peak, color=colors[fmt], linestyle="--", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n (M = N = K)")
    ax.set_ylabel("TFLOP/s (TOP/s for INT8)")
    ax.legend(fontsize=7, ncol=2, title="dashed: datasheet dense peak", title_fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    energy = [r for r in rows if "j_per_tflop" in r]
    names = [NAMES[r["variant"].replace("_torch", "")] + (" (torch)" if r["impl"] == "torch" else "") for r in energy]
    ax2.bar(np.arange(len(energy)), [r["j_per_tflop"] for r in energy],
            color=[colors[r["variant"].replace("_torch", "")] for r in energy])
    for i, r in enumerate(energy):
        ax2.text(i, r["j_per_tflop"], f"{r['j_per_tflop']:.2f}", ha="center", va="bottom", fontsize=7)
    ax2.set_xticks(np.arange(len(energy)), names, fontsize=7, rotation=20)
    ax2.set_yscale("log")
    ax2.set_ylabel("J per TFLOP (TOP for INT8)")
    ax2.set_title("energy per useful TFLOP at 8192^3", fontsize=9)
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "cuBLAS through CuPy, square GEMMs", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        e = f" {r['j_per_tflop']:6.2f} J/TFLOP {r['sm_clock_mhz']:.0f} MHz {r['power_w_median']:.0f} W" \
            if "j_per_tflop" in r else ""
        out.append(f"{r['impl']:6} {r['variant']:11} {r['shape'][0]:>6} {r['ms']:9.4f} ms {r['tflops']:8.1f} "
                   f"x fp32 {r['ratio']:6.2f} err {r['rel_err']:.1e}{e}")
    return out


def claims(data: dict) -> None:
    """docs/tensor-cores*.md, "cuBLAS across formats": what the table and plot show."""
    rows = results.select(data, TOPIC)

    def rec(variant, n=ENERGY_SIZE, impl="cublas"):
        return next(r for r in rows if r["impl"] == impl and r["variant"] == variant and r["shape"][0] == n)

    for fmt in FORMATS:
        r = rec(fmt)
        assert 0.6 < r["tflops"] / r["datasheet"] < 0.85, (fmt, r["tflops"] / r["datasheet"])  # well below the sheet
        assert r["power_w_median"] > 650                                            # at the 700 W cap
    assert rec("fp32")["sm_clock_mhz"] > 1900                                        # FP32 runs at full clock
    assert 0.7 < rec("fp32")["tflops"] / rec("fp32")["datasheet"] < 0.8              # a little over 7 tenths
    tc_clock = sheet_clock_mhz()                                                     # the sheet's clock, ~1830 MHz
    for fmt in ("tf32", "bf16", "fp16", "int8"):
        r = rec(fmt)
        assert 0.65 < r["sm_clock_mhz"] / tc_clock < 0.85                            # two to three tenths lower
        # rate, clock and power from one loop of >= 2 s: scaled to the clock it ran at, the
        # Tensor Cores still fall clearly short of the peak (the clock explains part of the gap)
        assert abs(r["loop_tflops"] / r["tflops"] - 1) < 0.2, fmt                   # the loop's rate near the timed one
        assert 0.7 < r["peak_share_at_clock"] < 0.92, (fmt, r["peak_share_at_clock"])  # a clear part remains
        assert r["peak_share_at_clock"] > r["loop_tflops"] / r["datasheet"]          # ... but the clock is part of it
    assert rec("fp64")["sm_clock_mhz"] > max(rec(f)["sm_clock_mhz"] for f in ("tf32", "bf16", "fp16", "int8"))
    for fmt in ("tf32", "bf16", "fp16", "int8"):
        assert rec(fmt)["sm_clock_mhz"] < 1600                                       # the Tensor Cores clock down
    assert rec("fp32")["j_per_tflop"] / rec("bf16")["j_per_tflop"] > 10              # over ten times
    assert rec("int8")["j_per_tflop"] < rec("bf16")["j_per_tflop"] / 1.5            # INT8 cheaper again
    assert rec("fp16", 1024)["ms"] * 1e-3 > 2 * 1024**3 / 312e12    # one call takes longer than 312 TFLOPS' GEMM
    assert 6 < rec("tf32")["ratio"] < 8                                              # TF32: six to seven times
    assert rec("bf16")["ratio"] > 10 and rec("int8")["ratio"] > 20                  # over 10x and 20x
    for fmt in ("tf32", "bf16", "fp16", "int8"):  # n = 256 .. 1024: one call's time hardly changes (the call rate)
        assert rec(fmt, 1024)["ms"] < 1.5 * rec(fmt, 256)["ms"], fmt
    assert max(r["tflops"] for r in rows if r["variant"] == "bf16") < 0.8 * DATASHEET["NVIDIA H200"]["bf16"]
    if any(r["impl"] == "torch" for r in rows):
        assert abs(rec("fp16_torch", impl="torch")["tflops"] / rec("fp16")["tflops"] - 1) < 0.1  # the same cuBLAS
        assert rec("fp8_torch", impl="torch")["tflops"] > 1.5 * rec("fp16")["tflops"]
