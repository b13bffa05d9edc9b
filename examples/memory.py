# %% [markdown]
# # The memory hierarchy: latency, energy kernels, coalescing, data layout, float4
#
# Small experiments from the chapter "Memory hierarchy and energy", each
# checked against NumPy: a pointer chase (latency of shared memory, L1, L2
# and HBM), the kernels whose energy the bench measures, strided and
# misaligned copies (coalescing), AoS against SoA, and vector add with
# float4 loads.

# %%
"""The memory hierarchy, measured and checked: latency, energy kernels,
coalescing, data layout, float4.

- A pointer chase: how many cycles one load takes from shared memory, L1,
  L2 and HBM (CuPy; Numba only in nanoseconds: it has no cycle counter).
  Each chase must stop on the node the chain predicts.
- The kernels whose energy the bench measures (HBM or L2 reads, shared
  memory reads, FMAs on registers), against their NumPy references.
- A strided copy out[i] = x[i * stride] and a misaligned one
  out[i] = x[i + offset]: the bandwidth follows the 32-byte sectors a warp
  touches.
- Points stored as an array of structures (AoS) or a structure of arrays
  (SoA), read whole (the norm) or one field (scale_x).
- Vector add with float4 loads, timed against a device-to-device copy.

Run:

    python memory.py                     # n = 2^22, both
    python memory.py --size 1000 --impl numba

Copy with it: kernels/cuda/memory.cu and kernels/cuda/vector_add.cu (beside
this file). Needs numpy and numba(-cuda); cupy for the CUDA C part. Without
a GPU the Numba part runs in Numba's CUDA simulator (one Python thread per
GPU thread: n is cut to 300 there) and the CuPy part is skipped. A wrong
result (an unwritten, NaN element included) fails an assertion, so the
script exits non-zero.
"""

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
import math  # the Numba norm uses math.sqrt

import numpy as np
from numba import cuda


# %% [markdown]
# ## A random chain of nodes
#
# The chase visits the nodes of one random cycle: a random order defeats
# any prefetcher, one cycle visits every node. `walk` follows the same
# cycle on the host, so a chase can be checked: it must stop where the
# chain says after its number of loads.

# %%
# --8<-- [start:chain]
def random_cycle(nodes, seed=0):
    """succ[k] = the node after node k on one random cycle through all nodes."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(nodes)
    succ = np.empty(nodes, dtype=np.int64)
    succ[order[:-1]] = order[1:]  # each node points at the next one in the order,
    succ[order[-1]] = order[0]    # and the last one back at the first: one cycle
    return succ


def walk(succ, loads, node=0):
    """The node a chase from `node` reaches after `loads` dependent loads."""
    for step in range(loads):
        node = succ[node]
    return int(node)


def chase_ended_right(r, seed=0):
    """Did the chase r stop on the node the chain predicts? r: the dict a
    chase returns, with "end" in bytes from the start of the chain. (A
    chase that skipped or repeated a load would stop elsewhere.)"""
    return r["end"] == walk(random_cycle(r["nodes"], seed), r["loads"]) * r["stride"]
# --8<-- [end:chain]


# %% [markdown]
# ## Latency by pointer chasing (CuPy)
#
# `chase_global` in memory.cu: one thread, p = *p. The chain holds
# addresses, so no arithmetic sits between two loads; its footprint picks
# the level (16 KiB stays in L1 once walked, 1 GiB lives in HBM), and
# `chase_global_cg` loads with __ldcg, which skips L1.

# %%
# --8<-- [start:cupy_latency]
def chase_global_cupy(nbytes, *, stride=128, steps=4000, warm=None, l2_only=False, seed=0):
    """One thread follows a random chain of pointers through nbytes of
    device memory, one node every `stride` bytes (one per 128-byte line).
    Returns cycles and nanoseconds per load, and where the chase stopped
    ("end", bytes from the start of the chain). The chain is first walked
    once, untimed (warm loads), when it has at most 2^19 nodes: a footprint
    that fits a cache is then measured from that cache."""
    import cupy as cp
    import numpy as np

    if stride % 8 or not 8 <= stride <= nbytes:
        raise ValueError(f"stride must be a multiple of 8 bytes, from 8 to nbytes; got {stride}")
    nodes = nbytes // stride
    if warm is None:
        warm = nodes if nodes <= 1 << 19 else 0
    succ = cp.asarray(random_cycle(nodes, seed), dtype=cp.uint64)
    buf = cp.zeros(nodes * stride // 8, dtype=cp.uint64)
    # node k is at byte k * stride of buf and holds the address of node succ[k]
    buf[::stride // 8] = buf.data.ptr + succ * stride
    timing = cp.full(2, -1, dtype=cp.int64)  # [cycles, nanoseconds]: -1 until the kernel writes them
    sink = cp.zeros(1, dtype=cp.uint64)      # the address the chase stopped at
    kernel = load_cuda("memory.cu").get_function("chase_global_cg" if l2_only else "chase_global")
    kernel((1,), (1,), (np.uint64(buf.data.ptr), np.int32(warm), np.int32(steps), timing, sink))
    cycles, ns = timing.get().tolist()
    return {"cycles": cycles / steps, "ns": ns / steps, "end": int(sink.get()[0]) - buf.data.ptr,
            "nodes": nodes, "stride": stride, "loads": warm + steps}


def chase_shared_cupy(entries=4096, *, steps=4000, seed=0):
    """The same chase through shared memory: `entries` 4-byte nodes (at
    most 4096, 16 KB), each holding the byte offset of the next one. The
    kernel walks the chain once untimed, then `steps` timed loads."""
    import cupy as cp
    import numpy as np

    if not 1 <= entries <= 4096:  # CHASE_SHARED_MAX in memory.cu
        raise ValueError(f"entries must be from 1 to 4096, got {entries}")
    offsets = cp.asarray(random_cycle(entries, seed) * 4, dtype=cp.uint32)  # byte offset of node succ[k]
    timing = cp.full(2, -1, dtype=cp.int64)
    sink = cp.full(1, 1 << 40, dtype=cp.uint64)  # no offset is this large: the kernel must overwrite it
    kernel = load_cuda("memory.cu").get_function("chase_shared")
    kernel((1,), (128,), (offsets, np.int32(entries), np.int32(steps), timing, sink))
    cycles, ns = timing.get().tolist()
    return {"cycles": cycles / steps, "ns": ns / steps, "end": int(sink.get()[0]),
            "nodes": entries, "stride": 4, "loads": entries + steps}


def latency_demo():
    """Cycles per dependent load from each level, each chase checked."""
    levels = {
        "shared": chase_shared_cupy(),
        "L1 (16 KiB chain)": chase_global_cupy(16 << 10),
        "L2 (16 KiB, __ldcg)": chase_global_cupy(16 << 10, l2_only=True),
        "HBM (1 GiB chain)": chase_global_cupy(1 << 30, l2_only=True),
    }
    for name, r in levels.items():
        assert chase_ended_right(r), f"{name}: the chase stopped on the wrong node"
        assert 0.5 < r["cycles"] / r["ns"] < 3.0, f"{name}: cycles / ns is not an SM clock in GHz"
        print(f"cupy latency, {name:20} {r['cycles']:6.0f} cycles {r['ns']:7.1f} ns per load")
# --8<-- [end:cupy_latency]


# %% [markdown]
# ## The same chase in Numba (nanoseconds only)

# %%
# --8<-- [start:numba_chase]
@cuda.jit
def chase_numba(nxt, start, steps, sink):
    # nxt[j] is the index of the node after j; one thread, dependent loads
    j = start
    for _ in range(steps):
        j = nxt[j]
    sink[0] = j
# --8<-- [end:numba_chase]


# --8<-- [start:numba_latency]
def chase_numba_ns(nbytes, *, steps=1 << 16, stride=128, seed=0):
    """Nanoseconds per dependent load through a chain of nbytes, from CUDA
    events around one long chase (Numba has no cycle counter), after an
    untimed walk through the whole chain; and where the chase stopped
    ("end", bytes from the start). The chain holds indices into an int32
    array: one node every `stride` bytes."""
    import numpy as np
    from numba import cuda

    words = stride // 4  # int32 per node
    nodes = nbytes // stride
    host = np.zeros(nodes * words, dtype=np.int32)
    host[::words] = random_cycle(nodes, seed) * words  # node k holds the index of node succ[k]
    nxt = cuda.to_device(host)
    sink = cuda.to_device(np.full(1, -1, dtype=np.int32))
    chase_numba[1, 1](nxt, 0, nodes, sink)  # untimed: compiles the kernel and warms the caches
    start, end = cuda.event(), cuda.event()
    start.record()
    chase_numba[1, 1](nxt, 0, steps, sink)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)  # (the simulator has no clock: its events measure nothing)
    return {"ns": ms * 1e6 / steps, "end": 4 * int(sink.copy_to_host()[0]), "nodes": nodes,
            "stride": stride, "loads": steps}
# --8<-- [end:numba_latency]


# %% [markdown]
# ## The energy kernels, checked at a small size
#
# The bench runs each for over two seconds and divides NVML's energy by
# the bytes or FMAs; here each runs once on a few blocks and is compared
# with what it must compute.

# %%
# --8<-- [start:cupy_energy]
def read_global_cupy(x, reps, out, *, blocks, threads=256):
    """Each of the blocks * threads threads sums its share of x (float4
    loads through L2, __ldcg) `reps` times into out[thread]. x: float32,
    4 * 2^k elements (the kernel rotates its start with a mask)."""
    import cupy as cp
    import numpy as np

    n4 = x.size // 4
    if x.size % 4 or n4 & (n4 - 1) or out.size != blocks * threads:
        raise ValueError(f"x must hold 4 * 2^k floats and out blocks * threads; got {x.size} and {out.size}")
    if cp.may_share_memory(out, x):  # x and out are __restrict__ in the kernel
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    kernel = load_cuda("memory.cu").get_function("read_global")
    kernel((blocks,), (threads,), (x, np.int64(n4), np.int32(reps), out))
    return out


def read_global_reference(x, reps, threads_total):
    """read_global's out in float64: thread t sums float4 number i for
    i = t, t + T, t + 2T, ... (T threads in all), the start rotated by
    4096 float4 each rep."""
    import numpy as np

    x4 = x.astype(np.float64).reshape(-1, 4).sum(axis=1)
    i = np.arange(x4.size)
    return sum(np.bincount(i % threads_total, x4[(i + r * 4096) % x4.size], minlength=threads_total)
               for r in range(reps))


def read_shared_cupy(x, reps, out, *, blocks, threads=256):
    """Every block copies x (4096 float32, 16 KB) into shared memory; each
    thread then reads a float4 of it `reps` times, summing into out[thread]."""
    import cupy as cp
    import numpy as np

    if x.size != 4096 or out.size != blocks * threads:
        raise ValueError(f"x must hold 4096 floats and out blocks * threads; got {x.size} and {out.size}")
    if cp.may_share_memory(out, x):
        raise ValueError("out must not overlap x: other blocks still read x while out is written")
    kernel = load_cuda("memory.cu").get_function("read_shared")
    kernel((blocks,), (threads,), (x, np.int32(reps), out))
    return out


def read_shared_reference(x, reps, blocks, threads):
    """read_shared's out in float64: rep r of thread t reads float4 number
    (t + 32 r) mod 1024; every block does the same."""
    import numpy as np

    x4 = x.astype(np.float64).reshape(-1, 4).sum(axis=1)
    t, r = np.arange(threads)[:, None], np.arange(reps)[None, :]
    return np.tile(x4[(t + 32 * r) % 1024].sum(axis=1), blocks)


def fma_registers_cupy(iters, out, *, blocks, threads=256, a=0.999, b=0.001):
    """8 independent chains x = x * a + b per thread, `iters` FMAs each, on
    registers only; out[thread] = the sum of the 8 chains."""
    import numpy as np

    if out.size != blocks * threads:
        raise ValueError(f"out must hold blocks * threads = {blocks * threads} floats, got {out.size}")
    kernel = load_cuda("memory.cu").get_function("fma_registers")
    kernel((blocks,), (threads,), (np.int32(iters), np.float32(a), np.float32(b), out))
    return out


def fma_registers_reference(iters, blocks, threads, a=0.999, b=0.001):
    """fma_registers' out in float64, from the closed form of the chain:
    x_iters = a^iters x_0 + b (1 - a^iters) / (1 - a), with x_0 = t + k for
    chain k of thread t (threadIdx.x: the same in every block)."""
    import numpy as np

    a, b = float(np.float32(a)), float(np.float32(b))  # the kernel's float32 a and b
    x0 = np.arange(threads)[:, None] + np.arange(8)[None, :]
    ai = a**iters
    return np.tile((ai * x0 + b * (1 - ai) / (1 - a)).sum(axis=1), blocks)


def energy_demo(blocks=5, threads=64):
    """Each energy kernel once, on a few blocks, against its reference."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(0)
    out = cp.full(blocks * threads, cp.nan, dtype=cp.float32)
    x = cp.asarray(rng.random(4 * 16384, dtype=np.float32))
    read_global_cupy(x, 3, out, blocks=blocks, threads=threads)
    np.testing.assert_allclose(out.get(), read_global_reference(x.get(), 3, blocks * threads), rtol=1e-4)
    out.fill(cp.nan)
    x = cp.asarray(rng.random(4096, dtype=np.float32))
    read_shared_cupy(x, 40, out, blocks=blocks, threads=threads)
    np.testing.assert_allclose(out.get(), read_shared_reference(x.get(), 40, blocks, threads), rtol=1e-5)
    out.fill(cp.nan)
    fma_registers_cupy(100, out, blocks=blocks, threads=threads)
    np.testing.assert_allclose(out.get(), fma_registers_reference(100, blocks, threads), rtol=1e-5)
    print("cupy energy kernels: read_global, read_shared, fma_registers match NumPy")
# --8<-- [end:cupy_energy]


# %% [markdown]
# ## A strided copy (CuPy)
#
# Every copy is checked exactly; its useful bandwidth (4 bytes read and 4
# written per element) is timed with `cupyx.profiler.benchmark` against a
# plain copy of the same n floats.

# %%
# --8<-- [start:cupy_strided]
def copy_strided_cupy(x, out, stride, *, threads=256):
    """out[i] = x[i * stride] for every i of out, with memory.cu's
    copy_strided (4 elements per thread); x, out: 1-D float32 cupy arrays."""
    import cupy as cp
    import numpy as np

    n = out.size
    blocks = (n - 1) // (4 * threads) + 1  # 4 elements per thread (PER_THREAD in memory.cu)
    for name, a in (("x", x), ("out", out)):
        if a.dtype != np.float32 or a.ndim != 1 or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a contiguous 1-D float32 array, got {a.dtype} {a.shape}")
    if not 0 < stride < 2**31 or (n and (n - 1) * stride >= x.size):
        raise ValueError(f"x must hold (out.size - 1) * stride + 1 floats, got {x.size} (stride {stride})")
    if cp.may_share_memory(out, x):  # x and out are __restrict__ in the kernel
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    if n:
        kernel = load_cuda("memory.cu").get_function("copy_strided")
        kernel((blocks,), (threads,), (x, out, np.int64(n), np.int32(stride)))
    return out


def strided_demo(n=1 << 22, strides=(1, 2, 4, 8, 32)):
    """Each stride: the copy checked exactly, then its useful bandwidth
    against a plain copy of n floats (cupy.copyto)."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    out = cp.empty(n, dtype=cp.float32)
    base = cp.random.default_rng(0).random(n, dtype=cp.float32)
    copy_ms = np.median(benchmark(cp.copyto, (out, base), n_repeat=20).gpu_times) * 1e3
    for stride in strides:
        x = cp.random.default_rng(stride).random((n - 1) * stride + 1, dtype=cp.float32)
        out.fill(cp.nan)  # an element the kernel never writes stays NaN
        copy_strided_cupy(x, out, stride)
        np.testing.assert_array_equal(out.get(), x[::stride].get())
        ms = np.median(benchmark(copy_strided_cupy, (x, out, stride), n_repeat=20).gpu_times) * 1e3
        print(f"stride {stride:2}: {8 * n / ms / 1e6:7.0f} GB/s of useful bytes, "
              f"{copy_ms / ms:4.2f} x a plain copy")
# --8<-- [end:cupy_strided]


# %% [markdown]
# ## A misaligned copy (CuPy)

# %%
# --8<-- [start:cupy_offset]
def copy_offset_cupy(x, out, offset, *, threads=256):
    """out[i] = x[i + offset] for every i of out, with memory.cu's
    copy_offset (4 elements per thread); x, out: 1-D float32 cupy arrays."""
    import cupy as cp
    import numpy as np

    n = out.size
    blocks = (n - 1) // (4 * threads) + 1  # 4 elements per thread (PER_THREAD in memory.cu)
    for name, a in (("x", x), ("out", out)):
        if a.dtype != np.float32 or a.ndim != 1 or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a contiguous 1-D float32 array, got {a.dtype} {a.shape}")
    if not 0 <= offset < 2**31 or n + offset > x.size:
        raise ValueError(f"x must hold out.size + offset floats, got {x.size} (offset {offset})")
    if cp.may_share_memory(out, x):
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    if n:
        kernel = load_cuda("memory.cu").get_function("copy_offset")
        kernel((blocks,), (threads,), (x, out, np.int64(n), np.int32(offset)))
    return out


def offset_demo(n=1 << 22, offsets=(0, 1, 7, 32)):
    """Each offset: the copy checked exactly, then its bandwidth against
    the aligned copy (offset 0)."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    out = cp.empty(n, dtype=cp.float32)
    for offset in offsets:
        x = cp.random.default_rng(offset).random(n + offset, dtype=cp.float32)
        out.fill(cp.nan)  # an element the kernel never writes stays NaN
        copy_offset_cupy(x, out, offset)
        np.testing.assert_array_equal(out.get(), x[offset:].get())
        ms = np.median(benchmark(copy_offset_cupy, (x, out, offset), n_repeat=20).gpu_times) * 1e3
        print(f"offset {offset:2}: {8 * n / ms / 1e6:7.0f} GB/s of useful bytes")
# --8<-- [end:cupy_offset]


# %% [markdown]
# ## The same copy in Numba (runs in the simulator too)

# %%
# --8<-- [start:numba_strided]
@cuda.jit
def copy_strided_numba_kernel(x, out, stride):
    # PER_THREAD (4) elements per thread, a block's width apart, as in CUDA C:
    # all loads first, then the stores
    base = cuda.blockIdx.x * cuda.blockDim.x * 4 + cuda.threadIdx.x
    v = cuda.local.array(4, np.float32)
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            v[k] = x[i * stride]  # a warp reads 32 floats spread over 128 * stride bytes
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            out[i] = v[k]
# --8<-- [end:numba_strided]


# --8<-- [start:numba_copy]
# --8<-- [start:overlaps]
import numpy as np


def byte_span(x):
    """[lo, hi): the bytes array x's elements occupy, from its CUDA array
    interface (CuPy, Numba device arrays) or its NumPy one (host arrays;
    Numba's simulator, whose device arrays wrap NumPy arrays). Empty: (0, 0)."""
    face = getattr(x, "__cuda_array_interface__", None)
    if face is None:
        face = x.__array_interface__
    shape, itemsize = tuple(face["shape"]), np.dtype(face["typestr"]).itemsize
    if any(s == 0 for s in shape):
        return 0, 0
    strides = face.get("strides")
    if strides is None:  # C-contiguous
        strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) * itemsize for k in range(len(shape))]
    lo = hi = face["data"][0]
    for size, step in zip(shape, strides):
        hi += max(step, 0) * (size - 1)
        lo += min(step, 0) * (size - 1)  # a negative stride reaches below the first element
    return lo, hi + itemsize


def overlaps(a, b):
    """Might arrays a and b share memory? True when the byte ranges their
    elements span intersect: a bounds check, as cupy.may_share_memory (a[::2]
    and a[1::2] overlap). Host and device pointers share one address space
    (unified addressing), so spans of either kind compare."""
    (a_lo, a_hi), (b_lo, b_hi) = byte_span(a), byte_span(b)
    return a_lo < b_hi and b_lo < a_hi
# --8<-- [end:overlaps]


def copy_strided_numba(x, out, stride, *, threads=256):
    """out[i] = x[i * stride] for every i of out (Numba device arrays, float32)."""
    n = out.shape[0]
    blocks = (n - 1) // (4 * threads) + 1  # 4 elements per thread
    if n and (n - 1) * stride >= x.shape[0]:
        raise ValueError(f"x must hold (out.size - 1) * stride + 1 floats, got {x.shape[0]}")
    if overlaps(out, x):  # one block's stores could land where another block still reads
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    if n:
        copy_strided_numba_kernel[blocks, threads](x, out, stride)
    return out


def check_copy_strided_numba(n=381, strides=(1, 3, 32), threads=32):
    """Each stride against NumPy, exactly (a copy computes nothing); out
    starts as NaN, so an element no thread writes fails."""
    import numpy as np
    from numba import cuda

    for stride in strides:
        x = np.random.default_rng(stride).random((n - 1) * stride + 1, dtype=np.float32)
        out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
        copy_strided_numba(cuda.to_device(x), out, stride, threads=threads)
        np.testing.assert_array_equal(out.copy_to_host(), x[::stride])
        print(f"numba copy_strided, n = {n}, stride {stride}: exact, max |error| = 0")
    buf = cuda.to_device(np.random.default_rng(0).random(2 * n, dtype=np.float32))
    for name, out in (("out = x", buf), ("out = x shifted by one", buf[1:n + 1])):
        try:
            copy_strided_numba(buf, out, 1, threads=threads)
        except ValueError as err:
            assert "overlap" in str(err), err  # rejected for sharing memory, not for something else
            print(f"numba copy_strided, {name}: rejected (they share memory)")
        else:
            raise AssertionError(f"copy_strided_numba accepted {name}, an out that overlaps x")
    copy_strided_numba(buf[:n], buf[n:], 1, threads=threads)  # out right after x in one buffer: accepted
    both = buf.copy_to_host()
    np.testing.assert_array_equal(both[n:], both[:n])
# --8<-- [end:numba_copy]


# %% [markdown]
# ## AoS or SoA (CuPy)

# %%
# --8<-- [start:cupy_aos_soa]
def points_cupy(op, p, layout, out, *, threads=256):
    """out[i] = |point i| (op "norm") or 2 * x of point i (op "scale_x"),
    for points stored as AoS, an (n, 3) array, or SoA, a (3, n) array;
    memory.cu's norm_aos, norm_soa, scale_x_aos or scale_x_soa."""
    import cupy as cp
    import numpy as np

    n = out.size
    blocks = (n - 1) // (4 * threads) + 1  # 4 points per thread
    if op not in ("norm", "scale_x") or layout not in ("aos", "soa"):
        raise ValueError(f"op must be norm or scale_x and layout aos or soa, got {op!r}, {layout!r}")
    want = (n, 3) if layout == "aos" else (3, n)
    if p.shape != want or p.dtype != np.float32 or not p.flags.c_contiguous or out.dtype != np.float32:
        raise ValueError(f"p must be a contiguous float32 array of shape {want}, got {p.dtype} {p.shape}")
    if cp.may_share_memory(out, p):
        raise ValueError("out must not overlap p: other threads still read p while out is written")
    if n:
        kernel = load_cuda("memory.cu").get_function(f"{op}_{layout}")
        kernel((blocks,), (threads,), (p, out, np.int64(n)))
    return out


def aos_soa_demo(n=1 << 22):
    """Both layouts, both uses, checked against NumPy in float64, and timed."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    aos = np.random.default_rng(0).standard_normal((n, 3), dtype=np.float32)
    norm = np.linalg.norm(aos.astype(np.float64), axis=1)
    out = cp.empty(n, dtype=cp.float32)
    for layout, p in (("aos", cp.asarray(aos)), ("soa", cp.asarray(np.ascontiguousarray(aos.T)))):
        for op, want, moved in (("norm", norm, 16), ("scale_x", 2 * aos[:, 0], 8)):
            out.fill(cp.nan)
            points_cupy(op, p, layout, out)
            np.testing.assert_allclose(out.get(), want, rtol=1e-6)
            ms = np.median(benchmark(points_cupy, (op, p, layout, out), n_repeat=20).gpu_times) * 1e3
            print(f"cupy {op:8s} {layout}: {moved * n / ms / 1e6:7.0f} GB/s of useful bytes "
                  f"({moved} per point), max |error| = {np.max(np.abs(out.get() - want)):.1e}")
# --8<-- [end:cupy_aos_soa]


# %% [markdown]
# ## AoS or SoA in Numba

# %%
# --8<-- [start:numba_aos_soa]
@cuda.jit(device=True, inline=True)
def norm3(x, y, z):
    return math.sqrt(x * x + y * y + z * z)


@cuda.jit
def norm_aos_numba_kernel(p, out):  # p: (n, 3), one point per row
    base = cuda.blockIdx.x * cuda.blockDim.x * 4 + cuda.threadIdx.x
    v = cuda.local.array(4, np.float32)
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            v[k] = norm3(p[i, 0], p[i, 1], p[i, 2])
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            out[i] = v[k]


@cuda.jit
def norm_soa_numba_kernel(p, out):  # p: (3, n), one field per row
    base = cuda.blockIdx.x * cuda.blockDim.x * 4 + cuda.threadIdx.x
    v = cuda.local.array(4, np.float32)
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            v[k] = norm3(p[0, i], p[1, i], p[2, i])
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            out[i] = v[k]
# --8<-- [end:numba_aos_soa]


# --8<-- [start:numba_points]
def norm_numba(p, layout, out, *, threads=256):
    """out[i] = |point i| for points stored as AoS (n, 3) or SoA (3, n)
    (Numba device arrays, float32)."""
    n = out.shape[0]
    blocks = (n - 1) // (4 * threads) + 1  # 4 points per thread
    want = (n, 3) if layout == "aos" else (3, n)
    if layout not in ("aos", "soa") or p.shape != want:
        raise ValueError(f"layout must be aos or soa, and p of shape {want}; got {layout!r}, {p.shape}")
    if overlaps(out, p):
        raise ValueError("out must not overlap p: other threads still read p while out is written")
    kernel = norm_aos_numba_kernel if layout == "aos" else norm_soa_numba_kernel
    if n:
        kernel[blocks, threads](p, out)
    return out


def check_norm_numba(n=250, threads=32):
    """Both layouts against NumPy's norm in float64; out starts as NaN."""
    import numpy as np
    from numba import cuda

    aos = np.random.default_rng(0).standard_normal((n, 3), dtype=np.float32)
    want = np.linalg.norm(aos.astype(np.float64), axis=1)
    for layout, p in (("aos", aos), ("soa", np.ascontiguousarray(aos.T))):
        out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
        got = norm_numba(cuda.to_device(p), layout, out, threads=threads).copy_to_host()
        np.testing.assert_allclose(got, want, rtol=1e-6)
        print(f"numba norm, {layout}, n = {n}: max |error| = {np.max(np.abs(got - want)):.1e}")
    p = cuda.to_device(aos)
    try:
        norm_numba(p, "aos", p.ravel()[:n], threads=threads)  # out: the first n floats of the points
    except ValueError as err:
        assert "overlap" in str(err), err
        print("numba norm, out inside p: rejected (they share memory)")
    else:
        raise AssertionError("norm_numba accepted an out that overlaps p")
    host = np.full((4, n), np.nan, dtype=np.float32)
    host[:3] = aos.T
    buf = cuda.to_device(host)
    got = norm_numba(buf[:3], "soa", buf[3], threads=threads).copy_to_host()  # out right after p: accepted
    np.testing.assert_allclose(got, want, rtol=1e-6)
    print("numba norm, out right after p in one buffer: accepted")
# --8<-- [end:numba_points]


# %% [markdown]
# ## Vector add with float4 loads (CuPy)
#
# vector_add.cu's `vector_add_vec4`: a grid-stride loop, so the caller
# picks the grid; float4 needs 16-byte aligned arrays.

# %%
# --8<-- [start:cupy_vec4]
def vector_add_vec4_cupy(a, b, out, *, blocks=1024, threads=256):
    """out = a + b with vector_add.cu's vector_add_vec4: 16-byte loads and
    stores, two float4 per operand in flight per thread. A grid-stride
    loop: any grid covers any n. a, b, out: 1-D float32 cupy arrays of one
    size, 16-byte aligned (a view such as a[1:] is not)."""
    import cupy as cp
    import numpy as np

    for name, v in (("a", a), ("b", b), ("out", out)):
        if v.ndim != 1 or v.shape != a.shape or v.dtype != np.float32 or not v.flags.c_contiguous:
            raise ValueError(f"{name} must be a contiguous 1-D float32 array of a's shape, got {v.dtype} {v.shape}")
        if v.data.ptr % 16:
            raise ValueError(f"{name} must be 16-byte aligned (float4 loads and stores)")
    for name, v in (("a", a), ("b", b)):  # the kernel's pointers are __restrict__
        if cp.may_share_memory(out, v):
            raise ValueError(f"out must not overlap {name}: other threads still read {name} while out is written")
    kernel = load_cuda("vector_add.cu").get_function("vector_add_vec4")
    kernel((blocks,), (threads,), (a, b, out, np.int64(a.size)))
    return out


def vec4_demo(n=10_000_003):
    """vector_add_vec4 checked (at a size where every thread loops, so all
    of the kernel runs), then timed against a device-to-device copy
    (bandwidth: 12 bytes per element, 8 read and 4 written)."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    rng = cp.random.default_rng(1)
    a, b = rng.random(n, dtype=cp.float32), rng.random(n, dtype=cp.float32)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    vector_add_vec4_cupy(a, b, out)
    np.testing.assert_allclose(out.get(), a.get().astype(np.float64) + b.get(), rtol=1e-6)
    copy = cp.empty_like(a)
    copy_ms = np.median(benchmark(cp.copyto, (copy, a), n_repeat=20).gpu_times) * 1e3
    ms = np.median(benchmark(vector_add_vec4_cupy, (a, b, out), n_repeat=20).gpu_times) * 1e3
    print(f"cupy vector_add_vec4: n = {n:,}: {12 * n / ms / 1e6:7.0f} GB/s, device copy "
          f"{8 * n / copy_ms / 1e6:7.0f} GB/s, max |error| = "
          f"{np.max(np.abs(out.get() - (a.get().astype(np.float64) + b.get()))):.1e}")
# --8<-- [end:cupy_vec4]


# %%
def numba_demo(n, threads=32):
    """The strided copy, the AoS/SoA norm and a short chase in Numba, each
    checked against NumPy (an AssertionError on a wrong result)."""
    check_copy_strided_numba(n, (1, 3, 8), threads)
    check_norm_numba(n, threads)
    r = chase_numba_ns(4096, steps=50)  # 32 nodes, 50 loads: a tiny chain
    assert chase_ended_right(r), "the Numba chase stopped on the wrong node"
    print("numba chase: stopped on the node the chain predicts")


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Latency, energy kernels, coalescing, AoS/SoA, float4; checked.")
    p.add_argument("--size", type=int, default=1 << 22, help="elements (points) per experiment")
    p.add_argument("--impl", choices=("all", "cupy", "numba"), default="all")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    n = args.size
    if args.impl in ("all", "numba"):
        simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
        n_numba = min(n, 300) if simulator else n
        if n_numba != n:
            print(f"numba: the CUDA simulator is slow; using n = {n_numba}")
        numba_demo(n_numba, threads=32 if simulator else 256)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        latency_demo()
        energy_demo()
        strided_demo(n)
        offset_demo(n)
        aos_soa_demo(n)
        vec4_demo(max(n, 10_000_003))  # large enough that each thread loops: all of the kernel runs


if __name__ == "__main__":
    main()
