"""Topic `matmul`: every step of the FP32 matmul ladder (CUDA C through
CuPy, and Numba) against cuBLAS SGEMM (cupy.matmul, TF32 off) measured in
the same run, at 1024^3, 4096^3 and 8192^3.

Each record: time (median of CUDA-event samples), TFLOP/s = 2*M*N*K / t,
ratio to cuBLAS at the same size, rel_err against a float64 product (the
output poisoned with NaN first), board energy per useful GFLOP from NVML
over >= 2 s with its ratio to the naive CUDA C step, the kernel's
registers, shared and local memory and the driver's occupancy, and the
arithmetic intensity of its global loads (FLOP per byte requested).
A sweep of step 8's tuning knobs (CONFIGS) is recorded as variants
`warptiled_t/<config>` (tuning: true) at 4096^3 and 8192^3. Source 001's
three kernels, as it prints them, are recorded as variants matMulNaive,
matMulShared and matMulILP (source: "001", time only).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import results, sass
from ..matmul import CONFIGS
from . import plotting

TOPIC = "matmul"
ORDER = 50  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "intensity": ("算术强度 (FLOP/B)", "intensity (FLOP/B)"),
}
SIZES = (1024, 4096, 8192)

# Step 8's tuning sweep: kernels.matmul.CONFIGS.

# FLOP per byte the kernel requests from global memory: a BM x BN tile
# loads (BM + BN) * BK floats for BM * BN * BK FMAs; one output per thread
# without tiling (naive, coalesced) loads two floats per FMA.
def tile_intensity(bm: int, bn: int) -> float:
    return 2 * bm * bn / (4 * (bm + bn))


def intensity(impl: str, variant: str) -> float:
    from .. import matmul as mm

    if variant in ("naive", "coalesced"):
        return 2 / 8  # 2 FLOP per 8 bytes
    if impl == "numba":
        bm, bn = (mm.TILE, mm.TILE) if variant == "smem_tiled" else (mm.BM, mm.BN)
    else:
        bm, bn = mm._BLOCK_TILE[variant][:2]
    return tile_intensity(bm, bn)


def _max_seconds(quick: bool) -> float:
    return 0.5 if quick else 2.0


# The ptxas report the matmul page embeds: the autotuned configuration under
# __launch_bounds__(128, MIN_BLOCKS) for MIN_BLOCKS = 1 ... 4.
AUTOTUNED_T = "matmul_warptiled_t<128, 128, 16, 32, 128, 8, 16, 128, {}, true>"


def launch_bounds_report() -> str:
    """Registers and spills ptxas reports for each MIN_BLOCKS (its mangled
    name carries MIN_BLOCKS as `Li<m>E` before the `Lb1E` of PREFETCH)."""
    import re

    params = "(const float* __restrict__, const float* __restrict__, float* __restrict__, int, int, int)"
    report = sass.ptxas_verbose("matmul.cu", tuple(AUTOTUNED_T.format(m) for m in (1, 2, 3, 4)), params)
    out = [f"// ptxas -v for {sass.ARCH} (nvcc -arch={sass.ARCH} -cubin -Xptxas -v), matmul.cu"]
    for minb in (1, 2, 3, 4):
        for m in re.finditer(r"Function properties for (\S+)\s*\n\s*(\d+ bytes stack frame, \d+ bytes spill "
                             r"stores, \d+ bytes spill loads)\s*\n.*?(Used \d+ registers)", report):
            if "matmul_warptiled_t" in m.group(1) and f"Li{minb}ELb1E" in m.group(1):
                out.append(f"__launch_bounds__(128, {minb}): {m.group(3)}, {m.group(2)}")
    return "\n".join(out) + "\n"


LISTINGS = {"autotuned_launch_bounds.ptxas": launch_bounds_report}


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import harness, matmul as mm
    from ..device import kernel_attributes, numba_kernel_attributes

    sizes = (1024,) if quick else SIZES
    records = []
    naive_energy = {}
    for n in sizes:
        shape = [n, n, n]
        gflop = 2 * n**3 / 1e9
        rng = cp.random.default_rng(n)
        sets = harness.rotation(3 * 4 * n * n)  # A, B, C beyond the L2 cache
        args = [(rng.standard_normal((n, n), dtype=cp.float32), rng.standard_normal((n, n), dtype=cp.float32),
                 cp.empty((n, n), dtype=cp.float32)) for _ in range(sets)]
        A0, B0, _ = args[0]
        ref = cp.matmul(A0.astype(cp.float64), B0.astype(cp.float64))
        ref_id = results.record_id(TOPIC, "cublas", "sgemm", shape, "float32")

        nb_args = [tuple(cuda.as_cuda_array(x) for x in a) for a in args]  # the same buffers, for Numba

        def run(impl, variant, fn, extra=None, energy=True, arg_sets=args):
            C0 = args[0][2]
            C0.fill(cp.nan)  # an element the kernel leaves unwritten fails the check
            fn(*arg_sets[0])
            err = harness.rel_err(C0, ref)
            if not err < 1e-5:
                raise RuntimeError(f"{impl} {variant} {n}: rel_err {err}")
            t = harness.time_gpu(fn, arg_sets, warmup=2, samples=20, max_seconds=_max_seconds(quick))
            rec = results.record(TOPIC, impl, variant, shape, "float32", ms=t["ms"], ref=ref_id, rel_err=err,
                                 tflops=2 * n**3 / (t["ms"] * 1e-3) / 1e12, samples=t["samples"])
            if energy:
                e = harness.measure_energy(fn, arg_sets, min_seconds=0.5 if quick else 2.0)
                rec.update(harness.energy_fields(e, gflop=gflop))
            rec.update(extra or {})
            records.append(rec)
            return rec

        cublas = run("cublas", "sgemm", mm.cublas_matmul)
        for step, variant in enumerate(mm.VARIANTS, start=1):
            extra = dict(step=step, intensity=intensity("cupy", variant),
                         **kernel_attributes(mm.cupy_kernel(variant), mm.threads_of(variant)))
            rec = run("cupy", variant, lambda A, B, C, v=variant: mm.matmul_cupy(A, B, C, variant=v), extra)
            if variant == "naive":
                naive_energy[n] = rec["energy_j_per_gflop"]
        for step, kernel in enumerate(mm.SOURCE_001, start=1):  # source 001's table, as printed
            run("cupy", kernel, lambda A, B, C, k=kernel: mm.matmul_source001(A, B, C, kernel=k),
                dict(source="001", source_step=step, intensity=2 / 8 if step == 1 else tile_intensity(32, 32),
                     **kernel_attributes(mm.cupy_module(mm.CUDA_SOURCE.name).get_function(kernel), 1024)),
                energy=False)
        for step, variant in enumerate(mm.NUMBA_KERNELS, start=1):
            rec = run("numba", variant, lambda A, B, C, v=variant: mm.matmul_numba(A, B, C, variant=v),
                      dict(step=step, intensity=intensity("numba", variant)), arg_sets=nb_args)
            threads = math.prod(mm.numba_grid(variant, n, n)[1])
            rec.update(numba_kernel_attributes(mm.NUMBA_KERNELS[variant], threads))
        if n >= 4096:  # step 8's tuning sweep (no energy: time only)
            for cfg in CONFIGS:
                kern = mm.warptiled_config_kernel(cfg)
                run("cupy", f"warptiled_t/{mm.config_name(cfg)}",
                    lambda A, B, C, c=cfg: mm.matmul_warptiled_config(A, B, C, c),
                    dict(tuning=True, config=list(cfg), intensity=tile_intensity(cfg[0], cfg[1]),
                         **kernel_attributes(kern, cfg[7])), energy=False)
        for r in records:
            if r["shape"] == shape:
                r["ratio"] = r["tflops"] / cublas["tflops"]
                if "energy_j_per_gflop" in r:
                    r["energy_ratio_to_naive"] = r["energy_j_per_gflop"] / naive_energy[n]
        if n >= 4096:  # the goal (>= 0.90 x cuBLAS) and Numba's (>= 0.5): beside cuBLAS in paired rounds
            cases = {"cublas/sgemm": (mm.cublas_matmul, args),
                     "cupy/autotuned": (lambda A, B, C: mm.matmul_cupy(A, B, C, variant="autotuned"), args),
                     "numba/unsigned": (lambda A, B, C: mm.matmul_numba(A, B, C, variant="unsigned"), nb_args)}
            paired = harness.paired_rounds(cases, "cublas/sgemm", rounds=2 if quick else 5, warmup=1, samples=5,
                                           max_seconds=_max_seconds(quick))
            for r in records:
                p = paired.get(f"{r['impl']}/{r['variant']}")
                if r["shape"] == shape and p is not None:
                    r.update(harness.paired_fields(p, cublas["id"]))
        del args, nb_args, ref, A0, B0
        cp.get_default_memory_pool().free_all_blocks()
    return records


LADDER_LABELS = {"naive": "naive", "coalesced": "coalesced", "smem_tiled16": "smem 16",
                 "smem_tiled32": "smem 32", "blocktile_1d": "1D block", "blocktile_2d": "2D block",
                 "vectorized": "float4", "double_buffered": "double\nbuffer", "warptiled": "warp\ntile",
                 "register_prefetch": "register\nprefetch", "autotuned": "auto-\ntuned"}


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'smem 16': '共享内存\n16',
    'smem 32': '共享内存\n32',
    'board energy, J per GFLOP': '每 GFLOP 的整卡能耗 (J)',
    'FP32 matmul ladder (CUDA C via CuPy)': 'FP32 矩阵乘法阶梯（CuPy 调用 CUDA C）',
    'Energy per useful GFLOP at': '每有效 GFLOP 的能耗，规模',
    'J per GFLOP': '每 GFLOP 的焦耳数',
    '1D block': '一维分块',
    '2D block': '二维分块',
    'auto-\ntuned': '自动\n调优',
    'double\nbuffer': '双缓冲',
    'register\nprefetch': '寄存器\n预取',
    'warp\ntile': 'warp\n分块',
    'register blocked': '寄存器分块',
    'smem tiled': '共享内存分块',
    'smem': '共享内存',
    'unrolled': '展开',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    from .. import matmul as mm

    recs = results.select(data, TOPIC)
    if not recs:
        return []
    env = data["topics"][TOPIC]["env"]
    sizes = sorted({r["shape"][0] for r in recs})
    by = {(r["impl"], r["variant"], r["shape"][0]): r for r in recs}
    paths = []
    # 1. TFLOP/s per step, one bar group per size, cuBLAS as lines.
    fig, ax = plotting.new_figure(8, 4.2)
    xs = np.arange(len(mm.VARIANTS))
    width = 0.8 / len(sizes)
    for i, n in enumerate(sizes):
        vals = [by.get(("cupy", v, n), {}).get("tflops", np.nan) for v in mm.VARIANTS]
        bars = ax.bar(xs + (i - (len(sizes) - 1) / 2) * width, vals, width, label=f"{n}³")
        cub = by.get(("cublas", "sgemm", n))
        if cub:
            ax.axhline(cub["tflops"], ls="--", lw=1, color=bars.patches[0].get_facecolor(),
                       label=f"cuBLAS {n}³")
    ax.set_xticks(xs, [LADDER_LABELS[v] for v in mm.VARIANTS], fontsize=8)
    ax.set_ylabel("TFLOP/s (FP32)")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    paths += plotting.save(fig, ax, TOPIC, env, out_dir, "FP32 matmul ladder (CUDA C via CuPy)", words=PLOT_WORDS)
    # 2. Energy per useful GFLOP per step (log scale), CUDA C and Numba, with cuBLAS.
    fig, ax = plotting.new_figure(8, 4.2)
    n = 4096 if 4096 in sizes else sizes[-1]
    labels = [LADDER_LABELS[v] for v in mm.VARIANTS] + [f"numba\n{v.replace('_', ' ')}" for v in mm.NUMBA_KERNELS] \
        + ["cuBLAS"]
    keys = [("cupy", v) for v in mm.VARIANTS] + [("numba", v) for v in mm.NUMBA_KERNELS] + [("cublas", "sgemm")]
    vals = [by.get((i, v, n), {}).get("energy_j_per_gflop", np.nan) for i, v in keys]
    colors = ["C0"] * len(mm.VARIANTS) + ["C1"] * len(mm.NUMBA_KERNELS) + ["k"]
    ax.bar(np.arange(len(vals)), vals, color=colors)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(vals)), labels, fontsize=7, rotation=45, ha="right")  # 16 labels: no overlap
    ax.set_ylabel("board energy, J per GFLOP")
    ax.grid(True, axis="y", alpha=0.3)
    paths += plotting.save(fig, ax, f"{TOPIC}_energy", env, out_dir, f"Energy per useful GFLOP at {n}³", words=PLOT_WORDS)
    return paths


def summary(data: dict) -> list[str]:
    out = [f"{'impl':6} {'variant':44} {'n':>5} {'ms':>9} {'TFLOP/s':>7} {'ratio':>6} {'J/GFLOP':>8} "
           f"{'regs':>4} {'occ':>5} {'rel_err':>8}"]
    for r in results.select(data, TOPIC):
        out.append(f"{r['impl']:6} {r['variant']:44} {r['shape'][0]:5} {r['ms']:9.3f} {r['tflops']:7.2f} "
                   f"{r['ratio']:6.3f} {r.get('energy_j_per_gflop', float('nan')):8.4f} "
                   f"{r.get('regs', 0):4} {r.get('occupancy', float('nan')):5.2f} {r['rel_err']:8.1e}")
    return out


def claims(data: dict) -> None:
    """docs/matmul*.md: "What the tables show", energy, Numba, the sources'
    tables; and the chapter's goal (>= 0.90 x cuBLAS at 4096^3 and 8192^3),
    checked against the committed measurements."""
    rows = results.select(data, TOPIC)
    from .. import harness
    from ..matmul import NUMBA_KERNELS, VARIANTS

    def rec(impl, variant, n):
        return next(r for r in rows if (r["impl"], r["variant"], r["shape"][0]) == (impl, variant, n))

    def t(v, n=4096):
        return rec("cupy", v, n)["tflops"]

    for n in (4096, 8192):
        ratios = [rec("cupy", v, n)["ratio"] for v in VARIANTS]
        assert ratios == sorted(ratios), (n, ratios)                          # every step helps
        assert harness.against(rec("cupy", "autotuned", n), 0.90) == "above", n  # goal, paired beside cuBLAS
    assert t("coalesced") > 10 * t("naive")                                  # coalescing: > 10x
    assert t("smem_tiled16") < 1.5 * t("coalesced") and t("smem_tiled32") < 1.5 * t("coalesced")
    assert t("blocktile_1d") > 2 * t("smem_tiled32")                        # register blocking: the jump
    occ = {v: rec("cupy", v, 4096)["occupancy"] for v in VARIANTS}
    assert occ["autotuned"] == min(occ.values()) and occ["autotuned"] == 0.125  # 4 warps x 2 blocks / 64
    assert all(rec("cupy", v, 4096)["local_bytes"] == 0 for v in VARIANTS)   # no spills
    # 1024^3 falls short of 4096^3's rate, cuBLAS too (64 tiles of 128 x 128 for 132 SMs)
    assert rec("cupy", "autotuned", 1024)["tflops"] < 0.5 * rec("cupy", "autotuned", 4096)["tflops"]
    assert rec("cublas", "sgemm", 1024)["tflops"] < 0.8 * rec("cublas", "sgemm", 4096)["tflops"]
    # energy: falls with time, less steeply; autotuned close to cuBLAS
    e = {v: rec("cupy", v, 4096)["energy_j_per_gflop"] for v in VARIANTS}
    ms = {v: rec("cupy", v, 4096)["ms"] for v in VARIANTS}
    speedup, saving = ms["naive"] / ms["coalesced"], e["naive"] / e["coalesced"]
    assert speedup > 10 and 1 < saving < speedup / 2  # coalescing: time / 10 or less, energy by under half that
    assert e["autotuned"] <= 1.1 * rec("cublas", "sgemm", 4096)["energy_j_per_gflop"]
    assert e["naive"] > 20 * e["autotuned"]
    # Numba
    nb = {v: {n: rec("numba", v, n) for n in (1024, 4096, 8192)} for v in NUMBA_KERNELS}
    for n in (4096, 8192):
        assert nb["register_blocked"][n]["tflops"] > 1.5 * nb["smem_tiled"][n]["tflops"]
        assert nb["unrolled"][n]["tflops"] < nb["register_blocked"][n]["tflops"]
    assert nb["register_blocked"][1024]["tflops"] < 1.5 * nb["smem_tiled"][1024]["tflops"]
    for n in (4096, 8192):  # step 5: unsigned indices, the only change from register_blocked
        assert max(nb[v][n]["ratio"] for v in nb if v != "unsigned") < 1 / 3
        assert harness.against(nb["unsigned"][n], 0.5) == "above", n            # the chapter's goal, paired
        assert nb["unsigned"][n]["tflops"] > 1.9 * nb["register_blocked"][n]["tflops"]
    assert all(nb[v][4096]["occupancy"] == 0.125 and nb[v][4096]["local_bytes"] == 0
               for v in ("register_blocked", "unsigned"))                     # 8 warps per SM, no spills
    assert nb["unrolled"][4096]["regs"] == 255                                # literal_unroll: every register
    # the sources' tables, against our coalesced step (their "naive")
    assert ms["smem_tiled16"] / ms["coalesced"] > 0.5 and e["smem_tiled16"] / e["coalesced"] > 0.5  # 000
    assert 0.5 < (ms["register_prefetch"] / ms["coalesced"]) / 0.12 < 2                              # 000
    assert 0.5 < (e["register_prefetch"] / e["coalesced"]) / 0.18 < 2
    assert all(ms["coalesced"] / ms[v] < 3.5 / 2 for v in ("smem_tiled16", "smem_tiled32"))          # 001: far less
    assert occ["smem_tiled32"] == 1.0          # 001: the shape of its matMulShared/matMulILP, full occupancy, not 50 %
    assert ms["naive"] / ms["smem_tiled16"] < 25                                                     # 002
    assert occ["blocktile_2d"] == 0.25                                                               # 001
    # 001's three kernels as printed: Shared < 1.5 x Naive (not 3.5), ILP no faster than Shared
    # (within a few per cent; not 8.2), all at full theoretical occupancy with 32 registers (not 50 %)
    for n in (1024, 4096, 8192):
        src = {k: rec("cupy", k, n) for k in ("matMulNaive", "matMulShared", "matMulILP")}
        assert 1 < src["matMulNaive"]["ms"] / src["matMulShared"]["ms"] < 1.5, n
        assert abs(src["matMulILP"]["ms"] / src["matMulShared"]["ms"] - 1) < 0.05, n
        assert all(r["occupancy"] == 1.0 and r["regs"] == 32 and r["source"] == "001" for r in src.values())
    # the sweep: at both sizes the best has BK = 16 and 128 outputs per thread; either trait alone stays
    # within a twentieth of the best (and >= 0.87 x cuBLAS at 8192^3); only the two with neither, the
    # shapes of steps 8 and 9, fall clearly behind; 128 outputs: up to 255 registers, an eighth occupancy
    def bk16(r):
        return r["config"][2] == 16

    def out128(r):
        return r["config"][5] * r["config"][6] == 128

    for n in (4096, 8192):
        sweep = sorted((r for r in rows if r.get("tuning") and r["shape"][0] == n), key=lambda r: -r["ratio"])
        best = sweep[0]["ratio"]
        assert bk16(sweep[0]) and out128(sweep[0]), n
        either = [r for r in sweep if bk16(r) or out128(r)]
        neither = [r for r in sweep if not (bk16(r) or out128(r))]
        assert all(r["ratio"] >= 0.95 * best for r in either), n
        assert n != 8192 or all(r["ratio"] >= 0.87 for r in either)
        assert len(neither) == 2 and all(r["ratio"] < 0.95 * best for r in neither), n
        assert {tuple(r["config"][:8]) for r in neither} == {(128, 128, 8, 32, 64, 8, 8, 256)}  # steps 8 and 9
        wide = [r for r in sweep if out128(r)]
        assert max(r["regs"] for r in wide) == 255 and all(r["occupancy"] == 0.125 for r in wide), n


# On the roofline: every step and cuBLAS at 4096^3, the compulsory 2N^3 FLOP
# per 3 * 4N^2 bytes = N / 6 (the bytes a step *requests* are many more, but
# L1 and L2 serve most of them; the `intensity` column counts requests).
ROOFLINE = ("s", 2)


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    return [(f"{r['impl']} {r['variant']}", r["shape"][0] / 6, r["tflops"] * 1e3)
            for r in results.select(data, TOPIC) if r["shape"][0] == 4096 and not r.get("tuning")]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import cupy as cp

    from kernels import harness, matmul as mm

    for M, N, K in ((1, 1, 1), (33, 65, 17), (257, 131, 67)):
        A = cp.random.standard_normal((M, K), dtype=cp.float32)
        B = cp.random.standard_normal((K, N), dtype=cp.float32)
        ref = A.astype(cp.float64) @ B.astype(cp.float64)
        runs = [(v, lambda C, v=v: mm.matmul_cupy(A, B, C, variant=v)) for v in mm.VARIANTS]
        runs += [(mm.config_name(c), lambda C, c=c: mm.matmul_warptiled_config(A, B, C, c))
                 for c in CONFIGS]
        for name, launch in runs:
            C = cp.full((M, N), cp.nan, dtype=cp.float32)
            launch(C)
            err = harness.rel_err(C, ref)
            assert err < 1e-5, (M, N, K, name, err)
    for n in (32, 96):  # source 001's kernels: square, N a multiple of 32 (they check no bounds)
        A = cp.random.standard_normal((n, n), dtype=cp.float32)
        B = cp.random.standard_normal((n, n), dtype=cp.float32)
        ref = A.astype(cp.float64) @ B.astype(cp.float64)
        for kernel in mm.SOURCE_001:
            C = cp.full((n, n), cp.nan, dtype=cp.float32)
            mm.matmul_source001(A, B, C, kernel=kernel)
            err = harness.rel_err(C, ref)
            assert err < 1e-5, (n, kernel, err)
