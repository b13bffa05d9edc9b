"""Topic `vector_add`: bandwidth of out = a + b from 2^16 to 2^28 elements,
as a fraction of the device-to-device copy ceiling measured in the same run.

Variants: guard and grid_stride in CuPy and Numba (the first chapter),
vec4 in CuPy (the memory chapter), and vec4's tuning experiments vec4_u1
and vec4_u4 at the largest size only (tuning: true).

Bytes counted: 12 per element (read a and b, write out). Kernels are timed
as bare launches (grid fixed beforehand), with enough argument sets rotated
that the working set exceeds three times the L2 cache.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import results
from . import plotting
from .ceilings import copy_ceiling_record

TOPIC = "vector_add"
ORDER = 10  # where the topic sorts: the chapters' order
SIZES = [1 << p for p in range(16, 29)]
QUICK_SIZES = [1 << 16, 1 << 20, 1 << 24, 1 << 28]
THREADS = 256


def _launchers(n: int):
    """(impl, variant) -> a function launching that kernel on (a, b, out)."""
    import cupy as cp

    from .. import vector_add as va

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    full = (n + THREADS - 1) // THREADS
    gs = min(full, va.grid_stride_blocks(THREADS, sms))
    n64 = np.int64(n)
    k_guard, k_gs = va.cupy_kernel("guard"), va.cupy_kernel("grid_stride")
    nb_guard = va.vector_add_kernel[full, THREADS]
    nb_gs = va.vector_add_grid_stride_kernel[gs, THREADS]

    def vec4(variant):  # the allocations are 256-byte aligned: float4 loads apply
        k, blocks = va.cupy_kernel(variant), va.vec4_blocks(variant, n, THREADS)
        return lambda a, b, o, *_: k((blocks,), (THREADS,), (a, b, o, n64))

    return {
        ("cupy", "guard"): lambda a, b, o, na, nb_, no: k_guard((full,), (THREADS,), (a, b, o, n64)),
        ("cupy", "grid_stride"): lambda a, b, o, na, nb_, no: k_gs((gs,), (THREADS,), (a, b, o, n64)),
        ("cupy", "vec4"): vec4("vec4"),
        ("numba", "guard"): lambda a, b, o, na, nb_, no: nb_guard(na, nb_, no, n),
        ("numba", "grid_stride"): lambda a, b, o, na, nb_, no: nb_gs(na, nb_, no, n),
        **{("cupy", v): vec4(v) for v in va.TUNING},
    }


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp
    from numba import cuda

    from .. import harness, vector_add as va

    ceiling, _ = copy_ceiling_record(TOPIC)
    ceil_id = ceiling["id"]
    records = [ceiling]
    sizes = QUICK_SIZES if quick else SIZES
    rng = cp.random.default_rng(0)
    for n in sizes:
        sets = []
        for _ in range(harness.rotation(12 * n)):
            a = rng.standard_normal(n, dtype=cp.float32)
            b = rng.standard_normal(n, dtype=cp.float32)
            o = cp.empty_like(a)
            # Numba views of the same memory, made once (each conversion syncs).
            sets.append((a, b, o, cuda.as_cuda_array(a), cuda.as_cuda_array(b), cuda.as_cuda_array(o)))
        a0, b0, o0 = sets[0][:3]
        ref = a0.astype(cp.float64) + b0.astype(cp.float64)
        for (impl, variant), launch in _launchers(n).items():
            tuning = variant in va.TUNING
            if tuning and n != sizes[-1]:
                continue  # the float4 experiments: at the largest size only
            o0.fill(cp.nan)  # poison: an unwritten element makes rel_err NaN
            launch(*sets[0])
            err = harness.rel_err(o0, ref)
            if not err <= 1e-6:  # also catches NaN
                raise RuntimeError(f"{impl} {variant} n={n}: rel_err {err}")
            t = harness.time_gpu(launch, sets)
            gbps = 12 * n / (t["ms"] * 1e-3) / 1e9
            rec = results.record(TOPIC, impl, variant, [n], "float32", ms=t["ms"], ms_min=t["ms_min"],
                                 gbps=gbps, ref=ceil_id, ratio=gbps / ceiling["gbps"], rel_err=err,
                                 bytes=12 * n, threads=THREADS)
            if tuning:
                rec["tuning"] = True
            if n == sizes[-1]:
                e = harness.measure_energy(launch, sets)
                rec.update(harness.energy_fields(e, nbytes=12 * n))
            records.append(rec)
        if n == sizes[-1]:  # the ratios the pages compare with the copy ceiling: in paired rounds
            _pair_with_the_ceiling(records, n, sets, quick)
        # The same copy engine path at this size: how small sizes fare for a copy.
        rt = cp.cuda.runtime
        stream = cp.cuda.get_current_stream().ptr

        def copy(a, b, o, *_):
            rt.memcpyAsync(o.data.ptr, a.data.ptr, a.nbytes, rt.memcpyDeviceToDevice, stream)

        copy(*sets[0])
        if not bool(cp.array_equal(o0, a0)):
            raise RuntimeError(f"memcpy n={n} did not reproduce its source")
        err = harness.rel_err(o0, a0)
        t = harness.time_gpu(copy, sets)
        gbps = 8 * n / (t["ms"] * 1e-3) / 1e9
        energy = {}
        if n == sizes[-1]:
            e = harness.measure_energy(copy, sets)
            energy = harness.energy_fields(e, nbytes=8 * n)
        records.append(results.record(TOPIC, "cuda_memcpy", "same_size", [n], "float32", ms=t["ms"],
                                      ms_min=t["ms_min"], gbps=gbps, ref=ceil_id, ratio=gbps / ceiling["gbps"],
                                      rel_err=err, bytes=8 * n, **energy))
        del sets
        cp.get_default_memory_pool().free_all_blocks()
    return records


PAIRED = (("cupy", "guard"), ("cupy", "grid_stride"), ("cupy", "vec4"), ("cupy", "vec4_u1"), ("cupy", "vec4_u4"),
          ("numba", "guard"), ("numba", "grid_stride"))


def _pair_with_the_ceiling(records: list[dict], n: int, sets, quick: bool) -> None:
    """Each kernel the pages compare with the copy ceiling, timed in rounds
    beside the ceiling's 1 GiB device copy (kernels.harness.paired_rounds):
    paired_ratio (of bandwidths) with its spread, ratio_min and ratio_max."""
    from .. import harness

    copy, _, src = harness.device_copy(1 << 30)
    launchers = _launchers(n)
    cases = {"ceiling": (copy, ((),))}
    cases.update({f"{i}/{v}": (launchers[i, v], sets) for i, v in PAIRED})
    work = {"ceiling": 2 * src.nbytes, **{f"{i}/{v}": 12 * n for i, v in PAIRED}}
    paired = harness.paired_rounds(cases, "ceiling", rounds=2 if quick else 7, work_per_call=work)
    for r in records:
        key = f"{r['impl']}/{r['variant']}"
        if r["shape"] == [n] and key in paired:
            r.update(harness.paired_fields(paired[key], records[0]["id"]))  # against the ceiling record


# The plots' words in Chinese (kernels/bench/plotting.py: whole phrases, longest first).
PLOT_WORDS = {
    'vector add bandwidth': '向量加法带宽',
    'elements n (float32; 12 bytes moved per element)': '元素个数 n（float32；每个元素搬运 12 字节）',
}


def plot(data: dict, out_dir: Path) -> list[Path]:
    rows = results.select(data, TOPIC)
    env = data["topics"][TOPIC]["env"]
    ceiling = next(r for r in rows if r["variant"] == "ceiling")
    fig, ax = plotting.new_figure(7, 4)
    styles = {("cupy", "guard"): "o-", ("cupy", "grid_stride"): "s-", ("cupy", "vec4"): "^-",
              ("numba", "guard"): "o--", ("numba", "grid_stride"): "s--",
              ("cuda_memcpy", "same_size"): "k:"}
    for (impl, variant), style in styles.items():
        pts = sorted((r["shape"][0], r["ratio"]) for r in rows
                     if r["impl"] == impl and r["variant"] == variant)
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, style, label=f"{impl} {variant}", markersize=4)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("elements n (float32; 12 bytes moved per element)")
    ax.set_ylabel(f"fraction of copy ceiling ({ceiling['gbps']:.0f} GB/s)")
    ax.set_ylim(0, 1.1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return plotting.save(fig, ax, TOPIC, env, out_dir, "vector add bandwidth", words=PLOT_WORDS)


def summary(data: dict) -> list[str]:
    rows = results.select(data, TOPIC)
    out = [f"{'impl':12} {'variant':12} {'n':>10} {'ms':>9} {'GB/s':>8} {'ratio':>6} {'rel_err':>8}"]
    for r in rows:
        if r["shape"][0] in (1 << 16, 1 << 20, 1 << 24, 1 << 28):
            out.append(f"{r['impl']:12} {r['variant']:12} {r['shape'][0]:>10} {r['ms']:9.4f} "
                       f"{r['gbps']:8.0f} {r['ratio']:6.3f} {r['rel_err']:8.1e}")
    return out


def claims(data: dict) -> None:
    """What the pages say about vector add, checked against the committed
    measurements: the sentences under "How to read it" in
    docs/programming-model*.md; and in docs/memory-hierarchy*.md, vector add
    in float4 and the issue's goal (vector add >= 0.90 x copy)."""
    rows = results.select(data, TOPIC)
    # docs/programming-model*.md, "How to read it"
    ratio = {(r["impl"], r["variant"], r["shape"][0]): r["ratio"] for r in rows}
    sizes = sorted({n for (_, v, n) in ratio if v != "ceiling"})
    small, big = sizes[0], sizes[-1]
    kernels = [("cupy", "guard"), ("cupy", "grid_stride"), ("numba", "guard"), ("numba", "grid_stride")]
    # small arrays are launch-bound, memcpy included
    assert small == 1 << 16
    assert all(ratio[(i, v, small)] < 0.1 for i, v in kernels + [("cuda_memcpy", "same_size")])
    # Numba pays more per launch: far below CuPy at 2^20, close from 2^25 on
    for v in ("guard", "grid_stride"):
        assert ratio[("numba", v, 1 << 20)] < 0.5 * ratio[("cupy", v, 1 << 20)]
        for n in (s for s in sizes if s >= 1 << 25):
            assert ratio[("numba", v, n)] >= 0.85 * ratio[("cupy", v, n)], (v, n)
    # at the largest size the grid-stride loop beats one thread per element, in CuPy and
    # in Numba: every paired round's ratio (beside the copy) of the one above the other's
    paired = {(r["impl"], r["variant"]): r for r in rows if r["shape"][0] == big and "ratio_min" in r}
    for impl in ("cupy", "numba"):
        assert paired[impl, "grid_stride"]["ratio_min"] > paired[impl, "guard"]["ratio_max"], impl
    # most of the ceiling, but not all of it
    assert all(0.7 < ratio[(i, v, big)] < 1.0 for i, v in kernels)
    # docs/memory-hierarchy*.md: vector add in float4: the goal
    va = {(r["impl"], r["variant"], r["shape"][0]): r for r in rows}
    big = max(n for (_, _, n) in va)
    from .. import harness

    # the goal, in paired rounds beside the ceiling's copy: the whole spread above 0.90
    assert harness.against(va[("cupy", "vec4", big)], 0.90) == "above"      # goal
    assert harness.against(va[("cupy", "grid_stride", big)], 0.90) == "below"
    tuned = [va[("cupy", v, big)]["paired_ratio"] for v in ("vec4_u1", "vec4", "vec4_u4")]
    assert max(tuned) - min(tuned) < 0.03
    pj = [va[("cupy", v, big)]["energy_pj_per_byte"] for v in ("vec4", "grid_stride", "guard")]
    assert pj == sorted(pj)


# On the roofline (kernels/bench/roofline.py): 1 FLOP per 12 bytes (two
# loads, one store), every kernel at the largest size.
ROOFLINE = ("o", 0)


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    rows = [r for r in results.select(data, TOPIC) if r["impl"] != "cuda_memcpy"]
    big = max((r["shape"][0] for r in rows), default=None)
    return [(f"{r['impl']} {r['variant']}", 1 / 12, r["gbps"] / 12) for r in rows if r["shape"][0] == big]


def sanitize() -> None:
    """`make sanitize` (tests.gpu_driver, under compute-sanitizer): every CUDA C
    kernel of this topic once, at odd sizes, its results checked."""
    import cupy as cp

    from kernels.vector_add import CUPY_VARIANTS, TUNING, vector_add_cupy

    for n in (1, 5, 1000, 2**20 + 3):
        for variant in CUPY_VARIANTS + TUNING:
            for threads in (32, 256, 1024):
                a = cp.random.standard_normal(n, dtype=cp.float32)
                b = cp.random.standard_normal(n, dtype=cp.float32)
                out = cp.full(n, cp.nan, dtype=cp.float32)
                vector_add_cupy(a, b, out, threads=threads, variant=variant)
                ref = a.astype(cp.float64) + b.astype(cp.float64)
                assert cp.allclose(out, ref, rtol=1e-6, atol=1e-7), (n, variant, threads)
