"""Topic `occupancy_check`: the occupancy calculator (kernels/occupancy.py)
against the driver (cudaOccupancyMaxActiveBlocksPerMultiprocessor) for
every CuPy kernel of the project, at 64, 128, 256 and 1024 threads per block
(where the kernel allows them) and 0 or 16 KB of dynamic shared memory.

A record per case: calc_blocks_per_sm, driver_blocks_per_sm, the binding
limit(s) the calculator names, the kernel's registers and static shared
memory, occupancy. These records compare two answers, not speeds:
`check: true`, no rate, ms null; ratio = calc / driver (1.0 when both are
0), ref = the record itself, rel_err = |calc - driver| / max(driver, 1).
"""

from __future__ import annotations

from pathlib import Path

from .. import results

TOPIC = "occupancy_check"
ORDER = 110  # where the topic sorts: the chapters' order
# Column labels (Chinese, English) of the keys this topic adds to its records.
LABELS = {
    "calc_blocks_per_sm": ("计算器：每 SM 块数", "calculator: blocks/SM"),
    "driver_blocks_per_sm": ("驱动：每 SM 块数", "driver: blocks/SM"),
    "binding": ("受限于", "bound by"),
}
# The words of the `binding` column (what limits the blocks per SM), joined by " + ".
WORDS = {"binding": {"registers": ("寄存器", "registers"), "shared memory": ("共享内存", "shared memory"),
                     "warps": ("warp 数", "warps"), "blocks": ("线程块数", "blocks")}}
THREADS = (64, 128, 256, 1024)  # 128: the block of the tuned matmul kernels
DYNAMIC = (0, 16 << 10)


def measure(quick: bool = False) -> list[dict]:
    from .. import occupancy as occ

    limits = occ.device_limits()
    records = []
    kernels = occ.all_cupy_kernels()
    for name, kern in (kernels[::8] if quick else kernels):
        a = occ.kernel_attributes(kern)
        for threads in THREADS:
            if threads > a["max_threads_per_block"]:
                continue
            for dyn in DYNAMIC:
                if dyn > a["max_dynamic_smem"]:
                    continue
                o = occ.kernel_occupancy(kern, threads, dyn, limits)
                drv = occ.driver_blocks_per_sm(kern, threads, dyn)
                records.append(results.record(
                    TOPIC, "cupy", name, [threads, dyn], "n/a", ms=None, check=True,
                    ratio=1.0 if o.blocks_per_sm == drv == 0 else o.blocks_per_sm / max(drv, 1),
                    rel_err=abs(o.blocks_per_sm - drv) / max(drv, 1)))
                records[-1].update({
                    "threads": threads, "dynamic_smem": dyn, "regs": a["regs"], "smem_bytes": a["smem_bytes"],
                    "calc_blocks_per_sm": o.blocks_per_sm, "driver_blocks_per_sm": drv,
                    "occupancy": o.occupancy, "binding": " + ".join(o.binding),
                })
    return records


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    rows = results.select(data, TOPIC)
    wrong = [r for r in rows if r["calc_blocks_per_sm"] != r["driver_blocks_per_sm"]]
    out = [f"{len(rows)} cases, {len(rows) - len(wrong)} equal to the driver"]
    for r in wrong[:20]:
        out.append(f"  DIFFERS {r['variant']} threads={r['threads']} dyn={r['dynamic_smem']}: "
                   f"calc {r['calc_blocks_per_sm']} driver {r['driver_blocks_per_sm']}")
    return out


def claims(data: dict) -> None:
    """docs/occupancy*.md, the calculator against the driver: the occupancy
    calculator equals the driver in every recorded case (checked against the
    committed measurements)."""
    check = results.select(data, TOPIC)
    assert len(check) > 300 and all(r["calc_blocks_per_sm"] == r["driver_blocks_per_sm"] for r in check)
