"""Topic `spmv_crossover`: one n x n matrix-vector product (n = 16384, float32)
done dense (cuBLAS through cupy.matmul: every element read, zeros too) and in
CSR (cuSPARSE through cupyx.scipy.sparse, and this chapter's kernels) at
densities from 10^-6 to 0.5: where CSR stops winning in time, and where in
energy.

Each density: a random mask (density d, uniform positions) of random N(0, 1)
values, built on the GPU with a fixed seed; the dense matrix and the CSR
arrays hold the same nonzeros. Records per density and implementation: time
(CUDA events, median; the matrices rotated so the working set exceeds the L2
cache), useful work 2 nnz FLOP for every implementation (tflops = 2 nnz /
time: one denominator for one result), ratio = the dense product's time /
this time, board energy per call and per useful GFLOP over >= 2 s (NVML),
rel_err against the float64 dense product, and the analytic bytes each
format must move: dense 4 n^2 + 4 n + 4 n (4 B per element, zeros included),
CSR 8 nnz + 4 (n + 1) + 4 n + 4 n (4 B value + 4 B index per nonzero; x, 64 KiB,
stays in cache, so its gathers cost no HBM bytes). In bytes the two meet at
d = 1/2; in time CSR loses earlier (gathers, irregular rows), and in energy
where the time and the power drawn cross, which need not be the same place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "spmv_crossover"
ORDER = 141
N = 16384
QUICK_N = 2048
DENSITIES = (1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5)
QUICK_DENSITIES = (1e-4, 0.01, 0.1, 0.5)
SEED = 15
# CSR implementations beside cuSPARSE: (step, spmv() options)
OURS = (("merge", {"kernel": "merge"}), ("subwarp_v4", {"kernel": "subwarp", "vec": True}))
LABELS = {
    "density": ("密度", "density"),
    "nnz": ("非零元数", "nonzeros"),
    "gflops": ("有效 GFLOP/s", "useful GFLOP/s"),
    "dense_bytes": ("稠密格式字节数", "dense bytes"),
    "csr_bytes": ("CSR 字节数", "CSR bytes"),
    "bytes": ("搬运字节数（解析）", "bytes moved (analytic)"),
    "csr_bytes_per_nnz": ("CSR 每非零元字节数", "CSR bytes per nonzero"),
    "dense_bytes_per_nnz": ("稠密格式每非零元字节数", "dense bytes per nonzero"),
    "dense_bytes_per_element": ("稠密格式每元素字节数", "dense bytes per element"),
    "analytic_gbps": ("按解析字节的带宽 (GB/s)", "bandwidth on analytic bytes (GB/s)"),
    "energy_ratio_to_dense": ("能耗 / 稠密", "energy / dense"),
}


def dense_bytes(n: int) -> int:
    """The dense product's least traffic: every element (4 B), x and out."""
    return 4 * n * n + 4 * n + 4 * n


def make_pair(n: int, density: float, seed: int):
    """(dense, indptr, indices, data) on the GPU: one random matrix of the
    given density, as a dense array and as CSR arrays (sorted columns)."""
    import cupy as cp

    rng = cp.random.default_rng(seed)
    mask = rng.random((n, n), dtype=cp.float32) < density
    rows, cols = cp.nonzero(mask)  # row-major order: by row, then by column
    del mask
    data = rng.standard_normal(int(rows.size), dtype=cp.float32)
    dense = cp.zeros((n, n), dtype=cp.float32)
    dense[rows, cols] = data
    indptr = cp.zeros(n + 1, dtype=cp.int32)
    indptr[1:] = cp.cumsum(cp.bincount(rows, minlength=n))
    return dense, indptr, cols.astype(cp.int32), data


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    n = QUICK_N if quick else N
    x = cp.random.default_rng(SEED + 1).standard_normal(n, dtype=cp.float32)
    records = []
    for i, density in enumerate(QUICK_DENSITIES if quick else DENSITIES):
        records += measure_density(n, density, x, SEED + 100 + i, min_seconds=0.5 if quick else 2.0)
        cp.get_default_memory_pool().free_all_blocks()
    return records


def measure_density(n: int, density: float, x, seed: int, min_seconds: float = 2.0) -> list[dict]:
    """The records of one density: dense, cuSPARSE, and OURS."""
    import cupy as cp

    from .. import harness, spmv as S

    dense, indptr, indices, data = make_pair(n, density, seed)
    nnz = int(indices.size)
    want = dense.astype(cp.float64) @ x.astype(cp.float64)
    shape = [n, n, nnz]
    gflop = 2 * nnz / 1e9
    b_dense, b_csr = dense_bytes(n), S.csr_bytes(n, n, nnz)
    common = dict(density=density, density_actual=nnz / n**2, nnz=nnz, dense_bytes=b_dense, csr_bytes=b_csr,
                  csr_bytes_per_nnz=b_csr / max(nnz, 1), dense_bytes_per_nnz=b_dense / max(nnz, 1),
                  dense_bytes_per_element=4.0)
    # copies of the CSR arrays, each with its own out, so the rotation reads HBM, not L2 (the dense
    # matrix, 4 n^2 bytes, is larger than L2 by itself)
    sets = harness.rotation(b_csr)
    csr_sets = [(indptr, indices, data)] + [(indptr.copy(), indices.copy(), data.copy()) for _ in range(sets - 1)]
    runs = [("cublas", "dense", b_dense, [(lambda: cp.matmul(dense, x),)], lambda: cp.matmul(dense, x))]
    mats = [S.cusparse_matrix(*c, n) for c in csr_sets]
    for A in mats:  # each matrix's first product checks its format (a sync): here, not while timed
        A @ x
    # cusparseSpMV with descriptors made once (kernels.spmv.cusparse_plan): cupyx's A @ x makes them per call
    cus = [S.cusparse_plan(A, x, cp.empty(n, dtype=cp.float32)) for A in mats]
    runs.append(("cusparse", "cuSPARSE", b_csr, [(launch,) for launch, _ in cus],
                 lambda: (cus[0][1].fill(cp.nan), cus[0][0](), cus[0][1])[2]))
    for step, opts in OURS:
        plans = [S.spmv_plan(*c, x, **opts) for c in csr_sets]
        runs.append(("cupy", step, b_csr, [(launch,) for launch, _ in plans],
                     lambda plans=plans: (plans[0][1].fill(cp.nan), plans[0][0](), plans[0][1])[2]))
    dense_id = results.record_id(TOPIC, "cublas", "dense", shape, "float32")
    records = []
    for impl, step, nbytes, arg_sets, check in runs:
        err = harness.rel_err(check(), want)
        if not err < 1e-4:
            raise RuntimeError(f"density {density} {impl} {step}: rel_err {err}")
        t = harness.time_gpu(lambda fn: fn(), arg_sets, warmup=2, samples=20, max_seconds=2.0)
        e = harness.measure_energy(lambda fn: fn(), arg_sets, min_seconds=min_seconds)
        records.append(results.record(
            TOPIC, impl, step, shape, "float32", ms=t["ms"], ref=dense_id, rel_err=err, step=step,
            tflops=gflop / (t["ms"] * 1e-3) / 1e3, gflops=gflop / (t["ms"] * 1e-3), bytes=nbytes,
            analytic_gbps=nbytes / (t["ms"] * 1e-3) / 1e9, **common,
            **harness.energy_fields(e, nbytes=nbytes, gflop=gflop)))
    ref = records[0]  # the dense product
    for r in records:
        r["ratio"] = ref["ms"] / r["ms"]
        r["energy_ratio_to_dense"] = r["energy_j_per_call"] / ref["energy_j_per_call"]
    return records


def crossover(rows: list[dict], impl: str, step: str, key: str) -> float | None:
    """The density where `step`'s key (ms or energy_j_per_call) meets the
    dense product's, interpolated in log density between the two measured
    densities around it; None where it never meets in the measured range."""
    def series(i, s):
        return {r["density"]: r[key] for r in rows if r["impl"] == i and r["step"] == s}

    dense, csr = series("cublas", "dense"), series(impl, step)
    ds = sorted(set(dense) & set(csr))
    for a, b in zip(ds, ds[1:]):
        fa, fb = np.log(csr[a] / dense[a]), np.log(csr[b] / dense[b])
        if fa <= 0 < fb:
            w = -fa / (fb - fa)
            return float(np.exp(np.log(a) + w * (np.log(b) - np.log(a))))
    return None


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    "Dense or CSR: time across densities": "稠密还是压缩稀疏行：各密度下的时间",
    "Dense or CSR: energy across densities": "稠密还是压缩稀疏行：各密度下的能耗",
    "density (nonzeros / elements)": "密度（非零元数 / 元素数）",
    "bytes moved (analytic)": "搬运字节数（解析）",
    "energy per product (J, board)": "每次乘积的能耗（J，整卡）",
    "dense (cuBLAS)": "稠密 (cuBLAS)",
    "CSR, cuSPARSE": "压缩稀疏行，cuSPARSE",
    "CSR, merge": "压缩稀疏行，merge",
    "CSR, subwarp_v4": "压缩稀疏行，subwarp_v4",
    "dense": "稠密",
    "CSR": "压缩稀疏行",
    "crossover": "交叉点",
}
LINES = (("cublas", "dense", "dense (cuBLAS)", "k", "o-"), ("cusparse", "cuSPARSE", "CSR, cuSPARSE", "C0", "s-"),
         ("cupy", "merge", "CSR, merge", "C1", "^-"), ("cupy", "subwarp_v4", "CSR, subwarp_v4", "C2", "v--"))


def _panel(ax, rows, key):
    for impl, step, label, color, style in LINES:
        pts = sorted((r["density"], r[key]) for r in rows if r["impl"] == impl and r["step"] == step)
        if pts:
            ax.plot(*zip(*pts), style, color=color, label=label, ms=4)
        cross = crossover(rows, impl, step, key) if impl != "cublas" else None
        if cross is not None:
            ax.axvline(cross, color=color, ls=":", lw=1, label=f"crossover, {label} ({cross:.2g})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel("density (nonzeros / elements)")


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    paths = []
    fig, (ax1, ax2) = plotting.new_figure(7.5, 7, nrows=2)
    _panel(ax1, rows, "ms")
    ax1.set_ylabel("time (ms)")
    ax1.legend(fontsize=7)
    for fmt, label, color, style in (("dense_bytes", "dense", "k", "-"), ("csr_bytes", "CSR", "C0", "--")):
        pts = sorted({(r["density"], r[fmt]) for r in rows})
        ax2.plot(*zip(*pts), style, color=color, label=label)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.set_xlabel("density (nonzeros / elements)")
    ax2.set_ylabel("bytes moved (analytic)")
    ax2.legend(fontsize=7)
    paths += plotting.save(fig, ax1, TOPIC, env, out_dir, "Dense or CSR: time across densities", fontsize=9,
                           words=PLOT_WORDS)
    fig, ax = plotting.new_figure(7.5, 4.5)
    _panel(ax, rows, "energy_j_per_call")
    ax.set_ylabel("energy per product (J, board)")
    ax.legend(fontsize=7)
    paths += plotting.save(fig, ax, f"{TOPIC}_energy", env, out_dir, "Dense or CSR: energy across densities",
                           fontsize=9, words=PLOT_WORDS)
    return paths


def summary(data: dict) -> list[str]:
    rows = results.select(data, TOPIC)
    out = [f"{'density':>8} {'nnz':>10} {'impl':9} {'step':11} {'ms':>9} {'x dense':>8} {'J/call':>9} "
           f"{'E/dense':>8} {'rel_err':>8}"]
    for r in sorted(rows, key=lambda r: (r["density"], r["ms"])):
        out.append(f"{r['density']:8.0e} {r['nnz']:10} {r['impl']:9} {r['step']:11} {r['ms']:9.4f} "
                   f"{r['ratio']:8.3f} {r['energy_j_per_call']:9.2e} {r['energy_ratio_to_dense']:8.3f} "
                   f"{r['rel_err']:8.1e}")
    for impl, step, label, _, _ in LINES[1:]:
        t, e = crossover(rows, impl, step, "ms"), crossover(rows, impl, step, "energy_j_per_call")
        out.append(f"{label}: time crossover {t if t is None else f'{t:.3g}'}, "
                   f"energy crossover {e if e is None else f'{e:.3g}'}")
    return out


def claims(data: dict) -> None:
    """docs/algorithms*.md, "The crossover": what the plots and the table say,
    against the committed measurements."""
    rows = results.select(data, TOPIC)
    t = {(r["density"], r["step"]): r for r in rows}
    densities = sorted({r["density"] for r in rows})
    assert densities[0] <= 1e-6 and densities[-1] >= 0.5
    dense = [t[d, "dense"]["ms"] for d in densities]
    assert max(dense) < 1.05 * min(dense)  # the dense product's time does not depend on the density
    # ... but its power does: zeros cost less energy than values, at the same bytes and time
    assert t[densities[-1], "dense"]["avg_power_w"] > 1.15 * t[densities[0], "dense"]["avg_power_w"]
    cross = {(s, key): crossover(rows, i, s, key) for i, s in (("cusparse", "cuSPARSE"), ("cupy", "merge"),
                                                              ("cupy", "subwarp_v4"))
             for key in ("ms", "energy_j_per_call")}
    for key in ("ms", "energy_j_per_call"):
        assert 0.3 < cross["cuSPARSE", key] < 0.5, key          # cuSPARSE loses to dense between 0.3 and 0.5
        assert 0.25 < cross["merge", key] < 0.35, key           # merge path between 0.25 and 0.35
        assert cross["merge", key] < cross["cuSPARSE", key], key  # ... before cuSPARSE
        assert cross["subwarp_v4", key] is None, key            # the sub-warp kernel never does up to 0.5
    for s in ("cuSPARSE", "merge"):  # energy crosses a little (under 1.2x) before time
        assert 1.0 < cross[s, "ms"] / cross[s, "energy_j_per_call"] < 1.2, s
    assert 1.0 <= t[densities[-1], "subwarp_v4"]["ratio"] < 1.1  # at 0.5: level with dense
    for d in densities:  # the sub-warp kernel is the fastest CSR at every density
        assert min(("cuSPARSE", "merge", "subwarp_v4"), key=lambda s: t[d, s]["ms"]) == "subwarp_v4", d
        if d <= 1e-3:   # sparse enough: every CSR product at least 10x faster than dense
            assert all(t[d, s]["ratio"] > 10 for s in ("cuSPARSE", "merge", "subwarp_v4")), d
        if d <= 0.01:   # ... and its energy advantage larger still: little more than idle power drawn
            assert all(t[d, s]["energy_ratio_to_dense"] < 1 / t[d, s]["ratio"]
                       for s in ("cuSPARSE", "merge", "subwarp_v4")), d
    low = [t[d, "subwarp_v4"]["ms"] for d in densities if d <= 1e-4]
    # below 1e-4 the time no longer falls: a few microseconds, a launch's floor, not bytes
    assert len(low) >= 3 and max(low) < 0.01 and low[-1] >= 0.9 * min(low)
    assert all(abs(t[d, "dense"]["csr_bytes_per_nnz"] - 8) < 0.1 for d in densities if d >= 0.03)
    assert all(r["rel_err"] < 1e-6 for r in rows)
