"""Every launch wrapper rejects an output that shares memory with an input.

The kernels declare their pointers __restrict__ and read inputs that other
threads may already have overwritten: `conv2d_cupy(x, w, out=x)` or an out
that is x shifted by one element would give a silently wrong answer. So each
wrapper that takes a caller's output (kernels/ and the examples' copies) must
raise ValueError naming the output and the input, for

- out identical to the input (or, where the shapes differ, starting where it
  starts),
- out a view of the same buffer shifted by one element (four for float4
  kernels, which must stay 16-byte aligned),

and must accept out placed right after the input in the same buffer, giving
the answer a separate out gets and leaving the input as it was.

Sizes need many blocks (at least 8), so that without the check the kernel
really would go wrong: 2^20 elements or 1024 x 1024 on a GPU; in Numba's
CUDA simulator a few hundred elements in blocks of 32 threads. (The
simulator runs a grid-stride kernel of kernels/host_transfer.py on 2 blocks
whatever n is; its threads then loop over the rest.) CuPy cases need a GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from kernels import divergence as dv
from kernels import managed_memory as mg
from kernels import transfer_pipeline as tp
from kernels import ilp
from kernels import memory as mem
from kernels import stencil as st
from kernels import transpose as tr
from kernels import vector_add as va
from kernels import warp_specialization as ws
from kernels.device import numba_simulator

ROOT = Path(__file__).resolve().parent.parent
N = 1 << 20    # 1-D on the GPU: 4096 blocks of 256 threads
SIDE = 1024    # 2-D on the GPU
SIM = numba_simulator()
N_SIM = 293    # one element per thread, 32-thread blocks: 10 blocks
N_SIM4 = 9 * 128  # 4 elements per thread (memory.PER_THREAD), 32-thread blocks: 9 blocks


@functools.cache
def example(name: str):
    """examples/<name>.py as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location(f"{name}_example_overlap", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Case:
    id: str
    lib: str                 # arrays: "cupy", "numba" (device arrays) or "host" (NumPy)
    gpu: bool                # needs a CUDA GPU (CuPy somewhere in the call)
    call: Callable           # call(inputs: dict name -> array, out)
    inputs: dict             # name -> shape of every array input
    out_shape: tuple
    dtype: type = np.float32
    out_name: str = "out"
    shift: int = 1           # elements between the input's start and the overlapping out's
    input_kept: bool = True  # False: the wrapper writes that input too (a work buffer)


def ex(name: str):
    """The function "module.fn" of examples/module.py (the cases call this at
    test time, so collecting the tests loads no example)."""
    module, _, fn = name.partition(".")
    return getattr(example(module), fn)


def _pipeline_host(n):
    """Host input and output of a pipeline whose work buffers are the case."""
    x = np.random.default_rng(5).uniform(0.25, 0.75, n).astype(np.float32)
    return x, np.full(n, np.nan, dtype=np.float32)


def _n(sim_n: int) -> int:
    return sim_n if SIM else N


def _spmv_lengths(n_rows: int) -> np.ndarray:
    """Row lengths of the spmv cases' n_rows x n_rows matrix: 1 to 8 nonzeros."""
    return np.arange(n_rows) % 8 + 1


def _spmv_structure(n_rows: int, lib: str):
    """indptr and indices of the spmv cases' matrix, in `lib`'s arrays (data
    and x are the cases' float32 inputs)."""
    indptr = np.concatenate([[0], np.cumsum(_spmv_lengths(n_rows))]).astype(np.int32)
    indices = (np.arange(indptr[-1]) * 7919 % n_rows).astype(np.int32)
    return to_lib(indptr, lib), to_lib(indices, lib)


def cupy_cases() -> list[Case]:
    sq = (SIDE, SIDE)
    c = functools.partial(Case, lib="cupy", gpu=True)
    return [
        # ---- kernels/
        c("vector_add_cupy", call=lambda i, out: va.vector_add_cupy(i["a"], i["b"], out, variant="guard"),
          inputs={"a": (N,), "b": (N,)}, out_shape=(N,)),
        c("branch_cupy", call=lambda i, out: dv.branch_cupy(i["x"], out, split=16, iters=8),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("fma_chains_cupy", call=lambda i, out: ilp.fma_chains_cupy(i["x"], out, kernel="ilp_chains_4", iters=64),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("int_cupy", call=lambda i, out: ilp.int_cupy(i["x"], out, iters=8),
          inputs={"x": (N,)}, out_shape=(N,), dtype=np.uint32),
        c("poly_cupy", call=lambda i, out: tp.poly_cupy(i["x"], out, iters=8), inputs={"x": (N,)}, out_shape=(N,)),
        c("scale_cupy", call=lambda i, out: mg.scale_cupy(i["x"], out), inputs={"x": (N,)}, out_shape=(N,)),
        c("center_cupy", call=lambda i, out: mg.center_cupy(i["x"], out), inputs={"x": (N,)}, out_shape=(N,)),
        Case("pipeline", lib="host", gpu=True, out_name="out_host",
             call=lambda i, out: tp.pipeline(i["x_host"], out, chunks=8, streams=2, iters=4),
             inputs={"x_host": (N,)}, out_shape=(N,)),
        c("pipeline_work", out_name="work[1]", input_kept=False,
          call=lambda i, out: tp.pipeline(*_pipeline_host(N), chunks=8, streams=2, iters=4, work=(i["work[0]"], out)),
          inputs={"work[0]": (N,)}, out_shape=(N,)),
        c("read_global_cupy", call=lambda i, out: mem.read_global_cupy(i["x"], 1, out, blocks=N // 256, threads=256),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("read_shared_cupy", call=lambda i, out: mem.read_shared_cupy(i["x"], 4, out, blocks=16, threads=256),
          inputs={"x": (4096,)}, out_shape=(4096,)),
        c("copy_strided_cupy", call=lambda i, out: mem.copy_strided_cupy(i["x"], out, 2),
          inputs={"x": (2 * N - 1,)}, out_shape=(N,)),
        c("copy_offset_cupy", call=lambda i, out: mem.copy_offset_cupy(i["x"], out, 3),
          inputs={"x": (N + 3,)}, out_shape=(N,)),
        c("norm_cupy", call=lambda i, out: mem.norm_cupy(i["p"], "aos", out), inputs={"p": (N, 3)}, out_shape=(N,)),
        c("scale_x_cupy", call=lambda i, out: mem.scale_x_cupy(i["p"], "soa", out),
          inputs={"p": (3, N)}, out_shape=(N,)),
        c("conv2d_cupy", call=lambda i, out: st.conv2d_cupy(i["x"], i["w"], out, variant="tiled16"),
          inputs={"x": sq, "w": (st.KW, st.KW)}, out_shape=sq),
        c("transpose_cupy", call=lambda i, out: tr.transpose_cupy(i["x"], out), inputs={"x": sq}, out_shape=sq),
        c("stream", shift=4,  # 16-byte copies: views stay 16-byte aligned
          call=lambda i, out: ws.stream(i["x"], out, k=3, step="ws_tma"), inputs={"x": (N,)}, out_shape=(N,)),
        c("copy_tiled_cupy", call=lambda i, out: tr.copy_tiled_cupy(i["x"], out), inputs={"x": sq}, out_shape=sq),
        # ---- examples/
        c("examples/vector_add.vector_add_cupy",
          call=lambda i, out: ex("vector_add.vector_add_cupy")(i["a"], i["b"], out),
          inputs={"a": (N,), "b": (N,)}, out_shape=(N,)),
        c("examples/divergence.branch_cupy", call=lambda i, out: ex("divergence.branch_cupy")(i["x"], out, 16, 8),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("examples/ilp.fma_chains_cupy",
          call=lambda i, out: ex("ilp.fma_chains_cupy")(i["x"], out, kernel="ilp_chains_4", iters=64),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("examples/ilp.int_cupy", call=lambda i, out: ex("ilp.int_cupy")(i["x"], out, iters=8),
          inputs={"x": (N,)}, out_shape=(N,), dtype=np.uint32),
        c("examples/stencil.conv2d_cupy", call=lambda i, out: ex("stencil.conv2d_cupy")(i["x"], i["w"], out, "tiled16"),
          inputs={"x": sq, "w": (st.KW, st.KW)}, out_shape=sq),
        c("examples/transpose.transpose_cupy", call=lambda i, out: ex("transpose.transpose_cupy")(i["x"], out),
          inputs={"x": sq}, out_shape=sq),
        c("examples/transpose.transpose_coarsened_config",
          call=lambda i, out: ex("transpose.transpose_coarsened_config")(i["x"], out, (32, 8, 4)),
          inputs={"x": sq}, out_shape=sq),
        c("examples/memory.read_global_cupy",
          call=lambda i, out: ex("memory.read_global_cupy")(i["x"], 1, out, blocks=N // 256, threads=256),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("examples/memory.read_shared_cupy",
          call=lambda i, out: ex("memory.read_shared_cupy")(i["x"], 4, out, blocks=16, threads=256),
          inputs={"x": (4096,)}, out_shape=(4096,)),
        c("examples/memory.copy_strided_cupy", call=lambda i, out: ex("memory.copy_strided_cupy")(i["x"], out, 2),
          inputs={"x": (2 * N - 1,)}, out_shape=(N,)),
        c("examples/memory.copy_offset_cupy", call=lambda i, out: ex("memory.copy_offset_cupy")(i["x"], out, 3),
          inputs={"x": (N + 3,)}, out_shape=(N,)),
        c("examples/memory.points_cupy", call=lambda i, out: ex("memory.points_cupy")("norm", i["p"], "aos", out),
          inputs={"p": (N, 3)}, out_shape=(N,)),
        c("examples/memory.vector_add_vec4_cupy", shift=4,  # float4 loads: views stay 16-byte aligned
          call=lambda i, out: ex("memory.vector_add_vec4_cupy")(i["a"], i["b"], out),
          inputs={"a": (N,), "b": (N,)}, out_shape=(N,)),
        c("examples/host_transfer.scale_cupy", call=lambda i, out: ex("host_transfer.scale_cupy")(i["x"], out),
          inputs={"x": (N,)}, out_shape=(N,)),
        Case("examples/host_transfer.pipeline", lib="host", gpu=True, out_name="out_host",
             call=lambda i, out: ex("host_transfer.pipeline")(i["x_host"], out, chunks=8, streams=2, iters=4),
             inputs={"x_host": (N,)}, out_shape=(N,)),
        c("examples/warp_specialization.stream", shift=4,
          call=lambda i, out: ex("warp_specialization.stream")(i["x"], out, k=3, step="ws_regbuf"),
          inputs={"x": (N,)}, out_shape=(N,)),
        c("examples/spmv.spmv_cupy",
          call=lambda i, out: ex("spmv.spmv_cupy")(*_spmv_structure(N, "cupy"), i["data"], i["x"], out,
                                                   kernel="merge"),
          inputs={"data": (int(_spmv_lengths(N).sum()),), "x": (N,)}, out_shape=(N,)),
        c("examples/fusion.bias_gelu_residual",
          call=lambda i, out: ex("fusion.bias_gelu_residual")(i["x"], i["bias"], i["residual"], out),
          inputs={"x": sq, "bias": (SIDE,), "residual": sq}, out_shape=sq),
        c("examples/fusion.softmax_rows", call=lambda i, out: ex("fusion.softmax_rows")(i["x"], out),
          inputs={"x": sq}, out_shape=sq),
        # a block per 128 query rows: 8 x 8 blocks; 16-byte copies: views stay 16-byte aligned
        c("examples/attention.attention_fused", shift=4,
          call=lambda i, out: ex("attention.attention_fused")(i["q"], i["k"], i["v"], out=out),
          inputs={name: (8, SIDE, 64) for name in "qkv"}, out_shape=(8, SIDE, 64)),
    ]


def numba_cases() -> list[Case]:
    """Numba wrappers: in the simulator on the CPU, at GPU sizes on a GPU."""
    c = functools.partial(Case, lib="numba", gpu=False)
    n, n4 = _n(N_SIM), _n(N_SIM4)
    sq = (96, 96) if SIM else (SIDE, SIDE)  # coarsened transpose: 32 x 32 tiles, 9 blocks in the simulator
    image = (32, 64) if SIM else (SIDE, SIDE)  # tiled16: 16 x 16 tiles, 8 blocks in the simulator
    rows = 8 * 128 if SIM else N  # spmv: rows of the matrix
    wide = (16, 40) if SIM else (SIDE, SIDE)  # fusion: a few rows in the simulator
    return [
        # ---- kernels/
        c("vector_add_numba", call=lambda i, out: va.vector_add_numba(i["a"], i["b"], out, threads=32),
          inputs={"a": (n,), "b": (n,)}, out_shape=(n,)),
        c("branch_numba", call=lambda i, out: dv.branch_numba(i["x"], out, split=16, iters=4, threads=32),
          inputs={"x": (n,)}, out_shape=(n,)),
        c("scale_numba", call=lambda i, out: mg.scale_numba(i["x"], out, threads=32),
          inputs={"x": (n,)}, out_shape=(n,)),
        Case("pipeline_numba", lib="host", gpu=False, out_name="out_host",
             call=lambda i, out: tp.pipeline_numba(i["x_host"], out, chunks=4, streams=2, iters=4, threads=32),
             inputs={"x_host": (n4,)}, out_shape=(n4,)),
        c("pipeline_numba_work", out_name="work[1]", input_kept=False,
          call=lambda i, out: tp.pipeline_numba(*_pipeline_host(n4), chunks=4, streams=2, iters=4, threads=32,
                                                work=(i["work[0]"], out)),
          inputs={"work[0]": (n4,)}, out_shape=(n4,)),
        c("copy_strided_numba", call=lambda i, out: mem.copy_strided_numba(i["x"], out, 2, threads=32),
          inputs={"x": (2 * n4 - 1,)}, out_shape=(n4,)),
        c("copy_offset_numba", call=lambda i, out: mem.copy_offset_numba(i["x"], out, 3, threads=32),
          inputs={"x": (n4 + 3,)}, out_shape=(n4,)),
        c("points_numba", call=lambda i, out: mem.points_numba("norm", i["p"], "aos", out, threads=32),
          inputs={"p": (n4, 3)}, out_shape=(n4,)),
        c("conv2d_numba", call=lambda i, out: st.conv2d_numba(i["x"], i["w"], out, variant="tiled16"),
          inputs={"x": image, "w": (st.KW, st.KW)}, out_shape=image),
        c("transpose_numba", call=lambda i, out: tr.transpose_numba(i["x"], out, variant="coarsened"),
          inputs={"x": sq}, out_shape=sq),
        # tiles of 2048 floats: in the simulator 2 blocks of 256 threads (n a multiple of 4)
        c("stream_numba", shift=4, call=lambda i, out: ws.stream_numba(i["x"], out, k=2, blocks=2),
          inputs={"x": (n4 if not SIM else 4096,)}, out_shape=(n4 if not SIM else 4096,)),
        # ---- examples/
        c("examples/memory.copy_strided_numba",
          call=lambda i, out: ex("memory.copy_strided_numba")(i["x"], out, 2, threads=32),
          inputs={"x": (2 * n4 - 1,)}, out_shape=(n4,)),
        c("examples/warp_specialization.stream_numba", shift=4,
          call=lambda i, out: ex("warp_specialization.stream_numba")(i["x"], out, k=2, blocks=2),
          inputs={"x": (n4 if not SIM else 4096,)}, out_shape=(n4 if not SIM else 4096,)),
        # one row per thread, 128-thread blocks: 8 blocks in the simulator
        c("examples/spmv.spmv_numba",
          call=lambda i, out: ex("spmv.spmv_numba")(*_spmv_structure(rows, "numba"), i["data"], i["x"], out,
                                                    kernel="scalar"),
          inputs={"data": (int(_spmv_lengths(rows).sum()),), "x": (rows,)}, out_shape=(rows,)),
        # blocks of 32 x 2 threads: 2 x 8 blocks in the simulator
        c("examples/fusion.bias_gelu_residual_numba",
          call=lambda i, out: ex("fusion.bias_gelu_residual_numba")(i["x"], i["bias"], i["residual"], out,
                                                                    block=(32, 2)),
          inputs={"x": wide, "bias": (wide[1],), "residual": wide}, out_shape=wide),
        c("examples/fusion.softmax_rows_numba",  # a block per row: 8 blocks in the simulator
          call=lambda i, out: ex("fusion.softmax_rows_numba")(i["x"], out, threads=32),
          inputs={"x": (8, 40) if SIM else sq}, out_shape=(8, 40) if SIM else sq),
        c("examples/memory.norm_numba", call=lambda i, out: ex("memory.norm_numba")(i["p"], "aos", out, threads=32),
          inputs={"p": (n4, 3)}, out_shape=(n4,)),
        Case("examples/host_transfer.pipeline_numba", lib="host", gpu=False, out_name="out_host",
             call=lambda i, out: ex("host_transfer.pipeline_numba")(i["x_host"], out, chunks=4, streams=2, iters=4,
                                                                   threads=32),
             inputs={"x_host": (4 * 256,)}, out_shape=(4 * 256,)),  # chunks of 256: 8 blocks of 32 each
        # a query row per thread, 32-thread blocks: a block per head (8 blocks) in the simulator
        c("examples/attention.attention_numba",
          call=lambda i, out: ex("attention.attention_numba")(i["q"], i["k"], i["v"], False, out),
          inputs={name: (8, 8, 64) if SIM else (8, SIDE, 64) for name in "qkv"},
          out_shape=(8, 8, 64) if SIM else (8, SIDE, 64)),
    ]


CASES = cupy_cases() + numba_cases()


def params():
    out = []
    for case in CASES:
        for name in case.inputs:
            marks = [pytest.mark.gpu] if case.gpu else []
            out.append(pytest.param(case, name, id=f"{case.id}[{name}]", marks=marks))
    return out


# ------------------------------------------------------------- arrays --

def values(rng, shape, dtype) -> np.ndarray:
    """Random, never zero, small enough for every kernel's arithmetic."""
    if np.dtype(dtype) == np.uint32:
        return rng.integers(1, 2**32, size=shape, dtype=np.uint32)
    return rng.uniform(0.25, 0.75, shape).astype(dtype)


def poison(n: int, dtype) -> np.ndarray:
    """What an output holds before the launch: NaN (uint32: all ones)."""
    return np.full(n, np.iinfo(np.uint32).max if np.dtype(dtype) == np.uint32 else np.nan, dtype=dtype)


def to_lib(host: np.ndarray, lib: str):
    if lib == "cupy":
        import cupy as cp

        return cp.asarray(host)
    if lib == "numba":
        from numba import cuda

        return cuda.to_device(host)
    return host.copy()


def to_host(a, lib: str) -> np.ndarray:
    if lib == "cupy":
        import cupy as cp

        return cp.asnumpy(a)
    if lib == "numba":
        return a.copy_to_host()
    return np.array(a)


def view(buf, lo: int, shape: tuple):
    """prod(shape) elements of the 1-D buffer from element lo, as `shape`."""
    return buf[lo:lo + math.prod(shape)].reshape(shape)


# -------------------------------------------------------------- tests --

@pytest.mark.parametrize("case,name", params())
def test_out_sharing_memory_with_an_input_is_rejected(case, name):
    rng = np.random.default_rng(1)
    host = {k: values(rng, shape, case.dtype) for k, shape in case.inputs.items()}
    inputs = {k: to_lib(v, case.lib) for k, v in host.items()}
    shape, size = case.inputs[name], host[name].size
    out_size = math.prod(case.out_shape)
    # one buffer: the input first, then room for an out of its own
    buf = to_lib(np.concatenate([host[name].ravel(), poison(out_size + case.shift, case.dtype)]), case.lib)
    x = view(buf, 0, shape)
    message = re.escape(f"{case.out_name} must not overlap {name}")

    # out is the input itself (or, where the shapes differ, starts where it starts)
    same = x if tuple(shape) == tuple(case.out_shape) else view(buf, 0, case.out_shape)
    with pytest.raises(ValueError, match=message):
        case.call({**inputs, name: x}, same)
    # out is the same buffer shifted by a few elements: every element but the
    # first few is both read and written
    with pytest.raises(ValueError, match=message):
        case.call({**inputs, name: x}, view(buf, case.shift, case.out_shape))

    # out right after the input, in the same buffer: no byte shared, accepted
    beside = view(buf, size, case.out_shape)
    case.call({**inputs, name: x}, beside)
    alone = view(to_lib(poison(out_size, case.dtype), case.lib), 0, case.out_shape)
    case.call(inputs, alone)  # inputs[name] holds the same values in an allocation of its own
    np.testing.assert_allclose(to_host(beside, case.lib), to_host(alone, case.lib), rtol=1e-5, atol=1e-6)
    if case.input_kept:
        np.testing.assert_array_equal(to_host(buf, case.lib)[:size], host[name].ravel())


def test_every_wrapper_with_an_output_is_covered():
    """A new function taking an `out` (or `out_host`, `work`) in a kernels/
    module of this file or in an example (matmul has tests/test_matmul.py)
    must get a case here, or a reason in `exempt`."""
    import ast

    covered = {c.id.rsplit(".", 1)[-1].removesuffix("_work") for c in CASES}
    exempt = {
        "fma_registers_cupy": "no array input: it writes out from registers only",
        "seed_cupy": "in place by design: data is the input and the output",
        "time_copy": "a cudaMemcpy, not a kernel launch",
        "roundtrip_numba": "two copies on one stream: the whole input is copied before out is written",
        "check_operands": "the argument check the wrappers above call",
        "bias_gelu_residual_steps": "examples/fusion.py: the unfused chain as usually written (CuPy operators); "
                                    "bias_gelu_residual checks out before it calls this",
        "softmax_steps": "examples/fusion.py: the unfused softmax as usually written (CuPy operators); "
                         "softmax_rows checks out before it calls this",
        "attention_fused_fp16": "examples/attention.py: float16 q, k, v and a float32 out, which the cases' one "
                                "buffer of one dtype cannot hold; its out goes through check_qkv, as "
                                "attention_fused's does",
        "check_qkv": "examples/attention.py: the argument check attention_fused and attention_fused_fp16 call",
        "run_kernel": "examples/attention.py: the checks' dispatch to attention_naive (no out), "
                      "attention_fused and attention_fused_fp16, which check out",
    }
    files = [ROOT / "kernels" / f"{m}.py" for m in
             ("vector_add", "divergence", "ilp", "host_transfer", "transfer_pipeline", "managed_memory", "memory",
              "stencil", "transpose", "reduction", "warp_specialization")]
    files += [f for f in sorted((ROOT / "examples").glob("*.py")) if f.name != "matmul.py"]
    missing = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                continue  # a kernel, not a wrapper
            names = {a.arg for a in node.args.args + node.args.kwonlyargs}
            if names & {"out", "out_host", "work"} and node.name not in covered | set(exempt):
                missing.append(f"{f.relative_to(ROOT)}:{node.name}")
    assert not missing, "wrappers taking an output with no overlap case: " + ", ".join(missing)
