"""Topic `tc_profile`: what limits the last two steps of the Tensor Core
ladder, from Nsight Compute (`ncu --clock-control none`, one launch each of
tc_mma_async and tc_mma_tuned at 4096^3, in a child process that checks
each result against float64 first).

Each record: the kernel's time under the profiler, its TFLOP/s, the tensor
(HMMA) pipe's busy fraction, warps resident and issue slots used (fractions
of their peaks), eligible warps per scheduler per cycle, and the warp stall
reasons as warps stalled per issued instruction (ncu's
smsp__average_warps_issue_stalled_<reason>_per_issue_active), with the
largest named in `top_stall`. ratio: step 4's time over this one's.
Without ncu on PATH the bench stops and says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import harness, results

TOPIC = "tc_profile"
ORDER = 46
SIZE, QUICK_SIZE = 4096, 1024
STEPS = ("mma_async", "mma_tuned")
STALLS = ("wait", "barrier", "math_pipe_throttle", "short_scoreboard", "long_scoreboard", "mio_throttle",
          "not_selected", "selected", "dispatch_stall", "lg_throttle")
METRICS = {
    "tensor_pipe_active": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "eligible_warps": "smsp__warps_eligible.avg.per_cycle_active",
    **harness.NCU_COMMON, **harness.ncu_stall_metrics(STALLS),
}
PERCENT = ("tensor_pipe_active", *harness.NCU_PERCENT)
LABELS = {
    "tensor_pipe_active": ("Tensor 流水线忙碌比例", "tensor pipe busy"),
    "eligible_warps": ("每周期可发射 warp 数", "eligible warps per cycle"),
    **harness.NCU_LABELS,
    "stall_wait": ("wait 停顿", "wait stalls"),
    "stall_barrier": ("barrier 停顿", "barrier stalls"),
    "stall_math_pipe_throttle": ("math_pipe_throttle 停顿", "math_pipe_throttle stalls"),
}


def launch_each(n: int) -> None:
    """The child ncu profiles: steps 4 and 5 once each at n^3, checked;
    prints each step's rel_err for the parent."""
    import cupy as cp

    from .. import harness, tensor_cores as tc

    rng = cp.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    B = rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    ref = A.astype(cp.float64) @ B.astype(cp.float64)
    for step in STEPS:
        C = cp.full((n, n), cp.nan, dtype=cp.float32)
        tc.tc_matmul(A, B, C, step=step)
        err = harness.rel_err(C, ref)
        if not err < 1e-5:
            raise RuntimeError(f"{step}: rel_err {err}")
        print(f"rel_err {step} {err!r}", flush=True)


def profile(n: int) -> dict[str, dict]:
    """{step: {metric: value, "err": its rel_err}} from ncu over launch_each(n)."""
    from .. import harness

    rows, lines = harness.ncu_metrics(list(METRICS.values()), "^tc_mma",
                                      ["kernels.bench.tc_profile", "--launch-each", str(n)],
                                      need="tc_profile reads Nsight Compute's counters")
    errs = {ln.split()[1]: float(ln.split()[2]) for ln in lines if ln.startswith("rel_err ")}
    kernels = {"tc_mma_async": "mma_async", "tc_mma_async_t": "mma_tuned"}
    by_metric = {v: k for k, v in METRICS.items()}
    found: dict[str, dict] = {s: {"err": errs[s]} for s in STEPS}
    for kernel, metric, value in rows:
        step = kernels.get(kernel.split("(")[0].split("<")[0].replace("void ", "").strip())
        if step and metric in by_metric:
            found[step][by_metric[metric]] = value
    for step, got in found.items():
        missing = set(METRICS) - set(got)
        if missing:
            raise RuntimeError(f"ncu reported no {sorted(missing)} for {step}")
    return found


def measure(quick: bool = False) -> list[dict]:
    n = QUICK_SIZE if quick else SIZE
    found = profile(n)
    shape = [n, n, n]
    base_id = results.record_id(TOPIC, "cupy", STEPS[0], shape, "float16")
    records = []
    for step in STEPS:
        m = found[step]
        ms = m["duration_ns"] / 1e6
        rec = results.record(TOPIC, "cupy", step, shape, "float16", ms=ms, ref=base_id, rel_err=m["err"],
                             tflops=2 * n**3 / (ms * 1e-3) / 1e12, **harness.ncu_fields(m, PERCENT, STALLS))
        records.append(rec)
    for r in records:
        r["ratio"] = records[0]["ms"] / r["ms"]
    return records


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        stalls = ", ".join(f"{s} {r['stall_' + s]:.2f}" for s in STALLS[:5])
        out.append(f"{r['variant']:10} {r['ms']:.3f} ms {r['tflops']:6.1f} TFLOP/s tensor pipe "
                   f"{r['tensor_pipe_active']:.2f} warps {r['warps_active']:.3f} issue {r['issue_active']:.2f} "
                   f"top stall {r['top_stall']} ({stalls})")
    return out


def claims(data: dict) -> None:
    """docs/tensor-cores*.md, "What limits steps 4 and 5"."""
    rows = {r["variant"]: r for r in results.select(data, TOPIC)}
    assert set(rows) == set(STEPS)
    for r in rows.values():
        assert r["warps_active"] < 0.14                  # 8 warps per SM: 2 per scheduler
        assert r["top_stall"] == "wait"                  # fixed-latency waits lead
        assert 0.55 < r["tensor_pipe_active"] < 0.8      # the tensor pipe busy six to seven tenths
        assert r["issue_active"] < 0.5                   # most issue slots empty
    assert rows["mma_tuned"]["tensor_pipe_active"] > rows["mma_async"]["tensor_pipe_active"]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--launch-each":
        launch_each(int(sys.argv[2]))
    else:
        sys.exit("usage: python -m kernels.bench.tc_profile --launch-each N")
