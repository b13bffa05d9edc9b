# %% [markdown]
# # Occupancy: how many blocks an SM holds, and which resource decides
#
# A calculator in plain Python derives blocks per SM from a kernel's
# registers, shared memory and block size, the way NVIDIA's occupancy
# calculator does, and names the limit that binds. Worked cases (by hand,
# from compute capability 9.0's numbers) check it anywhere; on a GPU it is
# checked against the driver (cudaOccupancyMaxActiveBlocksPerMultiprocessor)
# for CUDA C kernels compiled by CuPy, one case per binding limit. The
# script exits non-zero on any disagreement.
#
# Run:
#
#     python occupancy.py               # worked cases; on a GPU, the driver check too
#     python occupancy.py --impl numba  # worked cases only (no GPU needed)
#
# Copy with it: kernels/cuda/matmul.cu, kernels/cuda/stencil.cu and
# kernels/cuda/vector_add.cu (beside this file). Needs numpy; cupy for the
# driver check. The calculator is plain Python: this example has no Numba
# kernel, and runs its worked cases without a GPU.

# %%
# --8<-- [start:pick_target]
import ctypes
import os
import sys


def has_gpu() -> bool:
    """True when the CUDA driver loads and reports a device. Asks the driver
    through ctypes, so it initialises neither CuPy nor Numba."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


# Numba reads NUMBA_ENABLE_CUDASIM when it is first imported: with no GPU,
# run its CUDA simulator (one Python thread per GPU thread: keep sizes small).
if "numba" not in sys.modules and not has_gpu():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# --8<-- [end:pick_target]

# %%
# --8<-- [start:load_cuda]
import functools
from pathlib import Path


def find_cuda_source(name: str) -> Path:
    """The CUDA C file `name`: beside this script (an example copied with its
    .cu file), else in the handbook's kernels/cuda/ (run from the repository
    or from examples/)."""
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    for folder in (here, here / "cuda", here.parent / "kernels" / "cuda", Path.cwd() / "kernels" / "cuda"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{name}: copy it beside this script (it is in the handbook's kernels/cuda/)")


@functools.cache
def load_cuda(name: str):
    """kernels/cuda/<name> compiled once per process by CuPy's RawModule (NVRTC)."""
    import cupy as cp

    return cp.RawModule(code=find_cuda_source(name).read_text(), options=("--std=c++17",))
# --8<-- [end:load_cuda]


import argparse

# %% [markdown]
# ## The limits of one device, and the calculator
#
# Four resources bound the blocks an SM holds: warp slots, block slots,
# registers (allocated per warp, in each of the SM's four sub-partitions)
# and shared memory (plus the driver's 1 KB per block).

# %%
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


# %%
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


# %% [markdown]
# ## Worked cases
#
# Each case was worked by hand from compute capability 9.0's numbers; each
# limit binds in at least one.

# %%
# --8<-- [start:worked_cases]
def check_worked_cases() -> None:
    # (registers per thread, threads per block, static shared memory in bytes):
    # (blocks per SM, the limits that bind), worked by hand from SM90's numbers
    cases = {
        # 32 registers = 1,024 per warp: 16 warps per sub-partition, 64 per SM;
        # 8 warps per block: warp slots and registers both allow 8 blocks
        (32, 256, 0): (8, {"warps", "registers"}),
        # 64 registers = 2,048 per warp: 8 per sub-partition, 32 per SM = 4 blocks of 8 warps
        (64, 256, 0): (4, {"registers"}),
        # 200 registers = 6,400 per warp: 2 per sub-partition (16,384 // 6,400), 8 per SM
        # = 4 blocks of 2 warps (a plain 65,536 // 12,800 would say 5)
        (200, 64, 0): (4, {"registers"}),
        # 249 registers (the matmul chapter's autotuned step) = 8,192 per warp after
        # rounding: 2 per sub-partition = 2 blocks of 4 warps; its shared memory allows 6
        (249, 128, 33280): (2, {"registers"}),
        # 16 KB + the 1 KB reserve = 17,408 B: 233,472 // 17,408 = 13 blocks; warps allow 16
        (24, 128, 16384): (13, {"shared memory"}),
        # the same with 8 warps per block: warp slots allow only 8
        (24, 256, 16384): (8, {"warps"}),
        # tiny blocks: the 32-block limit; 1 thread still takes a whole warp slot
        (10, 32, 0): (32, {"blocks"}),
        (10, 1, 0): (32, {"blocks"}),
        # 8,192 registers per warp x 32 warps > the 65,536 a block may have: no launch
        (255, 1024, 0): (0, {"registers"}),
    }
    for (regs, threads, smem), (blocks, binding) in cases.items():
        o = occupancy(regs, threads, static_smem=smem)
        print(f"{regs:3} registers, {threads:4} threads, {smem:5} B: {o.explain(threads)}")
        assert o.blocks_per_sm == blocks and set(o.binding) == binding, (regs, threads, smem, o.limits)
        assert o.occupancy == blocks * math.ceil(threads / 32) / 64
    # over 48 KB per block without opting in: no block fits; opted in to 100 KB of
    # dynamic shared memory: 2 blocks of 101 KB (reserve included) in 228 KB
    assert occupancy(16, 256, static_smem=40 << 10, dynamic_smem=9 << 10).blocks_per_sm == 0
    assert occupancy(16, 256, dynamic_smem=100 << 10, max_dynamic_smem=100 << 10).blocks_per_sm == 2
# --8<-- [end:worked_cases]


# %% [markdown]
# ## Against the driver (GPU)
#
# The device's limits and each kernel's registers and shared memory come
# from the driver; the calculator's answer must equal the driver's own.

# %%
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


# --8<-- [start:kernel_attributes]
def kernel_attributes(kern, threads: int | None = None, dynamic_smem: int = 0) -> dict:
    """What a compiled CuPy kernel uses and allows (cuFuncGetAttribute):
    registers, static shared and local memory (spills) per thread, its
    largest block (__launch_bounds__) and dynamic shared memory; with
    `threads` (and the bytes of dynamic shared memory each block is
    launched with), also the driver's blocks per SM and occupancy (active
    warps / max warps)."""
    attrs = {"regs": int(kern.num_regs), "smem_bytes": int(kern.shared_size_bytes),
             "local_bytes": int(kern.local_size_bytes),
             "max_threads_per_block": int(kern.max_threads_per_block),
             "max_dynamic_smem": int(kern.max_dynamic_shared_size_bytes)}
    if dynamic_smem:
        attrs["dynamic_smem_bytes"] = int(dynamic_smem)
    if threads is not None:
        import cupy as cp

        blocks = driver_blocks_per_sm(kern, threads, dynamic_smem)
        max_warps = cp.cuda.Device().attributes["MaxThreadsPerMultiProcessor"] // 32
        attrs.update(blocks_per_sm=blocks, occupancy=blocks * -(-threads // 32) / max_warps)
    return attrs


def driver_blocks_per_sm(kern, threads: int, dynamic_smem: int = 0) -> int:
    """The driver's answer: cudaOccupancyMaxActiveBlocksPerMultiprocessor."""
    import cupy as cp

    return int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kern.kernel.ptr, threads, dynamic_smem))
# --8<-- [end:kernel_attributes]


# --8<-- [start:kernel_occupancy]
def kernel_occupancy(kern, threads: int, dynamic_smem: int = 0, limits: Limits | None = None) -> Occupancy:
    """occupancy() for a compiled CuPy RawKernel, from its own attributes."""
    a = kernel_attributes(kern)
    return occupancy(a["regs"], threads, a["smem_bytes"], dynamic_smem, limits=limits or device_limits(),
                     max_threads_per_block=a["max_threads_per_block"], max_dynamic_smem=a["max_dynamic_smem"])
# --8<-- [end:kernel_occupancy]


# %%
# --8<-- [start:check_against_driver]
def check_against_driver() -> None:
    cases = [  # (file, kernel, threads per block, dynamic shared memory per block)
        ("matmul.cu", "matmul_autotuned", 128, 0),       # 249 registers: registers bind, 2 blocks
        ("matmul.cu", "matmul_smem_tiled16", 256, 0),
        ("stencil.cu", "conv_tuned", 256, 0),
        ("vector_add.cu", "vector_add", 1024, 0),        # 32 warps per block: warp slots bind, 2 blocks
        ("vector_add.cu", "vector_add", 128, 16 << 10),  # 17 KB per block: shared memory binds, 13 blocks
        ("vector_add.cu", "vector_add", 32, 0),          # 1 warp per block: the 32-block limit binds
    ]
    limits = device_limits()
    bound = set()
    for file, name, threads, dyn in cases:
        kern = load_cuda(file).get_function(name)
        mine = kernel_occupancy(kern, threads, dyn, limits)
        driver = driver_blocks_per_sm(kern, threads, dyn)  # cudaOccupancyMaxActiveBlocksPerMultiprocessor
        assert mine.blocks_per_sm == driver, (name, threads, dyn, mine.limits, driver)
        a = kernel_attributes(kern, threads)  # the driver's blocks per SM and occupancy, no dynamic smem
        if dyn == 0:
            assert (a["blocks_per_sm"], a["occupancy"]) == (mine.blocks_per_sm, mine.occupancy), (name, a)
        bound.update(mine.binding)
        print(f"{name:19} {a['regs']:3} registers, {dyn:5} B dynamic: {mine.explain(threads)}")
    assert bound >= {"warps", "blocks", "registers", "shared memory"}, bound
# --8<-- [end:check_against_driver]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Occupancy: the calculator, checked by hand and against the driver.")
    p.add_argument("--size", type=int, default=None, help="unused (every example takes it)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    check_worked_cases()
    if args.impl == "numba":
        print("numba: no Numba kernel in this example (the calculator is plain Python; its cases ran above)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        check_against_driver()


if __name__ == "__main__":
    main()
