"""The memory hierarchy, measured: latency, energy per operation, coalescing.

CUDA C kernels in kernels/cuda/memory.cu, launched here through CuPy:
- latency: `latency_global` (a pointer chase through a buffer of any size:
  L1, L2 or HBM by its footprint; `l2_only` skips L1) and `latency_shared`;
- energy: `read_global_cupy` (stream a buffer from HBM, or from L2 when it
  fits), `read_shared_cupy`, `fma_registers_cupy`; kernels/bench/energy.py
  divides NVML's board energy by their bytes and FMAs;
- coalescing: `copy_strided_cupy`, `copy_offset_cupy`, and AoS vs SoA in
  `norm_cupy` / `scale_x_cupy`.
Numba versions of the chase (timed with events: nanoseconds, no cycle
counter), the strided and misaligned copies and AoS/SoA run anywhere (the
CUDA simulator too).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from . import checks
from .device import cupy_module

CUDA_SOURCE = Path(__file__).with_name("cuda") / "memory.cu"
LAYOUTS = ("aos", "soa")
CHASE_SHARED_MAX = 4096  # entries of the shared chain (kernels/cuda/memory.cu)
READ_SHARED_F4 = 1024  # float4 each block of read_shared keeps in shared memory
PER_THREAD = 4  # elements per thread of the copy and AoS/SoA kernels


def _kernel(name: str):
    return cupy_module(CUDA_SOURCE.name).get_function(name)


def random_cycle(nodes: int, seed: int = 0) -> np.ndarray:
    """succ[k] = the node after node k in one random cycle through all nodes
    (a random order defeats any prefetcher; one cycle visits every node)."""
    order = np.random.default_rng(seed).permutation(nodes)
    succ = np.empty(nodes, dtype=np.int64)
    succ[order] = np.roll(order, -1)
    return succ


# -------------------------------------------------------------- latency --

# --8<-- [start:latency_global]
def chain_global(nbytes: int, stride: int = 128, seed: int = 0):
    """A pointer chain through nbytes of device memory: one node every
    `stride` bytes (one per 128-byte line), each holding the address of the
    next node in a random cycle. Returns (buffer, address of the first node)."""
    import cupy as cp

    checks.require_int("stride", stride, 8)
    if stride % 8:
        raise ValueError(f"stride must be a multiple of 8 bytes, got {stride}")
    nodes = checks.require_int("nbytes", nbytes, stride) // stride
    buf = cp.zeros(nodes * stride // 8, dtype=cp.uint64)
    succ = cp.asarray(random_cycle(nodes, seed))
    # node k lives at element k * stride / 8 and holds the address of succ[k]
    buf[cp.arange(nodes) * (stride // 8)] = buf.data.ptr + succ.astype(cp.uint64) * stride
    return buf, buf.data.ptr


def latency_global(nbytes: int, *, stride: int = 128, steps: int = 4096, warm: int | None = None,
                   l2_only: bool = False, seed: int = 0) -> dict:
    """Cycles and nanoseconds per dependent load through a chain of nbytes.
    First `warm` untimed loads; by default (None) one walk of the chain if it
    has at most 2^19 nodes, so a footprint that fits a cache is measured
    from it. The result says how many it took ("warm"): the chase stops
    warm + steps loads from the first node."""
    import cupy as cp

    buf, start = chain_global(nbytes, stride, seed)
    nodes = nbytes // stride
    if warm is None:
        warm = nodes if nodes <= 1 << 19 else 0
    checks.require_int("warm", warm, 0, 2**31 - 1)  # an int32 kernel argument
    checks.require_int("steps", steps, 1, 1 << 30)
    timing = cp.zeros(2, dtype=cp.int64)  # [cycles, nanoseconds]
    sink = cp.zeros(1, dtype=cp.uint64)
    name = "chase_global_cg" if l2_only else "chase_global"
    _kernel(name)((1,), (1,), (np.uint64(start), np.int32(warm), np.int32(steps), timing, sink))
    cycles, ns = (int(v) for v in cp.asnumpy(timing))
    end = int(sink[0]) - start  # where the chase stopped, in bytes from the start
    return {"cycles": cycles / steps, "ns": ns / steps, "steps": steps, "warm": warm, "nodes": nodes,
            "end": end}
# --8<-- [end:latency_global]


def latency_shared(entries: int = CHASE_SHARED_MAX, *, steps: int = 4096, seed: int = 0) -> dict:
    """Cycles and nanoseconds per dependent load from shared memory."""
    import cupy as cp

    checks.require_int("entries", entries, 1, CHASE_SHARED_MAX)
    checks.require_int("steps", steps, 1, 1 << 30)
    offsets = cp.asarray(random_cycle(entries, seed).astype(np.uint32) * 4)  # byte offsets
    timing = cp.zeros(2, dtype=cp.int64)
    sink = cp.zeros(1, dtype=cp.uint64)
    _kernel("chase_shared")((1,), (128,), (offsets, np.int32(entries), np.int32(steps), timing, sink))
    cycles, ns = (int(v) for v in cp.asnumpy(timing))
    return {"cycles": cycles / steps, "ns": ns / steps, "steps": steps, "nodes": entries,
            "end": int(sink[0])}


# --------------------------------------------------------------- energy --

def read_global_cupy(x, reps: int, out, *, blocks: int, threads: int = 256) -> None:
    """Each of blocks*threads threads sums its share of x (float32, length a
    power of two and a multiple of 4) `reps` times into out[thread]."""
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_vector("out", out, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    n4 = x.size // 4
    if x.size % 4 or n4 & (n4 - 1) or n4 == 0:
        raise ValueError(f"x must hold 4 * 2^k floats, got {x.size}")
    if x.data.ptr % 16:
        raise ValueError("x must be 16-byte aligned (float4 loads)")
    if out.size < blocks * threads:
        raise ValueError(f"out must hold blocks * threads = {blocks * threads} floats, got {out.size}")
    checks.require_no_overlap("out", out, x=x)
    _kernel("read_global")((blocks,), (threads,), (x, np.int64(n4), np.int32(reps), out))


def read_shared_cupy(x, reps: int, out, *, blocks: int, threads: int = 256) -> None:
    """Every block copies x (4096 float32) to shared memory and each thread
    reads a float4 of it `reps` times, summing into out[thread]."""
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_vector("out", out, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    if x.size != 4 * READ_SHARED_F4 or x.data.ptr % 16:
        raise ValueError(f"x must be {4 * READ_SHARED_F4} float32, 16-byte aligned, got {x.size}")
    if out.size < blocks * threads:
        raise ValueError(f"out must hold blocks * threads = {blocks * threads} floats, got {out.size}")
    checks.require_no_overlap("out", out, x=x)
    _kernel("read_shared")((blocks,), (threads,), (x, np.int32(reps), out))


def fma_registers_cupy(iters: int, out, *, blocks: int, threads: int = 256,
                       a: float = 0.999, b: float = 0.001) -> None:
    """8 * iters FMAs per thread on registers only; out[thread] = their sum."""
    checks.require_vector("out", out, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    if out.size < blocks * threads:
        raise ValueError(f"out must hold blocks * threads = {blocks * threads} floats, got {out.size}")
    _kernel("fma_registers")((blocks,), (threads,), (np.int32(iters), np.float32(a), np.float32(b), out))


def fma_registers_reference(iters: int, threads: int, a: float = 0.999, b: float = 0.001) -> np.ndarray:
    """What fma_registers leaves for each thread of one block, in float64."""
    t = np.arange(threads, dtype=np.float64)
    x = np.stack([t + k for k in range(8)])
    # x_i = a^i x_0 + b (1 - a^i) / (1 - a), the closed form of the recurrence
    x = a**iters * x + b * (1 - a**iters) / (1 - a)
    return x.sum(axis=0)


# ----------------------------------------------------------- coalescing --

def blocks_for(n: int, threads: int) -> int:
    """Blocks for n elements at PER_THREAD elements per thread."""
    return (n + threads * PER_THREAD - 1) // (threads * PER_THREAD)


def _launch_1d(name: str, args, n: int, threads: int) -> None:
    checks.require_block_size("threads", threads)
    if n:
        _kernel(name)((blocks_for(n, threads),), (threads,), args)


# --8<-- [start:strided_wrapper]
def copy_strided_cupy(x, out, stride: int, *, threads: int = 256):
    """out[i] = x[i * stride] for every i of out; returns out."""
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_vector("out", out, np.float32, lib="cupy")
    stride = checks.require_int("stride", stride, 1, 2**31 - 1)  # an int32 kernel argument
    n = out.size
    if n and (n - 1) * stride >= x.size:
        raise ValueError(f"x must hold (out.size - 1) * stride + 1 = {(n - 1) * stride + 1} floats, "
                         f"got {x.size}")
    checks.require_no_overlap("out", out, x=x)  # x and out are __restrict__ in the kernel
    _launch_1d("copy_strided", (x, out, np.int64(n), np.int32(stride)), n, threads)
    return out
# --8<-- [end:strided_wrapper]


def copy_offset_cupy(x, out, offset: int, *, threads: int = 256):
    """out[i] = x[i + offset] for every i of out; returns out."""
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_vector("out", out, np.float32, lib="cupy")
    offset = checks.require_int("offset", offset, 0, 2**31 - 1)
    n = out.size
    if n + offset > x.size:
        raise ValueError(f"x must hold out.size + offset = {n + offset} floats, got {x.size}")
    checks.require_no_overlap("out", out, x=x)
    _launch_1d("copy_offset", (x, out, np.int64(n), np.int32(offset)), n, threads)
    return out


def _points(p, layout: str, lib: str) -> int:
    """Check a point array: (n, 3) for AoS, (3, n) for SoA; return n."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    (checks.require_cupy_array if lib == "cupy" else checks.require_numba_array)("p", p)
    checks.require_dtype("p", p, np.float32)
    checks.require_ndim("p", p, 2)
    checks.require_contiguous("p", p)
    want = 1 if layout == "aos" else 0
    if p.shape[want] != 3:
        raise ValueError(f"p must have shape {'(n, 3)' if layout == 'aos' else '(3, n)'} for "
                         f"layout {layout!r}, got {tuple(p.shape)}")
    return p.shape[1 - want]


def _out_for(out, n: int, lib: str, p):
    """out (n float32, sharing no memory with the points p), or a new one."""
    if out is None:
        if lib == "cupy":
            import cupy as cp

            return cp.empty(n, dtype=cp.float32)
        from numba import cuda

        return cuda.device_array(n, dtype=np.float32)
    checks.require_vector("out", out, np.float32, lib=lib)
    if out.shape[0] != n:
        raise ValueError(f"out must hold n = {n} floats, got {out.shape[0]}")
    checks.require_no_overlap("out", out, p=p)
    return out


def norm_cupy(p, layout: str, out=None, *, threads: int = 256):
    """out[i] = |point i| for points stored as AoS (n, 3) or SoA (3, n)."""
    n = _points(p, layout, "cupy")
    out = _out_for(out, n, "cupy", p)
    _launch_1d(f"norm_{layout}", (p, out, np.int64(n)), n, threads)
    return out


def scale_x_cupy(p, layout: str, out=None, *, threads: int = 256):
    """out[i] = 2 * x of point i: uses one field of three."""
    n = _points(p, layout, "cupy")
    out = _out_for(out, n, "cupy", p)
    _launch_1d(f"scale_x_{layout}", (p, out, np.int64(n)), n, threads)
    return out


# --------------------------------------------------------------- Numba --

# --8<-- [start:numba_import]
from numba import cuda  # noqa: E402  (after `import kernels` picked the target)
# --8<-- [end:numba_import]


# --8<-- [start:numba_chase]
@cuda.jit
def chase_numba(nxt, start, steps, sink):
    # nxt[j] is the index of the node after j; one thread, dependent loads
    j = start
    for _ in range(steps):
        j = nxt[j]
    sink[0] = j
# --8<-- [end:numba_chase]


def latency_global_numba(nbytes: int, *, steps: int = 1 << 16, stride: int = 128, seed: int = 0) -> dict:
    """Nanoseconds per dependent load from CUDA events around the chase
    (launch overhead amortised over `steps`; Numba has no cycle counter).
    The chain is walked once before the timed launch."""
    nodes = checks.require_int("nbytes", nbytes, stride) // stride
    words = stride // 4  # one node per `stride` bytes of an int32 array
    succ = random_cycle(nodes, seed) * words
    host = np.zeros(nodes * words, dtype=np.int32)
    host[np.arange(nodes) * words] = succ
    nxt = cuda.to_device(host)
    sink = cuda.device_array(1, dtype=np.int32)
    chase_numba[1, 1](nxt, 0, nodes, sink)  # warm-up walk (and compile)
    start, end = cuda.event(), cuda.event()
    start.record()
    chase_numba[1, 1](nxt, 0, steps, sink)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)  # (the simulator has no clock: -1)
    return {"ns": ms * 1e6 / steps, "steps": steps, "nodes": nodes, "end": int(sink.copy_to_host()[0])}


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


@cuda.jit
def copy_offset_numba_kernel(x, out, offset):
    base = cuda.blockIdx.x * cuda.blockDim.x * 4 + cuda.threadIdx.x
    v = cuda.local.array(4, np.float32)
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            v[k] = x[i + offset]
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            out[i] = v[k]


def copy_strided_numba(x, out, stride: int, *, threads: int = 256):
    checks.require_vector("x", x, np.float32, lib="numba")
    checks.require_vector("out", out, np.float32, lib="numba")
    checks.require_block_size("threads", threads)
    stride = checks.require_int("stride", stride, 1, 2**31 - 1)  # an int32 kernel argument
    n = out.shape[0]
    if n and (n - 1) * stride >= x.shape[0]:
        raise ValueError(f"x must hold (out.size - 1) * stride + 1 = {(n - 1) * stride + 1} floats, "
                         f"got {x.shape[0]}")
    checks.require_no_overlap("out", out, x=x)
    if n:
        copy_strided_numba_kernel[blocks_for(n, threads), threads](x, out, stride)
    return out


def copy_offset_numba(x, out, offset: int, *, threads: int = 256):
    checks.require_vector("x", x, np.float32, lib="numba")
    checks.require_vector("out", out, np.float32, lib="numba")
    checks.require_block_size("threads", threads)
    offset = checks.require_int("offset", offset, 0, 2**31 - 1)
    n = out.shape[0]
    if n + offset > x.shape[0]:
        raise ValueError(f"x must hold out.size + offset = {n + offset} floats, got {x.shape[0]}")
    checks.require_no_overlap("out", out, x=x)
    if n:
        copy_offset_numba_kernel[blocks_for(n, threads), threads](x, out, offset)
    return out


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


@cuda.jit
def scale_x_aos_numba_kernel(p, out):
    base = cuda.blockIdx.x * cuda.blockDim.x * 4 + cuda.threadIdx.x
    v = cuda.local.array(4, np.float32)
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            v[k] = 2.0 * p[i, 0]
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            out[i] = v[k]


@cuda.jit
def scale_x_soa_numba_kernel(p, out):
    base = cuda.blockIdx.x * cuda.blockDim.x * 4 + cuda.threadIdx.x
    v = cuda.local.array(4, np.float32)
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            v[k] = 2.0 * p[0, i]
    for k in range(4):
        i = base + k * cuda.blockDim.x
        if i < out.size:
            out[i] = v[k]


_NUMBA_POINTS = {("norm", "aos"): norm_aos_numba_kernel, ("norm", "soa"): norm_soa_numba_kernel,
                 ("scale_x", "aos"): scale_x_aos_numba_kernel, ("scale_x", "soa"): scale_x_soa_numba_kernel}


def points_numba(op: str, p, layout: str, out=None, *, threads: int = 256):
    """op "norm" or "scale_x" on points stored as AoS (n, 3) or SoA (3, n)."""
    if op not in ("norm", "scale_x"):
        raise ValueError(f"op must be 'norm' or 'scale_x', got {op!r}")
    checks.require_block_size("threads", threads)
    n = _points(p, layout, "numba")
    out = _out_for(out, n, "numba", p)
    if n:
        _NUMBA_POINTS[op, layout][blocks_for(n, threads), threads](p, out)
    return out
