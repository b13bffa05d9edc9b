"""Topic `warp_specialization`: the streaming ladder (kernels/cuda/
warp_specialization.cu, and Numba's two steps) across arithmetic intensity.

out[i] = f^k(x[i]) over n = 2^28 floats (1 GiB read, 1 GiB written): 2k FLOP
per 8 bytes, k from 1 (far below the ridge point) to 256 (far above). Each
record: time (CUDA events, median), GB/s = 8n / t, TFLOP/s = 2kn / t,
board energy per GFLOP over >= 2 s (NVML), the error against the host's
fmaf emulation on a checked slice, ratio = step 1's time at the same k /
this one's. At k = RIDGE_K (near the ridge point) each CuPy step is also
profiled once by Nsight Compute in a child process: DRAM throughput, FMA
pipe, warps resident, issue slots used, and the warp stall reasons.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import harness, results
from . import plotting

TOPIC = "warp_specialization"
ORDER = 46
N = 1 << 28
KS = (1, 8, 32, 48, 64, 128, 256)
RIDGE_K = 48
STALLS = ("long_scoreboard", "barrier", "short_scoreboard", "wait", "math_pipe_throttle", "not_selected",
          "lg_throttle", "sleeping", "branch_resolving", "no_instruction")
METRICS = {
    "dram_busy": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "fma_pipe_active": "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    **harness.NCU_COMMON, **harness.ncu_stall_metrics(STALLS),
}
PERCENT = ("dram_busy", "fma_pipe_active", *harness.NCU_PERCENT)
LABELS = {
    "k": ("每元素 FMA 数 k", "FMAs per element k"),
    "step": ("步骤", "step"),
    "flop_per_byte": ("FLOP/字节", "FLOP/byte"),
    "blocks_per_sm": ("每 SM 线程块", "blocks per SM"),
    "dram_busy": ("显存带宽占用", "DRAM bandwidth used"),
    "fma_pipe_active": ("FMA 流水线占用", "FMA pipe busy"),
    **harness.NCU_LABELS,
}
NUMBA_STEPS = ("ws_sync_numba", "ws_regbuf_numba")
# The ladder's steps in its order (kernels.warp_specialization.STEPS, then Numba's): a table with
# order=step lists them so, and the plot's legend. Code names: the same in both languages.
WORDS = {"step": {"ws_sync": ("ws_sync", "ws_sync"), "ws_regbuf": ("ws_regbuf", "ws_regbuf"),
                  "ws_cpasync": ("ws_cpasync", "ws_cpasync"), "ws_pipeline": ("ws_pipeline", "ws_pipeline"),
                  "ws_tma": ("ws_tma", "ws_tma"), "ws_tma_regs": ("ws_tma_regs", "ws_tma_regs"),
                  "ws_sync_numba": ("ws_sync_numba", "ws_sync_numba"),
                  "ws_regbuf_numba": ("ws_regbuf_numba", "ws_regbuf_numba")}}


def launch_each() -> None:
    """The child ncu profiles: every CuPy step once at k = RIDGE_K, checked."""
    import cupy as cp
    import numpy as np

    from .. import warp_specialization as ws

    x = cp.random.default_rng(0).standard_normal(N, dtype=cp.float32)
    out = cp.empty_like(x)
    want = ws.stream_reference(cp.asnumpy(x[:65536]), RIDGE_K)
    for step in ws.STEPS:
        out[:65536].fill(cp.nan)
        ws.stream(x, out, k=RIDGE_K, step=step)
        if not float(np.max(np.abs(cp.asnumpy(out[:65536]) - want))) < 1e-5:
            raise RuntimeError(f"{step}: wrong result")


def profile() -> dict:
    rows, _ = harness.ncu_metrics(list(METRICS.values()), "ws_", ["kernels.bench.warp_specialization", "--launch-each"],
                                  need="warp_specialization reads Nsight Compute's counters")
    by_metric = {v: k for k, v in METRICS.items()}
    found: dict = {}
    for kernel, metric, value in rows:
        if metric in by_metric:
            found.setdefault(kernel, {})[by_metric[metric]] = value
    return found


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import warp_specialization as ws
    from ..device import kernel_attributes

    n = (1 << 24) if quick else N
    x = cp.random.default_rng(1).standard_normal(n, dtype=cp.float32)
    out = cp.empty_like(x)
    xn, outn = cuda.as_cuda_array(x), cuda.as_cuda_array(out)
    check = 1 << 16  # the slice checked against the host after every timed launch
    records = []
    for k in KS:
        ref_id = results.record_id(TOPIC, "cupy", f"ws_sync/k{k}", [n, k], "float32")
        want = ws.stream_reference(cp.asnumpy(x[:check]), k)
        runs = [("cupy", s, lambda s=s: ws.stream(x, out, k=k, step=s)) for s in ws.STEPS]
        runs += [("numba", s, lambda s=s: (ws.stream_numba(xn, outn, k=k, step=s), cuda.synchronize()))
                 for s in NUMBA_STEPS]
        for step_no, (impl, step, fn) in enumerate(runs, start=1):
            out[:check].fill(cp.nan)
            fn()
            err = harness.rel_err(cp.asnumpy(out[:check]), want)
            if not err < 1e-6:
                raise RuntimeError(f"{step} k={k}: rel_err {err}")
            t = harness.time_gpu(fn, warmup=1, samples=7, max_seconds=2.0)
            e = harness.measure_energy(lambda *_: fn(), min_seconds=0.5 if quick else 2.0)
            gflop = 2 * k * n / 1e9
            extra = {}
            if impl == "cupy":
                extra = kernel_attributes(ws.ws_kernel(step), ws.THREADS[step])
            records.append(results.record(
                TOPIC, impl, f"{step}/k{k}", [n, k], "float32", ms=t["ms"], ref=ref_id, rel_err=err,
                step=step, k=k, flop_per_byte=2 * k / 8, gbps=8 * n / (t["ms"] * 1e-3) / 1e9,
                tflops=gflop / (t["ms"] * 1e-3) / 1e3, **harness.energy_fields(e, gflop=gflop), **extra))
    by_id = {r["id"]: r for r in records}
    for r in records:
        r["ratio"] = by_id[r["ref"]]["ms"] / r["ms"]
    if not quick:
        prof = profile()
        for r in records:
            if r["k"] == RIDGE_K and r["impl"] == "cupy":
                m = prof[r["step"]]
                r.update(harness.ncu_fields(m, PERCENT, STALLS), ncu_ms=m["duration_ns"] / 1e6)
    return records


PLOT_WORDS = {
    "The streaming ladder across arithmetic intensity": "流式阶梯：算术强度从低到高",
    "FLOP per byte (k / 4)": "每字节 FLOP（每元素 FMA 数的四分之一）",
    "TFLOP/s": "TFLOP/s",
    "pJ per FLOP (board)": "每 FLOP 皮焦（整卡）",
    "(Numba)": "（Numba）",
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    env = data["topics"][TOPIC]["env"]
    fig, (ax1, ax2) = plotting.new_figure(7.5, 6.5, nrows=2)
    steps = [s for s in WORDS["step"] if any(r["step"] == s for r in rows)]  # the ladder's order
    styles = {"ws_sync": "o-", "ws_regbuf": "s-", "ws_cpasync": "^-", "ws_pipeline": "v--", "ws_tma": "D--",
              "ws_tma_regs": "P--", "ws_sync_numba": "o:", "ws_regbuf_numba": "s:"}
    for step in steps:
        pts = sorted((r["flop_per_byte"], r["tflops"], r["energy_j_per_gflop"] * 1e3) for r in rows
                     if r["step"] == step)
        label = step.replace("_numba", " (Numba)")
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(step, "x-"), label=label, ms=4)
        ax2.plot([p[0] for p in pts], [p[2] for p in pts], styles.get(step, "x-"), label=label, ms=4)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("FLOP per byte (k / 4)")
    ax1.set_ylabel("TFLOP/s")
    ax2.set_ylabel("pJ per FLOP (board)")
    ax1.legend(fontsize=7, ncol=2)
    return plotting.save(fig, ax1, TOPIC, env, out_dir, "The streaming ladder across arithmetic intensity",
                         fontsize=9, words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        prof = f"  dram {r['dram_busy']:.2f} fma {r['fma_pipe_active']:.2f} top {r['top_stall']}" \
            if "dram_busy" in r else ""
        out.append(f"{r['variant']:26} {r['ms']:8.3f} ms {r['gbps']:7.0f} GB/s {r['tflops']:6.2f} TFLOP/s "
                   f"{r['energy_j_per_gflop'] * 1e3:7.2f} pJ/FLOP x{r['ratio']:.2f}{prof}")
    return out


def claims(data: dict) -> None:
    """docs/warp-specialization*.md, "Measured": what the tables show, against
    the committed measurements."""
    rows = results.select(data, TOPIC)
    t = {(r["step"], r["k"]): r for r in rows}
    cupy_steps = [s for s in ("ws_sync", "ws_regbuf", "ws_cpasync", "ws_pipeline", "ws_tma", "ws_tma_regs")]
    for k in (1, 8):  # below the ridge: every CUDA C step streams at about the same rate
        assert all(0.88 <= t[s, k]["ratio"] <= 1.12 for s in cupy_steps), k
    for k in (48, 64, 128, 256):  # near and above the ridge: the best step is not a specialized one
        best_plain = min(t[s, k]["ms"] for s in ("ws_sync", "ws_regbuf", "ws_cpasync"))
        best_ws = min(t[s, k]["ms"] for s in ("ws_pipeline", "ws_tma", "ws_tma_regs"))
        assert best_ws > best_plain, k
        assert min(cupy_steps, key=lambda s: t[s, k]["ms"]) == "ws_regbuf", k       # step 2 is the fastest
        assert t["ws_tma_regs", k]["ms"] < t["ws_tma", k]["ms"], k                   # step 6 ahead of step 5
        assert t["ws_tma_regs", k]["ms"] < 1.15 * t["ws_regbuf", k]["ms"], k         # and close to the best
        assert min(t["ws_pipeline", k]["ms"], t["ws_tma", k]["ms"]) > t["ws_tma_regs", k]["ms"], k  # 4, 5 trail
    ridge = [t[s, RIDGE_K] for s in cupy_steps]
    assert all(r["top_stall"] == "not_selected" for r in ridge)                        # short of issue slots
    assert t["ws_regbuf", RIDGE_K]["blocks_per_sm"] == 6 and t["ws_tma_regs", RIDGE_K]["blocks_per_sm"] == 2
    assert t["ws_tma", RIDGE_K]["blocks_per_sm"] == 3
    # step 6's launch bounds give 80 registers a thread; step 5, without the move, needs fewer:
    # the consumers have no use for the 104 that setmaxnreg gives them
    assert t["ws_tma", RIDGE_K]["regs"] < t["ws_tma_regs", RIDGE_K]["regs"] == 80
    assert t["ws_tma", RIDGE_K]["issue_active"] < t["ws_tma_regs", RIDGE_K]["issue_active"]  # step 5 issues less
    for k in KS:  # Numba well behind the CUDA C steps at every k
        assert max(t[s, k]["ms"] for s in cupy_steps) < min(t[s, k]["ms"] for s in NUMBA_STEPS), k
    assert all(r["rel_err"] < 1e-6 for r in rows)


def sanitize() -> None:
    """`make sanitize`: every step once at odd sizes and grids, checked."""
    import cupy as cp
    import numpy as np

    from kernels import warp_specialization as ws

    # the chapter's primitives first (kernels/ws_primitives.py), each once at odd sizes: a tool that
    # stops at the first error then still sees them
    from kernels import ws_primitives as p

    x = cp.random.standard_normal(5003, dtype=cp.float32)
    assert np.allclose(cp.asnumpy(p.pipeline_copy(x, blocks=3)), p.pipeline_copy_reference(cp.asnumpy(x)), rtol=1e-6)
    assert np.allclose(cp.asnumpy(p.barrier_split(x)), p.barrier_split_reference(cp.asnumpy(x)))
    x4 = x[:5000]
    assert np.allclose(cp.asnumpy(p.mbarrier_bulk_copy(x4, blocks=2)), p.bulk_copy_reference(cp.asnumpy(x4)), rtol=1e-6)
    X = cp.random.standard_normal((37, 52), dtype=cp.float32)
    assert np.array_equal(cp.asnumpy(p.tma_tile_2d(X)), p.tma_tile_2d_reference(cp.asnumpy(X), 32, 32))
    assert np.allclose(cp.asnumpy(p.cluster_dsmem(x)), p.cluster_dsmem_reference(cp.asnumpy(x)))
    W = cp.random.standard_normal((70, 48), dtype=cp.float32)
    Xs = cp.random.standard_normal((48, p.ROLE_COLS), dtype=cp.float32)
    got = cp.asnumpy(p.setmaxnreg_roles(W, Xs))
    assert np.allclose(got, cp.asnumpy(W).astype(np.float64) @ cp.asnumpy(Xs), rtol=1e-4, atol=1e-4)
    # then the ladder's steps
    for n in (4, 2052, 10_004):
        x = cp.random.standard_normal(n, dtype=cp.float32)
        want = ws.stream_reference(cp.asnumpy(x), 3)
        for step in ws.STEPS:
            for blocks in (None, 3):
                out = cp.full(n, cp.nan, dtype=cp.float32)
                ws.stream(x, out, k=3, step=step, blocks=blocks)
                assert float(np.max(np.abs(cp.asnumpy(out) - want))) < 1e-5, (step, n, blocks)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--launch-each":
        launch_each()
    else:
        raise SystemExit("usage: python -m kernels.bench.warp_specialization --launch-each")
