"""Topic `attention_profile`: what Nsight Compute sees in one launch of each
fused attention kernel (kernels/cuda/attention.cu) and of the naive version's
two cuBLAS GEMMs alone, at BH = 16, N = 8192, d = 128 (the FP32 goal size),
`ncu --clock-control none`, in a child process that checks every result
against a float64 reference made on the host.

It answers one question: why the FP32 fused kernel stops short of 3 x the
naive version. Both do the same multiply-adds (2 FLOP per FFMA: the ratio
ffma_flop_ratio = 2 FFMA / useful FLOP is 1 for both), so the FP32 time is
set by how busy the FMA pipe is kept. Each record: the launch's time under
the profiler (ms; the two GEMMs summed), TFLOP/s of useful work (4 N^2 d
per head), ratio = the two GEMMs' time / this one's, the FMA pipe's and the
issue slots' share of their peak (time-weighted over the GEMMs' two
kernels), the Tensor Core pipe's share (FP16), the share of warp slots in
use, and registers per thread. Without ncu on PATH the bench stops and says
so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import results

TOPIC = "attention_profile"
ORDER = 146  # right after `attention`
BH, N, D = 16, 8192, 128
QUICK_N = 2048
STEPS = ("gemms_only", "fp32_rows", "fp32_blocked", "fp32_async", "fp16")
METRICS = {
    "ncu_ns": "gpu__time_duration.sum",
    "fma_pipe_active": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_active": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "tensor_pipe_active": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "warps_active": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "ffma": "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "regs": "launch__registers_per_thread",
}
SHARES = ("fma_pipe_active", "issue_active", "tensor_pipe_active", "warps_active")  # percent: time-weighted
LABELS = {
    "step": ("实现", "implementation"),
    "config": ("分块配置", "tile configuration"),
    "fma_pipe_active": ("FMA 流水线占用", "FMA pipe busy"),
    "issue_active": ("发射槽占用", "issue slots busy"),
    "tensor_pipe_active": ("Tensor 流水线占用", "tensor pipe busy"),
    "warps_active": ("活跃 warp 占比", "warp slots in use"),
    "ffma_flop_ratio": ("FFMA 折合 FLOP / 有效 FLOP", "FFMA FLOP / useful FLOP"),
    "regs": ("每线程寄存器", "registers per thread"),
}
WORDS = {
    "step": {"gemms_only": ("朴素版的两个 cuBLAS GEMM（无 softmax）", "the naive version's two cuBLAS GEMMs alone"),
             "fp32_rows": ("FP32 融合，每线程一行", "fused FP32, a row per thread"),
             "fp32_blocked": ("FP32 融合，寄存器分块", "fused FP32, register-blocked"),
             "fp32_async": ("FP32 融合，寄存器分块 + cp.async 流水线", "fused FP32, blocked + cp.async pipeline"),
             "fp16": ("FP16 融合，Tensor Core（mma.sync）", "fused FP16, Tensor Cores (mma.sync)")},
}


def launch_each(n: int) -> None:
    """The child ncu profiles: the two GEMMs (S = Q K^T, then S V: cuBLAS),
    then every fused kernel once (default configurations), each checked on
    64 query rows of head 0 against float64 on the host."""
    import cupy as cp
    import numpy as np

    from .. import attention as at, harness

    rng = np.random.default_rng(0)
    host = [rng.standard_normal((BH, n, D), dtype=np.float32) for _ in range(3)]
    q, k, v = (cp.asarray(x) for x in host)
    rows = slice(0, 64)
    want = at.attention_reference(host[0][:1], host[1][:1], host[2][:1], rows=rows)
    s = np.float64(host[0][0, rows]) @ np.float64(host[1][0]).T
    want_gemms = s @ np.float64(host[2][0])
    got = cp.asnumpy(cp.matmul(cp.matmul(q, k.transpose(0, 2, 1)), v)[0, rows])
    checks = [("gemms_only", got, want_gemms)]
    out = cp.empty_like(q)
    for kernel in ("fp32_rows", "fp32_blocked", "fp32_async"):
        out.fill(cp.nan)
        at.attention_fused(q, k, v, kernel=kernel, out=out)
        checks.append((kernel, cp.asnumpy(out[0, rows]), want))
    q16, k16, v16 = (cp.asarray(x.astype(np.float16)) for x in host)
    want16 = at.attention_reference(*(x[:1].astype(np.float16) for x in host), rows=rows)
    out.fill(cp.nan)
    at.attention_fused_fp16(q16, k16, v16, out=out)
    checks.append(("fp16", cp.asnumpy(out[0, rows]), want16))
    for name, got, ref in checks:
        err = harness.rel_err(got, ref)
        if not err < 3e-3:
            raise RuntimeError(f"{name}: rel_err {err}")
        print(f"rel_err {name} {err!r}", flush=True)


def kernel_step(name: str) -> str:
    """The step a profiled kernel belongs to: ours by name, any other (cuBLAS) the GEMMs."""
    for step in STEPS[1:]:
        if name.startswith(f"attention_{step}_"):
            return step
    return "gemms_only"


def profile(n: int) -> dict:
    """{step: {metric: value, "kernels": count, "err": rel_err}}: one launch
    of each under ncu; the GEMMs' two kernels combined (times and FFMAs
    summed, shares weighted by time, registers the larger)."""
    from .. import harness

    rows, lines = harness.ncu_metrics(list(METRICS.values()), "attention_|gemm|xmma|nvjet",
                                      ["kernels.bench.attention_profile", "--launch-each", str(n)],
                                      need="attention_profile reads Nsight Compute's counters")
    found: dict = {}
    for kernel, m in harness.ncu_launches(rows, METRICS):
        f = found.setdefault(kernel_step(kernel), {"kernels": 0, "ncu_ns": 0.0, "ffma": 0.0, "regs": 0.0,
                                                   **{k: 0.0 for k in SHARES}})
        f["kernels"] += 1
        f["ncu_ns"] += m["ncu_ns"]
        f["ffma"] += m["ffma"]
        f["regs"] = max(f["regs"], m["regs"])
        for key in SHARES:
            f[key] += m[key] * m["ncu_ns"]  # divided by the summed time below
    for f in found.values():
        for key in SHARES:
            f[key] /= f["ncu_ns"]
    for ln in lines:
        if ln.startswith("rel_err ") and ln.split()[1] in found:
            found[ln.split()[1]]["err"] = float(ln.split()[2])
    missing = set(STEPS) - {k for k, v in found.items() if "err" in v}
    if missing:
        raise RuntimeError(f"ncu reported nothing for {sorted(missing)}")
    return found


def measure(quick: bool = False) -> list[dict]:
    from .. import attention as at

    n = QUICK_N if quick else N
    shape = [BH, n, D]
    prof = profile(n)
    flop = at.useful_flop(BH, n, D)
    ref_id = results.record_id(TOPIC, "cublas", "gemms_only", shape, "float32")
    records = []
    for step in STEPS:
        p = prof[step]
        ms = p["ncu_ns"] / 1e6
        impl = "cublas" if step == "gemms_only" else "cupy"
        config = at.DEFAULT_CONFIG[step][D] if step in at.DEFAULT_CONFIG else None
        variant = step if config is None else f"{step}/{config}"
        records.append(results.record(
            TOPIC, impl, variant, shape, "float16" if step == "fp16" else "float32", ms=ms, ref=ref_id,
            rel_err=p["err"], tflops=flop / (ms * 1e-3) / 1e12, ratio=prof["gemms_only"]["ncu_ns"] / p["ncu_ns"],
            step=step, config=config, fma_pipe_active=p["fma_pipe_active"] / 100, issue_active=p["issue_active"] / 100,
            tensor_pipe_active=p["tensor_pipe_active"] / 100, warps_active=p["warps_active"] / 100,
            ffma_flop_ratio=2 * p["ffma"] / flop, regs=int(p["regs"]), ncu_kernels=p["kernels"],
            profiler="ncu --clock-control none"))
    return records


def claims(data: dict) -> None:
    """docs/algorithms*.md, "Why not 3x": the fused FP32 kernel does the
    GEMMs' multiply-adds and no fewer, and keeps the FMA pipe less busy than
    cuBLAS does; 3 x the naive version would need it busier than cuBLAS's."""
    r = {x["step"]: x for x in results.select(data, TOPIC)}
    gemms, best = r["gemms_only"], r["fp32_async"]
    assert all(abs(r[s]["ffma_flop_ratio"] - 1) < 0.02 for s in ("gemms_only", "fp32_blocked", "fp32_async"))
    assert r["fp16"]["ffma_flop_ratio"] < 0.1 and r["fp16"]["tensor_pipe_active"] > 0.2
    assert best["fma_pipe_active"] < gemms["fma_pipe_active"] and best["ratio"] < 1
    assert best["issue_active"] < gemms["issue_active"]
    assert r["fp32_rows"]["fma_pipe_active"] < 0.5                      # step 1: the FMA pipe mostly idle
    assert r["fp32_rows"]["fma_pipe_active"] < r["fp32_blocked"]["fma_pipe_active"] < best["fma_pipe_active"]
    assert r["fp16"]["tensor_pipe_active"] < 0.5  # the tensor pipe idle most of the time
    assert all(x["rel_err"] < 3e-3 for x in r.values())


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    return [f"{r['variant']:32} {r['ms']:8.3f} ms x{r['ratio']:.3f}  fma {r['fma_pipe_active']:.3f} "
            f"issue {r['issue_active']:.3f} tensor {r['tensor_pipe_active']:.3f} "
            f"ffma/flop {r['ffma_flop_ratio']:.3f} regs {r['regs']}"
            for r in results.select(data, TOPIC)]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--launch-each":
        launch_each(int(sys.argv[2]))
    else:
        raise SystemExit("usage: python -m kernels.bench.attention_profile --launch-each N")
