"""Occupancy: how many blocks of a kernel an SM holds at once, and why.

`occupancy(regs, threads, static_smem, dynamic_smem)` derives blocks per SM
and active warps from a kernel's resources and the device's limits, the way
the CUDA occupancy calculator does (cuda_occupancy.h,
cudaOccMaxActiveBlocksPerMultiprocessor), and names the limit that binds:

- warps: the SM holds at most 64 warps (2048 threads) on sm_80 / sm_90;
- blocks: at most 32 blocks per SM;
- registers: a warp's registers are allocated in units of 256, in each of
  the SM's 4 sub-partitions (16,384 registers each);
- shared memory: a block's static + dynamic shared memory plus 1 KB the
  driver reserves, rounded up to 128 bytes, out of 228 KB per SM.

`kernel_occupancy(kernel, threads, dynamic_smem)` reads a compiled CuPy
kernel's registers and shared memory (device.kernel_attributes,
cuFuncGetAttribute) and applies the same formula; tests/test_occupancy.py checks it against the driver's own
answer (cudaOccupancyMaxActiveBlocksPerMultiprocessor) for every CuPy
kernel of the project.
"""

from __future__ import annotations

import re

from .device import CUDA_DIR, driver_blocks_per_sm, kernel_attributes  # noqa: F401  (one reader of both)


# --8<-- [start:limits]
import dataclasses  # noqa: E402
import math  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Limits:
    """What bounds occupancy on one device (defaults: compute capability 9.0,
    CUDA C++ Programming Guide, "Compute Capabilities", technical
    specifications; granularities from cuda_occupancy.h)."""

    warp_size: int = 32
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers per warp are allocated in these units
    sub_partitions: int = 4  # an SM's four schedulers, each with a quarter of the registers
    smem_per_sm: int = 233472  # 228 KB
    smem_per_block: int = 49152  # 48 KB without opting in
    smem_per_block_optin: int = 232448  # 227 KB with cudaFuncAttributeMaxDynamicSharedMemorySize
    reserved_smem_per_block: int = 1024  # the driver's own, per block (sm_80 on)
    smem_alloc_unit: int = 128

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


SM90 = Limits()


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """What occupancy() found: blocks and warps per SM, and why."""

    blocks_per_sm: int
    active_warps: int
    occupancy: float  # active warps / max warps per SM
    limits: dict  # blocks per SM allowed by each resource alone
    binding: tuple  # the resources whose limit equals blocks_per_sm
    regs_per_warp: int  # allocated, after rounding
    smem_per_block: int  # allocated, after rounding (reserved included)

    def explain(self, threads: int) -> str:
        lim = ", ".join(f"{k} {v}" for k, v in self.limits.items())
        return (f"{self.blocks_per_sm} blocks of {threads} threads per SM = {self.active_warps} warps "
                f"({self.occupancy:.0%}); bound by {' and '.join(self.binding)} (blocks allowed by: {lim})")
# --8<-- [end:limits]


# --8<-- [start:calculator]
def round_up(x: int, unit: int) -> int:
    """x rounded up to a whole number of allocation units."""
    return unit * math.ceil(x / unit)


def occupancy(regs: int, threads: int, static_smem: int = 0, dynamic_smem: int = 0, *,
              limits: Limits = SM90, max_threads_per_block: int | None = None,
              max_dynamic_smem: int | None = None) -> Occupancy:
    """Blocks per SM for a kernel using `regs` registers per thread and
    `static_smem` + `dynamic_smem` bytes of shared memory per block,
    launched with `threads` per block. max_threads_per_block: the kernel's
    own bound (__launch_bounds__); max_dynamic_smem: its limit for dynamic
    shared memory (cudaFuncAttributeMaxDynamicSharedMemorySize; None: the
    default, 48 KB per block in all)."""
    L = limits
    if threads <= 0 or regs < 0 or static_smem < 0 or dynamic_smem < 0:
        raise ValueError("threads must be positive and resources non-negative")
    warps = math.ceil(threads / L.warp_size)  # a partial warp occupies a whole warp slot
    fits = threads <= min(L.max_threads_per_block, max_threads_per_block or L.max_threads_per_block)

    # 1. warp slots: 64 per SM
    by_warps = L.max_warps_per_sm // warps if fits else 0
    # 2. block slots: 32 per SM
    by_blocks = L.max_blocks_per_sm
    # 3. registers: per warp, rounded up to 256, placed in 4 sub-partitions
    regs_per_warp = round_up(regs * L.warp_size, L.reg_alloc_unit)
    assumed = regs_per_warp * round_up(warps, L.sub_partitions)  # the hardware's per-block check
    if regs > L.max_regs_per_thread or assumed > L.regs_per_block or regs_per_warp * warps > L.regs_per_block:
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = by_blocks
    else:
        warps_per_sub = (L.regs_per_sm // L.sub_partitions) // regs_per_warp
        by_regs = warps_per_sub * L.sub_partitions // warps
    # 4. shared memory: static + dynamic + the driver's reserve, in 128-byte units
    smem = round_up(static_smem + dynamic_smem + L.reserved_smem_per_block, L.smem_alloc_unit)
    if max_dynamic_smem is None:  # the default: 48 KB per block in all
        max_dynamic_smem = max(0, L.smem_per_block - static_smem)
    too_much = dynamic_smem > max_dynamic_smem or smem > L.smem_per_block_optin + L.reserved_smem_per_block
    by_smem = 0 if too_much else L.smem_per_sm // smem

    found = {"warps": by_warps, "blocks": by_blocks, "registers": by_regs, "shared memory": by_smem}
    blocks = min(found.values())
    return Occupancy(blocks_per_sm=blocks, active_warps=blocks * warps,
                     occupancy=blocks * warps / L.max_warps_per_sm, limits=found,
                     binding=tuple(k for k, v in found.items() if v == blocks),
                     regs_per_warp=regs_per_warp, smem_per_block=smem)
# --8<-- [end:calculator]


# --8<-- [start:device_limits]
def device_limits() -> Limits:
    """The current GPU's limits from the driver (CuPy device attributes);
    the allocation granularities, which the driver does not report, are
    those of compute capability 8.x / 9.0."""
    import cupy as cp

    dev = cp.cuda.Device()
    a = dev.attributes
    major = int(dev.compute_capability[:-1])
    if major < 8:
        raise ValueError(f"granularities are tabulated for compute capability 8.0 and up, got {dev.compute_capability}")
    return Limits(
        warp_size=a["WarpSize"], max_threads_per_sm=a["MaxThreadsPerMultiProcessor"],
        max_blocks_per_sm=a["MaxBlocksPerMultiprocessor"], max_threads_per_block=a["MaxThreadsPerBlock"],
        regs_per_sm=a["MaxRegistersPerMultiprocessor"], regs_per_block=a["MaxRegistersPerBlock"],
        smem_per_sm=a["MaxSharedMemoryPerMultiprocessor"], smem_per_block=a["MaxSharedMemoryPerBlock"],
        smem_per_block_optin=a["MaxSharedMemoryPerBlockOptin"],
        reserved_smem_per_block=a["ReservedSharedMemoryPerBlock"])
# --8<-- [end:device_limits]


# --8<-- [start:kernel_occupancy]
def kernel_occupancy(kern, threads: int, dynamic_smem: int = 0, limits: Limits | None = None) -> Occupancy:
    """occupancy() for a compiled CuPy RawKernel, from its own attributes."""
    a = kernel_attributes(kern)
    return occupancy(a["regs"], threads, a["smem_bytes"], dynamic_smem, limits=limits or device_limits(),
                     max_threads_per_block=a["max_threads_per_block"], max_dynamic_smem=a["max_dynamic_smem"])
# --8<-- [end:kernel_occupancy]


# extern "C" __global__ void [attributes] name( ... , outside comments and #define lines
# (a macro that stamps kernels out names a parameter, not a kernel)
_ENTRY = re.compile(r'extern "C" __global__ void\s+(?:__\w+__\s*(?:\([^)]*\))?\s*)*(\w+)\s*\(')
_NOT_CODE = re.compile(r"//[^\n]*|/\*.*?\*/|^[ \t]*#[ \t]*define(?:[^\n]*\\\n)*[^\n]*", re.S | re.M)


def cuda_entry_points(source: str) -> list[str]:
    """The extern "C" kernels of kernels/cuda/<source>, in file order."""
    return _ENTRY.findall(_NOT_CODE.sub(" ", (CUDA_DIR / source).read_text()))


def all_cupy_kernels(cc: tuple[int, int] = (9, 0)) -> list[tuple[str, object]]:
    """(name, compiled RawKernel) for every CuPy kernel of the project: each
    extern "C" kernel of kernels/cuda/*.cu, compiled as its wrapper compiles
    it (device.all_cuda_builds), and each template instantiation the benches
    sweep (matmul's CONFIGS, tensor_cores' TC_CONFIGS, transpose's TUNING)."""
    from . import matmul, tensor_cores, transpose
    from .device import all_cuda_builds

    out = []
    for build in all_cuda_builds(cc):  # a source built several ways (-D options) names each build
        mod, tag = build.module(), "".join(f"[{o[2:]}]" for o in build.options if o.startswith("-D"))
        out += [(f"{build.source[:-3]}{tag}/{name}", mod.get_function(name))
                for name in cuda_entry_points(build.source)]
    for cfg in matmul.CONFIGS:
        out.append((f"matmul/{matmul.config_name(cfg)}", matmul.warptiled_config_kernel(cfg)))
    for cfg in tensor_cores.TC_CONFIGS:
        out.append((f"tensor_cores/config_{tensor_cores.config_name(cfg)}", tensor_cores.config_kernel(cfg)))
    for cfg in transpose.TUNING:
        for move in (True, False):
            kind = "transpose" if move else "copy_tiled"
            out.append((f"transpose/{kind}_{transpose.config_name(cfg)}", transpose.config_kernel(cfg, transpose=move)))
    return out
