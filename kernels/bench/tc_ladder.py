"""Topic `tc_ladder`: the hand-written Tensor Core ladder (FP16 in, FP32
accumulate and out; kernels/cuda/tensor_cores.cu) against cuBLAS's FP16 GEMM
with FP32 output (cublasGemmEx, CUBLAS_COMPUTE_32F) measured in the same
run, at 4096^3 and 8192^3; and the ceiling of mma.sync itself (register
operands only).

Each record: time (median of CUDA-event samples), TFLOP/s = 2*M*N*K / t,
ratio to cuBLAS at the same size, rel_err against a float64 product of the
same FP16 inputs (output poisoned with NaN first), board energy per useful
GFLOP from NVML over >= 2 s, and the kernel's registers, shared and local
memory and the driver's occupancy. The sweep of tc_mma_async_t's
configurations (TC_CONFIGS) is recorded as variants `config/<BMxBNxBKxWMxWNxSTAGES>`
(tuning: true, time only) at 8192^3.
"""

from __future__ import annotations

from pathlib import Path

from .. import results

TOPIC = "tc_ladder"
ORDER = 45  # the Tensor Core chapter sits before the matmul case study
LABELS = {
    "step": ("步骤", "step"),
    "config": ("配置", "config"),
    "dynamic_smem_bytes": ("动态共享内存 (B)", "dynamic shared memory (B)"),
}
SIZES = (4096, 8192)
PAIRED = ("mma_async", "mma_tuned")  # the steps the page holds to cuBLAS's speed and to the goal


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, tensor_cores as tc
    from ..device import kernel_attributes

    sizes = (1024,) if quick else SIZES
    records = []
    for n in sizes:
        shape = [n, n, n]
        gflop = 2 * n**3 / 1e9
        rng = cp.random.default_rng(n)
        sets = harness.rotation(n * n * (2 + 2 + 4))  # A, B (FP16) and C (FP32) beyond the L2 cache
        args = [(rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16),
                 rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16),
                 cp.empty((n, n), dtype=cp.float32)) for _ in range(sets)]
        A0, B0, C0 = args[0]
        ref = A0.astype(cp.float64) @ B0.astype(cp.float64)
        ref_id = results.record_id(TOPIC, "cublas", "gemmex_f16_f32", shape, "float16")

        fns = {}

        def run(impl, variant, fn, extra=None, energy=True):
            fns[variant] = fn
            C0.fill(cp.nan)
            fn(*args[0])
            err = harness.rel_err(C0, ref)
            if not err < 1e-5:
                raise RuntimeError(f"{impl} {variant} {n}: rel_err {err}")
            t = harness.time_gpu(fn, args, warmup=2, samples=20, max_seconds=2.0 if quick else 6.0)
            rec = results.record(TOPIC, impl, variant, shape, "float16", ms=t["ms"], ref=ref_id, rel_err=err,
                                 tflops=2 * n**3 / (t["ms"] * 1e-3) / 1e12, samples=t["samples"])
            if energy:
                e = harness.measure_energy(fn, args, min_seconds=0.5 if quick else 2.0)
                rec.update(harness.energy_fields(e, gflop=gflop))
            rec.update(extra or {})
            records.append(rec)
            return rec

        cublas = run("cublas", "gemmex_f16_f32", tc.cublas_gemm)
        for step_no, step in enumerate(tc.STEPS, start=1):
            _, (threads,), smem = tc.launch_shape(step, n, n)
            run("cupy", step, lambda A, B, C, s=step: tc.tc_matmul(A, B, C, step=s),
                dict(step=step_no, **kernel_attributes(tc.step_kernel(step), threads, smem)))
        if n == max(sizes):
            for cfg in tc.TC_CONFIGS:
                run("cupy", f"config/{tc.config_name(cfg)}",
                    lambda A, B, C, c=cfg: tc.tc_matmul(A, B, C, step="config", config=c),
                    dict(tuning=True, config=list(cfg), **kernel_attributes(tc.step_kernel("config", cfg),
                                                                              tc.config_threads(cfg),
                                                                              tc.config_smem(cfg))),
                    energy=False)
        for r in records:
            if r["shape"] == shape:
                r["ratio"] = r["tflops"] / cublas["tflops"]
        # the ratios the page compares with its goals, in paired rounds beside cuBLAS
        paired = harness.paired_rounds({v: (fns[v], args) for v in ("gemmex_f16_f32",) + PAIRED}, "gemmex_f16_f32",
                                       rounds=2 if quick else 5, warmup=1, samples=5, max_seconds=1.0)
        for r in records:
            if r["shape"] == shape and r["variant"] in PAIRED:
                r.update(harness.paired_fields(paired[r["variant"]], cublas["id"]))
        del args, ref, A0, B0, C0
        cp.get_default_memory_pool().free_all_blocks()
    peak = _peak(quick)
    top = next(r for r in records if r["variant"] == "gemmex_f16_f32" and r["shape"] == [max(sizes)] * 3)
    peak.update(ref=top["id"], ratio=peak["tflops"] / top["tflops"])  # the ceiling over cuBLAS's best
    records.append(peak)
    return records


def _peak(quick: bool) -> dict:
    """mma.sync on registers: 4 warps per block, 8 blocks per SM, every SM."""
    import cupy as cp

    from .. import harness, tensor_cores as tc

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads, iters = sms * 8, 128, 4096 if quick else 65536
    out, flops = tc.mma_peak(blocks, threads, iters)
    t = harness.time_gpu(lambda: tc.mma_peak(blocks, threads, iters), warmup=1, samples=10,
                         max_seconds=2.0 if quick else 5.0)
    if not bool(cp.isfinite(out).all()):
        raise RuntimeError("tc_mma_peak wrote a non-finite sum")
    return results.record(TOPIC, "cupy", "mma_peak", [blocks, threads, iters], "float16", ms=t["ms"],
                          no_rel_err="throughput_only", tflops=flops / (t["ms"] * 1e-3) / 1e12,
                          samples=t["samples"])


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []  # the chapter's plots come with its pages


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        extra = f"x cuBLAS {r['ratio']:.3f}" if "ratio" in r else ""
        out.append(f"{r['impl']:7} {r['variant']:34} {'x'.join(map(str, r['shape'])):>16} {r['ms']:9.4f} ms "
                   f"{r['tflops']:7.1f} TFLOP/s {extra}")
    return out


def sanitize() -> None:
    """`make sanitize`: every step and configuration once, at small and odd
    sizes (for the mma steps: M any, N and K multiples of 8), checked."""
    import cupy as cp

    from kernels import harness, tensor_cores as tc

    shapes = {"wmma": ((16, 16, 16), (48, 80, 32)), "mma": ((16, 16, 16), (33, 24, 40), (130, 264, 72))}
    for step in list(tc.STEPS) + [("config", c) for c in tc.TC_CONFIGS]:
        kind = "wmma" if step in tc.WMMA_STEPS else "mma"
        for M, N, K in shapes[kind]:
            A = cp.random.standard_normal((M, K), dtype=cp.float32).astype(cp.float16)
            B = cp.random.standard_normal((K, N), dtype=cp.float32).astype(cp.float16)
            ref = A.astype(cp.float64) @ B.astype(cp.float64)
            C = cp.full((M, N), cp.nan, dtype=cp.float32)
            if isinstance(step, tuple):
                tc.tc_matmul(A, B, C, step="config", config=step[1])
            else:
                tc.tc_matmul(A, B, C, step=step)
            err = harness.rel_err(C, ref)
            assert err < 1e-5, (step, M, N, K, err)
    out, _ = tc.mma_peak(2, 64, 8)
    assert bool(cp.isfinite(out).all())


def claims(data: dict) -> None:
    """docs/tensor-cores*.md, "Measured": what the tables show, against the
    committed measurements."""
    from .. import harness

    rows = results.select(data, TOPIC)

    def rec(variant, n=8192):
        return next(r for r in rows if r["variant"] == variant and r["shape"][0] == n)

    def ratio(variant, n=8192):
        return rec(variant, n)["ratio"]

    for n in (4096, 8192):
        assert ratio("wmma_global", n) < 0.05                                        # a few percent
        assert 3.5 < ratio("wmma_smem", n) / ratio("wmma_global", n) < 4.5          # about four times
        assert ratio("wmma_smem", n) < 0.2                                          # below a fifth
        assert ratio("mma_ldmatrix", n) < 1.05 * ratio("wmma_smem", n)               # no faster than step 2
        assert ratio("mma_async", n) > 2.5 * ratio("mma_ldmatrix", n)                # about three times
        assert ratio("wmma_global", n) < ratio("wmma_smem", n) and \
            ratio("mma_ldmatrix", n) < ratio("mma_async", n) < ratio("mma_tuned", n)  # steps 3-5 climb
        assert harness.against(rec("mma_tuned", n), 0.5) == "above"                # above a half ...
        assert harness.against(rec("mma_tuned", n), 2 / 3) == "below"              # ... below two thirds, every round
        assert harness.against(rec("mma_tuned", n), 0.75) == "below"               # 8192^3: the goal is missed
    assert harness.against(rec("mma_tuned", 4096), 0.65) == "level"               # 4096^3: rounds on both sides
    for step in ("mma_async", "mma_tuned"):
        r = rec(step)
        assert r["local_bytes"] == 0 and r["blocks_per_sm"] == 1 and r["occupancy"] == 0.125  # 8 warps per SM
    assert rec("mma_async")["regs"] < 160 < 224 < rec("mma_tuned")["regs"]
    sweep = sorted((r for r in rows if r.get("tuning")), key=lambda r: -r["ratio"])
    assert len(sweep) == 8 and all(0.3 < r["ratio"] < 0.65 for r in sweep)      # between 0.3 and 0.65
    assert all(r["config"][3:5] == [64, 64] for r in sweep[:3])                  # the 64 x 64 warp tiles lead
    assert ratio("mma_tuned") > 0.85 * sweep[0]["ratio"]                         # within the runs' spread
    peak = next(r for r in rows if r["variant"] == "mma_peak")
    assert peak["ratio"] < 0.95, peak["ratio"]                                    # below cuBLAS, clear of 1.0
    assert ratio("mma_tuned") / peak["ratio"] < 0.7                               # well below the ceiling
    assert all(r["rel_err"] < 1e-5 for r in rows if r.get("no_rel_err") is None)
