"""Topic `matmul_profile`: what Nsight Compute sees in the matmul kernels
the second pass is about (`ncu --clock-control none`, one launch each, in
a child process that checks every result against a float64 product made
on the host first, so that no other GEMM runs under the profiler):

- at 4096^3: Numba's register_blocked and unsigned steps, and step 10 in
  CUDA C (the instruction counts and shared-memory loads behind the
  SASS difference);
- at 1000x1013x777, the shape the dispatch leaves furthest from cuBLAS:
  the dispatch's kernel and cuBLAS's (every kernel cuBLAS launches, their
  times summed).

Each record: the kernel's time under the profiler, TFLOP/s, the FMA pipe's
share of its peak, warps resident and issue slots used (fractions of
their peaks), instructions executed, shared-memory load instructions, the
warp stall reasons per issued instruction (largest in `top_stall`).
ratio: the reference's time (step 10 at 4096^3, cuBLAS at the small
shape) over this one's. Without ncu on PATH the bench stops and says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import harness, results

TOPIC = "matmul_profile"
ORDER = 52
BIG, SMALL = (4096, 4096, 4096), (1000, 1013, 777)
QUICK_BIG = (1024, 1024, 1024)
STALLS = ("wait", "short_scoreboard", "long_scoreboard", "mio_throttle", "math_pipe_throttle", "not_selected",
          "barrier", "dispatch_stall")
METRICS = {
    "fma_pipe_active": "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "instructions": "smsp__inst_executed.sum",
    "shared_loads": "sm__sass_inst_executed_op_shared_ld.sum",
    **harness.NCU_COMMON, **harness.ncu_stall_metrics(STALLS),
}
PERCENT = ("fma_pipe_active", *harness.NCU_PERCENT)
LABELS = {
    "fma_pipe_active": ("FMA 流水线占用", "FMA pipe busy"),
    "instructions": ("执行的指令数（warp 级）", "instructions (warp level)"),
    "shared_loads": ("共享内存加载指令数", "shared-memory load instructions"),
    **harness.NCU_LABELS,
    "stall_wait": ("wait 停顿", "wait stalls"),
    "stall_short_scoreboard": ("short_scoreboard 停顿", "short_scoreboard stalls"),
    "stall_not_selected": ("not_selected 停顿", "not_selected stalls"),
}
RUNS = (("numba", "register_blocked", BIG), ("numba", "unsigned", BIG), ("cupy", "autotuned", BIG),
        ("cupy", "dispatch", SMALL), ("cublas", "sgemm", SMALL))


def kind(kernel: str) -> tuple[str, str] | None:
    """(impl, variant) of a kernel name ncu reports."""
    for key, run in (("matmul_register_blocked", ("numba", "register_blocked")),
                     ("matmul_unsigned", ("numba", "unsigned")), ("matmul_autotuned", ("cupy", "autotuned")),
                     ("matmul_warptiled_t", ("cupy", "dispatch")), ("matmul_splitk_t", ("cupy", "dispatch"))):
        if key in kernel:
            return run
    return ("cublas", "sgemm") if "gemm" in kernel.lower() or "splitk" in kernel.lower() else None


def launch_each(big: tuple) -> None:
    """The child ncu profiles: each run of RUNS once, checked against a
    float64 product on the host; prints each rel_err for the parent."""
    import cupy as cp
    import numpy as np
    from numba import cuda

    from .. import harness, matmul as mm

    rng = np.random.default_rng(0)
    for impl, variant, shape in RUNS:
        M, N, K = big if shape == BIG else shape
        A = rng.standard_normal((M, K), dtype=np.float32)
        B = rng.standard_normal((K, N), dtype=np.float32)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        Ad, Bd = cp.asarray(A), cp.asarray(B)
        C = cp.full((M, N), cp.nan, dtype=cp.float32)
        if impl == "numba":
            mm.matmul_numba(cuda.as_cuda_array(Ad), cuda.as_cuda_array(Bd), cuda.as_cuda_array(C), variant=variant)
            cuda.synchronize()
        elif impl == "cublas":
            mm.cublas_matmul(Ad, Bd, C)
        elif variant == "dispatch":
            mm.matmul(Ad, Bd, C)
        else:
            mm.matmul_cupy(Ad, Bd, C, variant=variant)
        err = harness.rel_err(C.get(), ref)
        if not err < 1e-5:
            raise RuntimeError(f"{impl} {variant}: rel_err {err}")
        print(f"rel_err {impl} {variant} {err!r}", flush=True)


def profile(big: tuple) -> dict:
    """{(impl, variant): {metric: value, "err": rel_err}} from ncu."""
    from .. import harness

    rows, lines = harness.ncu_metrics(list(METRICS.values()), "matmul_|gemm|splitK",
                                      ["kernels.bench.matmul_profile", "--launch-each", *map(str, big)],
                                      need="matmul_profile reads Nsight Compute's counters")
    errs = {(ln.split()[1], ln.split()[2]): float(ln.split()[3]) for ln in lines if ln.startswith("rel_err ")}
    by_metric = {v: k for k, v in METRICS.items()}
    per_kernel: dict = {}
    for kernel, metric, value in rows:
        run = kind(kernel)
        if run and metric in by_metric:
            per_kernel.setdefault((run, kernel), {})[by_metric[metric]] = value
    found = {}
    for (run, kernel), m in per_kernel.items():  # a run with several kernels: the longest one's counters,
        prev = found.get(run)                      # the times summed
        if prev is None:
            found[run] = dict(m)
        else:
            total = prev["duration_ns"] + m["duration_ns"]
            if m["duration_ns"] > prev["duration_ns"]:
                found[run] = dict(m)
            found[run]["duration_ns"] = total
    for run in found:
        found[run]["err"] = errs[run]
    missing = {(i, v) for i, v, _ in RUNS} - set(found)
    if missing:
        raise RuntimeError(f"ncu reported nothing for {sorted(missing)}")
    return found


def measure(quick: bool = False) -> list[dict]:
    big = QUICK_BIG if quick else BIG
    found = profile(big)
    records = []
    for impl, variant, shape in RUNS:
        shape = list(big if shape == BIG else shape)
        m = found[impl, variant]
        ms = m["duration_ns"] / 1e6
        ref = ("cupy", "autotuned") if shape == list(big) else ("cublas", "sgemm")
        records.append(results.record(
            TOPIC, impl, variant, shape, "float32", ms=ms, ref=results.record_id(TOPIC, *ref, shape, "float32"),
            rel_err=m["err"], tflops=2 * shape[0] * shape[1] * shape[2] / (ms * 1e-3) / 1e12,
            **harness.ncu_fields(m, PERCENT, STALLS)))
    by_id = {r["id"]: r for r in records}
    for r in records:
        r["ratio"] = by_id[r["ref"]]["ms"] / r["ms"]
    return records


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        out.append(f"{r['impl']:6} {r['variant']:16} {'x'.join(map(str, r['shape'])):>14} {r['ms']:.3f} ms "
                   f"{r['tflops']:6.1f} TFLOP/s fma {r['fma_pipe_active']:.2f} warps {r['warps_active']:.3f} "
                   f"issue {r['issue_active']:.2f} inst {r['instructions']:.3g} lds {r['shared_loads']:.3g} "
                   f"top stall {r['top_stall']}")
    return out


def claims(data: dict) -> None:
    """docs/matmul*.md: the Numba step's profile, and why the small odd shape stays short."""
    rows = {(r["impl"], r["variant"]): r for r in results.select(data, TOPIC)}
    rb, us, at = rows["numba", "register_blocked"], rows["numba", "unsigned"], rows["cupy", "autotuned"]
    assert rb["shared_loads"] >= 3.5 * us["shared_loads"]         # LDS.128: a quarter of the loads
    assert rb["instructions"] > 2 * us["instructions"]            # less than half the instructions
    assert 1.2 < us["instructions"] / at["instructions"] < 1.45   # still more than CUDA C, clearly
    assert rb["fma_pipe_active"] < us["fma_pipe_active"] < at["fma_pipe_active"]
    # 1000x1013x777: as many warps resident and about as many instructions as cuBLAS,
    # but far fewer issued per cycle: waiting on shared memory (short_scoreboard)
    d, c = rows["cupy", "dispatch"], rows["cublas", "sgemm"]
    assert abs(d["warps_active"] - c["warps_active"]) < 0.02
    assert abs(d["instructions"] / c["instructions"] - 1) < 0.1
    assert d["issue_active"] < 0.75 * c["issue_active"] and d["ratio"] < 0.85
    assert d["top_stall"] == "short_scoreboard"


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--launch-each":
        launch_each(tuple(int(x) for x in sys.argv[2:]))
    else:
        raise SystemExit("usage: python -m kernels.bench.matmul_profile --launch-each M N K")
