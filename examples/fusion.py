# %% [markdown]
# # Kernel fusion: bias + GELU + residual, and a row softmax
#
# Two chains of steps a model runs on every layer, each written two ways: as
# separate CuPy calls, every intermediate an M x N array that goes to HBM and
# comes back, and fused into one kernel, where what one step hands the next
# stays in registers or shared memory.
#
# 1. out = gelu(x + bias) + residual (GELU in its tanh form, as GPT-2 and
#    BERT use it): ten CuPy kernels; the same Python function under
#    cupy.fuse; one ElementwiseKernel; CUDA C (fusion.cu); Numba.
# 2. Row softmax, out[r] = exp(x[r] - max x[r]) / sum exp(x[r] - max x[r]):
#    five CuPy kernels; one CUDA C kernel (a warp per row for rows of up to
#    1024 floats, a block per row with the row in shared memory up to 12224,
#    else an online two-pass kernel); Numba.
#
# Every variant is checked against float64 with its output poisoned with NaN
# (softmax also on logits near 1e4, whose exp overflows float32: the maximum
# must be subtracted first); the script exits non-zero on a wrong answer. On
# a GPU it then times the variants against the unfused chain.
#
# Run:
#
#     python fusion.py                  # check everything, time rows of N = 4096
#     python fusion.py --size 1000      # time rows of 1000 floats
#     python fusion.py --impl numba     # only the Numba kernels
#
# Copy with it: kernels/cuda/fusion.cu (beside this file). Needs numpy and
# numba(-cuda); cupy for the CuPy and CUDA C variants. Without a GPU the Numba
# kernels run in Numba's CUDA simulator (on a few rows: one Python thread per
# GPU thread) and the CuPy part is skipped.

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

# %%
import argparse  # noqa: E402

# %% [markdown]
# ## The float64 references

# %%
# --8<-- [start:fusion_reference]
import math

import numpy as np


def bias_gelu_residual_reference(x, bias, residual):
    """gelu(x + bias) + residual in float64 on the host, GELU in the tanh form
    the kernels compute: 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))."""
    h = np.asarray(x, dtype=np.float64) + np.asarray(bias, dtype=np.float64)
    g = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
    return g + np.asarray(residual, dtype=np.float64)


def softmax_reference(x):
    """Row softmax in float64, each row's maximum subtracted first."""
    z = np.asarray(x, dtype=np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --8<-- [start:rel_err]
def rel_err(got, want):
    """||got - want|| / ||want|| in float64 (||got|| when want is 0): NaN when
    got holds a NaN, an element no thread wrote."""
    got = np.asarray(got, dtype=np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / den if den else np.linalg.norm(got))
# --8<-- [end:rel_err]


TOL = 1e-5  # float32 arithmetic (tanhf, expf within a few ulp) against the same formula in float64


def gelu_inputs(M, N, seed=0):
    """x, bias, residual: float32 host arrays, N(0, 1)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(np.float32) for shape in ((M, N), (N,), (M, N)))
# --8<-- [end:fusion_reference]


# %% [markdown]
# ## Chain 1: bias + GELU + residual
#
# Unfused, as it is usually written; the same function traced by cupy.fuse;
# a hand-written ElementwiseKernel (copies of the handbook's kernels/fusion.py).

# %%
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


# %% [markdown]
# One wrapper for the four: check the arguments, then run the variant. The
# CUDA C kernel (fusion.cu) reads 16 bytes at a time when it can; its grid
# covers the columns along x and fills every SM once along y, each block
# walking the rows gridDim.y apart.

# %%
# --8<-- [start:gelu_chain]
import numpy as np

GELU_VARIANTS = ("unfused", "fuse", "elementwise", "cuda_c")


def bias_gelu_residual(x, bias, residual, out=None, *, variant="cuda_c"):
    """out = gelu(x + bias) + residual on CuPy arrays: x and residual (and
    out) M x N float32, bias N float32, all C-contiguous. variant: one of
    GELU_VARIANTS. Returns out."""
    import cupy as cp

    if variant not in GELU_VARIANTS:
        raise ValueError(f"variant must be one of {GELU_VARIANTS}, got {variant!r}")
    for name, a, ndim in (("x", x, 2), ("bias", bias, 1), ("residual", residual, 2)):
        if not isinstance(a, cp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(a).__name__}")
        if a.dtype != cp.float32:
            raise TypeError(f"{name} must have dtype float32, got {a.dtype}")
        if a.ndim != ndim or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a C-contiguous {ndim}-D array, got shape {a.shape}")
    M, N = x.shape
    if residual.shape != x.shape or bias.shape != (N,):
        raise ValueError(f"need residual of x's shape {x.shape} and bias of N = {N}, "
                         f"got {residual.shape} and {bias.shape}")
    if max(M, N) >= 2**30:  # the kernel indexes rows and columns with int
        raise ValueError(f"x must have fewer than 2^30 rows and columns, got {M} x {N}")
    if out is None:
        out = cp.empty_like(x)
    elif (not isinstance(out, cp.ndarray) or out.dtype != cp.float32 or out.shape != x.shape
          or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous float32 cupy array of shape {x.shape}")
    for name, a in (("x", x), ("bias", bias), ("residual", residual)):
        if cp.may_share_memory(out, a):  # other threads may still read what a store overwrites
            raise ValueError(f"out must not overlap {name}: write the result to a new array")
    if x.size == 0:
        return out
    if variant == "unfused":
        bias_gelu_residual_steps(x, bias, residual, out)
    elif variant == "fuse":
        gelu_fused()(x, bias, residual, out)
    elif variant == "elementwise":
        gelu_elementwise()(x, bias, residual, out)
    else:  # float4 loads when every row starts on a 16-byte boundary: N % 4 == 0 and aligned arrays
        vec = N % 4 == 0 and all(a.data.ptr % 16 == 0 for a in (x, bias, residual, out))
        kern = load_cuda("fusion.cu").get_function("bias_gelu_residual_vec4" if vec else "bias_gelu_residual")
        threads = 256
        gx = -(-(N // 4 if vec else N) // threads)  # blocks across the columns
        per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kern.kernel.ptr, threads, 0)
        gy = max(1, min(M, 65535, cp.cuda.Device().attributes["MultiProcessorCount"] * per_sm // gx))
        kern((gx, gy), (threads,), (x, bias, residual, out, np.int32(M), np.int32(N)))
    return out
# --8<-- [end:gelu_chain]


# %% [markdown]
# ## Chain 2: row softmax
#
# Unfused (a copy of the handbook's kernels/fusion.py), then one wrapper for
# fusion.cu's three fused kernels.

# %%
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


# --8<-- [start:softmax_fused]
import numpy as np

SOFTMAX_VARIANTS = ("unfused", "fused", "warp", "block", "online")
WARP_MAX_N = 1024  # softmax_warp_32: 32 lanes x 32 values in registers
BLOCK_MAX_N = (48 * 1024 - 2 * 32 * 4) // 4  # softmax_block: the row in 48 KiB of shared memory, less 64 floats


def fused_softmax_kernel(N):
    """The kernel variant "fused" runs on rows of N floats: the row in one
    warp's registers, else in a block's shared memory, else read twice."""
    return "warp" if N <= WARP_MAX_N else "block" if N <= BLOCK_MAX_N else "online"


def softmax_rows(x, out=None, *, variant="fused", threads=256):
    """Softmax of each row of a C-contiguous M x N float32 CuPy array.
    variant: one of SOFTMAX_VARIANTS ("fused" picks warp, block or online by
    N); threads: the CUDA C kernels' block, a multiple of 32 up to 1024.
    Returns out."""
    import cupy as cp

    if variant not in SOFTMAX_VARIANTS:
        raise ValueError(f"variant must be one of {SOFTMAX_VARIANTS}, got {variant!r}")
    if not isinstance(x, cp.ndarray):
        raise TypeError(f"x must be a cupy.ndarray, got {type(x).__name__}")
    if x.dtype != cp.float32:
        raise TypeError(f"x must have dtype float32, got {x.dtype}")
    if x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError(f"x must be a C-contiguous 2-D array, got shape {x.shape}")
    if not (isinstance(threads, int) and 32 <= threads <= 1024 and threads % 32 == 0):
        raise ValueError(f"threads must be a multiple of 32 from 32 to 1024, got {threads!r}")
    M, N = x.shape
    if max(M, N) >= 2**30:  # the kernels index rows and columns with int
        raise ValueError(f"x must have fewer than 2^30 rows and columns, got {M} x {N}")
    if out is None:
        out = cp.empty_like(x)
    elif (not isinstance(out, cp.ndarray) or out.dtype != cp.float32 or out.shape != x.shape
          or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous float32 cupy array of shape {x.shape}")
    if cp.may_share_memory(out, x):  # a row's threads read it again after others have stored
        raise ValueError("out must not overlap x: write the result to a new array")
    if x.size == 0:
        return out
    if variant == "unfused":
        softmax_steps(x, out)
        return out
    kernel = fused_softmax_kernel(N) if variant == "fused" else variant
    if (kernel == "warp" and N > WARP_MAX_N) or (kernel == "block" and N > BLOCK_MAX_N):
        raise ValueError(f"variant {kernel!r} needs N <= {WARP_MAX_N if kernel == 'warp' else BLOCK_MAX_N}, got {N}")
    module = load_cuda("fusion.cu")
    args = (x, out, np.int32(M), np.int32(N))
    if kernel == "warp":  # a warp per row: the smallest softmax_warp_<VPT> whose 32 x VPT registers hold it
        vpt = next(v for v in (4, 8, 16, 32) if 32 * v >= N)
        rows = threads // 32
        module.get_function(f"softmax_warp_{vpt}")((-(-M // rows),), (threads,), args)
    else:  # a block per row; softmax_block keeps the row in N floats of dynamic shared memory
        module.get_function(f"softmax_{kernel}")((M,), (threads,), args,
                                                 shared_mem=4 * N if kernel == "block" else 0)
    return out
# --8<-- [end:softmax_fused]


# %% [markdown]
# ## The same chains in Numba
#
# Copies of the handbook's kernels (kernels/fusion.py). The softmax reduces
# in shared memory, with no warp shuffles, so it runs in Numba's simulator.

# %%
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


# %% [markdown]
# The launch wrappers: Numba device arrays in, the same checks as the CuPy
# wrappers (the output may share no byte with an input).

# %%
# --8<-- [start:fusion_numba]
import numpy as np
from numba import cuda


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


def bias_gelu_residual_numba(x, bias, residual, out=None, *, block=(32, 8)):
    """The Numba kernel on Numba device arrays: x and residual (and out) M x N
    float32, bias N float32; block: threads along (columns, rows). Returns out."""
    for name, a, ndim in (("x", x, 2), ("bias", bias, 1), ("residual", residual, 2)):
        if not hasattr(a, "copy_to_host"):  # a Numba device array (the simulator's too)
            raise TypeError(f"{name} must be a Numba device array (numba.cuda.to_device), got {type(a).__name__}")
        if a.dtype != np.float32 or len(a.shape) != ndim:
            raise ValueError(f"{name} must be a {ndim}-D float32 array, got {a.dtype} of shape {a.shape}")
    M, N = x.shape
    if residual.shape != x.shape or bias.shape != (N,):
        raise ValueError(f"need residual of x's shape {x.shape} and bias of N = {N}, "
                         f"got {residual.shape} and {bias.shape}")
    if out is None:
        out = cuda.device_array((M, N), dtype=np.float32)
    elif not hasattr(out, "copy_to_host") or out.dtype != np.float32 or out.shape != x.shape:
        raise ValueError(f"out must be a float32 Numba device array of shape {x.shape}")
    for name, a in (("x", x), ("bias", bias), ("residual", residual)):
        if overlaps(out, a):
            raise ValueError(f"out must not overlap {name}: write the result to a new array")
    if x.size:
        grid = (-(-N // block[0]), min(65535, -(-M // block[1])))  # rows past 65535 blocks: the kernel loops
        bias_gelu_residual_kernel[grid, block](x, bias, residual, out)
    return out


def softmax_rows_numba(x, out=None, *, threads=256):
    """The Numba softmax, one block per row, on a Numba device array x (M x N
    float32, N <= NB_MAX_N); threads: a power of two from 32 to 1024 (the
    shared-memory tree halves it). Returns out."""
    if not hasattr(x, "copy_to_host"):
        raise TypeError(f"x must be a Numba device array (numba.cuda.to_device), got {type(x).__name__}")
    if x.dtype != np.float32 or len(x.shape) != 2:
        raise ValueError(f"x must be a 2-D float32 array, got {x.dtype} of shape {x.shape}")
    M, N = x.shape
    if N > NB_MAX_N:
        raise ValueError(f"x must have at most {NB_MAX_N} columns (the kernel's shared row), got {N}")
    if threads not in (32, 64, 128, 256, 512, 1024):
        raise ValueError(f"threads must be a power of two from 32 to 1024, got {threads!r}")
    if out is None:
        out = cuda.device_array((M, N), dtype=np.float32)
    elif not hasattr(out, "copy_to_host") or out.dtype != np.float32 or out.shape != x.shape:
        raise ValueError(f"out must be a float32 Numba device array of shape {x.shape}")
    if overlaps(out, x):
        raise ValueError("out must not overlap x: write the result to a new array")
    if x.size:
        softmax_block_kernel[M, threads](x, out)
    return out
# --8<-- [end:fusion_numba]


# %% [markdown]
# ## Checks against float64
#
# Odd shapes (N not a multiple of 4 takes the CUDA C kernel's one-float
# path; rows just past each softmax kernel's limit), one element, and
# softmax logits near 1e4. Outputs are poisoned with NaN first.

# %%
# --8<-- [start:fusion_check]
import numpy as np

GELU_SHAPES = ((1, 1), (7, 33), (129, 1028), (1000, 1013))
SOFTMAX_SHAPES = ((1, 1), (37, 1), (5, 129), (7, 1024), (5, 1025), (2049, 33), (3, 4096), (3, BLOCK_MAX_N),
                  (3, BLOCK_MAX_N + 1), (2, 50_000))


def check_gelu(variant, shapes=GELU_SHAPES):
    """A CuPy variant of bias + GELU + residual against float64; raises
    AssertionError on a wrong answer, returns the largest relative error."""
    import cupy as cp

    worst = 0.0
    for M, N in shapes:
        x, bias, residual = gelu_inputs(M, N, seed=M + N)
        out = cp.full((M, N), cp.nan, dtype=cp.float32)  # poison: an unwritten element stays NaN
        bias_gelu_residual(cp.asarray(x), cp.asarray(bias), cp.asarray(residual), out, variant=variant)
        err = rel_err(cp.asnumpy(out), bias_gelu_residual_reference(x, bias, residual))
        if not err < TOL:
            raise AssertionError(f"bias_gelu_residual {variant} at {M} x {N}: relative error {err:.1e}")
        worst = max(worst, err)
    return worst


def check_softmax(variant, shapes=SOFTMAX_SHAPES, scales=(1.0, 1e4)):
    """A CuPy softmax variant against float64 at every shape it takes, on
    logits of N(0, scale^2); returns the largest relative error."""
    import cupy as cp

    worst = 0.0
    for M, N in shapes:
        if (variant == "warp" and N > WARP_MAX_N) or (variant == "block" and N > BLOCK_MAX_N):
            continue  # beyond what that kernel holds on the chip (softmax_rows refuses it)
        for scale in scales:
            x = (np.random.default_rng(M * N).standard_normal((M, N)) * scale).astype(np.float32)
            out = cp.full((M, N), cp.nan, dtype=cp.float32)
            softmax_rows(cp.asarray(x), out, variant=variant)
            err = rel_err(cp.asnumpy(out), softmax_reference(x))
            if not err < TOL:
                raise AssertionError(f"softmax {variant} at {M} x {N}, scale {scale:g}: relative error {err:.1e}")
            worst = max(worst, err)
    return worst
# --8<-- [end:fusion_check]


# %%
# --8<-- [start:fusion_numba_check]
import numpy as np


def check_gelu_numba(shapes=((1, 1), (3, 5), (7, 33), (2, 70))):
    """The Numba bias + GELU + residual against float64 (keep shapes small in the simulator)."""
    from numba import cuda

    worst = 0.0
    for M, N in shapes:
        x, bias, residual = gelu_inputs(M, N, seed=M + N)
        out = cuda.to_device(np.full((M, N), np.nan, dtype=np.float32))
        bias_gelu_residual_numba(cuda.to_device(x), cuda.to_device(bias), cuda.to_device(residual), out)
        err = rel_err(out.copy_to_host(), bias_gelu_residual_reference(x, bias, residual))
        if not err < TOL:
            raise AssertionError(f"numba bias_gelu_residual at {M} x {N}: relative error {err:.1e}")
        worst = max(worst, err)
    x, bias, residual = gelu_inputs(3, 5, seed=8)
    buf = cuda.to_device(np.stack([x, residual, np.full(x.shape, np.nan, dtype=np.float32)]))
    bias_gelu_residual_numba(buf[0], cuda.to_device(bias), buf[1], buf[2])  # x, residual, out in a row: accepted
    if not rel_err(buf[2].copy_to_host(), bias_gelu_residual_reference(x, bias, residual)) < TOL:
        raise AssertionError("numba bias_gelu_residual with out right after residual in one buffer: wrong answer")
    return worst


def check_softmax_numba(shapes=((1, 1), (2, 5), (3, 70)), scales=(1.0, 1e4), threads=32):
    """The Numba softmax against float64 (keep shapes small in the simulator)."""
    from numba import cuda

    worst = 0.0
    for M, N in shapes:
        for scale in scales:
            x = (np.random.default_rng(M * N).standard_normal((M, N)) * scale).astype(np.float32)
            out = cuda.to_device(np.full((M, N), np.nan, dtype=np.float32))
            softmax_rows_numba(cuda.to_device(x), out, threads=threads)
            err = rel_err(out.copy_to_host(), softmax_reference(x))
            if not err < TOL:
                raise AssertionError(f"numba softmax at {M} x {N}, scale {scale:g}: relative error {err:.1e}")
            worst = max(worst, err)
    x = np.random.default_rng(6).standard_normal((2, 5)).astype(np.float32)
    buf = cuda.to_device(np.stack([x, np.full(x.shape, np.nan, dtype=np.float32)]))
    softmax_rows_numba(buf[0], buf[1], threads=threads)  # out right after x in one buffer: accepted
    if not rel_err(buf[1].copy_to_host(), softmax_reference(x)) < TOL:
        raise AssertionError("numba softmax with out right after x in one buffer: wrong answer")
    return worst
# --8<-- [end:fusion_numba_check]


# %% [markdown]
# ## Timing: fused against unfused
#
# CUDA events around a few launches after a warm-up, on M x N arrays of
# 128 MiB each (twice the H200's L2). GB/s counts the bytes every variant
# must move at least: the inputs read once and out written once. The unfused
# chains move more (each intermediate written and read back): that is the
# whole difference.

# %%
# --8<-- [start:fusion_timing]
import numpy as np


# --8<-- [start:time_ms]
def time_ms(fn, reps=10):
    """Mean time of one call over reps back-to-back calls, after a warm-up call (CUDA events)."""
    import cupy as cp

    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / reps
# --8<-- [end:time_ms]


def time_fusion(N, elements=1 << 25):
    """Every variant of both chains on M x N float32 arrays (M = elements // N);
    returns {(chain, variant): ms}."""
    import cupy as cp

    M = max(1, elements // N)
    rng = cp.random.default_rng(1)
    x, residual = rng.standard_normal((M, N), dtype=cp.float32), rng.standard_normal((M, N), dtype=cp.float32)
    bias = rng.standard_normal(N, dtype=cp.float32)
    out = cp.empty_like(x)
    times = {}
    for chain, variants, useful in (("bias_gelu_residual", GELU_VARIANTS, 4 * (3 * M * N + N)),
                                    ("softmax", SOFTMAX_VARIANTS[:2], 4 * 2 * M * N)):
        print(f"{chain}, {M} x {N}" + (f" (fused: the {fused_softmax_kernel(N)} kernel)" if chain == "softmax" else ""))
        for variant in variants:
            if chain == "softmax":
                ms = time_ms(lambda: softmax_rows(x, out, variant=variant))
            else:
                ms = time_ms(lambda: bias_gelu_residual(x, bias, residual, out, variant=variant))
            times[chain, variant] = ms
            print(f"  {variant:11s} {ms:8.3f} ms  {useful / ms / 1e6:6.0f} GB/s  "
                  f"{times[chain, 'unfused'] / ms:5.2f} x unfused")
    return times
# --8<-- [end:fusion_timing]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Kernel fusion: bias + GELU + residual and row softmax.")
    p.add_argument("--size", type=int, default=None,
                   help="row length N of the timed arrays and of the Numba check's widest rows (default 4096)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    N = args.size if args.size is not None else 4096
    if args.impl in ("all", "numba"):
        # the simulator runs one Python thread per GPU thread: a few rows of at most 1000 floats there
        M, n = (3, min(N, 1000)) if simulator else (1000, N)
        where = ", simulator" if simulator else ""
        err = check_gelu_numba(((1, 1), (3, 5), (7, 33), (M, n)))
        print(f"numba bias_gelu_residual: max relative error {err:.1e} (up to {M} x {n}{where})")
        n = min(n, NB_MAX_N)
        err = check_softmax_numba(((1, 1), (2, 5), (3, 70), (M, n)), threads=32 if simulator else 256)
        print(f"numba softmax: max relative error {err:.1e} (up to {M} x {n}{where})")
    if args.impl == "numba":
        return
    if not has_gpu():
        print("cupy: skipped (needs a CUDA GPU)")
        return
    for variant in GELU_VARIANTS:
        print(f"cupy bias_gelu_residual {variant}: max relative error {check_gelu(variant):.1e}")
    for variant in SOFTMAX_VARIANTS:
        print(f"cupy softmax {variant}: max relative error {check_softmax(variant):.1e}")
    time_fusion(N)


if __name__ == "__main__":
    main()
