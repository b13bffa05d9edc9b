"""The measuring harness (kernels/harness.py) and `make bench`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import harness, results

ROOT = Path(__file__).resolve().parent.parent

SPIN = r"""
extern "C" __global__ void spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
"""


def test_bench_without_gpu_says_so_and_fails():
    env = dict(os.environ, HANDBOOK_FORCE_CPU="1")
    proc = subprocess.run([sys.executable, "-m", "kernels.bench"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "needs a CUDA GPU" in proc.stderr


@pytest.mark.gpu
def test_time_gpu_measures_a_known_duration():
    import cupy as cp
    import numpy as np

    from kernels import harness

    spin = cp.RawKernel(SPIN, "spin")
    t = harness.time_gpu(lambda: spin((1,), (1,), (np.int64(1_000_000),)), samples=10)
    assert 0.95 <= t["ms"] <= 1.3, t  # a 1 ms spin, plus launch gaps


@pytest.mark.gpu
def test_energy_counter_loop_runs_two_seconds():
    import cupy as cp
    import numpy as np

    from kernels import harness

    spin = cp.RawKernel(SPIN, "spin")
    e = harness.measure_energy(lambda: spin((132,), (32,), (np.int64(200_000),)), min_seconds=2.0)
    assert e["seconds"] >= 2.0 and e["calls"] > 1000
    assert e["energy_j"] > 0 and 20 < e["avg_power_w"] < 2000, e


@pytest.mark.gpu
def test_env_stamp_and_ceilings():
    from kernels import harness

    env = harness.env_stamp()
    for key in results.ENV_REQUIRED:
        assert env.get(key), key
    c = harness.copy_ceiling(1 << 28)
    assert c["exact"] and c["gbps"] > 100
    g = harness.sgemm_ceiling(1024)
    assert g["tflops"] > 1


@pytest.mark.gpu
def test_quick_bench_writes_a_valid_file(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-m", "kernels.bench", "--quick", "--topics", "ceilings", "vector_add",
                           "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = results.load(out)
    assert results.validate(data) == []
    assert {r["topic"] for r in data["records"]} == {"ceilings", "vector_add"}
    assert list(tmp_path.glob("vector_add-*.svg"))


def test_plots_redraw_from_the_results_file_without_a_gpu(tmp_path):
    src = results.results_path("nvidia-h200")
    assert src.exists(), "no results file committed (make bench on a GPU writes one)"
    out = tmp_path / "nvidia-h200.json"
    out.write_text(src.read_text())
    env = dict(os.environ, HANDBOOK_FORCE_CPU="1")
    proc = subprocess.run([sys.executable, "-m", "kernels.bench", "--plots-only", "nvidia-h200", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in tmp_path.glob("*.svg")} >= {"vector_add-nvidia-h200.svg", "reduction-nvidia-h200.svg"}


def test_time_host_takes_the_median_of_batches():
    """harness.time_host: warm-up, one trial call, then `samples` batches
    (the sampling time_gpu shares, here on the host's clock)."""
    from kernels import harness

    calls = []
    t = harness.time_host(lambda: calls.append(1), samples=3, min_sample_ms=0.01, warmup=1)
    assert t["samples"] == 3 and t["ms"] >= 0 and len(calls) == 1 + 1 + 3 * t["batch"]


def test_energy_fields_divide_by_bytes_or_gflop():
    from kernels import harness

    e = {"j_per_call": 0.5, "avg_power_w": 400.0, "seconds": 2.1, "calls": 7}
    f = harness.energy_fields(e, nbytes=10**9)
    assert f == {"energy_j_per_call": 0.5, "avg_power_w": 400.0, "energy_seconds": 2.1,
                 "energy_pj_per_byte": pytest.approx(500.0)}
    assert harness.energy_fields(e, gflop=50.0)["energy_j_per_gflop"] == pytest.approx(0.01)
    assert set(harness.energy_fields(e)) == {"energy_j_per_call", "avg_power_w", "energy_seconds"}


def _fake_ncu(folder: Path, body: str) -> None:
    """An executable named ncu that prints what `body` prints (a stand-in for Nsight Compute)."""
    exe = folder / "ncu"
    exe.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    exe.chmod(0o755)


def test_ncu_metrics_runs_the_child_under_ncu_and_reads_its_csv(tmp_path, monkeypatch):
    from kernels import harness

    _fake_ncu(tmp_path, '''
args = sys.argv[1:]
assert args[:2] == ["--clock-control", "none"] and "--csv" in args, args
assert args[args.index("--metrics") + 1] == "m.a,m.b" and args[args.index("-k") + 1] == "regex:^k_", args
assert args[-4:] == ["-m", "pkg.child", "--launch-each", "64"], args
print("==PROF== Connected")
print("rel_err x 1e-07")
print('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"')
print('"0","k_one(float*)","m.a","%","12.5"')
print('"0","void k_two<1, 2>(float*)","m.b","","1,234.5"')
''')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    rows, lines = harness.ncu_metrics(["m.a", "m.b"], "^k_", ["pkg.child", "--launch-each", "64"], need="a test")
    assert rows == [("k_one(float*)", "m.a", 12.5), ("void k_two<1, 2>(float*)", "m.b", 1234.5)]
    assert lines == ["==PROF== Connected", "rel_err x 1e-07"]


def test_ncu_metrics_says_what_is_missing_or_failed(tmp_path, monkeypatch):
    from kernels import harness

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="four_step needs it: put ncu on PATH"):
        harness.ncu_metrics(["m"], "k", ["c"], need="four_step needs it")
    _fake_ncu(tmp_path, 'print("==ERROR== no kernel profiled"); sys.exit(1)')
    with pytest.raises(RuntimeError, match=r"ncu failed \(1\):\n==ERROR== no kernel profiled"):
        harness.ncu_metrics(["m"], "k", ["c"], need="a test")


def test_ncu_launches_split_the_rows_at_each_launch():
    from kernels import harness

    metrics = {"t": "gpu__time_duration.sum", "b": "dram__bytes.sum"}
    rows = [("gemm", "gpu__time_duration.sum", 1.0), ("gemm", "dram__bytes.sum", 2.0),
            ("gemm", "gpu__time_duration.sum", 3.0), ("gemm", "dram__bytes.sum", 4.0),  # the same kernel again
            ("k", "other.metric", 9.0), ("k", "gpu__time_duration.sum", 5.0)]
    assert harness.ncu_launches(rows, metrics) == [("gemm", {"t": 1.0, "b": 2.0}), ("gemm", {"t": 3.0, "b": 4.0}),
                                                   ("k", {"t": 5.0})]
    assert harness.ncu_launches([], metrics) == []


def test_ncu_fields_turn_percentages_into_fractions_and_name_the_top_stall():
    measured = {"warps_active": 12.5, "issue_active": 80.0, "fma": 3.0, "duration_ns": 1e6, "err": 1e-7,
                "stall_wait": 0.3, "stall_barrier": 0.9}
    f = harness.ncu_fields(measured, ("warps_active", "issue_active"), ("wait", "barrier"))
    assert f["warps_active"] == 0.125 and f["issue_active"] == 0.8 and f["fma"] == 3.0
    assert "duration_ns" not in f and "err" not in f
    assert f["top_stall"] == "barrier" and f["profiler"] == "ncu --clock-control none"
    assert harness.ncu_stall_metrics(["wait"]) == {
        "stall_wait": "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"}


# Functions taking an output that need no overlap case, and why (tests/test_overlap.py).
OVERLAP_EXEMPT = {
    "rel_err": "compares out with ref; it writes nothing",
    "require_vector_like": "kernels/checks.py: an argument check of the wrappers",
    "require_no_overlap": "kernels/checks.py: the check itself (tests/test_overlap.py runs it in every case)",
}


def test_paired_rounds_pair_each_case_with_the_reference_round_by_round():
    """A clock that drifts from round to round (every time scaled by the
    round's factor) moves the reference and the case together: the paired
    ratio stays exact while the unpaired medians would not; the order
    alternates; the spread is the per-round ratios' range."""
    drift = [1.0, 1.3, 0.9, 1.2, 1.1]
    base = {"ref": 2.0, "fast": 1.0, "slow": 4.0}
    calls = []

    def timer(fn, arg_sets, **kw):
        calls.append(fn)
        rnd = sum(1 for c in calls if c == fn) - 1
        return {"ms": base[fn] * drift[rnd]}

    out = harness.paired_rounds({n: (n, ((),)) for n in base}, "ref", rounds=5, timer=timer)
    assert calls[:3] == ["ref", "fast", "slow"] and calls[3:6] == ["slow", "fast", "ref"]
    assert out["fast"]["paired_ratio"] == pytest.approx(2.0) and out["slow"]["paired_ratio"] == pytest.approx(0.5)
    assert out["ref"]["paired_ratio"] == 1.0 and out["fast"]["rounds"] == 5
    assert out["fast"]["ratio_min"] == pytest.approx(2.0) == pytest.approx(out["fast"]["ratio_max"])
    assert out["fast"]["ms"] == pytest.approx(1.1)  # the median of its own rounds
    assert harness.paired_fields(out["fast"], "t/ref") == {  # what a record keeps of it
        "paired_ratio": out["fast"]["paired_ratio"], "ratio_min": out["fast"]["ratio_min"],
        "ratio_max": out["fast"]["ratio_max"], "rounds": 5, "paired_ref": "t/ref"}

    noisy = iter([2.0, 1.0, 1.1, 2.0, 2.0, 0.95])  # ref, case in round 0; case, ref in round 1; ...
    out = harness.paired_rounds({"ref": ("r", ()), "x": ("x", ())}, "ref", rounds=3,
                                timer=lambda fn, a: {"ms": next(noisy)})
    assert out["x"]["ratio_min"] == pytest.approx(2 / 1.1) and out["x"]["ratio_max"] == pytest.approx(2 / 0.95)
    assert harness.against(out["x"], 1.5) == "above" and harness.against(out["x"], 2.05) == "level"
    assert harness.against(out["x"], 2.2) == "below"
    with pytest.raises(ValueError, match="reference"):
        harness.paired_rounds({"x": ("x", ())}, "ref", timer=timer)
    # different work per call: a ratio of rates (a kernel moving 12 bytes per element against a copy of 8)
    out = harness.paired_rounds({"copy": ("c", ()), "add": ("a", ())}, "copy", rounds=1,
                                work_per_call={"copy": 8, "add": 12},
                                timer=lambda fn, a: {"ms": 1.0 if fn == "c" else 1.6})
    assert out["add"]["paired_ratio"] == pytest.approx(12 / 1.6 / 8)
