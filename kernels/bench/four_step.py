"""Topic `four_step`: the four-step tuning method applied to a 5 x 5 image
convolution (kernels/stencil.py) at 8192 x 8192 float32 (quick: 2048^2).

Every CUDA C step and both Numba steps: time (median of CUDA-event
samples), useful TFLOP/s (2 * 25 FLOP per pixel), the compulsory traffic's
GB/s (4 bytes read + 4 written per pixel), board energy per useful GFLOP
from NVML over >= 2 s and its ratio to step 1, the kernel's registers,
shared memory and the driver's occupancy, rel_err against a float64
product on a NaN-poisoned output. ref = step 1 (naive CUDA C), so ratio is
the speed-up over the baseline.

Achieved occupancy (the average fraction of warp slots in use while an SM
is busy) has no CUDA API; Nsight Compute measures it. Each CUDA C step's
record carries `achieved_occupancy` from one profiled launch per step at
the same size, in a child process under
`ncu --clock-control none --metrics sm__warps_active.avg.pct_of_peak_sustained_active`
(the clocks are left as the timing runs saw them), beside the driver's
theoretical `occupancy`. Without ncu on PATH the bench stops and says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "four_step"
ORDER = 130  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "achieved_occupancy": ("实测占用率（ncu）", "achieved occupancy (ncu)"),
}
SIZE, QUICK_SIZE = 8192, 2048


ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"


def achieved_occupancy(n: int) -> dict[str, float]:
    """{variant: achieved occupancy (0..1)} of every CUDA C step at n x n,
    from Nsight Compute profiling this module's child (one launch per step)."""
    from .. import stencil as st

    from .. import harness

    rows, _ = harness.ncu_metrics([ACHIEVED], "^conv_", ["kernels.bench.four_step", "--launch-each", str(n)],
                                  need="four_step records achieved occupancy with Nsight Compute")
    found = {kernel.split("(")[0].strip(): value / 100 for kernel, metric, value in rows if metric == ACHIEVED}
    missing = [v for v in st.VARIANTS if f"conv_{v}" not in found]
    if missing:
        raise RuntimeError(f"ncu reported no {ACHIEVED} for {missing}; it reported {sorted(found)}")
    return {v: found[f"conv_{v}"] for v in st.VARIANTS}


def launch_each(n: int) -> None:
    """The child ncu profiles: every CUDA C step once at n x n, checked."""
    import cupy as cp

    from .. import harness, stencil as st

    rng = cp.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=cp.float32)
    w = rng.standard_normal((st.KW, st.KW), dtype=cp.float32)
    ref = st.reference(x, w, xp=cp)
    for variant in st.VARIANTS:
        out = st.conv2d_cupy(x, w, variant=variant)
        err = harness.rel_err(out, ref)
        if not err < 1e-5:
            raise RuntimeError(f"{variant}: rel_err {err}")


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import harness, stencil as st
    from ..device import kernel_attributes

    n = QUICK_SIZE if quick else SIZE
    rng = cp.random.default_rng(0)
    sets = []
    for _ in range(harness.rotation(8 * n * n)):
        x = rng.standard_normal((n, n), dtype=cp.float32)
        o = cp.empty_like(x)
        sets.append((x, o, cuda.as_cuda_array(x), cuda.as_cuda_array(o)))
    w = rng.standard_normal((st.KW, st.KW), dtype=cp.float32)
    nw = cuda.as_cuda_array(w)
    x0, o0 = sets[0][:2]
    ref = st.reference(x0, w, xp=cp)  # float64, on the GPU
    gflop = st.flops(n, n) / 1e9
    achieved = achieved_occupancy(n)
    records, base = [], {}
    entries = [("cupy", v) for v in st.VARIANTS] + [("numba", v) for v in st.NUMBA_VARIANTS]
    for impl, variant in entries:
        if impl == "cupy":
            kern = st.cupy_kernel(variant)
            blocks, threads = st.grid(variant, n, n)
            if variant == "tuned":
                st._set_constant_filter(w)  # once: the bare launches below do not copy it

            def launch(x, o, *_, kern=kern, blocks=blocks, threads=threads):
                kern(blocks, threads, (x, w, o, np.int32(n), np.int32(n)))
            extra = kernel_attributes(kern, int(np.prod(threads)))
            extra["achieved_occupancy"] = achieved[variant]
        else:
            def launch(x, o, nx, no, variant=variant):
                st.conv2d_numba(nx, nw, no, variant=variant)
            extra = {}
        o0.fill(cp.nan)
        launch(*sets[0])
        err = harness.rel_err(o0, ref)
        if not err < 1e-5:
            raise RuntimeError(f"{impl} {variant}: rel_err {err}")
        t = harness.time_gpu(launch, sets, samples=10 if quick else 30, max_seconds=2.0)
        e = harness.measure_energy(launch, sets, min_seconds=1.0 if quick else 2.0)
        rid = results.record_id(TOPIC, impl, variant, [n, n], "float32")
        energy = harness.energy_fields(e, gflop=gflop)
        j_per_gflop = energy["energy_j_per_gflop"]
        if (impl, variant) == ("cupy", "naive"):
            base = {"id": rid, "ms": t["ms"], "energy": j_per_gflop}
        tflops = gflop / t["ms"]
        records.append(results.record(
            TOPIC, impl, variant, [n, n], "float32", ms=t["ms"], ref=base["id"], rel_err=err,
            ms_min=t["ms_min"], tflops=tflops, gbps=8 * n * n / (t["ms"] * 1e-3) / 1e9,
            ratio=base["ms"] / t["ms"], step=st.STEP[variant],
            energy_ratio_to_naive=j_per_gflop / base["energy"], **energy, **extra))
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'board energy, J per useful GFLOP': '每有效 GFLOP 的整卡能耗 (J)',
    '5x5 convolution, step by step': '5x5 卷积，逐步优化',
    'J per useful GFLOP': '每有效 GFLOP 的焦耳数',
    'useful TFLOP/s': '有效 TFLOP/s',
    'tuned': '调优版',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    from .. import stencil as st

    keys = [("cupy", v) for v in st.VARIANTS] + [("numba", v) for v in st.NUMBA_VARIANTS]
    by = {(r["impl"], r["variant"]): r for r in rows}
    keys = [k for k in keys if k in by]
    fig, (ax, ax2) = plotting.new_figure(7, 7.5, nrows=2)
    labels = [f"{st.STEP[v]}: {v}" + ("\n(numba)" if i == "numba" else "") for i, v in keys]
    colors = [f"C{st.STEP[v] - 1}" for _, v in keys]
    xs = np.arange(len(keys))
    ax.bar(xs, [by[k]["tflops"] for k in keys], color=colors)
    ax.set_ylabel("useful TFLOP/s")
    ax2.bar(xs, [by[k]["energy_j_per_gflop"] for k in keys], color=colors)
    ax2.set_ylabel("board energy, J per useful GFLOP")
    ax2.set_yscale("log")
    for a in (ax, ax2):
        a.set_xticks(xs, labels, fontsize=7, rotation=30)
        a.grid(True, axis="y", alpha=0.3)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "5x5 convolution, step by step", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'impl':6} {'variant':10} {'step':>4} {'ms':>8} {'TFLOP/s':>8} {'GB/s':>7} {'x naive':>8} "
           f"{'J/GFLOP':>8} {'E/naive':>8} {'regs':>4} {'occ':>5}"]
    for r in sorted(results.select(data, TOPIC), key=lambda r: (r["impl"], r["step"])):
        out.append(f"{r['impl']:6} {r['variant']:10} {r['step']:4} {r['ms']:8.3f} {r['tflops']:8.2f} "
                   f"{r['gbps']:7.0f} {r['ratio']:8.2f} {r['energy_j_per_gflop']:8.4f} "
                   f"{r['energy_ratio_to_naive']:8.3f} {r.get('regs', 0):4} {r.get('occupancy', 0):5.2f}")
    return out


def claims(data: dict) -> None:
    """docs/tuning-method*.md, "What the measurements show": the four-step
    convolution, every step faster and cheaper than the one before; the
    source's tile story: 32x32 does not cost more energy than 8x8, and
    16x16 with 4 outputs per thread is the best of step 3 (checked against
    the committed measurements)."""
    fs = {(r["impl"], r["variant"]): r for r in results.select(data, TOPIC)}
    c = {v: fs[("cupy", v)] for v in ("naive", "coalesced", "tiled8", "tiled16", "tiled32", "tiled16x4", "tuned")}
    chain = ["naive", "coalesced", "tiled16", "tiled16x4", "tuned"]
    assert [c[v]["ms"] for v in chain] == sorted((c[v]["ms"] for v in chain), reverse=True)
    assert [c[v]["energy_j_per_gflop"] for v in chain] == sorted((c[v]["energy_j_per_gflop"] for v in chain),
                                                                  reverse=True)
    assert c["coalesced"]["ratio"] > 3 and c["tuned"]["ratio"] > 15              # step 2 alone; all four
    assert c["tuned"]["energy_ratio_to_naive"] > 1 / c["tuned"]["ratio"]           # energy falls less than time
    assert c["tuned"]["avg_power_w"] > c["naive"]["avg_power_w"]                   # and draws more power
    step3 = [v for v in c if c[v]["step"] == 3]
    assert min(step3, key=lambda v: c[v]["ms"]) == "tiled16x4"                   # the source's final choice
    assert min(step3, key=lambda v: c[v]["energy_j_per_gflop"]) == "tiled16x4"
    assert c["tiled32"]["energy_j_per_gflop"] < c["tiled8"]["energy_j_per_gflop"]   # not "+12 %"
    assert abs(c["tiled32"]["ms"] / c["tiled8"]["ms"] - 1) < 0.1                  # nor slower: about equal
    assert all(c[v]["occupancy"] == 1.0 for v in c)                               # theoretical (the driver's)
    achieved = {v: c[v]["achieved_occupancy"] for v in c}                        # Nsight Compute's
    assert all(0.5 < a < c[v]["occupancy"] for v, a in achieved.items())          # below theoretical, every step
    assert min(achieved, key=achieved.get) == "naive"                             # lowest for the baseline
    assert max(achieved.values()) - min(achieved.values()) < 0.2                  # a spread of a few points
    assert fs[("numba", "tiled16")]["ms"] < fs[("numba", "coalesced")]["ms"] < c["naive"]["ms"]


# On the roofline: 2 * 25 FLOP per 8 bytes (each pixel read and written once).
ROOFLINE = ("D", 3)


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    return [(f"{r['impl']} {r['variant']}", 50 / 8, r["tflops"] * 1e3) for r in results.select(data, TOPIC)]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import cupy as cp
    import numpy as np

    from kernels import stencil as st

    for H, W in ((1, 1), (5, 7), (33, 65), (130, 47)):
        x = cp.random.standard_normal((H, W), dtype=cp.float32)
        w = cp.random.standard_normal((st.KW, st.KW), dtype=cp.float32)
        ref = st.reference(cp.asnumpy(x), cp.asnumpy(w))
        for variant in st.VARIANTS:
            out = st.conv2d_cupy(x, w, variant=variant)
            assert np.allclose(cp.asnumpy(out), ref, rtol=1e-4, atol=1e-4), (variant, H, W)


if __name__ == "__main__":  # the child of achieved_occupancy: python -m kernels.bench.four_step --launch-each N
    if sys.argv[1:2] != ["--launch-each"] or len(sys.argv) != 3:
        sys.exit("usage: python -m kernels.bench.four_step --launch-each N")
    launch_each(int(sys.argv[2]))
