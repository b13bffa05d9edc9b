"""Topic `tc_hopper_gemm`: the Hopper FP16 GEMM of the warp-specialization
chapter (kernels/cuda/hopper_gemm.cu: TMA, mbarriers, wgmma, setmaxnreg,
clusters) against cuBLAS's GEMM of the same layout (C = A @ Bt^T, FP16 in,
FP32 accumulate and out; cublasGemmEx) at 4096^3 and 8192^3.

Each record:
- time: paired rounds. Every round times each kernel and cuBLAS back to
  back (CUDA events, median of a batch); ms is the median over rounds and
  ratio = cuBLAS's ms / this ms; paired_ratio, the median of the per-round
  ratios, beside it (a drift of the clock between rounds hits both alike);
- TFLOP/s = 2*M*N*K / ms; rel_err against a float64 product of the same
  FP16 inputs (output poisoned with NaN first);
- sustained: throughput, board energy per GFLOP (NVML energy counter) and
  the SM clock (NVML, sampled) over a loop of >= 2.5 s, where the 700 W
  power limit sets the clock;
- one launch under Nsight Compute (--clock-control none, in a child
  process): its time, SM clock, the tensor pipe's share of its peak, L2
  and DRAM bytes; ncu_ratio = cuBLAS's profiled time / this one's;
- registers, shared memory and blocks per SM of the kernel.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from .. import results
from . import plotting

TOPIC = "tc_hopper_gemm"
ORDER = 47  # after the Tensor Core chapter's topics, in the warp-specialization chapter
SIZES = (4096, 8192)
ROUNDS = 5
LABELS = {
    "paired_ratio": ("逐轮配对的比值（中位数）", "paired ratio (median of rounds)"),
    "sustained_tflops": ("持续 TFLOP/s（≥ 2.5 s）", "sustained TFLOP/s (>= 2.5 s)"),
    "sustained_ratio": ("持续吞吐相对 cuBLAS", "sustained vs cuBLAS"),
    "energy_ratio": ("每 GFLOP 能耗相对 cuBLAS", "energy per GFLOP vs cuBLAS"),
    "sm_clock_mhz": ("SM 时钟 (MHz)", "SM clock (MHz)"),
    "ncu_ms": ("ncu 单次时间 (ms)", "ncu one launch (ms)"),
    "ncu_ratio": ("ncu 单次相对 cuBLAS", "ncu one launch vs cuBLAS"),
    "ncu_clock_ghz": ("ncu 下的 SM 时钟 (GHz)", "SM clock under ncu (GHz)"),
    "tensor_pipe_active": ("Tensor 流水线占用", "tensor pipe busy"),
    "l2_gbytes": ("L2 流量 (GB)", "L2 traffic (GB)"),
    "dram_gbytes": ("显存流量 (GB)", "DRAM traffic (GB)"),
    "specialized": ("专用化", "specialized"),
    "persistent": ("常驻", "persistent"),
    "cluster": ("簇", "cluster"),
    "bn": ("BN", "BN"),
    "stages": ("级数", "stages"),
}
METRICS = {
    "ncu_ns": "gpu__time_duration.sum",
    "ncu_hz": "sm__cycles_elapsed.avg.per_second",
    "tensor_pipe_active": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "l2_bytes": "lts__t_bytes.sum",
    "dram_bytes": "dram__bytes.sum",
}


def launch_each(n: int) -> None:
    """The child ncu profiles: cuBLAS and every kernel once at n^3, each
    checked against a float64 product."""
    import cupy as cp

    from .. import harness, hopper_gemm as hg

    import numpy as np

    rng = np.random.default_rng(n)
    A16 = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    Bt16 = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    # the reference on the host: a float64 GEMM on the GPU would be profiled as cuBLAS's
    ref = A16.astype(np.float64) @ Bt16.astype(np.float64).T
    A, Bt = cp.asarray(A16), cp.asarray(Bt16)
    C = cp.empty((n, n), dtype=cp.float32)
    for name in ("cublas", *hg.KERNELS):
        C.fill(cp.nan)
        if name == "cublas":
            hg.cublas_gemm_tn(A, Bt, C)
        else:
            hg.hopper_gemm(A, Bt, C, kernel=name)
        err = harness.rel_err(cp.asnumpy(C), ref)
        if not err < 1e-5:
            raise RuntimeError(f"{name}: rel_err {err}")


def profile(n: int) -> dict:
    """{kernel or "cublas": {metric: value}} from one launch each under ncu."""
    from .. import harness, hopper_gemm as hg

    rows, _ = harness.ncu_metrics(list(METRICS.values()), "hg_|gemm|nvjet|xmma",
                                  ["kernels.bench.tc_hopper_gemm", "--launch-each", str(n)],
                                  need="tc_hopper_gemm reads Nsight Compute's counters")
    by_metric = {v: k for k, v in METRICS.items()}
    found: dict = {}
    for kernel, metric, value in rows:
        name = kernel if kernel in hg.KERNELS else "cublas"
        if metric in by_metric:
            m = found.setdefault(name, {})
            if metric == METRICS["ncu_ns"] and "ncu_ns" in m:  # cuBLAS in several kernels: times summed
                m["ncu_ns"] += value
            else:
                m[by_metric[metric]] = value
    missing = {"cublas", *hg.KERNELS} - set(found)
    if missing:
        raise RuntimeError(f"ncu reported nothing for {sorted(missing)}")
    return found


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, hopper_gemm as hg
    from ..device import kernel_attributes

    sizes = (2048,) if quick else SIZES
    records = []
    for n in sizes:
        shape = [n, n, n]
        gflop = 2 * n**3 / 1e9
        rng = cp.random.default_rng(n)
        sets = harness.rotation(n * n * (2 + 2 + 4))  # A, Bt (FP16) and C (FP32) beyond the L2 cache
        args = [(rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16),
                 rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16),
                 cp.empty((n, n), dtype=cp.float32)) for _ in range(sets)]
        A0, B0, C0 = args[0]
        ref = A0.astype(cp.float64) @ B0.astype(cp.float64).T
        ref_id = results.record_id(TOPIC, "cublas", "gemmex_tn_f16_f32", shape, "float16")
        fns = {"cublas": hg.cublas_gemm_tn}
        fns.update({k: (lambda A, B, C, k=k: hg.hopper_gemm(A, B, C, kernel=k)) for k in hg.KERNELS})
        errs = {}
        for name, fn in fns.items():
            C0.fill(cp.nan)
            fn(*args[0])
            errs[name] = harness.rel_err(C0, ref)
            if not errs[name] < 1e-5:
                raise RuntimeError(f"{name} {n}: rel_err {errs[name]}")
        del ref
        times = {name: [] for name in fns}
        for _ in range(2 if quick else ROUNDS):  # paired rounds: every kernel beside cuBLAS
            for name, fn in fns.items():
                times[name].append(harness.time_gpu(fn, args, warmup=1, samples=5, max_seconds=1.0)["ms"])
        sustained = {}
        for name, fn in fns.items():
            with harness.ClockSampler(0.05) as clocks:
                e = harness.measure_energy(fn, args, min_seconds=0.5 if quick else 2.5)
            sustained[name] = (e, clocks.summary())
        prof = profile(n)
        cub_e, _ = sustained["cublas"]
        for name in fns:
            ms = statistics.median(times[name])
            ratio = statistics.median(times["cublas"]) / ms  # = tflops / cuBLAS's tflops
            paired = statistics.median(c / t for c, t in zip(times["cublas"], times[name]))
            e, clk = sustained[name]
            p = prof[name]
            fields = dict(
                tflops=2 * n**3 / (ms * 1e-3) / 1e12, rounds=len(times[name]), paired_ratio=paired,
                sustained_tflops=2 * n**3 * e["calls"] / e["seconds"] / 1e12,
                sustained_ratio=(e["calls"] / e["seconds"]) / (cub_e["calls"] / cub_e["seconds"]),
                energy_ratio=(e["j_per_call"] / cub_e["j_per_call"]),
                sm_clock_mhz=clk.get("sm_clock_mhz"), power_w_median=clk.get("power_w_median"),
                ncu_ms=p["ncu_ns"] / 1e6, ncu_ratio=prof["cublas"]["ncu_ns"] / p["ncu_ns"],
                ncu_clock_ghz=p["ncu_hz"] / 1e9, tensor_pipe_active=p["tensor_pipe_active"] / 100,
                l2_gbytes=p["l2_bytes"] / 1e9, dram_gbytes=p["dram_bytes"] / 1e9,
                profiler="ncu --clock-control none", **harness.energy_fields(e, gflop=gflop))
            if name == "cublas":
                rec = results.record(TOPIC, "cublas", "gemmex_tn_f16_f32", shape, "float16", ms=ms,
                                     rel_err=errs[name], ratio=1.0, **fields)
            else:
                bn, stages, threads, persistent, cluster = hg.KERNELS[name]
                rec = results.record(TOPIC, "cupy", name, shape, "float16", ms=ms, ref=ref_id,
                                     rel_err=errs[name], ratio=ratio, bn=bn, stages=stages,
                                     specialized=threads == 384, persistent=persistent, cluster=cluster,
                                     **fields, **kernel_attributes(hg.hg_kernel(name), threads, hg.smem_bytes(name)))
            records.append(rec)
        del args, A0, B0, C0
        cp.get_default_memory_pool().free_all_blocks()
    return records


PLOT_WORDS = {
    "Hopper FP16 GEMM against cuBLAS": "Hopper FP16 GEMM 与 cuBLAS 对比",
    "this kernel / cuBLAS (time, paired rounds)": "本核函数 / cuBLAS（时间，成对轮次）",
    "plain": "不专用化",
    "specialized": "专用化",
    "persistent": "常驻",
    "cluster": "簇",
}


def _label(r: dict) -> str:
    parts = ["specialized" if r["specialized"] else "plain", f"BN {r['bn']}"]
    if r["persistent"]:
        parts.append("persistent")
    if r["cluster"] > 1:
        parts.append(f"cluster {r['cluster']}")
    return "\n".join(parts)


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = [r for r in results.select(data, TOPIC) if r["impl"] == "cupy"]
    env = data["topics"][TOPIC]["env"]
    sizes = sorted({r["shape"][0] for r in rows})
    names = list(dict.fromkeys(r["variant"] for r in rows))
    by = {(r["variant"], r["shape"][0]): r for r in rows}
    fig, ax = plotting.new_figure(8.5, 4.0)
    width = 0.8 / len(sizes)
    for j, n in enumerate(sizes):
        xs = [i + (j - (len(sizes) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, [by[v, n]["ratio"] for v in names], width, label=f"{n}³")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.95, color="tab:red", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)), [_label(by[v, sizes[-1]]) for v in names], fontsize=7)
    ax.set_ylabel("this kernel / cuBLAS (time, paired rounds)")
    ax.set_ylim(0.5, 1.1)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return plotting.save(fig, ax, TOPIC, env, out_dir, "Hopper FP16 GEMM against cuBLAS", fontsize=9,
                         words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        out.append(f"{r['variant']:30} {r['shape'][0]:5} {r['ms']:8.4f} ms {r['tflops']:6.1f} TFLOP/s "
                   f"x{r['ratio']:.3f} sustained x{r['sustained_ratio']:.3f} energy x{r['energy_ratio']:.3f} "
                   f"ncu x{r['ncu_ratio']:.3f} tensor {r['tensor_pipe_active']:.3f} L2 {r['l2_gbytes']:.2f} GB")
    return out


def sanitize() -> None:
    """`make sanitize`: every kernel once at small odd shapes, checked."""
    import cupy as cp

    from kernels import harness, hopper_gemm as hg

    for M, N, K in ((1, 1, 8), (130, 260, 200), (300, 129, 72)):
        A = cp.random.standard_normal((M, K), dtype=cp.float32).astype(cp.float16)
        Bt = cp.random.standard_normal((N, K), dtype=cp.float32).astype(cp.float16)
        ref = A.astype(cp.float64) @ Bt.astype(cp.float64).T
        for name in hg.KERNELS:
            C = cp.full((M, N), cp.nan, dtype=cp.float32)
            hg.hopper_gemm(A, Bt, C, kernel=name)
            assert harness.rel_err(C, ref) < 1e-5, (name, M, N, K)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--launch-each":
        launch_each(int(sys.argv[2]))
    else:
        raise SystemExit("usage: python -m kernels.bench.tc_hopper_gemm --launch-each N")
