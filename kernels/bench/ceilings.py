"""Topic `ceilings`: the device's own limits, which chapters compare against.

- device-to-device copy (cudaMemcpyAsync of 1 GiB; bytes read + written);
- cuBLAS SGEMM through cupy.matmul, FP32 with TF32 off (2*n^3 / t), at
  4096^3 and 8192^3, checked against a float64 product;
- board energy of each from NVML over >= 2 s: pJ per byte, J per GFLOP.

Each chapter re-measures the ceiling it divides by in its own run; this
topic is the reference table of the measurement appendix.
"""

from __future__ import annotations

from pathlib import Path

from .. import results

TOPIC = "ceilings"
ORDER = 0  # where the topic sorts: the chapters' order


def copy_ceiling_record(topic: str, variant: str = "ceiling") -> tuple[dict, dict]:
    """Measure the device-to-device copy ceiling (1 GiB) and make its record
    for `topic`: the reference the topic's bandwidth ratios divide by."""
    from .. import harness

    c = harness.copy_ceiling(1 << 30)
    if not c["exact"]:
        raise RuntimeError("the device-to-device copy did not reproduce its source")
    n = c["nbytes"] // 4
    return results.record(topic, "cuda_memcpy", variant, [n], "float32", ms=c["ms"], gbps=c["gbps"],
                          ratio=1.0, rel_err=c["rel_err"], bytes=2 * c["nbytes"]), c


def pair_with_the_ceiling(cases: list[tuple], ceiling_id: str, rounds: int) -> None:
    """Kernels a page compares with the copy ceiling, each timed in rounds
    beside the ceiling's 1 GiB device copy (kernels.harness.paired_rounds).
    cases: (record, fn, arg_sets, bytes moved per call); each record gets
    paired_ratio (of bandwidths) with its spread, against `ceiling_id`."""
    from .. import harness

    copy, _, src = harness.device_copy(1 << 30)
    timed, work = {"ceiling": (copy, ((),))}, {"ceiling": 2 * src.nbytes}
    for rec, fn, arg_sets, nbytes in cases:
        timed[rec["id"]], work[rec["id"]] = (fn, arg_sets), nbytes
    paired = harness.paired_rounds(timed, "ceiling", rounds=rounds, work_per_call=work)
    for rec, *_ in cases:
        rec.update(harness.paired_fields(paired[rec["id"]], ceiling_id))


def measure(quick: bool = False) -> list[dict]:
    import cupy as cp

    from .. import harness

    copy, c = copy_ceiling_record(TOPIC, "d2d")
    n = copy["shape"][0]
    src = cp.random.random(n, dtype=cp.float32)
    dst = cp.empty_like(src)
    rt = cp.cuda.runtime
    stream = cp.cuda.get_current_stream().ptr
    e = harness.measure_energy(
        lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, stream))
    copy.update(harness.energy_fields(e, nbytes=copy["bytes"]))
    records = [copy]
    del src, dst
    for size in ([4096] if quick else [4096, 8192]):
        rng = cp.random.default_rng(size)
        a = rng.standard_normal((size, size), dtype=cp.float32)
        b = rng.standard_normal((size, size), dtype=cp.float32)
        out = cp.full((size, size), cp.nan, dtype=cp.float32)
        cp.matmul(a, b, out=out)
        err = harness.rel_err(out, cp.matmul(a.astype(cp.float64), b.astype(cp.float64)))
        if not err < 1e-5:
            raise RuntimeError(f"SGEMM {size}: rel_err {err} (TF32 on?)")
        t = harness.sgemm_ceiling(size)
        e = harness.measure_energy(lambda: cp.matmul(a, b, out=out))
        gflop = 2 * size**3 / 1e9
        records.append(results.record(TOPIC, "cublas", "sgemm", [size, size, size], "float32", ms=t["ms"],
                                      tflops=t["tflops"], ratio=1.0, rel_err=err,
                                      **harness.energy_fields(e, gflop=gflop)))
        del a, b, out
        cp.get_default_memory_pool().free_all_blocks()
    return records


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    out = []
    for r in results.select(data, TOPIC):
        rate = f"{r['gbps']:.0f} GB/s, {r['energy_pj_per_byte']:.0f} pJ/B" if "gbps" in r else \
            f"{r['tflops']:.1f} TFLOP/s, {r['energy_j_per_gflop']:.4f} J/GFLOP, rel_err {r['rel_err']:.1e}"
        out.append(f"{r['impl']:12} {r['variant']:8} {'x'.join(map(str, r['shape'])):>15} {r['ms']:9.4f} ms  "
                   f"{rate}  {r['avg_power_w']:.0f} W")
    return out


def claims(data: dict) -> None:
    """docs/appendix/measurement*.md, "The ceilings of our GPU": this topic
    records the two ceilings (the device-to-device copy; cuBLAS SGEMM) with
    their board energy, and, "Ceilings measured in the same run", the
    datasheet's 4.8 TB/s is a design figure that real programs do not reach
    (checked against the committed measurements). The roofline this topic's
    plot shows is checked by tests/test_results.py (no point above the roof)."""
    rows = results.select(data, TOPIC)
    copy = [r for r in rows if r["impl"] == "cuda_memcpy"]
    sgemm = [r for r in rows if (r["impl"], r["variant"]) == ("cublas", "sgemm")]
    assert len(copy) == 1 and sgemm                                          # the two ceilings
    assert copy[0].get("energy_pj_per_byte", 0) > 0 and all(r.get("energy_j_per_gflop", 0) > 0 for r in sgemm)
    assert copy[0]["gbps"] < 4800                                            # below the datasheet's 4.8 TB/s


def roof(data: dict) -> dict:
    """The roofline's bandwidth ceiling: the device-to-device copy."""
    bw = next((r["gbps"] for r in results.select(data, TOPIC) if r["impl"] == "cuda_memcpy"), None)
    return {} if bw is None else {"gbps": bw}
