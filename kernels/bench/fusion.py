"""Topic `fusion`: two everyday chains, unfused (separate CuPy calls, each
intermediate an M x N array through HBM) and fused (one kernel), in bytes
moved, time and energy (kernels/fusion.py, kernels/cuda/fusion.cu).

- bias + GELU + residual on 16384 x 4096 float32 (256 MiB per array, four
  times the 60 MiB L2): unfused, cupy.fuse, ElementwiseKernel, CUDA C, Numba;
- row softmax on 16384 x 4096 (a block per row) and on 262144 x 256 (short
  rows: a warp per row): unfused, fused, online (two reads), Numba, and at
  short rows the block kernel too;
- beside each chain a device-to-device copy moving the chain's least bytes
  (inputs read once, output written once): the ceiling.

Each record: ms (CUDA events, median); bytes_moved = the variant's own
traffic, counted step by step (kernels.fusion.bytes_moved); useful_bytes =
the least any variant moves (kernels.fusion.useful_bytes: bias + GELU +
residual 4 * (3MN + N), softmax 4 * 2MN); gbps = useful_bytes / ms, the
effective bandwidth, one denominator for every variant of a chain (the
copy moves exactly those bytes, so its gbps is the ceiling); moved_gbps =
bytes_moved / ms (how hard each kernel drives HBM); copy_fraction = the
copy's ms / this ms; rel_err against float64 on the whole output; board
energy over >= 2 s (NVML), per call and per output element (the useful
work: one element of out, M * N per call), and energy_ratio_to_unfused =
this energy per call / the unfused one's. ratio = the unfused time of the
same chain and shape / this time (ref: that record).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting

TOPIC = "fusion"
ORDER = 150  # the algorithm-level chapter, after the case studies
GELU_SHAPE = (16384, 4096)
SOFTMAX_SHAPES = ((16384, 4096), (262144, 256))
QUICK = {"gelu": (4096, 4096), "softmax": ((4096, 4096), (65536, 256))}
PREFIX = {"bias_gelu_residual": "gelu", "softmax": "softmax"}
GELU_FORMS = ("unfused", "fuse", "elementwise", "cuda_c", "numba")
SOFTMAX_FORMS = ("unfused", "fused", "online", "numba")
SHORT_ROW_EXTRA = ("block",)  # at short rows: the block kernel beside the warp one "fused" picks
# Every timed batch lasts >= BATCH_MS: the host's gap before a batch's first launch (one Python call,
# 0.1 ms on a slow host) is then under 1 % of it; 1 ms batches let it into the time of a 0.2 ms kernel.
BATCH_MS = 20.0
PAIRED = {"bias_gelu_residual": ("cuda_c",), "softmax": ("fused",)}  # the forms the page holds to a line
LABELS = {
    "chain": ("计算链", "chain"),
    "form": ("写法", "form"),
    "kernel": ("CUDA C 核函数", "CUDA C kernel"),
    "kernels": ("核函数个数", "kernels launched"),
    "bytes_moved": ("搬运字节数", "bytes moved"),
    "useful_bytes": ("最少字节数", "least bytes"),
    "gbps": ("有效带宽 (GB/s)", "effective bandwidth (GB/s)"),
    "moved_gbps": ("实际搬运带宽 (GB/s)", "traffic bandwidth (GB/s)"),
    "copy_fraction": ("占拷贝上限", "of the copy ceiling"),
    "energy_nj_per_element": ("每输出元素能耗 (nJ)", "energy per output element (nJ)"),
    "energy_pj_per_byte": ("每有效字节能耗 (pJ)", "energy per useful byte (pJ)"),
    "energy_ratio_to_unfused": ("能耗 / 未融合", "energy / unfused"),
}
WORDS = {
    "chain": {"bias_gelu_residual": ("偏置 + GELU + 残差", "bias + GELU + residual"),
              "softmax": ("按行 softmax", "row softmax")},
    "form": {"unfused": ("未融合（逐个 CuPy 调用）", "unfused (separate CuPy calls)"),
             "fuse": ("cupy.fuse", "cupy.fuse"),
             "elementwise": ("ElementwiseKernel", "ElementwiseKernel"),
             "cuda_c": ("CUDA C（RawModule）", "CUDA C (RawModule)"),
             "numba": ("Numba", "Numba"),
             "fused": ("融合（CUDA C）", "fused (CUDA C)"),
             "block": ("融合，每行一个线程块", "fused, a block per row"),
             "online": ("在线 softmax（x 读两遍）", "online (x read twice)"),
             "copy": ("同字节数的显存拷贝", "device copy of the same bytes")},
}


def _inputs(chain: str, M: int, N: int, seed: int):
    import cupy as cp

    rng = cp.random.default_rng(seed)
    if chain == "bias_gelu_residual":
        return (rng.standard_normal((M, N), dtype=cp.float32), rng.standard_normal(N, dtype=cp.float32),
                rng.standard_normal((M, N), dtype=cp.float32))
    return (rng.standard_normal((M, N), dtype=cp.float32) * 4,)  # logits of a few units, as in attention


def _runs(chain: str, forms, args, out):
    """(form, impl, CUDA C kernel or None, fn) for each variant of a chain;
    fn() writes `out`."""
    from numba import cuda

    from .. import fusion as F

    M, N = out.shape
    nb = [cuda.as_cuda_array(a) for a in (*args, out)]  # Numba views of the same memory, made once
    runs = []
    for form in forms:
        if chain == "bias_gelu_residual":
            if form == "numba":
                runs.append((form, "numba", None, lambda: F.bias_gelu_residual_numba(*nb)))
            else:
                kernel = None
                if form == "cuda_c":
                    vec = N % 4 == 0 and all(a.data.ptr % 16 == 0 for a in (*args, out))
                    kernel = "bias_gelu_residual_vec4" if vec else "bias_gelu_residual"
                runs.append((form, "cupy", kernel,
                             lambda f=form: F.bias_gelu_residual(*args, variant=f, out=out)))
        elif form == "numba":
            runs.append((form, "numba", None, lambda: F.softmax_rows_numba(*nb)))
        else:
            kernel = None if form == "unfused" else F.softmax_kernel_for(N, form)
            runs.append((form, "cupy", kernel, lambda f=form: F.softmax_rows(*args, variant=f, out=out)))
    return runs


def make_record(chain: str, impl: str, form: str, M: int, N: int, *, t: dict, e: dict, moved: int, kernels: int,
                err: float, kernel: str | None = None) -> dict:
    """One variant's record from its timing (harness.time_gpu) and energy
    (harness.measure_energy); ratio and the fields relative to the unfused
    and copy records are added by finish()."""
    from .. import fusion as F, harness

    useful = F.useful_bytes(chain, M, N)
    sec = t["ms"] * 1e-3
    prefix = PREFIX[chain]
    rec = results.record(
        TOPIC, impl, f"{prefix}_{form}", [M, N], "float32", ms=t["ms"], ms_min=t["ms_min"],
        ref=results.record_id(TOPIC, "cupy", f"{prefix}_unfused", [M, N], "float32"), rel_err=err,
        chain=chain, form=form, kernels=kernels, bytes_moved=moved, useful_bytes=useful,
        gbps=useful / sec / 1e9,  # effective: the least bytes, whatever this variant moved
        moved_gbps=moved / sec / 1e9, energy_nj_per_element=e["j_per_call"] / (M * N) * 1e9,
        **harness.energy_fields(e, nbytes=useful))
    if kernel:
        rec["kernel"] = kernel
    return rec


def finish(records: list[dict]) -> None:
    """ratio = the unfused time / this one, copy_fraction = the copy's time /
    this one, energy_ratio_to_unfused, each within one chain and shape."""
    for r in records:
        group = [q for q in records if q["chain"] == r["chain"] and q["shape"] == r["shape"]]
        base = next(q for q in group if q["id"] == r["ref"])
        copy = next(q for q in group if q["form"] == "copy")
        r["ratio"] = base["ms"] / r["ms"]
        r["copy_fraction"] = copy["ms"] / r["ms"]
        r["energy_ratio_to_unfused"] = r["energy_j_per_call"] / base["energy_j_per_call"]


def _chain_records(chain: str, M: int, N: int, forms, quick: bool, seed: int) -> list[dict]:
    import cupy as cp

    from .. import fusion as F, harness

    args = _inputs(chain, M, N, seed)
    out = cp.empty((M, N), dtype=cp.float32)
    ref = (F.bias_gelu_residual_reference(*args) if chain == "bias_gelu_residual"
           else F.softmax_reference(args[0]))  # float64, on the GPU
    energy_s = 0.5 if quick else 2.0
    records = []

    def add(impl, form, kernel, fn, moved, kernels, err):
        t = harness.time_gpu(fn, warmup=2, samples=15, min_sample_ms=BATCH_MS, max_seconds=2.0)
        e = harness.measure_energy(lambda *_: fn(), min_seconds=energy_s)
        records.append(make_record(chain, impl, form, M, N, t=t, e=e, moved=moved, kernels=kernels, err=err,
                                   kernel=kernel))

    fns = {}
    for form, impl, kernel, fn in _runs(chain, forms, args, out):
        fns[form] = fn
        out.fill(cp.nan)  # poison: an element left unwritten makes rel_err NaN
        fn()
        err = harness.rel_err(out, ref)
        if not err < 1e-5:  # also catches NaN
            raise RuntimeError(f"{chain} {form} {M}x{N}: rel_err {err}")
        add(impl, form, kernel, fn, F.bytes_moved(chain, form, M, N), len(F.steps(chain, form, N)), err)
    del ref
    # The ceiling: one device-to-device copy of useful / 2 bytes (read once, written once).
    copy, dst, src = harness.device_copy(F.useful_bytes(chain, M, N) // 8 * 4, seed=seed + 1)
    copy()
    if not bool(cp.array_equal(dst, src)):
        raise RuntimeError(f"{chain} copy: the copy did not reproduce its source")
    add("cuda_memcpy", "copy", None, copy, 2 * src.nbytes, 1, harness.rel_err(dst, src))
    finish(records)
    # the share of the copy's speed that the page holds to a line: in paired rounds beside the copy
    timed = {"copy": (copy, ((),)), **{f: (fns[f], ((),)) for f in PAIRED[chain]}}
    paired = harness.paired_rounds(timed, "copy", rounds=2 if quick else 7, warmup=2, samples=15,
                                   min_sample_ms=BATCH_MS, max_seconds=2.0)
    copy_id = next(r["id"] for r in records if r["form"] == "copy")
    for r in records:
        if r["form"] in PAIRED[chain]:
            r.update(harness.paired_fields(paired[r["form"]], copy_id))
    return records


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    gelu = QUICK["gelu"] if quick else GELU_SHAPE
    softmax = QUICK["softmax"] if quick else SOFTMAX_SHAPES
    records = _chain_records("bias_gelu_residual", *gelu, GELU_FORMS, quick, seed=0)
    for i, (M, N) in enumerate(softmax):
        cp.get_default_memory_pool().free_all_blocks()  # the previous chain's arrays are gone
        forms = SOFTMAX_FORMS + (SHORT_ROW_EXTRA if N <= 1024 else ())
        records += _chain_records("softmax", M, N, forms, quick, seed=10 + i)
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    "Kernel fusion: time and energy per call": "核融合：每次调用的时间与能耗",
    "time per call (ms)": "每次调用时间 (ms)",
    "energy per output element (nJ, board)": "每个输出元素的能耗（纳焦，整卡）",
    "bias + GELU + residual": "偏置 + gelu + 残差",
    "row softmax": "按行 softmax",
    "unfused": "未融合",
    "ElementwiseKernel": "逐元素核",
    "fused, warp per row": "融合，每行一个 warp",
    "fused, block per row": "融合，每行一个线程块",
    "online, x read twice": "在线，x 读两遍",
    "copy, same bytes": "拷贝同样字节数",
}
TICKS = {"unfused": "unfused", "fuse": "cupy.fuse", "elementwise": "ElementwiseKernel", "cuda_c": "CUDA C",
         "numba": "Numba", "block": "fused, block per row", "online": "online, x read twice",
         "copy": "copy, same bytes"}
COLORS = {"unfused": "#c44e52", "copy": "#444444", "numba": "#8172b2"}


def _tick(r: dict) -> str:
    if r["form"] == "fused":
        return "fused, warp per row" if "warp" in r.get("kernel", "") else "fused, block per row"
    return TICKS[r["form"]]


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    env = data["topics"][TOPIC]["env"]
    groups = []  # (chain, shape) in the order measured
    for chain in ("bias_gelu_residual", "softmax"):
        for shape in sorted({tuple(r["shape"]) for r in rows if r["chain"] == chain}, key=lambda s: -s[1]):
            groups.append((chain, shape))
    order = {f: i for i, f in enumerate(("unfused", "fuse", "elementwise", "cuda_c", "fused", "block", "online",
                                         "numba", "copy"))}
    fig, (ax1, ax2) = plotting.new_figure(9, 7, nrows=2)
    x, ticks, centers = 0.0, [], []
    for chain, shape in groups:
        rs = sorted((r for r in rows if r["chain"] == chain and tuple(r["shape"]) == shape),
                    key=lambda r: order[r["form"]])
        start = x
        for r in rs:
            color = COLORS.get(r["form"], "#4c72b0")
            ax1.bar(x, r["ms"], color=color, width=0.8)
            ax2.bar(x, r["energy_nj_per_element"], color=color, width=0.8)
            ticks.append((x, _tick(r)))
            x += 1
        centers.append(((start + x - 1) / 2, f"{'bias + GELU + residual' if chain != 'softmax' else 'row softmax'}"
                                             f"\n{shape[0]} × {shape[1]}"))
        x += 1  # a gap between groups
    from matplotlib.ticker import NullFormatter

    for ax, key in ((ax1, "ms"), (ax2, "energy_nj_per_element")):
        ax.set_yscale("log")
        ax.set_ylim(bottom=min(r[key] for r in rows) / 3)  # log bars: the shortest still shows
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.set_xticks([t for t, _ in ticks])
        ax.set_xticklabels([s for _, s in ticks], rotation=35, ha="right", fontsize=7)
    ax1.set_ylim(top=max(r["ms"] for r in rows) * 6)  # room for the group labels above the bars
    for cx, label in centers:
        ax1.text(cx, 0.97, label, transform=ax1.get_xaxis_transform(), ha="center", va="top", fontsize=8)
    ax1.set_ylabel("time per call (ms)")
    ax2.set_ylabel("energy per output element (nJ, board)")
    return plotting.save(fig, ax1, TOPIC, env, out_dir, "Kernel fusion: time and energy per call",
                         fontsize=9, words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    out = []
    for r in sorted(results.select(data, TOPIC), key=lambda r: (r["chain"], r["shape"], r["ms"])):
        out.append(f"{r['variant']:20} {'x'.join(map(str, r['shape'])):>12} {r['ms']:8.3f} ms "
                   f"{r['gbps']:6.0f} GB/s eff {r['moved_gbps']:6.0f} GB/s moved {r['copy_fraction']:5.2f} of copy "
                   f"{r['energy_nj_per_element']:6.2f} nJ/elem E/unfused {r['energy_ratio_to_unfused']:5.2f} "
                   f"x{r['ratio']:.2f} err {r['rel_err']:.1e}")
    return out


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA
    C kernel, the ElementwiseKernel and the cupy.fuse kernel once at odd
    sizes, checked against float64."""
    import cupy as cp

    from kernels import fusion as F, harness

    def check(got, want, what):
        err = harness.rel_err(got, want)
        assert err < 2e-6, (what, err)

    rng = np.random.default_rng(0)
    for M, N in ((1, 1), (3, 7), (5, 36), (70, 1001)):
        x, r = (cp.asarray(rng.standard_normal((M, N)).astype(np.float32)) for _ in range(2))
        b = cp.asarray(rng.standard_normal(N).astype(np.float32))
        want = F.bias_gelu_residual_reference(cp.asnumpy(x), cp.asnumpy(b), cp.asnumpy(r))
        for variant in ("fuse", "elementwise", "cuda_c"):
            out = cp.full((M, N), cp.nan, dtype=cp.float32)
            check(F.bias_gelu_residual(x, b, r, variant=variant, out=out), want, (variant, M, N))
        out = cp.full((M, N), cp.nan, dtype=cp.float32)
        F.gelu_cuda_launch(x, b, r, out, threads=64, grid_rows=2)  # the batched row loop and its tail
        check(out, want, ("cuda_c rows", M, N))
    for M, N in ((1, 1), (3, 100), (2, 200), (5, 500), (3, 1000), (4, 3001), (2, F.FUSED_MAX_N + 5)):
        x = cp.asarray((rng.standard_normal((M, N)) * 30).astype(np.float32))
        want = F.softmax_reference(cp.asnumpy(x))
        for variant in ("fused", "warp", "block", "online"):
            if (variant == "warp" and N > F.WARP_MAX_N) or (variant == "block" and N > F.FUSED_MAX_N):
                continue
            for threads in (64, 256):
                out = cp.full((M, N), cp.nan, dtype=cp.float32)
                check(F.softmax_rows(x, variant=variant, out=out, threads=threads), want, (variant, M, N, threads))


def claims(data: dict) -> None:
    """docs/algorithms*.md, "Kernel fusion, measured": what the tables say,
    against the committed measurements."""
    rows = results.select(data, TOPIC)
    t = {(r["chain"], r["shape"][0], r["form"]): r for r in rows}
    g = {f: t["bias_gelu_residual", GELU_SHAPE[0], f] for f in GELU_FORMS + ("copy",)}
    # bias + GELU + residual: every fused form faster than the unfused chain and a fraction of its energy
    assert [f for f in sorted(GELU_FORMS, key=lambda f: g[f]["ms"])] == ["cuda_c", "elementwise", "fuse", "numba",
                                                                          "unfused"]
    assert all(g[f]["energy_ratio_to_unfused"] < 0.25 for f in GELU_FORMS if f != "unfused")
    from .. import harness

    assert harness.against(g["cuda_c"], 0.9) == "above"        # CUDA C close to the copy of the same bytes
    assert g["unfused"]["bytes_moved"] > 5 * g["unfused"]["useful_bytes"]  # intermediates through HBM
    # the unfused chain is slower than its bytes alone explain: its kernels stream below the copy
    assert g["unfused"]["moved_gbps"] < 0.6 * g["copy"]["gbps"]
    assert g["unfused"]["ms"] / g["cuda_c"]["ms"] > g["unfused"]["bytes_moved"] / g["cuda_c"]["bytes_moved"]
    long_rows, short_rows = sorted({r["shape"][1] for r in rows if r["chain"] == "softmax"}, reverse=True)
    M = {r["shape"][1]: r["shape"][0] for r in rows if r["chain"] == "softmax"}
    s = {f: t["softmax", M[long_rows], f] for f in SOFTMAX_FORMS}
    assert [f for f in sorted(SOFTMAX_FORMS, key=lambda f: s[f]["ms"])] == ["fused", "online", "numba", "unfused"]
    assert harness.against(s["fused"], 0.8) == "above" and s["fused"]["energy_ratio_to_unfused"] < 0.25
    assert s["online"]["bytes_moved"] > s["fused"]["bytes_moved"]  # x read twice
    q = {f: t["softmax", M[short_rows], f] for f in SOFTMAX_FORMS + SHORT_ROW_EXTRA}
    assert harness.against(q["fused"], 0.9) == "above" and q["fused"]["energy_ratio_to_unfused"] < 0.25  # warp/row
    assert q["block"]["ms"] > 3 * q["fused"]["ms"]                 # a block per short row: far behind
    assert 0.9 < q["online"]["ratio"] < 1.1 and q["online"]["energy_ratio_to_unfused"] > 1.0  # no gain at all
    assert q["numba"]["ratio"] < 1.0                               # slower than the unfused chain
    assert all(r["rel_err"] < 1e-6 for r in rows)
