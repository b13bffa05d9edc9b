"""The occupancy calculator (kernels/occupancy.py).

On any machine: cases worked by hand from the rules in its docstring (one
per limit, and the register sub-partition rounding that a plain division
gets wrong). On a GPU: for every CuPy kernel of the project, at several
block sizes and dynamic shared-memory sizes, the calculator must give the
driver's answer (cudaOccupancyMaxActiveBlocksPerMultiprocessor).
"""

import pytest

from kernels.occupancy import SM90, occupancy


@pytest.mark.parametrize("regs,threads,smem,blocks,binding", [
    (32, 256, 0, 8, {"warps", "registers"}),   # 8 warps x 8 blocks = 64 warps; 1024 regs/warp fits 64
    (64, 256, 0, 4, {"registers"}),            # 2048 regs per warp: 8 warps per sub-partition, 32 per SM
    (40, 256, 0, 6, {"registers"}),            # 1280 per warp: 12 per sub-partition, 48 warps, 6 blocks
    (200, 64, 0, 4, {"registers"}),            # 6400 per warp: 2 per sub-partition (not 65536 / 12800 = 5)
    (255, 1024, 0, 0, {"registers"}),          # 8192 per warp x 32 warps > 65536: cannot launch
    (10, 32, 0, 32, {"blocks"}),               # tiny blocks: the 32-block limit
    (24, 256, 16384, 8, {"warps"}),            # 17408 bytes with the reserve: 13 blocks fit, warps bind first
    (24, 128, 16384, 13, {"shared memory"}),   # 233472 // 17408 = 13
    (249, 128, 33280, 2, {"registers"}),       # the matmul chapter's autotuned step
])
def test_hand_worked_cases(regs, threads, smem, blocks, binding):
    o = occupancy(regs, threads, static_smem=smem)
    assert o.blocks_per_sm == blocks, o.limits
    assert set(o.binding) == binding
    assert o.active_warps == blocks * -(-threads // 32)
    assert o.occupancy == o.active_warps / 64
    assert str(blocks) in o.explain(threads)


def test_shared_memory_rounding_and_limits():
    # 1 byte of dynamic shared memory costs a 128-byte unit on top of the 1 KB reserve
    assert occupancy(16, 32, dynamic_smem=1).smem_per_block == 1024 + 128
    # more than 48 KB per block without opting in: no block fits
    assert occupancy(16, 256, static_smem=40 << 10, dynamic_smem=9 << 10).blocks_per_sm == 0
    # opted in to 100 KB of dynamic shared memory: 2 blocks of 101 KB
    o = occupancy(16, 256, dynamic_smem=100 << 10, max_dynamic_smem=100 << 10)
    assert o.blocks_per_sm == SM90.smem_per_sm // (101 << 10) == 2 and o.binding == ("shared memory",)


def test_launch_bounds_and_bad_input():
    assert occupancy(32, 512, max_threads_per_block=256).blocks_per_sm == 0
    assert occupancy(32, 1056).blocks_per_sm == 0  # more than 1024 threads per block
    with pytest.raises(ValueError):
        occupancy(32, 0)


@pytest.mark.gpu
def test_device_limits_are_the_tabulated_ones_on_sm90():
    import cupy as cp

    from kernels.occupancy import device_limits

    if cp.cuda.Device().compute_capability != "90":
        pytest.skip("the tabulated limits are those of compute capability 9.0")
    assert device_limits() == SM90


def _cases():
    from kernels.occupancy import all_cupy_kernels, kernel_attributes

    for name, kern in all_cupy_kernels():
        a = kernel_attributes(kern)
        for threads in (32, 64, 96, 128, 256, 512, 1024):
            if threads > a["max_threads_per_block"]:
                continue
            for dyn in (0, 1000, 16 << 10, a["max_dynamic_smem"]):
                if dyn <= a["max_dynamic_smem"]:
                    yield name, kern, threads, dyn


@pytest.mark.gpu
def test_calculator_equals_the_driver_for_every_cupy_kernel():
    from kernels.occupancy import all_cupy_kernels, driver_blocks_per_sm, kernel_occupancy

    assert len(all_cupy_kernels()) > 80
    wrong = []
    count = 0
    for name, kern, threads, dyn in _cases():
        calc = kernel_occupancy(kern, threads, dyn).blocks_per_sm
        drv = driver_blocks_per_sm(kern, threads, dyn)
        count += 1
        if calc != drv:
            wrong.append((name, threads, dyn, calc, drv))
    assert count > 1000
    assert not wrong, wrong[:20]


@pytest.mark.skipif(__import__("kernels.sass", fromlist=["tool"]).tool("nvcc") is None, reason="nvcc not found")
def test_launch_bounds_cap_spills_the_autotuned_matmul():
    """The ptxas report the occupancy page shows: asking for 3 or 4 blocks of
    128 threads per SM caps registers at 168 / 128 and spills; 1 or 2 do not."""
    import re

    from kernels.bench.matmul import launch_bounds_report

    lines = launch_bounds_report().splitlines()[1:]
    spills = [int(re.search(r"(\d+) bytes spill stores", ln).group(1)) for ln in lines]
    regs = [int(re.search(r"Used (\d+) registers", ln).group(1)) for ln in lines]
    assert spills[0] == spills[1] == 0 < spills[2] < spills[3]
    assert regs[2] <= 65536 // (3 * 128) and regs[3] <= 65536 // (4 * 128)


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/occupancy.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# the calculator forgets the 1 KB the driver reserves per block; the
# driver check is handed half a kernel's registers
EXAMPLE_FAULTS = [
    ("occupancy.py",
     "smem = round_up(static_smem + dynamic_smem + L.reserved_smem_per_block, L.smem_alloc_unit)",
     "smem = round_up(static_smem + dynamic_smem, L.smem_alloc_unit)",
     "numba"),
    ("occupancy.py", "\"regs\": int(kern.num_regs),", "\"regs\": int(kern.num_regs) // 2,", "cupy"),
]

# A page's planted fault given by hand, where the automatic wrong-result
# mutation hits code whose result cannot be checked (tests/mutants.py):
# "file:section:function" -> (old, new, why). An unused one fails.
MUTANT_OVERRIDES = {
    "kernels/occupancy.py:device_limits:device_limits": (
        'reserved_smem_per_block=a["ReservedSharedMemoryPerBlock"]', "reserved_smem_per_block=0",
        "the first comparison is on the compute capability, which the H200 does not exercise"),
    "kernels/occupancy.py:kernel_occupancy:kernel_occupancy": (
        'a["regs"], threads', 'a["regs"] // 2, threads', "no arithmetic of its own: halve the registers"),
}
