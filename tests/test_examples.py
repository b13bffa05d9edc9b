"""Every examples/*.py runs alone, checks itself, and fails on a wrong answer.

- Copied alone (with the .cu files its docstring names) into an empty
  folder outside the repository, an example runs: the Numba path anywhere
  (the CUDA simulator without a GPU), the CuPy path on a GPU. A `kernels.py`
  that raises is put beside it, so an example reaching for this repository's
  package fails instead of finding the editable install.
- It imports nothing but the standard library, NumPy, CuPy, Numba and NVML.
- A wrong kernel planted in the copy (FAULTS) makes it exit non-zero.
- The sections it shares with the library are the library's text
  (tests/sync.py; `python -m tests.sync` rewrites them).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sync

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
SMALL = "1000"
ALLOWED = {"numpy", "cupy", "cupyx", "cupy_backends", "numba", "pynvml"}  # cupy_backends ships in the cupy wheel
POISON = 'raise ImportError("an example must run without this repository\'s kernels package")\n'

# example -> [(file in the copy, old, new, impl)]: a wrong result planted in
# the copy; the example must exit non-zero. Numba faults run in the
# simulator on the CPU, CUDA C faults on the GPU.
FAULTS = {
    "vector_add.py": [("vector_add.py", "out[i] = a[i] + b[i]", "out[i] = a[i] - b[i]", "numba"),
                      ("vector_add.cu", "out[i] = a[i] + b[i];", "out[i] = a[i] * b[i];", "cupy")],
    # the Numba kernels never write the last column; the tiled CUDA C kernel neither
    "matmul.py": [("matmul.py", "acc += A[row, k] * B[k, col]", "acc -= A[row, k] * B[k, col]", "numba"),
                  ("matmul.cu", "for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];",
                   "for (int k = 0; k < K; ++k) acc -= A[row * K + k] * B[k * N + col];", "cupy"),
                  ("matmul.py", "blocks = ((N - 1) // bn + 1, (M - 1) // bm + 1)",
                   "blocks = ((N - 1) // bn, (M - 1) // bm + 1)", "cupy")],
    "ilp.py": [("ilp.cu", "for (int k = 0; k < K; ++k) s += acc[k];", "for (int k = 0; k < K; ++k) s -= acc[k];",
                "cupy")],
    "divergence.py": [("divergence.py", "v = v * float32(1.001) - float32(0.001)",
                       "v = v * float32(1.001) + float32(0.001)", "numba"),
                      ("divergence.cu", "for (int k = 0; k < iters; ++k) v = fmaf(v, 1.001f, -0.001f);",
                       "for (int k = 0; k < iters; ++k) v = fmaf(v, 1.001f, 0.001f);", "cupy")],
    "reduction.py": [("reduction.py", "for i in range(cuda.grid(1), n, cuda.gridsize(1)):",
                      "for i in range(cuda.grid(1), n - 1, cuda.gridsize(1)):", "numba"),
                     ("reduction.cu", "v += x[i];", "v -= x[i];", "cupy")],
    "memory.py": [("memory.py", "v[k] = x[i * stride]  # a warp reads", "v[k] = x[i * stride] + 1.0  # a warp reads",
                   "numba"),
                  ("memory.cu", "return 2.0f * p[i];", "return 3.0f * p[i];", "cupy")],
    "transpose.py": [("transpose.py", "out[r, c] = tile[tx, ty]  # a column", "out[r, c] = tile[ty, tx]  # a column",
                      "numba"),
                     ("transpose.cu", "out[c * rows + r] = in[r * cols + c];",
                      "out[c * rows + r] = in[r * cols + c] + 1.0f;", "cupy")],
    "host_transfer.py": [("host_transfer.py", "v = v * float32(0.5) + xi", "v = v * float32(0.5) - xi", "numba"),
                         ("host_transfer.cu", "v = fmaf(v, 0.5f, xi);", "v = fmaf(v, 0.5f, -xi);", "cupy")],
    # the calculator forgets the 1 KB the driver reserves per block; the
    # driver check is handed half a kernel's registers
    "occupancy.py": [("occupancy.py", "smem = round_up(static_smem + dynamic_smem + L.reserved_smem_per_block, L.smem_alloc_unit)",
                      "smem = round_up(static_smem + dynamic_smem, L.smem_alloc_unit)", "numba"),
                     ("occupancy.py", '"regs": int(kern.num_regs),', '"regs": int(kern.num_regs) // 2,', "cupy")],
    # steps 4 and 5 read slice 0 of A for every slice; the launcher drops the last row of blocks;
    # the INT8 layer forgets the activations' scale
    "tensor_cores.py": [("tensor_cores.cu", "in ? a_src[i] + k0 : A", "in ? a_src[i] : A", "cupy"),
                        ("tensor_cores.py", "(M + bm - 1) // bm), (threads,)", "M // bm), (threads,)", "cupy"),
                        ("tensor_cores.py", "return C.astype(cp.float64) * sx * sw[None, :]",
                         "return C.astype(cp.float64) * sw[None, :]", "cupy")],
    # the Numba step reads its tile one off; the CUDA C steps add -b; the GEMM swaps a pair of columns
    "warp_specialization.py": [("warp_specialization.py", "buf[q + e] = x[base + q + e]",
                                "buf[q + e] = x[base + q + e] + float32(1.0)", "numba"),
                               ("warp_specialization.cu", "v.x = fmaf(v.x, a, b);", "v.x = fmaf(v.x, a, -b);", "cupy"),
                               ("hopper_gemm.cu", "make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1])",
                                "make_float2(d[4 * j + 2 * h + 1], d[4 * j + 2 * h])", "cupy")],
    # the Numba vector step drops each row's last nonzero; the merge path's fix-up overwrites a row cut between
    # tiles instead of adding to it; the subwarp kernel sums half its lanes; the launcher drops the last block
    "spmv.py": [("spmv.py", "for k in range(indptr[row] + lane, indptr[row + 1], 32):",
                 "for k in range(indptr[row] + lane, indptr[row + 1] - 1, 32):", "numba"),
                ("spmv.cu", "if (c.x >= 0 && c.y != 0) atomicAdd(&out[c.x], __int_as_float(c.y));",
                 "if (c.x >= 0 && c.y != 0) atomicExch(&out[c.x], __int_as_float(c.y));", "cupy"),
                ("spmv.cu", "for (int off = L / 2; off > 0; off >>= 1) acc += __shfl_down_sync(FULL_MASK, acc, off, L);",
                 "for (int off = L / 4; off > 0; off >>= 1) acc += __shfl_down_sync(FULL_MASK, acc, off, L);", "cupy"),
                ("spmv.py", "(-(-n_rows * per_row // THREADS),)", "(n_rows * per_row // THREADS,)", "cupy")],
    # the Numba GELU subtracts the residual; the Numba softmax's block "max" is a min (softmax ignores the
    # shift: only idle threads' -inf and logits near 1e4, whose exp overflows, expose it); the CUDA C GELU
    # flips the cubic term; the online softmax forgets to rescale its running sum; the launcher takes the
    # float4 kernel when N % 4 != 0
    "fusion.py": [("fusion.py", "+ residual[r, c]", "- residual[r, c]", "numba"),
                  ("fusion.py", "red[t] = max(red[t], red[t + s])", "red[t] = min(red[t], red[t + s])", "numba"),
                  ("fusion.cu", "return 0.5f * h * (1.0f + tanhf(k0 * (h + k1 * h * h * h)));",
                   "return 0.5f * h * (1.0f + tanhf(k0 * (h - k1 * h * h * h)));", "cupy"),
                  ("fusion.cu", "s = s * expf(m - mx) + (expf(v0 - mx) + expf(v1 - mx)) + (expf(v2 - mx) + expf(v3 - mx));",
                   "s = s + (expf(v0 - mx) + expf(v1 - mx)) + (expf(v2 - mx) + expf(v3 - mx));", "cupy"),
                  ("fusion.py", "vec = N % 4 == 0 and all(", "vec = all(", "cupy")],
    # the Numba kernel forgets to rescale a row's output when its maximum grows, or to mask keys past the
    # query; the cp.async kernel forgets the same rescale; the one-row kernel at d = 128 drops the half of
    # each dot product its partner thread holds; the FP16 kernel multiplies P by the wrong half of V's
    # fragments; the FP32 launch passes 1 / sqrt(d) where the kernels' base-2 softmax wants log2(e) / sqrt(d)
    "attention.py": [("attention.py", "acc[e, t] *= corr", "acc[e, t] *= 1.0", "numba"),
                     ("attention.py", "if col >= n or (causal and col > row):", "if col >= n:", "numba"),
                     ("attention.cu", "for (int d = 0; d < TD; ++d) o[i][d] *= corr;",
                      "for (int d = 0; d < TD; ++d) o[i][d] *= 1.0f;", "cupy"),
                     ("attention.cu", "if (TPR == 2) dot += __shfl_xor_sync", "if (TPR == 3) dot += __shfl_xor_sync",
                      "cupy"),
                     ("attention.cu", "mma_16816(o[j + 1], p[kk], b[2], b[3]);",
                      "mma_16816(o[j + 1], p[kk], b[0], b[1]);", "cupy"),
                     ("attention.py", "np.float32(math.log2(math.e) / math.sqrt(d))  # the kernels' softmax",
                      "np.float32(1.0 / math.sqrt(d))  # the kernels' softmax", "cupy")],
    "stencil.py": [("stencil.py", "if row < H and col < W:", "if row < H and col < W - 1:", "numba"),
                   ("stencil.cu", "if (y < H && x < W) {", "if (y < H && x < W - 1) {", "cupy"),
                   ("stencil.cu", "acc += w[(dy + R) * KW + dx + R] * pixel(in, H, W, y + dy, x + dx);",
                    "acc -= w[(dy + R) * KW + dx + R] * pixel(in, H, W, y + dy, x + dx);", "cupy")],
}


def cu_files(example: Path) -> list[str]:
    """The .cu files an example says to copy with it (its "Copy with it:"
    sentence; docs/hooks/notebooks.py reads it the same way)."""
    from tests import pages

    return pages.hook("notebooks").copy_with_it(example.read_text())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_says_which_files_to_copy_with_it(example):
    text = example.read_text()
    named = set(re.findall(r'load_cuda\("(\w+\.cuh?)"\)', text))
    assert named <= set(cu_files(example)), (
        f"{example.name} loads {sorted(named)}; its 'Copy with it:' line names {cu_files(example)}")


def copy_alone(example: Path, dst: Path) -> Path:
    shutil.copy(example, dst / example.name)
    for cu in cu_files(example):
        shutil.copy(ROOT / "kernels" / "cuda" / cu, dst / cu)
    (dst / "kernels.py").write_text(POISON)
    return dst / example.name


def alone_env() -> dict:
    """The environment of a run outside the repository: Numba's simulator
    without a GPU; the site dir of a PYTHONPATH-installed numpy (the GPU
    machine's wheels) kept, but never the repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    if "NUMBA_ENABLE_CUDASIM" not in env and not _gpu():
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p).resolve() != ROOT]
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(extra)
    return env


def run_alone(script: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script.name, *args], cwd=script.parent, env=alone_env(),
                          capture_output=True, text=True, timeout=900)


def _gpu() -> bool:
    from kernels.device import has_gpu

    return has_gpu()


def test_there_are_examples():
    assert EXAMPLES, "examples/ is empty"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_has_docstring_and_main(example):
    text = example.read_text()
    assert "Run:" in text, "the example says how to run it"
    assert "def main(" in text and 'if __name__ == "__main__":' in text


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_imports_only_what_a_reader_has(example):
    tree = ast.parse(example.read_text())
    bad = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for n in names:
            top = n.split(".")[0]
            if top not in ALLOWED and top not in sys.stdlib_module_names:
                bad.append(n)
    assert not bad, f"{example.name} imports {bad}"
    assert "sys.path" not in example.read_text(), "no sys.path hacks"


def test_examples_share_the_library_text():
    bad = sync.drift()
    assert not bad, "examples whose shared sections differ from the library " \
        "(run `python -m tests.sync`):\n" + "\n".join(f"{e.name}:{n} <- {lib.name}" for e, n, lib in bad)
    assert sync.shared(), "no example shares a section with the library"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_alone_numba(example, tmp_path):
    script = copy_alone(example, tmp_path)
    proc = run_alone(script, "--size", SMALL, "--impl", "numba")
    assert proc.returncode == 0, f"{example.name} failed when copied alone:\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.gpu
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_alone_cupy(example, tmp_path):
    script = copy_alone(example, tmp_path)
    proc = run_alone(script, "--size", SMALL, "--impl", "cupy")
    assert proc.returncode == 0, f"{example.name} failed when copied alone:\n{proc.stdout}\n{proc.stderr}"
    assert "skipped" not in proc.stdout.lower()


def fault_params():
    out = []
    for ex, faults in FAULTS.items():
        for k, (file, old, new, impl) in enumerate(faults):
            marks = [pytest.mark.gpu] if impl == "cupy" else []
            out.append(pytest.param(ex, file, old, new, impl, marks=marks, id=f"{ex}-{impl}-{k}"))
    return out


def test_every_example_has_planted_faults():
    names = {p.name for p in EXAMPLES}
    assert set(FAULTS) == names, f"examples without planted faults: {sorted(names - set(FAULTS))}"
    for ex, faults in FAULTS.items():
        impls = {f[3] for f in faults}
        assert "cupy" in impls, f"{ex}: no planted fault in its CUDA C path"


@pytest.mark.parametrize("example,file,old,new,impl", fault_params())
def test_example_exits_nonzero_on_a_planted_fault(example, file, old, new, impl, tmp_path):
    script = copy_alone(ROOT / "examples" / example, tmp_path)
    target = tmp_path / file
    text = target.read_text()
    assert text.count(old) >= 1, f"{old!r} not in {file}"
    target.write_text(text.replace(old, new))
    proc = run_alone(script, "--size", SMALL, "--impl", impl)
    assert proc.returncode != 0, (f"{example} exited 0 with `{old}` -> `{new}` in {file}:\n"
                                  f"{proc.stdout[-2000:]}")
