"""Topic `tc_hopper_gemm_profile`: what Nsight Compute sees in one launch of
each Hopper GEMM kernel (kernels/cuda/hopper_gemm.cu) and of cuBLAS's GEMM of
the same layout, at 4096^3, 8192^3 and 5000 x 3000 x 7000, the shape of
rows off the 128-byte lines (`ncu --clock-control none`, in a
child process that checks every result against a float64 product made on
the host, so that no other GEMM runs under the profiler).

Each record: the launch's time under the profiler (ms) and TFLOP/s, ratio =
cuBLAS's profiled time / this one's, the SM clock it ran at, the tensor
pipe's share of its peak, and the bytes through L2 and from DRAM. Without
ncu on PATH the bench stops and says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import results

TOPIC = "tc_hopper_gemm_profile"
ORDER = 48
SIZES = (4096, 8192)
ODD = (5000, 3000, 7000)  # rows of 14000 bytes: only every eighth starts on a 128-byte line
SHAPES = tuple((n, n, n) for n in SIZES) + (ODD,)
LABELS = {
    "ncu_clock_ghz": ("ncu 下的 SM 时钟 (GHz)", "SM clock under ncu (GHz)"),
    "tensor_pipe_active": ("Tensor 流水线占用", "tensor pipe busy"),
    "l2_gbytes": ("L2 流量 (GB)", "L2 traffic (GB)"),
    "dram_gbytes": ("显存流量 (GB)", "DRAM traffic (GB)"),
    "l2_hit": ("L2 命中率", "L2 hit rate"),
    "dram_busy": ("显存带宽占用", "DRAM bandwidth busy"),
}
METRICS = {
    "ncu_ns": "gpu__time_duration.sum",
    "ncu_hz": "sm__cycles_elapsed.avg.per_second",
    "tensor_pipe_active": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "l2_bytes": "lts__t_bytes.sum",
    "dram_bytes": "dram__bytes.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
}


def launch_each(M: int, N: int, K: int) -> None:
    """The child ncu profiles: cuBLAS and every kernel once at M x N x K,
    each checked against a float64 product."""
    import cupy as cp

    from .. import harness, hopper_gemm as hg

    import numpy as np

    rng = np.random.default_rng(M + N + K)
    A16 = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
    Bt16 = rng.standard_normal((N, K), dtype=np.float32).astype(np.float16)
    # the reference on the host: a float64 GEMM on the GPU would be profiled as cuBLAS's
    ref = A16.astype(np.float64) @ Bt16.astype(np.float64).T
    A, Bt = cp.asarray(A16), cp.asarray(Bt16)
    C = cp.empty((M, N), dtype=cp.float32)
    for name in ("cublas", *hg.KERNELS):
        C.fill(cp.nan)
        if name == "cublas":
            hg.cublas_gemm_tn(A, Bt, C)
        else:
            hg.hopper_gemm(A, Bt, C, kernel=name)
        err = harness.rel_err(cp.asnumpy(C), ref)
        if not err < rel_err_bound({"shape": [M, N, K]}):
            raise RuntimeError(f"{name}: rel_err {err}")
        print(f"rel_err {name} {err!r}", flush=True)


def profile(shape) -> dict:
    """{kernel or "cublas": {metric: value}} from one launch each under ncu."""
    from .. import harness, hopper_gemm as hg

    rows, lines = harness.ncu_metrics(list(METRICS.values()), "hg_|gemm|nvjet|xmma",
                                  ["kernels.bench.tc_hopper_gemm_profile", "--launch-each", *map(str, shape)],
                                  need="tc_hopper_gemm_profile reads Nsight Compute's counters")
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
    for ln in lines:
        if ln.startswith("rel_err ") and ln.split()[1] in found:
            found[ln.split()[1]]["err"] = float(ln.split()[2])
    missing = {"cublas", *hg.KERNELS} - {k for k, v in found.items() if "err" in v}
    if missing:
        raise RuntimeError(f"ncu reported nothing for {sorted(missing)}")
    return found



def measure(quick: bool = False) -> list[dict]:
    from .. import hopper_gemm as hg

    records = []
    for M, N, K in (((2048, 2048, 2048),) if quick else SHAPES):
        shape = [M, N, K]
        prof = profile(shape)
        ref_id = results.record_id(TOPIC, "cublas", "gemmex_tn_f16_f32", shape, "float16")
        for name in ("cublas", *hg.KERNELS):
            p = prof[name]
            ms = p["ncu_ns"] / 1e6
            impl, variant = ("cublas", "gemmex_tn_f16_f32") if name == "cublas" else ("cupy", name)
            records.append(results.record(
                TOPIC, impl, variant, shape, "float16", ms=ms, ref=ref_id, rel_err=p["err"],
                tflops=2 * M * N * K / (ms * 1e-3) / 1e12, ratio=prof["cublas"]["ncu_ns"] / p["ncu_ns"],
                ncu_clock_ghz=p["ncu_hz"] / 1e9, tensor_pipe_active=p["tensor_pipe_active"] / 100,
                l2_gbytes=p["l2_bytes"] / 1e9, dram_gbytes=p["dram_bytes"] / 1e9,
                l2_hit=p["l2_hit_pct"] / 100, dram_busy=p["dram_pct"] / 100,
                profiler="ncu --clock-control none"))
    return records


def claims(data: dict) -> None:
    """docs/warp-specialization*.md, "What limits the last step": one launch
    of each under the profiler, against the committed measurements."""
    from .. import hopper_gemm as hg

    rows = results.select(data, TOPIC)
    r = {(x["variant"], x["shape"][0]): x for x in rows}
    big = [x for x in rows if x["shape"][0] == 8192 and x["impl"] == "cupy" and x["variant"].endswith("_256")]
    assert big and all(x["ratio"] >= 0.95 and x["tensor_pipe_active"] >= 0.9 for x in big)  # as long as cuBLAS's
    for n in SIZES:
        cublas = r["gemmex_tn_f16_f32", n]
        assert all(x["l2_gbytes"] > cublas["l2_gbytes"] for x in rows if x["impl"] == "cupy" and x["shape"][0] == n)
        assert r["hg_ws_cluster_persistent_256", n]["l2_gbytes"] < r["hg_ws_persistent_256", n]["l2_gbytes"]
    assert r["hg_ws_cluster_256", 8192]["l2_gbytes"] < r["hg_ws_256", 8192]["l2_gbytes"]   # multicast: less L2
    # 5000 x 3000 x 7000, rows of 14000 bytes: no kernel near DRAM's bandwidth; without the
    # multicast the BN = 256 kernels move far more through L2 and leave the tensor pipe idle
    # much of the time; the persistent cluster kernel keeps it about as busy as cuBLAS while its
    # SMs run, and is still short of cuBLAS's time
    odd = {x["variant"]: x for x in rows if x["shape"] == list(ODD)}
    assert set(odd) == {"gemmex_tn_f16_f32", *hg.KERNELS} and all(x["dram_busy"] < 0.3 for x in odd.values())
    best = odd["hg_ws_cluster_persistent_256"]
    assert abs(best["tensor_pipe_active"] - odd["gemmex_tn_f16_f32"]["tensor_pipe_active"]) < 0.05
    assert best["ratio"] < 0.92
    for v in ("hg_ws_256", "hg_ws_persistent_256", "hg_plain_256"):
        assert odd[v]["tensor_pipe_active"] < 0.7 and odd[v]["l2_gbytes"] > 1.2 * best["l2_gbytes"], v
    assert all(x["rel_err"] < rel_err_bound(x) for x in rows)


def rel_err_bound(r: dict) -> float:
    """FP16 in, FP32 accumulation: topic tc_hopper_shapes's bound for FP16
    (1e-5, growing as sqrt(K) past K = 1024)."""
    from . import tc_hopper_shapes

    return tc_hopper_shapes.rel_err_bound({"format": "fp16", "shape": r["shape"]})


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    return [f"{r['variant']:30} {r['shape'][0]:5} {r['ms']:.4f} ms x{r['ratio']:.3f} "
            f"tensor {r['tensor_pipe_active']:.3f} L2 {r['l2_gbytes']:.2f} GB {r['ncu_clock_ghz']:.2f} GHz"
            for r in results.select(data, TOPIC)]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--launch-each":
        launch_each(*map(int, sys.argv[2:]))
    else:
        raise SystemExit("usage: python -m kernels.bench.tc_hopper_gemm_profile --launch-each M N K")
