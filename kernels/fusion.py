"""Topic fusion: two chains of elementwise and reduction steps, unfused
(separate CuPy calls, every intermediate an M x N array in HBM) and fused
(one kernel: what one step hands the next stays on the chip).

Chain 1, bias + GELU + residual: out = gelu(x + bias) + residual, x and
residual M x N float32, bias a row of N floats; GELU in its tanh
approximation, 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))), which GPT-2
and BERT use (within 5e-4 of the erf form; the references below compute
the same tanh formula in float64). Variants:
    unfused      the chain written as usual: ten CuPy kernels
    fuse         the same Python function under cupy.fuse: one kernel
    elementwise  one hand-written cupy.ElementwiseKernel
    cuda_c       kernels/cuda/fusion.cu through RawModule (float4, rows batched)
    numba        a Numba kernel, one thread per element (runs in the simulator)

Chain 2, row softmax: out[r] = exp(x[r] - max x[r]) / sum exp(x[r] - max x[r]).
Variants:
    unfused      x.max, subtract, exp, sum, divide: five CuPy kernels
    fused        one kernel, x read once: a warp per row (N <= 1024, the row in
                 registers) or a block per row (N <= FUSED_MAX_N, the row in
                 shared memory); longer rows fall back to `online`
    warp, block  those two kernels by name
    online       one kernel, two passes over x (online max and sum, then out)
    numba        a Numba block per row, the row in shared memory, reductions in
                 shared memory (no shuffles: runs in the simulator)

The bytes each variant moves through HBM are counted step by step in
UNFUSED/FUSED tables below (bytes_moved): every intermediate written once
and read by each later step that uses it. The bias row (N floats) is
counted once: it stays in L2 while the rows stream past.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from . import checks
from .device import cupy_module, driver_blocks_per_sm, select_numba_target

select_numba_target()  # before the Numba sections below import numba

CUDA_SOURCE = Path(__file__).with_name("cuda") / "fusion.cu"
CHAINS = ("bias_gelu_residual", "softmax")
GELU_VARIANTS = ("unfused", "fuse", "elementwise", "cuda_c")
SOFTMAX_VARIANTS = ("unfused", "fused", "warp", "block", "online")
GELU_K0 = math.sqrt(2.0 / math.pi)
GELU_K1 = 0.044715
MAX_DIM = (1 << 30) - 1  # the CUDA C kernels index rows and columns with int (and add a grid's stride)
# softmax_block: the row and two 32-float reduction arrays in the 48 KiB of
# shared memory a block gets without opting in to more (static + dynamic).
FUSED_MAX_N = (48 * 1024 - 2 * 32 * 4) // 4  # 12224 floats
WARP_MAX_N = 1024  # softmax_warp_32: 32 lanes x 32 registers
WARP_VPT = (4, 8, 16, 32)  # the softmax_warp_<VPT> kernels in fusion.cu


# ----------------------------------------------------------- references --

def bias_gelu_residual_reference(x, bias, residual):
    """gelu(x + bias) + residual in float64 (the tanh approximation, as the
    kernels compute it), on the host for NumPy input, on the GPU for CuPy."""
    xp = checks.array_module(x)
    h = xp.asarray(x, dtype=xp.float64) + xp.asarray(bias, dtype=xp.float64)
    return 0.5 * h * (1.0 + xp.tanh(GELU_K0 * (h + GELU_K1 * h**3))) + xp.asarray(residual, dtype=xp.float64)


def gelu_erf_reference(h) -> np.ndarray:
    """GELU's own definition, h * Phi(h) = 0.5 h (1 + erf(h / sqrt 2)), in
    float64 on the host: what the tanh approximation approximates."""
    h = np.asarray(h, dtype=np.float64)
    return 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0)))


def softmax_reference(x):
    """Row softmax in float64, the maximum subtracted first (exp never overflows)."""
    xp = checks.array_module(x)
    z = xp.asarray(x, dtype=xp.float64)
    z = z - z.max(axis=1, keepdims=True)
    e = xp.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------- bytes moved --

# --8<-- [start:fusion_bytes]
class Step(NamedTuple):
    """One kernel of a chain and what it moves through HBM: each entry of
    reads and writes is one array, "MN" (M x N), "N" (a row) or "M" (a column)."""
    what: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]


# bias_gelu_residual_steps below, one line per CuPy kernel, in the order Python
# evaluates it; scalars travel as kernel arguments and move no bytes.
GELU_UNFUSED = (
    Step("h = x + bias", ("MN", "N"), ("MN",)),
    Step("u = 0.5 * h", ("MN",), ("MN",)),
    Step("t = h ** 3", ("MN",), ("MN",)),
    Step("t = 0.044715 * t", ("MN",), ("MN",)),
    Step("t = h + t", ("MN", "MN"), ("MN",)),
    Step("t = sqrt(2/pi) * t", ("MN",), ("MN",)),
    Step("t = tanh(t)", ("MN",), ("MN",)),
    Step("t = 1 + t", ("MN",), ("MN",)),
    Step("g = u * t", ("MN", "MN"), ("MN",)),
    Step("out = g + residual", ("MN", "MN"), ("MN",)),
)
GELU_FUSED = (Step("out = gelu(x + bias) + residual", ("MN", "N", "MN"), ("MN",)),)
# softmax_steps below: two reductions along the rows, three elementwise kernels.
SOFTMAX_UNFUSED = (
    Step("m = x.max(axis=1)", ("MN",), ("M",)),
    Step("z = x - m", ("MN", "M"), ("MN",)),
    Step("e = exp(z)", ("MN",), ("MN",)),
    Step("s = e.sum(axis=1)", ("MN",), ("M",)),
    Step("out = e / s", ("MN", "M"), ("MN",)),
)
SOFTMAX_FUSED = (Step("out = softmax(x), the row kept on the chip", ("MN",), ("MN",)),)
SOFTMAX_ONLINE = (Step("out = softmax(x), x read twice (max and sum, then out)", ("MN", "MN"), ("MN",)),)


def steps(chain: str, variant: str, N: int | None = None) -> tuple[Step, ...]:
    """The kernels a variant launches and what each moves. Softmax "fused"
    on rows longer than FUSED_MAX_N runs the online kernel (give N)."""
    if chain == "bias_gelu_residual":
        if variant == "unfused":
            return GELU_UNFUSED
        if variant in ("fuse", "elementwise", "cuda_c", "numba"):
            return GELU_FUSED
        raise ValueError(f"variant must be one of {GELU_VARIANTS + ('numba',)} for {chain}, got {variant!r}")
    if chain == "softmax":
        if variant == "unfused":
            return SOFTMAX_UNFUSED
        if variant == "online" or (variant == "fused" and N is not None and N > FUSED_MAX_N):
            return SOFTMAX_ONLINE
        if variant in ("fused", "warp", "block", "numba"):
            return SOFTMAX_FUSED
        raise ValueError(f"variant must be one of {SOFTMAX_VARIANTS + ('numba',)} for {chain}, got {variant!r}")
    raise ValueError(f"chain must be one of {CHAINS}, got {chain!r}")


def bytes_moved(chain: str, variant: str, M: int, N: int) -> int:
    """Bytes through HBM for one call on M x N float32: 4 * (sum over the
    variant's kernels of the elements each reads and writes)."""
    size = {"MN": M * N, "N": N, "M": M}
    return 4 * sum(size[a] for s in steps(chain, variant, N) for a in s.reads + s.writes)


def useful_bytes(chain: str, M: int, N: int) -> int:
    """The least any variant can move: inputs read once, out written once
    (bias + GELU + residual 4 * (3MN + N), softmax 4 * 2MN); the one
    denominator every variant's effective GB/s shares."""
    return bytes_moved(chain, "fuse" if chain == "bias_gelu_residual" else "block", M, N)
# --8<-- [end:fusion_bytes]


# ------------------------------------------------------- argument checks --

def _check_dims(M: int, N: int) -> None:
    if M > MAX_DIM or N > MAX_DIM:
        raise ValueError(f"x must have fewer than 2^30 rows and columns, got {M} x {N}")


def _check_matrix(name: str, a, lib: str, like=None, like_name: str = "x") -> None:
    (checks.require_cupy_array if lib == "cupy" else checks.require_numba_array)(name, a)
    checks.require_dtype(name, a, np.float32)
    checks.require_ndim(name, a, 2)
    if like is not None:
        checks.require_same_shape(name, a, like_name, like)
    checks.require_contiguous(name, a)


def _check_gelu_args(x, bias, residual, out, lib: str) -> None:
    """x, residual (and out): M x N float32, C-contiguous; bias: N float32."""
    _check_matrix("x", x, lib)
    _check_matrix("residual", residual, lib, x)
    checks.require_vector("bias", bias, np.float32, lib=lib)
    if bias.shape[0] != x.shape[1]:
        raise ValueError(f"bias must have length N = {x.shape[1]} (the columns of x), got {bias.shape[0]}")
    _check_dims(*x.shape)
    if out is not None:
        _check_matrix("out", out, lib, x)
        checks.require_no_overlap("out", out, x=x, bias=bias, residual=residual)


def _check_softmax_args(x, out, lib: str) -> None:
    _check_matrix("x", x, lib)
    _check_dims(*x.shape)
    if out is not None:
        _check_matrix("out", out, lib, x)
        checks.require_no_overlap("out", out, x=x)


def _check_threads(threads, low: int, high: int, power_of_two: bool = False) -> int:
    checks.require_block_size("threads", threads)
    if not low <= threads <= high or (power_of_two and threads & (threads - 1)):
        kind = "a power of two" if power_of_two else "a multiple of 32"
        raise ValueError(f"threads must be {kind} from {low} to {high}, got {threads}")
    return int(threads)


# --------------------------------------------- chain 1: bias + GELU + residual --

# --8<-- [start:gelu_unfused]
def bias_gelu_residual_steps(x, bias, residual, out):
    """out = gelu(x + bias) + residual as it is usually written: every
    operator is one CuPy kernel and every intermediate an M x N array that
    goes to HBM and comes back (GELU_UNFUSED counts them: ten kernels).
    Python floats are weak scalars in CuPy and in cupy.fuse: the arithmetic
    stays in float32."""
    import cupy as cp

    h = x + bias
    g = 0.5 * h * (1.0 + cp.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3)))  # sqrt(2/pi) = 0.79788...
    cp.add(g, residual, out=out)
# --8<-- [end:gelu_unfused]


# --8<-- [start:gelu_fuse]
@functools.cache
def gelu_fused():
    """The same Python function, traced once by cupy.fuse into one kernel:
    h, g and the rest become registers of that kernel."""
    import cupy as cp

    return cp.fuse(kernel_name="bias_gelu_residual_fuse")(bias_gelu_residual_steps)
# --8<-- [end:gelu_fuse]


# --8<-- [start:gelu_elementwise]
@functools.cache
def gelu_elementwise():
    """One hand-written elementwise kernel; CuPy broadcasts bias (N,) along
    the rows of x (M, N) and writes the loop around the body."""
    import cupy as cp

    return cp.ElementwiseKernel(
        "float32 x, float32 bias, float32 residual", "float32 out",
        """
        const float h = x + bias;
        out = 0.5f * h * (1.0f + tanhf(0.7978845608028654f * (h + 0.044715f * h * h * h))) + residual;
        """,
        "bias_gelu_residual_elementwise")
# --8<-- [end:gelu_elementwise]


def cupy_kernel(name: str):
    """A kernel of kernels/cuda/fusion.cu, compiled once per process."""
    return cupy_module(CUDA_SOURCE.name).get_function(name)


@functools.cache
def _blocks_per_sm(name: str, threads: int, device_id: int) -> int:
    return driver_blocks_per_sm(cupy_kernel(name), threads)


def gelu_cuda_launch(x, bias, residual, out, threads: int = 256, grid_rows: int | None = None) -> str:
    """Launch fusion.cu's bias + GELU + residual: float4 when N % 4 == 0 and
    every array starts on a 16-byte boundary, else one float per thread.
    grid.x covers the columns; grid.y (default: enough blocks to fill every
    SM once) walks the rows. Returns the kernel's name."""
    import cupy as cp

    M, N = x.shape
    vec = N % 4 == 0 and all(a.data.ptr % 16 == 0 for a in (x, bias, residual, out))
    name = "bias_gelu_residual_vec4" if vec else "bias_gelu_residual"
    cols = N // 4 if vec else N
    gx = -(-cols // threads)
    if grid_rows is None:
        dev = cp.cuda.Device()
        grid_rows = dev.attributes["MultiProcessorCount"] * _blocks_per_sm(name, threads, dev.id) // gx
    gy = max(1, min(M, 65535, grid_rows))
    cupy_kernel(name)((gx, gy), (threads,), (x, bias, residual, out, np.int32(M), np.int32(N)))
    return name


def bias_gelu_residual(x, bias, residual, *, variant: str = "elementwise", out=None, threads: int | None = None):
    """out = gelu(x + bias) + residual (GELU's tanh approximation) on CuPy
    arrays: x, residual M x N float32, bias N float32, all C-contiguous.
    variant: one of GELU_VARIANTS; threads: the block of variant "cuda_c"
    (a multiple of 32 up to 256, default 256). Returns out."""
    import cupy as cp

    if variant not in GELU_VARIANTS:
        raise ValueError(f"variant must be one of {GELU_VARIANTS}, got {variant!r}")
    if threads is not None and variant != "cuda_c":
        raise ValueError(f"threads applies to variant 'cuda_c' only, not {variant!r}")
    _check_gelu_args(x, bias, residual, out, "cupy")
    threads = _check_threads(256 if threads is None else threads, 32, 256)
    if out is None:
        out = cp.empty_like(x)
    if x.size == 0:
        return out
    if variant == "unfused":
        bias_gelu_residual_steps(x, bias, residual, out)
    elif variant == "fuse":
        gelu_fused()(x, bias, residual, out)
    elif variant == "elementwise":
        gelu_elementwise()(x, bias, residual, out)
    else:
        gelu_cuda_launch(x, bias, residual, out, threads)
    return out


# --------------------------------------------------- chain 2: row softmax --

# --8<-- [start:softmax_unfused]
def softmax_steps(x, out):
    """Row softmax as it is usually written: five CuPy kernels, and z and e
    are M x N arrays that go to HBM and come back (SOFTMAX_UNFUSED)."""
    import cupy as cp

    m = x.max(axis=1, keepdims=True)  # subtracting the row's maximum: exp never overflows
    z = x - m
    e = cp.exp(z)
    s = e.sum(axis=1, keepdims=True)
    cp.divide(e, s, out=out)
# --8<-- [end:softmax_unfused]


def softmax_kernel_for(N: int, variant: str = "fused") -> str:
    """The fusion.cu kernel a softmax variant runs on rows of N floats."""
    if variant not in SOFTMAX_VARIANTS[1:]:
        raise ValueError(f"variant must be one of {SOFTMAX_VARIANTS[1:]}, got {variant!r}")
    if variant == "fused":
        variant = "warp" if N <= WARP_MAX_N else "block" if N <= FUSED_MAX_N else "online"
    if variant == "warp":
        if N > WARP_MAX_N:
            raise ValueError(f"variant 'warp' holds a row in one warp's registers: N <= {WARP_MAX_N}, got {N}")
        return f"softmax_warp_{next(v for v in WARP_VPT if 32 * v >= N)}"
    if variant == "block":
        if N > FUSED_MAX_N:
            raise ValueError(f"variant 'block' holds a row in 48 KiB of shared memory: N <= {FUSED_MAX_N}, "
                             f"got {N}")
        return "softmax_block"
    return "softmax_online"


def softmax_rows(x, *, variant: str = "fused", out=None, threads: int | None = None):
    """Softmax of each row of a C-contiguous M x N float32 CuPy array
    (finite values; the maximum is subtracted first). variant: one of
    SOFTMAX_VARIANTS; threads: the block of the CUDA C kernels (a multiple
    of 32 up to 1024, default 256; a warp per row: rows per block x 32)."""
    import cupy as cp

    if variant not in SOFTMAX_VARIANTS:
        raise ValueError(f"variant must be one of {SOFTMAX_VARIANTS}, got {variant!r}")
    if threads is not None and variant == "unfused":
        raise ValueError("threads applies to the CUDA C variants, not 'unfused'")
    _check_softmax_args(x, out, "cupy")
    threads = _check_threads(256 if threads is None else threads, 32, 1024)
    if out is None:
        out = cp.empty_like(x)
    if x.size == 0:
        return out
    M, N = x.shape
    if variant == "unfused":
        softmax_steps(x, out)
        return out
    name = softmax_kernel_for(N, variant)
    args = (x, out, np.int32(M), np.int32(N))
    if name.startswith("softmax_warp"):
        rows = threads // 32  # one warp per row
        cupy_kernel(name)((-(-M // rows),), (threads,), args)
    else:  # one block per row; softmax_block keeps the row in N floats of dynamic shared memory
        cupy_kernel(name)((M,), (threads,), args, shared_mem=4 * N if name == "softmax_block" else 0)
    return out


# ------------------------------------------------------------------ Numba --

# --8<-- [start:gelu_numba]
import math

from numba import cuda

HALF, ONE = np.float32(0.5), np.float32(1.0)  # float32 globals: Numba keeps the arithmetic in float32
K0, K1 = np.float32(0.7978845608028654), np.float32(0.044715)


@cuda.jit
def bias_gelu_residual_kernel(x, bias, residual, out):
    """One thread per element: x index -> column (a warp reads 32 neighbouring
    floats), y index -> row; rows past the grid's 65535 blocks loop."""
    c, r0 = cuda.grid(2)
    M, N = x.shape
    if c < N:
        b = bias[c]
        for r in range(r0, M, cuda.gridDim.y * cuda.blockDim.y):
            h = x[r, c] + b
            out[r, c] = HALF * h * (ONE + math.tanh(K0 * (h + K1 * h * h * h))) + residual[r, c]
# --8<-- [end:gelu_numba]


def bias_gelu_residual_numba(x, bias, residual, out=None, *, block: tuple[int, int] = (32, 8)):
    """The Numba kernel on Numba device arrays (x, residual M x N float32,
    bias N float32); block: threads along (columns, rows). Returns out."""
    _check_gelu_args(x, bias, residual, out, "numba")
    if (not isinstance(block, tuple) or len(block) != 2
            or not all(isinstance(b, int) and b >= 1 for b in block) or block[0] * block[1] > 1024):
        raise ValueError(f"block must be two positive ints with a product <= 1024, got {block!r}")
    if out is None:
        out = cuda.device_array(x.shape, dtype=np.float32)
    M, N = x.shape
    if x.size:
        grid = (-(-N // block[0]), min(65535, -(-M // block[1])))
        bias_gelu_residual_kernel[grid, block](x, bias, residual, out)
    return out


# --8<-- [start:softmax_numba]
import math

import numpy as np
from numba import cuda, float32

NB_MAX_N = 4096  # a shared array's size is fixed when the kernel compiles: rows of up to 4096 floats (16 KiB)
NB_MAX_THREADS = 1024
NEG_INF = np.float32(-np.inf)


@cuda.jit(device=True)
def block_max_shared(red, v):
    """Tree reduction in shared memory (blockDim.x a power of two): no
    warp shuffles, so it runs in the simulator too. All threads get the max."""
    t = cuda.threadIdx.x
    red[t] = v
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if t < s:
            red[t] = max(red[t], red[t + s])
        cuda.syncthreads()
        s //= 2
    total = red[0]
    cuda.syncthreads()  # red is written again by the next reduction: everyone reads red[0] first
    return total


@cuda.jit(device=True)
def block_sum_shared(red, v):
    t = cuda.threadIdx.x
    red[t] = v
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if t < s:
            red[t] += red[t + s]
        cuda.syncthreads()
        s //= 2
    total = red[0]
    cuda.syncthreads()
    return total


@cuda.jit
def softmax_block_kernel(x, out):
    """One block per row: the row read once into shared memory, max and sum
    reduced in the block, out written once (as softmax_block in fusion.cu)."""
    row = cuda.shared.array(NB_MAX_N, float32)
    red = cuda.shared.array(NB_MAX_THREADS, float32)
    r = cuda.blockIdx.x
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    N = x.shape[1]
    m = NEG_INF
    for c in range(t, N, T):
        v = x[r, c]
        row[c] = v
        m = max(m, v)
    m = block_max_shared(red, m)
    s = float32(0.0)
    for c in range(t, N, T):  # the same columns this thread stored: no barrier needed for row[]
        e = math.exp(row[c] - m)
        row[c] = e
        s += e
    inv = float32(1.0) / block_sum_shared(red, s)
    for c in range(t, N, T):
        out[r, c] = row[c] * inv
# --8<-- [end:softmax_numba]


def softmax_rows_numba(x, out=None, *, threads: int = 256):
    """The Numba softmax on a Numba device array x (M x N float32, N <=
    NB_MAX_N); threads: a power of two from 32 to 1024. Returns out."""
    _check_softmax_args(x, out, "numba")
    threads = _check_threads(threads, 32, NB_MAX_THREADS, power_of_two=True)
    M, N = x.shape
    if N > NB_MAX_N:
        raise ValueError(f"x must have at most {NB_MAX_N} columns (the kernel's shared row), got {N}")
    if out is None:
        out = cuda.device_array(x.shape, dtype=np.float32)
    if x.size:
        softmax_block_kernel[M, threads](x, out)
    return out
