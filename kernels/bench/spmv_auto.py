"""Topic `spmv_auto`: what kernel="auto" of kernels/spmv.py picks, against
every configuration it could have picked, measured in the same run.

`auto` reads the row lengths (kernels.spmv.row_stats) and runs the sub-warp
kernel unless one sub-warp walking the longest row would take longer than
the whole matrix takes to stream (kernels.spmv.auto_options); then the merge
path. Two sets of matrices (made in code, fixed seed, n x n, float32 values,
int32 indices):

- the `spmv` topic's six (banded, uniform random and power-law, at about 11 M
  and 50 M nonzeros);
- a long-row sweep: the smaller uniform random matrix (700 000 rows, Poisson
  row lengths of mean 16) with its last row replaced by one of LONG_ROWS
  nonzeros, from a row like the others to one about 80 times past where
  the rule switches. The last row is the worst place for a sub-warp kernel:
  its block starts last, so nothing else hides its walk; the same rows put
  first (family long_row_first) show how much the rest of the matrix hides.

Per matrix: every configuration (the sub-warp kernel at each lane count,
4-byte and 128-bit loads; the merge path at each item count, both loads),
`auto` and cuSPARSE (cusparseSpMV, descriptors made once), each checked
against the float64 product on the host first. Records: time (CUDA events,
median), gbps on the least bytes a CSR product moves (kernels.spmv.csr_bytes),
ratio = cuSPARSE's time / this time; `auto`'s record adds what it picked,
the rule's two estimates (tail_us, stream_us) and ratio_to_best = the fastest
configuration's time / auto's time. Times only: the energy and the paired
rounds against cuSPARSE are topic `spmv`'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "spmv_auto"
ORDER = 142
LONG_N = 700_000
LONG_ROWS = (64, 512, 1024, 2048, 4096, 16384, 65536, 262144)
QUICK_LONG_ROWS = (64, 8192)
QUICK_N = 60_000
SEED = 15
LABELS = {
    "family": ("矩阵", "matrix"),
    "max_row": ("最长行", "longest row"),
    "mean_row": ("平均行长", "mean row length"),
    "spread": ("行长离散度（标准差 / 均值）", "row-length spread (std / mean)"),
    "config": ("配置", "configuration"),
    "picked": ("auto 的选择", "auto's pick"),
    "best": ("最快的配置", "fastest configuration"),
    "best_ms": ("最快配置的时间 (ms)", "fastest configuration (ms)"),
    "ratio_to_best": ("auto / 最快配置（速度）", "auto / fastest (speed)"),
    "tail_us": ("最长行估计 (µs)", "longest row, estimated (µs)"),
    "stream_us": ("流式读完估计 (µs)", "streaming, estimated (µs)"),
    "nnz": ("非零元数", "nonzeros"),
}
WORDS = {"family": {"banded": ("带状", "banded"), "uniform": ("均匀随机", "uniform random"),
                    "power_law": ("幂律", "power-law"), "long_row": ("均匀随机，末行为长行", "uniform, long last row"),
                    "long_row_first": ("均匀随机，首行为长行", "uniform, long first row")}}


def configs() -> list[tuple[str, dict]]:
    """(name, spmv options) of every configuration auto chooses among."""
    from .. import spmv as S

    out = []
    for vec in (False, True):
        out += [(f"subwarp{'_v4' if vec else ''}_l{L}", {"kernel": "subwarp", "lanes": L, "vec": vec})
                for L in S.LANES]
    for vec in (False, True):
        out += [(f"merge{'_v4' if vec else ''}_i{i}", {"kernel": "merge", "items": i, "vec": vec})
                for i in S.MERGE_ITEMS]
    return out


def config_name(opts: dict) -> str:
    """The configuration name of spmv options with every choice spelled out."""
    from .. import spmv as S

    if opts["kernel"] == "subwarp":
        return f"subwarp{'_v4' if opts['vec'] else ''}_l{opts['lanes']}"
    return f"merge{'_v4' if opts['vec'] else ''}_i{opts.get('items', S.DEFAULT_ITEMS)}"


def with_long_row(A, length: int, seed: int, first: bool = False):
    """The CSR matrix A (host arrays, n x n) with its last row (first=True:
    its first) replaced by `length` distinct random columns."""
    ip, ix, dv = A
    n = ip.size - 1
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(n, length, replace=False)).astype(np.int32)
    vals = rng.standard_normal(length, dtype=np.float32)
    if first:
        rest = slice(int(ip[1]), None)
        indptr = np.concatenate([[0], ip[1:] - ip[1] + length]).astype(np.int32)
        return indptr, np.concatenate([cols, ix[rest]]), np.concatenate([vals, dv[rest]])
    start = int(ip[-2])
    indptr = ip.copy()
    indptr[-1] = start + length
    return indptr, np.concatenate([ix[:start], cols]), np.concatenate([dv[:start], vals])


def matrices(quick: bool):
    """(family, host CSR arrays) of every matrix measured."""
    from .. import spmv as S
    from . import spmv as B

    for family in B.FAMILIES:
        for n in ((QUICK_N,) if quick else B.SIZES[family]):
            yield family, B.make_matrix(family, n)
    base = S.uniform_random(QUICK_N if quick else LONG_N, B.MEAN_ROW, seed=SEED)
    for i, length in enumerate(QUICK_LONG_ROWS if quick else LONG_ROWS):
        for family, first in (("long_row", False), ("long_row_first", True)):
            yield family, with_long_row(base, length, SEED + 1 + i, first)


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    records = []
    for family, A in matrices(quick):
        records += measure_matrix(family, A, max_seconds=0.2 if quick else 0.5)
        cp.get_default_memory_pool().free_all_blocks()
    return records


def measure_matrix(family: str, A, max_seconds: float = 0.5) -> list[dict]:
    import cupy as cp

    from .. import harness, spmv as S

    ip, ix, dv = A
    n, nnz = ip.size - 1, ix.size
    x_host = np.random.default_rng(SEED + 7).standard_normal(n, dtype=np.float32)
    want = S.spmv_reference(ip, ix, dv, x_host)
    d = [cp.asarray(a) for a in (ip, ix, dv, x_host)]
    out = cp.empty(n, dtype=cp.float32)
    lengths = np.diff(ip)
    shape = [n, n, nnz]
    nbytes = S.csr_bytes(n, n, nnz)
    common = dict(family=family, nnz=nnz, mean_row=float(lengths.mean()), max_row=int(lengths.max()),
                  spread=float(lengths.std() / lengths.mean()), bytes=nbytes)
    records = []

    def add(impl, config, fn, check, **extra):
        err = harness.rel_err(check(), want)
        if not err < 1e-3:
            raise RuntimeError(f"{family} n={n} max_row={common['max_row']} {config}: rel_err {err}")
        t = harness.time_gpu(fn, warmup=1, samples=10, max_seconds=max_seconds)
        records.append(results.record(TOPIC, impl, f"{family}/{common['max_row']}/{config}", shape, "float32",
                                      ms=t["ms"], gbps=nbytes / (t["ms"] * 1e-3) / 1e9, rel_err=err,
                                      config=config, **common, **extra))
        return records[-1]

    def ours(opts):
        launch, _ = S.spmv_plan(*d, out, **opts)
        return launch, lambda: (out.fill(cp.nan), launch(), out)[2]

    mat = S.cusparse_matrix(d[0], d[1], d[2], n)
    mat @ d[3]  # its first product checks the format: outside the timing
    y = cp.empty(n, dtype=cp.float32)
    run_cusparse, _ = S.cusparse_plan(mat, d[3], y)
    ref = add("cusparse", "cuSPARSE", run_cusparse, lambda: (y.fill(cp.nan), run_cusparse(), y)[2])
    for config, opts in configs():
        add("cupy", config, *ours(opts), **opts)
    stats = S.row_stats(d[0])
    aligned = d[2].data.ptr % 16 == 0 and d[1].data.ptr % 16 == 0
    picked = S.auto_options(stats, aligned)
    e = S.auto_estimates(stats, aligned)  # the sub-warp kernel the rule weighs, picked or not
    best = min((r for r in records if r["impl"] == "cupy"), key=lambda r: r["ms"])
    auto = add("cupy", "auto", *ours({"kernel": "auto"}), picked=config_name(picked), best=best["config"],
               best_ms=best["ms"], tail_us=e["tail_ns"] / 1e3, stream_us=e["stream_ns"] / 1e3,
               weighed=config_name({"kernel": "subwarp", "lanes": e["lanes"], "vec": e["vec"]}))
    auto["ratio_to_best"] = best["ms"] / auto["ms"]
    for r in records:
        r["ref"] = ref["id"]
        r["ratio"] = ref["ms"] / r["ms"]
    return records


# The plot's words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    "kernel=\"auto\" on one long row": "kernel=\"auto\" 遇到一条长行",
    "nonzeros in the long row (700 000 rows, the others about 16 nonzeros each)":
        "长行的非零元数（共 70 万行，其余每行约 16 个非零元）",
    "time (ms)": "时间 (ms)",
    "fastest sub-warp configuration, long row first": "最快的子 warp 配置（长行在首行）",
    "fastest sub-warp configuration": "最快的子 warp 配置",
    "fastest merge-path configuration": "最快的归并路径配置",
    "the rule's switch": "规则的切换点",
    "auto": "auto",
}


def _switch(rows: list[dict]) -> int | None:
    """The shortest longest-row at which the rule picks the merge path for
    the long-row sweep's matrix (its first record's row count, nonzeros,
    mean and spread; only the longest row grows): bisection on auto_options."""
    from .. import spmv as S

    autos = sorted((r for r in rows if r["family"] == "long_row" and r["config"] == "auto"),
                   key=lambda r: r["max_row"])
    if not autos:
        return None
    r = autos[0]
    n = r["shape"][0]
    stats = {"n_rows": n, "nnz": r["nnz"], "mean_row": r["mean_row"], "spread": r["spread"]}
    lo, hi = r["max_row"], n  # subwarp at lo (the sweep's first pick, checked by claims), merge at hi
    if S.auto_options({**stats, "max_row": hi})["kernel"] != "merge":
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if S.auto_options({**stats, "max_row": mid})["kernel"] == "merge" else (mid, hi)
    return hi


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = [r for r in results.select(data, TOPIC) if r["family"] in ("long_row", "long_row_first")]
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    fig, ax = plotting.new_figure(7.5, 4.5)
    by_len = {}
    for r in rows:
        by_len.setdefault((r["family"], r["max_row"]), []).append(r)
    xs = sorted({r["max_row"] for r in rows})

    def line(family, pick):
        return [pick(by_len[family, x]) for x in xs]

    fastest = {prefix: (lambda rs, prefix=prefix: min(r["ms"] for r in rs if r["config"].startswith(prefix)))
               for prefix in ("subwarp", "merge")}
    auto = lambda rs: next(r["ms"] for r in rs if r["config"] == "auto")  # noqa: E731
    ax.plot(xs, line("long_row", fastest["subwarp"]), "o-", color="C0", label="fastest sub-warp configuration")
    ax.plot(xs, line("long_row_first", fastest["subwarp"]), "o:", color="C0", markersize=3,
            label="fastest sub-warp configuration, long row first")
    ax.plot(xs, line("long_row", fastest["merge"]), "s-", color="C1", label="fastest merge-path configuration")
    ax.plot(xs, line("long_row", auto), "k^--", label="auto", markersize=5)
    ax.plot(xs, line("long_row", lambda rs: next(r["ms"] for r in rs if r["impl"] == "cusparse")), ":",
            color="grey", label="cuSPARSE")
    switch = _switch(rows)
    if switch is not None:
        ax.axvline(switch, color="k", lw=0.8, alpha=0.5, label="the rule's switch")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nonzeros in the long row (700 000 rows, the others about 16 nonzeros each)", fontsize=8)
    ax.set_ylabel("time (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return plotting.save(fig, ax, TOPIC, env, out_dir, "kernel=\"auto\" on one long row", fontsize=9,
                         words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    rows = results.select(data, TOPIC)
    out = [f"{'matrix':9} {'nnz':>9} {'max_row':>8} {'picked':15} {'ms':>8} {'best':15} {'best ms':>8} "
           f"{'x best':>7} {'x cuSP':>7} {'tail us':>8} {'stream us':>9}"]
    for r in sorted((r for r in rows if r["config"] == "auto"), key=lambda r: (r["family"], r["nnz"], r["max_row"])):
        out.append(f"{r['family']:9} {r['nnz']:9} {r['max_row']:8} {r['picked']:15} {r['ms']:8.4f} {r['best']:15} "
                   f"{r['best_ms']:8.4f} {r['ratio_to_best']:7.3f} {r['ratio']:7.3f} {r['tail_us']:8.1f} "
                   f"{r['stream_us']:9.1f}")
    return out


def claims(data: dict) -> None:
    """docs/algorithms*.md, "kernel="auto"": what the table and the plot say,
    against the committed measurements."""
    from .. import spmv as S

    rows = results.select(data, TOPIC)
    autos = [r for r in rows if r["config"] == "auto"]
    assert {r["family"] for r in autos} == {"banded", "uniform", "power_law", "long_row", "long_row_first"}
    for r in autos:  # the goal: never below 0.95 x the fastest of our configurations on that matrix
        if r["family"] != "long_row_first":  # ... the rule assumes the worst place for the long row
            assert r["ratio_to_best"] >= 0.95, (r["family"], r["max_row"], r["picked"], r["best"],
                                                r["ratio_to_best"])
    picks = {r["family"]: set() for r in autos}
    for r in autos:
        picks[r["family"]].add(r["picked"].split("_")[0])
    assert picks["banded"] == picks["uniform"] == {"subwarp"} and picks["power_law"] == {"merge"}
    assert all(r["picked"] == "subwarp_v4_l4" for r in autos if r["family"] == "banded")
    assert all(r["picked"] == "subwarp_l8" for r in autos if r["family"] == "uniform")
    sweep = sorted((r for r in autos if r["family"] == "long_row"), key=lambda r: r["max_row"])
    kinds = [r["picked"].split("_")[0] for r in sweep]
    assert kinds[0] == "subwarp" and kinds[-1] == "merge" and kinds == sorted(kinds, key=("subwarp", "merge").index)
    switch = _switch(rows)
    assert switch is not None and sweep[0]["max_row"] < switch < sweep[-1]["max_row"]
    # the constants behind the rule, against this run: one sub-warp step along the longest row
    # (4-byte loads, 8 lanes: 16 nonzeros a step) from the two longest rows' difference in time
    by = {(r["max_row"], r["config"]): r for r in rows if r["family"] == "long_row"}
    a, b = sweep[-2]["max_row"], sweep[-1]["max_row"]
    step_ns = (by[b, "subwarp_l8"]["ms"] - by[a, "subwarp_l8"]["ms"]) * 1e6 / ((b - a) / 16)
    assert 0.67 < step_ns / S.STEP_NS[False] < 1.5, step_ns
    step_v4 = (by[b, "subwarp_v4_l4"]["ms"] - by[a, "subwarp_v4_l4"]["ms"]) * 1e6 / ((b - a) / 16)
    assert 0.67 < step_v4 / S.STEP_NS[True] < 1.5, step_v4
    banded = [r for r in rows if r["family"] == "banded" and r["config"] == "subwarp_v4_l4"]
    assert all(0.75 < r["gbps"] / S.STREAM_GBPS < 1.33 for r in banded), [r["gbps"] for r in banded]
    # the long row first: its walk hides behind the rest, and the rule (estimating for the last row)
    # turns to the merge path too early near the switch: the set's lowest point about 0.85
    first = [r for r in autos if r["family"] == "long_row_first"]
    low = min(first, key=lambda r: r["ratio_to_best"])
    assert 0.8 < low["ratio_to_best"] < 0.9 and low["picked"].startswith("merge"), low["ratio_to_best"]
    # a long row of 2048 or more last, or 16384 or more anywhere: cuSPARSE ahead of our fastest by about a tenth
    for r in autos:
        if (r["family"] == "long_row" and r["max_row"] >= 2048) or (r["family"] == "long_row_first"
                                                                     and r["max_row"] >= 16384):
            fastest = r["best_ms"] / by_family_ref(rows, r)
            assert 1.05 < fastest < 1.2 and r["best"].startswith("merge"), (r["family"], r["max_row"], fastest)
    assert all(r["rel_err"] < 1e-4 for r in rows)


def by_family_ref(rows: list[dict], auto: dict) -> float:
    """cuSPARSE's time on the matrix of `auto`'s record."""
    return next(r["ms"] for r in rows if r["impl"] == "cusparse" and r["family"] == auto["family"]
                and r["max_row"] == auto["max_row"] and r["nnz"] == auto["nnz"])
