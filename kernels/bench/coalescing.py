"""Topic `coalescing`: what a warp's access pattern costs.

- strided: out[i] = x[i * stride], stride 1 ... 32, n = 2^26 useful
  elements; bandwidth counts useful bytes only (4 read + 4 written per
  element), as a fraction of the device copy measured in the same run.
  The 32-byte-sector model: a warp's 32 loads touch min(32, 4 * stride)
  sectors, so DRAM moves min(stride, 8) times the useful bytes read and
  the predicted fraction of copy bandwidth is 2 / (min(stride, 8) + 1).
- offset: out[i] = x[i + offset], offset 0 ... 32 floats (misaligned).
- AoS vs SoA: the norm of n = 2^26 points (all three fields) and 2 * x
  (one field of three), points stored as (n, 3) or (3, n); useful bytes
  16 (norm) or 8 (scale_x) per point.
CuPy (CUDA C) for all, Numba for some; board energy per useful byte (NVML,
>= 2 s) for the CuPy kernels in ENERGY_STRIDES, ENERGY_OFFSETS and AoS/SoA.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting
from .ceilings import copy_ceiling_record

TOPIC = "coalescing"
ORDER = 80  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "stride": ("步长", "stride"),
    "offset": ("偏移", "offset"),
    "sectors_per_request": ("每个 warp 的扇区数", "sectors per warp"),
    "sector_model": ("扇区模型", "sector model"),
}
N = 1 << 26
POINTS = 1 << 26
STRIDES = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 28, 32]
QUICK_STRIDES = [1, 2, 8, 32]
NUMBA_STRIDES = [1, 2, 8, 32]
ENERGY_STRIDES = [1, 2, 4, 8, 16, 32]
OFFSETS = [0, 1, 2, 4, 8, 16, 32]
NUMBA_OFFSETS = [0, 1]
ENERGY_OFFSETS = [0, 1]


def sector_model(stride: int) -> float:
    """Predicted fraction of copy bandwidth (useful bytes) for a stride."""
    return 2.0 / (min(stride, 8) + 1)


def dram64_model(stride: int) -> float:
    """The same if DRAM moved 64 bytes (two sectors) per sector requested:
    the read amplification grows up to a stride of 16 floats."""
    return 2.0 / (min(stride, 16) + 1)


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import harness, memory

    ceiling, _ = copy_ceiling_record(TOPIC)
    records = [ceiling]
    rng = cp.random.default_rng(0)
    seconds = 1.0 if quick else 2.0

    def add(impl, variant, shape, launch, sets, check, useful_bytes, energy, **extra):
        err = check()  # the output of one launch against its reference
        t = harness.time_gpu(launch, sets, samples=10 if quick else 30)
        gbps = useful_bytes / (t["ms"] * 1e-3) / 1e9
        rec = results.record(TOPIC, impl, variant, shape, "float32", ms=t["ms"], ms_min=t["ms_min"],
                             gbps=gbps, ref=ceiling["id"], ratio=gbps / ceiling["gbps"], rel_err=err,
                             useful_bytes=useful_bytes, **extra)
        if energy:
            e = harness.measure_energy(launch, sets, min_seconds=seconds)
            rec.update(harness.energy_fields(e, nbytes=useful_bytes))
        records.append(rec)

    # --- strided and misaligned copies -------------------------------------
    for kind in ("stride", "offset"):
        values = (QUICK_STRIDES if quick else STRIDES) if kind == "stride" else OFFSETS
        for v in values:
            need = (N - 1) * v + 1 if kind == "stride" else N + v
            sets = []
            for _ in range(max(2, harness.rotation(4 * (need + N)))):  # two placements at least
                x = rng.random(need, dtype=cp.float32)
                o = cp.empty(N, dtype=cp.float32)
                sets.append((x, o, cuda.as_cuda_array(x), cuda.as_cuda_array(o)))
            x0, o0 = sets[0][:2]
            want = x0[::v] if kind == "stride" else x0[v:]
            cupy_fn = memory.copy_strided_cupy if kind == "stride" else memory.copy_offset_cupy
            numba_fn = memory.copy_strided_numba if kind == "stride" else memory.copy_offset_numba

            def check(fn, args):
                def run():
                    o0.fill(cp.nan)
                    fn(*args)
                    cp.cuda.Device().synchronize()
                    if not bool(cp.array_equal(o0, want)):
                        raise RuntimeError(f"{kind} {v}: wrong copy")
                    return harness.rel_err(o0, want)
                return run

            extra = ({"kind": kind, "stride": v, "sector_model": sector_model(v),
                      "sectors_per_request": min(32, 4 * v)} if kind == "stride" else {"kind": kind, "offset": v})
            add("cupy", f"{kind}_{v}", [N], lambda x, o, *_: cupy_fn(x, o, v), sets,
                check(cupy_fn, (x0, o0, v)), 8 * N,
                v in (ENERGY_STRIDES if kind == "stride" else ENERGY_OFFSETS), **extra)
            if v in (NUMBA_STRIDES if kind == "stride" else NUMBA_OFFSETS):
                add("numba", f"{kind}_{v}", [N], lambda x, o, nx, no: numba_fn(nx, no, v), sets,
                    check(numba_fn, (sets[0][2], sets[0][3], v)), 8 * N, False, **extra)
            del sets, x0, o0, want
            cp.get_default_memory_pool().free_all_blocks()

    # --- AoS vs SoA ----------------------------------------------------------
    n = POINTS // (16 if quick else 1)
    for layout in memory.LAYOUTS:
        shape = (n, 3) if layout == "aos" else (3, n)
        sets = []
        for _ in range(harness.rotation(16 * n)):
            p = rng.standard_normal(shape, dtype=cp.float32)
            o = cp.empty(n, dtype=cp.float32)
            sets.append((p, o, cuda.as_cuda_array(p), cuda.as_cuda_array(o)))
        p0, o0 = sets[0][:2]
        aos = p0 if layout == "aos" else p0.T
        norm_ref = cp.sqrt(cp.sum(aos.astype(cp.float64) ** 2, axis=1))
        for op, useful in (("norm", 16 * n), ("scale_x", 8 * n)):
            want = norm_ref if op == "norm" else 2 * aos[:, 0]
            cupy_fn = memory.norm_cupy if op == "norm" else memory.scale_x_cupy

            def check(run_once, op=op, want=want):
                def run():
                    o0.fill(cp.nan)
                    run_once()
                    err = harness.rel_err(o0, want)
                    if not err <= 1e-6:
                        raise RuntimeError(f"{op} {layout}: rel_err {err}")
                    return err
                return run

            add("cupy", f"{op}_{layout}", [n, 3], lambda p, o, *_, f=cupy_fn: f(p, layout, o), sets,
                check(lambda f=cupy_fn: f(p0, layout, o0)), useful, True, kind="layout", layout=layout, op=op)
            add("numba", f"{op}_{layout}", [n, 3],
                lambda p, o, np_, no, op=op: memory.points_numba(op, np_, layout, no), sets,
                check(lambda op=op: memory.points_numba(op, sets[0][2], layout, sets[0][3])), useful, False,
                kind="layout", layout=layout, op=op)
        del sets, p0, o0, aos
        cp.get_default_memory_pool().free_all_blocks()
    return records


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'Strided reads': '跨步读取',
    'AoS vs SoA': 'AoS 与 SoA',
    '32-byte sector model': '32 字节扇区模型',
    '64-byte DRAM model': '64 字节 DRAM 模型',
    'stride (floats)': '跨步（以 float 计）',
    'scale x': '只读 x',
    'norm': '求模',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    if not rows:
        return []
    env = data["topics"][TOPIC]["env"]
    paths = []
    fig, ax = plotting.new_figure(7, 4)
    for impl, style in (("cupy", "o-"), ("numba", "s--")):
        pts = sorted((r["stride"], r["ratio"]) for r in rows if r["impl"] == impl and "stride" in r)
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, style, markersize=4, label=f"{impl}: out[i] = x[i * stride]")
    s = np.arange(1, 33)
    ax.plot(s, [sector_model(int(v)) for v in s], "k:", label="32-byte sector model 2 / (min(stride, 8) + 1)")
    ax.plot(s, [dram64_model(int(v)) for v in s], "--", color="grey", lw=0.9,
            label="64-byte DRAM model 2 / (min(stride, 16) + 1)")
    ax.set_xlabel("stride (floats)")
    ax.set_ylabel("useful bandwidth / copy bandwidth")
    ax.set_ylim(0, 1.1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    paths += plotting.save(fig, ax, TOPIC, env, out_dir, "Strided reads", words=PLOT_WORDS)
    fig, ax = plotting.new_figure(7, 3.6)
    keys = [(i, f"{op}_{lay}") for op in ("norm", "scale_x") for lay in ("aos", "soa") for i in ("cupy", "numba")]
    by = {(r["impl"], r["variant"]): r for r in rows}
    vals = [by.get(k, {}).get("ratio", np.nan) for k in keys]
    ax.bar(np.arange(len(keys)), vals, color=["C0" if i == "cupy" else "C1" for i, _ in keys])
    ax.set_xticks(np.arange(len(keys)), [f"{v.replace('_', ' ')}\n{i}" for i, v in keys], fontsize=7)
    ax.set_ylabel("useful bandwidth / copy bandwidth")
    ax.grid(True, axis="y", alpha=0.3)
    paths += plotting.save(fig, ax, f"{TOPIC}_aos_soa", env, out_dir, "AoS vs SoA", words=PLOT_WORDS)
    return paths


def summary(data: dict) -> list[str]:
    out = [f"{'impl':6} {'variant':16} {'GB/s':>8} {'ratio':>6} {'pJ/B':>7}"]
    for r in results.select(data, TOPIC):
        pj = f"{r['energy_pj_per_byte']:7.0f}" if "energy_pj_per_byte" in r else f"{'':7}"
        out.append(f"{r['impl']:6} {r['variant']:16} {r['gbps']:8.0f} {r['ratio']:6.3f} {pj}")
    return out


def claims(data: dict) -> None:
    """docs/memory-hierarchy*.md: "What the measurements show" and the boxes
    about coalescing (stride, offset, AoS/SoA), checked against the committed
    measurements."""
    co = {(r["impl"], r["variant"]): r for r in results.select(data, TOPIC)}
    stride = {r["stride"]: r for r in co.values() if r["impl"] == "cupy" and r.get("kind") == "stride"}
    for s, r in stride.items():
        if s <= 8:
            assert abs(r["ratio"] - sector_model(s)) < 0.07 * sector_model(s), s
        if s <= 24:
            assert abs(r["ratio"] - dram64_model(s)) < 0.07 * dram64_model(s), s
        else:
            assert r["ratio"] < dram64_model(s), s
    assert stride[16]["ratio"] < 0.7 * sector_model(16)                      # not flat after 8
    for s in (2, 4, 8, 16, 32):
        e = stride[s]["energy_pj_per_byte"] / stride[1]["energy_pj_per_byte"]
        t = stride[s]["ms"] / stride[1]["ms"]
        assert 0.75 < e / t < 1.1, s                                         # energy rises like time
    offsets = {r["offset"]: r["ratio"] for r in co.values() if r["impl"] == "cupy" and r.get("kind") == "offset"}
    assert all(v >= 0.9 * stride[1]["ratio"] for o, v in offsets.items() if o > 0)
    assert offsets[0] < min(v for o, v in offsets.items() if o > 0)         # the unexplained aligned row
    for impl in ("cupy", "numba"):
        aos, soa = co[(impl, "norm_aos")]["ratio"], co[(impl, "norm_soa")]["ratio"]
        assert abs(aos - soa) < (0.1 if impl == "cupy" else 0.25) * soa, impl  # whole struct: AoS costs little
        assert 0.4 < co[(impl, "scale_x_aos")]["ratio"] / co[(impl, "scale_x_soa")]["ratio"] < 0.6, impl


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""

    import cupy as cp

    from kernels import memory as mem

    for n in (1, 1000, 4099):
        for stride in (1, 3, 32):
            x = cp.random.random((n - 1) * stride + 1, dtype=cp.float32)
            out = cp.full(n, cp.nan, dtype=cp.float32)
            assert bool(cp.array_equal(mem.copy_strided_cupy(x, out, stride), x[::stride]))
        for offset in (0, 1, 31):
            x = cp.random.random(n + offset, dtype=cp.float32)
            out = cp.full(n, cp.nan, dtype=cp.float32)
            assert bool(cp.array_equal(mem.copy_offset_cupy(x, out, offset), x[offset:]))
        aos = cp.random.standard_normal((n, 3), dtype=cp.float32)
        for layout, p in (("aos", aos), ("soa", cp.ascontiguousarray(aos.T))):
            assert bool(cp.allclose(mem.norm_cupy(p, layout), cp.linalg.norm(aos, axis=1), rtol=1e-6))
            assert bool(cp.array_equal(mem.scale_x_cupy(p, layout), 2 * aos[:, 0]))
