"""The Tensor Core ladder (kernels/tensor_cores.py, kernels/cuda/tensor_cores.cu).

On the GPU: every step, and every configuration of tc_mma_async_t, against a
float64 product of the same FP16 inputs, output poisoned with NaN first, at
16^3, at shapes that are not multiples of its tile, and at 4096^3; cuBLAS's
FP16 GEMM (cublasGemmEx) likewise; bad input refused with an error naming
the argument. On the CPU: the compute-capability refusal (faked device),
configurations and launch shapes, and the SASS: the instructions each step
is about are there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels import tensor_cores as tc

gpu = pytest.mark.gpu


def test_an_older_gpu_is_refused_naming_it_and_the_need():
    with pytest.raises(RuntimeError, match=r"compute capability 8\.0 or newer .*Tesla T4 is 7\.5"):
        tc.require_compute_capability("Tesla T4", (7, 5))
    tc.require_compute_capability("NVIDIA A100", (8, 0))
    tc.require_compute_capability("NVIDIA H200", (9, 0))


def test_wmma_headers_are_found_or_the_error_says_where(tmp_path):
    inc = tmp_path / "cuda" / "include" / "crt"
    inc.mkdir(parents=True)
    (inc / "mma.h").write_text("")
    assert tc.wmma_include_dir({"CUDA_PATH": str(tmp_path / "cuda")}, lambda _: None) == tmp_path / "cuda" / "include"
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("")
    assert tc.wmma_include_dir({}, lambda _: str(nvcc)) == tmp_path / "cuda" / "include"
    if not (tc.Path("/usr/local/cuda/include/crt/mma.h")).is_file():
        with pytest.raises(RuntimeError, match="crt/mma.h comes with the CUDA toolkit"):
            tc.wmma_include_dir({}, lambda _: None)


def test_configs_and_launch_shapes():
    assert tc.TUNED in tc.TC_CONFIGS and tc.ASYNC in tc.TC_CONFIGS
    for cfg in tc.TC_CONFIGS:
        bm, bn, bk, wm, wn, stages = cfg
        assert bm % wm == 0 and bn % wn == 0 and wm % 16 == 0 and wn % 16 == 0 and bk % 16 == 0
        assert tc.config_threads(cfg) <= 1024 and tc.config_smem(cfg) <= 227 * 1024
        grid, block, smem = tc.launch_shape("config", 1000, 1016, cfg)
        assert grid == (-(-1016 // bn), -(-1000 // bm)) and block == (tc.config_threads(cfg),)
    with pytest.raises(ValueError, match="TC_CONFIGS"):
        tc.check_config((64, 64, 32, 32, 32, 2))


def test_every_config_is_instantiated_in_the_source():
    text = tc.CUDA_SOURCE.read_text()
    for cfg in tc.TC_CONFIGS:
        assert f"tc_mma_async_t<{', '.join(map(str, cfg))}>" in text, cfg


def test_sass_has_the_instructions_each_step_is_about():
    from kernels import sass

    if not sass.available():
        pytest.skip("nvcc, cuobjdump or nvdisasm not found")
    text = {k: "\n".join(sass.sass("tensor_cores.cu", k)) for k in ("tc_mma_ldmatrix", "tc_mma_async", "tc_mma_peak")}
    text["tc_wmma_global"] = "\n".join(sass.sass("tensor_cores_wmma.cu", "tc_wmma_global"))
    assert "HMMA.16816.F32" in text["tc_mma_ldmatrix"] and "LDSM" in text["tc_mma_ldmatrix"]
    assert "LDGSTS" in text["tc_mma_async"] and "LDSM" in text["tc_mma_async"]
    assert "LDGSTS" not in text["tc_mma_ldmatrix"]
    assert "HMMA" in text["tc_wmma_global"] and "LDS" not in text["tc_wmma_global"]
    assert "HMMA" in text["tc_mma_peak"] and "LDG" not in text["tc_mma_peak"]
    for src in ("tensor_cores.cu", "tensor_cores_wmma.cu"):
        resources = sass.resources(src)
        assert resources and all(r["spill_stores"] == 0 for r in resources.values()), resources


# --- GPU -------------------------------------------------------------------

def _inputs(M, N, K, seed=0):
    import cupy as cp

    rng = cp.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=cp.float32).astype(cp.float16)
    B = rng.standard_normal((K, N), dtype=cp.float32).astype(cp.float16)
    return A, B, A.astype(cp.float64) @ B.astype(cp.float64)


def _check(C, A, B, ref):
    """FP32 accumulation of exact FP16 products: |C - ref| within K * 2^-20 * (|A| @ |B|)."""
    import cupy as cp

    K = A.shape[1]
    bound = K * 2.0**-20 * (cp.abs(A.astype(cp.float64)) @ cp.abs(B.astype(cp.float64))) + 1e-30
    err = cp.abs(C.astype(cp.float64) - ref)
    assert not bool(cp.isnan(C).any()), "an element was left unwritten (NaN)"
    worst = float((err / bound).max())
    assert worst <= 1.0, f"error {worst:.2f} x the FP32-accumulation bound"


STEP_SHAPES = {"wmma": [(16, 16, 16), (48, 80, 32), (1008, 1024, 80)],
               "mma": [(16, 16, 16), (33, 24, 40), (1000, 1016, 72)]}


def _cases():
    out = []
    for step in tc.STEPS:
        for shape in STEP_SHAPES["wmma" if step in tc.WMMA_STEPS else "mma"]:
            out.append(pytest.param(step, None, shape, marks=gpu, id=f"{step}-{'x'.join(map(str, shape))}"))
    for cfg in tc.TC_CONFIGS:
        out.append(pytest.param("config", cfg, (1000, 1016, 72), marks=gpu, id=f"config{tc.config_name(cfg)}"))
    return out


@pytest.mark.parametrize("step, cfg, shape", _cases())
def test_step_matches_float64(step, cfg, shape):
    import cupy as cp

    M, N, K = shape
    A, B, ref = _inputs(M, N, K)
    C = cp.full((M, N), cp.nan, dtype=cp.float32)
    out = tc.tc_matmul(A, B, C, step=step, config=cfg)
    assert out is C
    _check(C, A, B, ref)


@gpu
@pytest.mark.parametrize("step", tc.STEPS + ("cublas",))
def test_4096_cubed(step):
    import cupy as cp

    A, B, ref = _inputs(4096, 4096, 4096, seed=1)
    C = cp.full((4096, 4096), cp.nan, dtype=cp.float32)
    if step == "cublas":
        tc.cublas_gemm(A, B, C)
    else:
        tc.tc_matmul(A, B, C, step=step)
    _check(C, A, B, ref)


@gpu
def test_allocates_c_when_none_is_given():
    A, B, ref = _inputs(64, 64, 64)
    _check(tc.tc_matmul(A, B, step="mma_async"), A, B, ref)


@gpu
def test_bad_input_is_refused_naming_the_argument():
    import cupy as cp

    A, B, _ = _inputs(64, 64, 64)
    C = cp.empty((64, 64), dtype=cp.float32)
    with pytest.raises(TypeError, match="A"):
        tc.tc_matmul(A.astype(cp.float32), B, C)
    with pytest.raises(TypeError, match="C"):
        tc.tc_matmul(A, B, C.astype(cp.float16))
    with pytest.raises(TypeError, match="B"):
        tc.tc_matmul(A, cp.asnumpy(B), C)
    with pytest.raises(ValueError, match="B"):
        tc.tc_matmul(A, cp.zeros((64, 128), cp.float16)[:, ::2], C)  # not contiguous
    with pytest.raises(ValueError, match="A must start on a 16-byte boundary"):
        tc.tc_matmul(cp.zeros(64 * 64 + 1, cp.float16)[1:].reshape(64, 64), B, C)
    with pytest.raises(ValueError, match="inner dimensions"):
        tc.tc_matmul(A, cp.zeros((32, 64), cp.float16), C)
    with pytest.raises(ValueError, match="C must have shape"):
        tc.tc_matmul(A, B, cp.empty((64, 32), cp.float32))
    with pytest.raises(ValueError, match="multiples of 16"):
        tc.tc_matmul(cp.zeros((64, 40), cp.float16), cp.zeros((40, 64), cp.float16), C, step="wmma_global")
    with pytest.raises(ValueError, match="multiples of 8"):
        tc.tc_matmul(cp.zeros((64, 36), cp.float16), cp.zeros((36, 64), cp.float16), C, step="mma_async")
    with pytest.raises(ValueError, match="step must be one of"):
        tc.tc_matmul(A, B, C, step="fastest")
    buf = cp.zeros(64 * 64 * 4, dtype=cp.uint8)  # C over A's bytes
    A2 = buf[: 64 * 64 * 2].view(cp.float16).reshape(64, 64)
    with pytest.raises(ValueError, match="overlap"):
        tc.tc_matmul(A2, B, buf.view(cp.float32).reshape(64, 64))


@gpu
def test_mma_peak_runs_and_counts_flops():
    import cupy as cp

    out, flops = tc.mma_peak(4, 128, 16)
    assert out.shape == (512,) and bool(cp.isfinite(out).all())
    assert flops == 4 * 4 * 16 * 8 * 2 * 16 * 8 * 16



def test_the_async_main_loop_is_lean():
    """The page: "in SASS (sm_90), step 4's main loop is 64 instructions per
    slice of K: 32 HMMA, 12 LDSM, one barrier and 19 others; the copies of
    the next slice sit in a branch beside it" (tc_mma_async, the loop that
    the backward branch after the last HMMA closes)."""
    import re

    from kernels import sass

    if not sass.available():
        pytest.skip("nvcc, cuobjdump or nvdisasm not found")
    lines = sass.sass("tensor_cores.cu", "tc_mma_async")
    ops = [sass.opcode(ln) for ln in lines]
    last_hmma = max(i for i, op in enumerate(ops) if op.startswith("HMMA"))
    end = next(i for i in range(last_hmma, len(ops)) if ops[i].startswith("BRA"))
    target = int(re.search(r"BRA (0x[0-9a-f]+)", lines[end]).group(1), 16)
    start = next(i for i, ln in enumerate(lines) if int(re.match(r"/\*([0-9a-f]+)\*/", ln).group(1), 16) == target)
    body = [op.split(".")[0] for op in ops[start:end + 1]]
    assert (body.count("HMMA"), body.count("LDSM"), body.count("BAR")) == (32, 12, 1), body
    assert "LDGSTS" not in body and len(body) == 64, body
    assert any(op.startswith("LDGSTS") for op in ops), "the copies are elsewhere in the kernel"


def int_mma_sass(arch: str) -> dict[str, list[str]]:
    """The SASS of kernels/cuda/tc_int_probe.cu's two kernels for one architecture."""
    from kernels import sass

    return {k: sass.sass("tc_int_probe.cu", k, arch=arch) for k in ("mma_s8", "mma_s4")}


def test_hopper_has_no_int4_tensor_instruction():
    """The page: for sm_80, sm_86 and sm_89 the INT4 mma.sync is one IMMA
    with S4 operands; for sm_90 there is no S4 instruction, the INT4 product
    is done with INT8 IMMA."""
    from kernels import sass

    if not sass.available():
        pytest.skip("nvcc, cuobjdump or nvdisasm not found")
    for arch in ("sm_80", "sm_86", "sm_89"):
        k = {name: [sass.opcode(ln) for ln in lines] for name, lines in int_mma_sass(arch).items()}
        assert "IMMA.16864.S4.S4" in k["mma_s4"] and "IMMA.16832.S8.S8" in k["mma_s8"], arch
    k = {name: [sass.opcode(ln) for ln in lines] for name, lines in int_mma_sass("sm_90").items()}
    assert "IMMA.16832.S8.S8" in k["mma_s8"]
    assert not any(".S4" in op for op in k["mma_s4"]) and "IMMA.16832.S8.S8" in k["mma_s4"], k["mma_s4"]
    count = {name: len(ops) for name, ops in k.items()}
    assert count["mma_s8"] <= 60 and count["mma_s4"] >= 200, count  # "from 40 SASS instructions to over 200"


B1_MMA = r"""
extern "C" __global__ void mma_b1(const unsigned* a, const unsigned* b, int* c) {
    unsigned a0 = a[threadIdx.x], a1 = a[threadIdx.x + 32], a2 = a[threadIdx.x + 64], a3 = a[threadIdx.x + 96];
    unsigned b0 = b[threadIdx.x], b1 = b[threadIdx.x + 32];
    int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    c[threadIdx.x] = d0 + d1 + d2 + d3;
}
"""


def test_hopper_keeps_the_one_bit_and_popc_tensor_instruction():
    """The page: besides INT8, sm_90 still compiles the 1-bit AND-and-count
    mma.sync to one BMMA.168256.AND.POPC."""
    import tempfile

    from kernels import sass

    if not sass.available():
        pytest.skip("nvcc, cuobjdump or nvdisasm not found")
    rc, report, cubin = sass.nvcc(B1_MMA, ["-arch=sm_90"])
    assert rc == 0, report
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.cubin").write_bytes(cubin)
        text = sass._run([sass.tool("cuobjdump"), "-sass", str(Path(tmp) / "k.cubin")])
    ops = [ln.split("*/", 1)[1].split()[0] for ln in text.splitlines() if "MMA" in ln and "*/" in ln]
    assert ops == ["BMMA.168256.AND.POPC"], ops


# ---------------------------------------------------------------------------
# What this chapter gives the shared proofs (tests/chapters.py finds it here).

# Wrong results planted in a copy of examples/tensor_cores.py: the example must exit
# non-zero (tests/test_examples.py), and so must its notebook
# (tests/test_notebooks.py). (file in the copy, old, new, impl: numba faults
# run in the simulator on the CPU, cupy faults on the GPU)
# steps 4 and 5 read slice 0 of A for every slice; the launcher drops the last row of blocks;
# the INT8 layer forgets the activations' scale
EXAMPLE_FAULTS = [
    ("tensor_cores.cu", "in ? a_src[i] + k0 : A", "in ? a_src[i] : A", "cupy"),
    ("tensor_cores.py", "(M + bm - 1) // bm), (threads,)", "M // bm), (threads,)", "cupy"),
    ("tensor_cores.py",
     "return C.astype(cp.float64) * sx * sw[None, :]",
     "return C.astype(cp.float64) * sw[None, :]",
     "cupy"),
]
