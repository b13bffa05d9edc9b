"""Topic `occupancy_sweep`: time and energy of kernels run at different
occupancies, to see when occupancy matters.

Memory-bound: the first chapter's grid-stride vector add (n = 2^28, one
wave of resident blocks), its occupancy changed two ways:
- block size 32 ... 1024 threads (sweep "threads");
- 128 threads and extra dynamic shared memory that lets only 16, 8, 4, 2
  or 1 blocks fit on an SM (sweep "smem"; the kernel never touches it).
Compute-bound: FP32 matmul at 4096^3 (the matmul chapter's kernels):
- the autotuned warptiled step with __launch_bounds__(128, MIN_BLOCKS),
  MIN_BLOCKS = 1 ... 4: the compiler caps registers at 65536 / (128 *
  MIN_BLOCKS) and spills what does not fit (local_bytes); one block per SM
  with extra shared memory (sweep "launch_bounds");
- the 16x16 shared-memory tiled step (one output per thread: no ILP) with
  extra shared memory for 6, 4, 2, 1 blocks per SM (sweep "smem").
Occupancy is the driver's: blocks per SM x warps per block / 64. Every
launch's output is checked; each record has board energy from NVML over
>= 2 s (pJ per byte, or J per GFLOP). References measured in the same run:
the device copy (memory-bound) and cuBLAS SGEMM (compute-bound).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from .. import results
from . import plotting
from .ceilings import copy_ceiling_record

TOPIC = "occupancy_sweep"
ORDER = 120  # where the topic sorts: the chapters' order
N_MEM = 1 << 28
N_MM = 4096
THREADS = (32, 64, 128, 256, 512, 1024)
SMEM_BLOCKS = (16, 8, 4, 2, 1)  # blocks per SM allowed by shared memory, at 128 threads
AUTOTUNED = (128, 128, 16, 32, 128, 8, 16, 128, 2, True)  # kernels/cuda/matmul.cu, step 10
MIN_BLOCKS = (1, 2, 3, 4)
SMEM16_BLOCKS = (6, 4, 2, 1)


def smem_for_blocks(blocks: int, static: int, limits) -> int:
    """Dynamic shared memory per block that leaves room for `blocks` blocks per SM."""
    per_block = limits.smem_per_sm // blocks // limits.smem_alloc_unit * limits.smem_alloc_unit
    return max(0, per_block - limits.reserved_smem_per_block - static)


@contextlib.contextmanager
def dynamic_smem_limit(kern, nbytes: int):
    """Opt a kernel in to `nbytes` of dynamic shared memory (above 48 KB),
    and put its attribute back afterwards."""
    old = kern.max_dynamic_shared_size_bytes
    kern.max_dynamic_shared_size_bytes = max(old, nbytes)
    try:
        yield
    finally:
        kern.max_dynamic_shared_size_bytes = old


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness, matmul as mm, occupancy as occ, vector_add as va

    limits = occ.device_limits()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    seconds = 1.0 if quick else 2.0
    records = []

    def record(kind, sweep, variant, kern, threads, dyn, launch, check, work, unit, ref, shape, **extra):
        err = check()  # one launch's output against its reference
        blocks = occ.driver_blocks_per_sm(kern, threads, dyn)
        t = harness.time_gpu(launch, samples=10 if quick else 20, max_seconds=1.0)
        e = harness.measure_energy(launch, min_seconds=seconds)
        rate = work / (t["ms"] * 1e-3) / (1e9 if unit == "gbps" else 1e12)
        a = occ.kernel_attributes(kern)
        rec = results.record(TOPIC, "cupy", variant, shape, "float32", ms=t["ms"], ref=ref["id"],
                             ratio=rate / ref[unit], rel_err=err, **{unit: rate})
        rec.update({"kind": kind, "sweep": sweep, "threads": threads, "dynamic_smem": dyn,
                    "blocks_per_sm": blocks, "occupancy": blocks * -(-threads // 32) / limits.max_warps_per_sm,
                    "regs": a["regs"], "smem_bytes": a["smem_bytes"], "local_bytes": a["local_bytes"], **extra,
                    **(harness.energy_fields(e, nbytes=work) if unit == "gbps" else
                       harness.energy_fields(e, gflop=work / 1e9))})
        records.append(rec)

    # --- memory-bound: vector add, grid-stride ------------------------------
    ceiling, _ = copy_ceiling_record(TOPIC)
    records.append(ceiling)
    n = N_MEM // (16 if quick else 1)
    rng = cp.random.default_rng(0)
    a = rng.standard_normal(n, dtype=cp.float32)
    b = rng.standard_normal(n, dtype=cp.float32)
    o = cp.empty_like(a)
    want = a + b
    kern = va.cupy_kernel("grid_stride")
    n64 = np.int64(n)

    def add_case(sweep, threads, dyn):
        blocks = max(1, occ.driver_blocks_per_sm(kern, threads, dyn)) * sms  # one wave of resident blocks

        def launch():
            kern((blocks,), (threads,), (a, b, o, n64), shared_mem=dyn)

        def check():
            o.fill(cp.nan)
            launch()
            if not bool(cp.array_equal(o, want)):
                raise RuntimeError(f"vector add {sweep} {threads} {dyn}: wrong result")
            return harness.rel_err(o, want)
        name = f"vector_add/{sweep}_{threads}t" + (f"_{dyn}B" if dyn else "")
        record("memory", sweep, name, kern, threads, dyn, launch, check, 12 * n, "gbps", ceiling, [n, threads, dyn])

    for threads in THREADS:
        add_case("threads", threads, 0)
    dyns = [smem_for_blocks(k, 0, limits) for k in SMEM_BLOCKS]
    with dynamic_smem_limit(kern, max(dyns)):
        for dyn in dyns:
            add_case("smem", 128, dyn)
    del a, b, o, want
    cp.get_default_memory_pool().free_all_blocks()

    # --- compute-bound: matmul -----------------------------------------------
    size = N_MM // (2 if quick else 1)
    A = rng.standard_normal((size, size), dtype=cp.float32)
    B = rng.standard_normal((size, size), dtype=cp.float32)
    C = cp.empty((size, size), dtype=cp.float32)
    ref64 = cp.matmul(A.astype(cp.float64), B.astype(cp.float64))
    t = harness.sgemm_ceiling(size)
    C.fill(cp.nan)
    cp.matmul(A, B, out=C)  # the reference is checked too: FP32 (TF32 off) against float64
    err = harness.rel_err(C, ref64)
    if not err < 1e-5:
        raise RuntimeError(f"cuBLAS SGEMM {size}: rel_err {err} (TF32 on?)")
    cublas = results.record(TOPIC, "cublas", "sgemm", [size] * 3, "float32", ms=t["ms"], tflops=t["tflops"],
                            ratio=1.0, rel_err=err)
    records.append(cublas)
    M = N = K = size
    args = (A, B, C, np.int32(M), np.int32(N), np.int32(K))
    flops = 2 * size**3

    def mm_case(sweep, variant, kern, grid, threads, dyn, **extra):
        def launch():
            kern(grid, threads, args, shared_mem=dyn)

        def check():
            C.fill(cp.nan)
            launch()
            err = harness.rel_err(C, ref64)
            if not err < 1e-5:
                raise RuntimeError(f"{variant}: rel_err {err}")
            return err
        nthreads = int(np.prod(threads))
        record("compute", sweep, variant, kern, nthreads, dyn, launch, check, flops, "tflops", cublas,
               [size, nthreads, dyn], **extra)

    for minb in MIN_BLOCKS:
        cfg = AUTOTUNED[:8] + (minb, AUTOTUNED[9])
        kern = mm.warptiled_config_kernel(cfg)
        grid = (-(-N // cfg[1]), -(-M // cfg[0]))
        mm_case("launch_bounds", f"autotuned/min_blocks_{minb}", kern, grid, (cfg[7],), 0, min_blocks=minb)
    kern = mm.warptiled_config_kernel(AUTOTUNED)
    dyn = smem_for_blocks(1, kern.shared_size_bytes, limits)
    with dynamic_smem_limit(kern, dyn):
        mm_case("launch_bounds", "autotuned/one_block", kern, (-(-N // 128), -(-M // 128)), (128,), dyn,
                min_blocks=AUTOTUNED[8])
    kern = mm.cupy_kernel("smem_tiled16")
    grid, block = mm.grid("smem_tiled16", M, N)
    dyns = [smem_for_blocks(k, kern.shared_size_bytes, limits) for k in SMEM16_BLOCKS]
    with dynamic_smem_limit(kern, max(dyns)):
        mm_case("smem", "smem_tiled16/full", kern, grid, block, 0)
        for k, dyn in zip(SMEM16_BLOCKS, dyns):
            mm_case("smem", f"smem_tiled16/{k}_blocks", kern, grid, block, dyn)
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'Throughput against occupancy': '吞吐量与占用率',
    'vector add: block size': '向量加法：线程块大小',
    'vector add: extra shared memory': '向量加法：额外共享内存',
    'autotuned matmul: __launch_bounds__ / one block': '自动调优矩阵乘法：__launch_bounds__ / 单线程块',
    '16x16 tiled matmul: extra shared memory': '16x16 分块矩阵乘法：额外共享内存',
    'fraction of the device copy': '占设备内拷贝的比例',
    'fraction of cuBLAS': '占 cuBLAS 的比例',
    "the source's 50–75 %": '原文的 50–75 %',
    'occupancy (active warps / 64, from the driver)': '占用率（活跃 warp 数 / 64，取自驱动）',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = [r for r in results.select(data, TOPIC) if "occupancy" in r]
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    fig, (ax, ax2) = plotting.new_figure(7, 7.5, nrows=2)
    for (kind, sweep, label, style), axis in (
            (("memory", "threads", "vector add: block size", "o-"), ax),
            (("memory", "smem", "vector add: extra shared memory", "s--"), ax),
            (("compute", "launch_bounds", "autotuned matmul: __launch_bounds__ / one block", "o-"), ax2),
            (("compute", "smem", "16x16 tiled matmul: extra shared memory", "s--"), ax2)):
        pts = sorted((r["occupancy"], r["ratio"]) for r in rows if r["kind"] == kind and r["sweep"] == sweep)
        if pts:
            xs, ys = zip(*pts)
            axis.plot(xs, ys, style, markersize=4, label=label)
    for axis, what in ((ax, "fraction of the device copy"), (ax2, "fraction of cuBLAS")):
        axis.axvspan(0.5, 0.75, color="grey", alpha=0.15, label="the source's 50–75 %")
        axis.set_xlabel("occupancy (active warps / 64, from the driver)")
        axis.set_ylabel(what)
        axis.set_xlim(0, 1.05)
        axis.set_ylim(0, 1.05)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7, loc="lower right")
    return plotting.save(fig, ax, TOPIC, env, out_dir, "Throughput against occupancy", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = [f"{'variant':36} {'thr':>5} {'dyn':>7} {'blk':>4} {'occ':>5} {'regs':>4} {'lmem':>5} {'rate':>9} "
           f"{'ratio':>6} {'energy':>8}"]
    for r in results.select(data, TOPIC):
        if "occupancy" not in r:
            continue
        rate = f"{r['gbps']:.0f} GB/s" if "gbps" in r else f"{r['tflops']:.1f} TF"
        en = f"{r['energy_pj_per_byte']:.0f} pJ/B" if "gbps" in r else f"{r['energy_j_per_gflop']:.4f}"
        out.append(f"{r['variant']:36} {r['threads']:5} {r['dynamic_smem']:7} {r['blocks_per_sm']:4} "
                   f"{r['occupancy']:5.2f} {r['regs']:4} {r['local_bytes']:5} {rate:>9} {r['ratio']:6.3f} {en:>8}")
    return out


def claims(data: dict) -> None:
    """docs/occupancy*.md, "What the sweeps show" and the source's 50-75 %
    band, checked against the committed measurements: memory-bound and
    ILP-free kernels want occupancy, the ILP-rich autotuned matmul is best
    at 12.5 % and spills when forced higher."""
    sweep = {r["variant"]: r for r in results.select(data, TOPIC) if "occupancy" in r}
    mem = sorted((r["occupancy"], r["ratio"]) for r in sweep.values() if r["kind"] == "memory" and r["sweep"] == "smem")
    best = max(v for _, v in mem)
    assert all(v < 0.6 * best for o, v in mem if o <= 0.125)                 # starved of loads in flight
    assert all(v >= 0.9 * best for o, v in mem if o >= 0.5)                  # enough from half occupancy on
    mem_all = [r for r in sweep.values() if r["kind"] == "memory"]
    fastest = max(mem_all, key=lambda r: r["ratio"])
    assert fastest["variant"] == "vector_add/threads_32t" and fastest["occupancy"] == 0.5
    for r1 in mem_all:  # energy per byte falls as bandwidth rises (beyond noise: 0.1 of the copy)
        for r2 in mem_all:
            if r2["ratio"] > r1["ratio"] + 0.1:
                assert r2["energy_pj_per_byte"] < r1["energy_pj_per_byte"], (r1["variant"], r2["variant"])
    auto = {m: sweep[f"autotuned/min_blocks_{m}"] for m in (1, 2, 3, 4)}
    assert max(auto.values(), key=lambda r: r["ratio"])["occupancy"] == 0.125  # best at 12.5 %
    assert auto[1]["local_bytes"] == auto[2]["local_bytes"] == 0 < auto[3]["local_bytes"] < auto[4]["local_bytes"]
    assert auto[4]["ratio"] < auto[3]["ratio"] < auto[2]["ratio"]            # the cap spills, and it costs
    assert auto[4]["ratio"] < 0.15 and [auto[m]["regs"] for m in (3, 4)] == [168, 128]
    assert auto[4]["energy_j_per_gflop"] > auto[3]["energy_j_per_gflop"] > auto[2]["energy_j_per_gflop"]
    assert sweep["autotuned/one_block"]["ratio"] < 0.7 * auto[2]["ratio"]     # but 1 block is too few
    s16 = sorted((r["occupancy"], r["ratio"]) for v, r in sweep.items() if v.startswith("smem_tiled16/"))
    assert [v for _, v in s16] == sorted(v for _, v in s16)                  # no ILP: occupancy helps throughout
    # the source's "50-75 % is best" is not a rule. By time: the ILP kernel is best at 12.5 %, the
    # ILP-free tile at 100 %, neither inside the band
    comp = [r for r in sweep.values() if r["kind"] == "compute"]
    assert not 0.5 <= max(comp, key=lambda r: r["ratio"])["occupancy"] <= 0.75
    assert max(s16, key=lambda p: p[1])[0] == 1.0
    # by energy per GFLOP (the source's measure): the ILP kernel is cheapest at 12.5 %, the tile inside
    # the band (50 % or 75 %: it moves between runs), but from 50 % to 100 % its energy differs by < 1/10
    auto_all = [r for v, r in sweep.items() if v.startswith("autotuned/")]
    assert min(auto_all, key=lambda r: r["energy_j_per_gflop"])["occupancy"] == 0.125
    e16 = {r["occupancy"]: r["energy_j_per_gflop"] for v, r in sweep.items() if v.startswith("smem_tiled16/")}
    assert min(e16, key=e16.get) in (0.5, 0.75)
    upper = [e for o, e in e16.items() if o >= 0.5]
    assert max(upper) / min(upper) - 1 < 0.1                                  # "less than a tenth"
    assert e16[1.0] / min(upper) - 1 < 0.1                                    # 100 %: "a few per cent" more
    # the memory-bound kernel: fastest at 50 % (asserted above), and that point is also the
    # cheapest per byte; from 50 % up every point is within a tenth of its own sweep's best
    assert min(mem_all, key=lambda r: r["energy_pj_per_byte"]) is fastest
    for name in ("threads", "smem"):
        pts = [r["ratio"] for r in mem_all if r["sweep"] == name]
        assert all(r["ratio"] >= 0.9 * max(pts) for r in mem_all if r["sweep"] == name and r["occupancy"] >= 0.5)
