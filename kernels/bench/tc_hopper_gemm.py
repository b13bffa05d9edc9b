"""Topic `tc_hopper_gemm`: the Hopper FP16 GEMM of the warp-specialization
chapter (kernels/cuda/hopper_gemm.cu: TMA, mbarriers, wgmma, setmaxnreg,
clusters) against cuBLAS's GEMM of the same layout (C = A @ Bt^T, FP16 in,
FP32 accumulate and out; cublasGemmEx) at 4096^3 and 8192^3.

Each record:
- time: paired rounds (kernels.harness.paired_rounds): every round times
  each kernel and cuBLAS back to back (CUDA events, median of a batch; the
  order reversed every other round); ms is the median over rounds and
  ratio = cuBLAS's ms / this ms; paired_ratio, the median of the per-round
  ratios, with their spread (ratio_min, ratio_max) beside it (a drift of
  the clock between rounds hits both alike);
- sustained: throughput, board energy per GFLOP (NVML energy counter) and
  the SM clock (NVML, sampled) over a loop of >= 2.5 s, where the 700 W
  power limit sets the clock;
- (one launch of each under Nsight Compute: topic tc_hopper_gemm_profile);
- registers, shared memory and blocks per SM of the kernel.
"""

from __future__ import annotations

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
        paired = harness.paired_rounds({name: (fn, args) for name, fn in fns.items()}, "cublas",
                                       rounds=2 if quick else ROUNDS, warmup=1, samples=5, max_seconds=1.0)
        sustained = {}
        for name, fn in fns.items():
            with harness.ClockSampler(0.05) as clocks:
                e = harness.measure_energy(fn, args, min_seconds=0.5 if quick else 2.5)
            sustained[name] = (e, clocks.summary())
        cub_e, _ = sustained["cublas"]
        for name in fns:
            ms = paired[name]["ms"]
            ratio = paired["cublas"]["ms"] / ms  # = tflops / cuBLAS's tflops
            e, clk = sustained[name]
            fields = dict(
                tflops=2 * n**3 / (ms * 1e-3) / 1e12, **harness.paired_fields(paired[name], ref_id),
                sustained_tflops=2 * n**3 * e["calls"] / e["seconds"] / 1e12,
                sustained_ratio=(e["calls"] / e["seconds"]) / (cub_e["calls"] / cub_e["seconds"]),
                energy_ratio=(e["j_per_call"] / cub_e["j_per_call"]),
                sm_clock_mhz=clk.get("sm_clock_mhz"), power_w_median=clk.get("power_w_median"),
                **harness.energy_fields(e, gflop=gflop))
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
    "Hopper FP16 GEMM against cuBLAS": "手写 FP16 GEMM（专用化与否）与 cuBLAS 对比",
    "BN": "分块宽",
    "speed vs cuBLAS (cuBLAS's time / this kernel's)": "相对 cuBLAS 的速度（cuBLAS 的时间 / 本核函数的时间）",
    "plain": "不专用化",
    "specialized": "专用化",
    "persistent": "常驻",
    "cluster": "簇",
    "ping-pong": "乒乓",
    "cuBLAS's speed": "cuBLAS 的速度",
}


def _label(r: dict) -> str:
    parts = ["specialized" if r["specialized"] else "plain", f"BN {r['bn']}"]
    if r["persistent"]:
        parts.append("persistent")
    if r["cluster"] > 1:
        parts.append(f"cluster {r['cluster']}")
    if "pingpong" in r["variant"]:
        parts.append("ping-pong")
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
    ax.axhline(1.0, color="k", lw=0.8, label="cuBLAS's speed")  # ratio 1: as fast as cuBLAS
    ax.set_xticks(range(len(names)), [_label(by[v, sizes[-1]]) for v in names], fontsize=7)
    ax.set_ylabel("speed vs cuBLAS (cuBLAS's time / this kernel's)")
    ax.set_ylim(0.5, 1.1)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)  # plotting.save moves it clear of the bars
    return plotting.save(fig, ax, TOPIC, env, out_dir, "Hopper FP16 GEMM against cuBLAS", fontsize=9,
                         words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        out.append(f"{r['variant']:30} {r['shape'][0]:5} {r['ms']:8.4f} ms {r['tflops']:6.1f} TFLOP/s "
                   f"x{r['ratio']:.3f} sustained x{r['sustained_ratio']:.3f} energy x{r['energy_ratio']:.3f} "
                   )
    return out


def claims(data: dict) -> None:
    """docs/warp-specialization*.md, the GEMM's "Measured": what the table
    shows, against the committed measurements."""
    from .. import harness

    rows = results.select(data, TOPIC)
    r = {(x["variant"], x["shape"][0]): x for x in rows}
    for n in SIZES:
        best = max((x for x in rows if x["impl"] == "cupy" and x["shape"][0] == n), key=lambda x: x["paired_ratio"])
        # short runs: level with cuBLAS at both sizes (the rounds' ratios on both sides of 1.0) ...
        assert harness.against(best, 1.0) == "level", n
        assert harness.against(best, 0.85) == "above", n    # ... and never 15 % behind
        assert 0.95 <= best["sustained_ratio"] <= 1.02, n   # over seconds, at the power-limited clock: within 5 %
        assert best["energy_ratio"] <= 1.06, n              # about the same energy per FLOP
        for family in ("hg_plain", "hg_ws", "hg_ws_persistent"):       # BN = 256 ahead in every family
            assert r[f"{family}_256", n]["ratio"] > r[f"{family}_128", n]["ratio"], (family, n)
        assert abs(r["hg_plain_256", n]["paired_ratio"] - r["hg_ws_256", n]["paired_ratio"]) < 0.05, n  # specialization alone
        assert r["hg_ws_128", n]["ratio"] > 1.05 * r["hg_plain_128", n]["ratio"], n  # ... pays at BN = 128
        for v in ("hg_plain_256", "hg_ws_256", "hg_ws_persistent_256", "hg_ws_cluster_persistent_256"):
            assert 0.93 <= r[v, n]["sustained_ratio"] <= 1.05, (v, n)
    assert all(x["rel_err"] < 1e-5 for x in rows)


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
