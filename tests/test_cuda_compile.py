"""Every CUDA C source in kernels/ compiles, exactly as its wrapper compiles
it (kernels.device.all_cuda_builds: the text NVRTC is given, quoted
includes resolved, and its options), without warnings and without register
spills (ptxas -v report): with nvcc for sm_90 on any machine, GPU or not,
and with NVRTC (CuPy's RawModule) for the GPU at hand. nvcc's outputs are
kept under build/nvcc (kernels.sass.nvcc), so a source is compiled once.

The slow proof, every architecture a reader may have, runs in `make check`.
"""

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "kernels").rglob("*.cu"))
SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def nvcc():
    for cand in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).exists():
            return cand
    return None


@functools.cache
def builds(cc: tuple[int, int] = (9, 0)) -> dict:
    """source name -> its builds for compute capability cc: one, or one per
    set of options its owner compiles it with (hopper_gemm.cu: a build per
    number format), never the same one twice."""
    from kernels.device import all_cuda_builds

    out: dict[str, list] = {}
    for b in all_cuda_builds(cc):
        assert all(b.options != o.options for o in out.get(b.source, [])), f"{b.source} is built twice alike"
        out.setdefault(b.source, []).append(b)
    return out


def test_there_are_cuda_sources():
    assert SOURCES


def test_every_source_has_its_builds():
    """Each kernels/cuda source is compiled for a GPU as its owner's
    cuda_builds says, else as it is; the compiles below give nvcc that text
    alone in an empty folder, as NVRTC sees it: a quoted #include left in
    it fails there (attention.cu's did, on the GPU only, in the occupancy
    check)."""
    assert set(builds()) == {s.name for s in SOURCES}
    # FP16, BF16, two FP8s with Bt (N x K); FP16 and BF16 with B (K x N)
    assert [len(builds()["hopper_gemm.cu"]), len(builds()["vector_add.cu"])] == [6, 1]


def test_a_plain_build_compiles_as_the_examples_load_cuda_does():
    """The library's plain build and the examples' load_cuda (its master in
    kernels/standalone.py) give NVRTC the same options."""
    import ast
    import inspect
    import textwrap

    from kernels import standalone
    from kernels.device import NVRTC_OPTIONS

    tree = ast.parse(textwrap.dedent(inspect.getsource(standalone.load_cuda)))
    given = [ast.literal_eval(k.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
             for k in n.keywords if k.arg == "options"]
    assert given == [NVRTC_OPTIONS]


EXPECT_SPILLS = re.compile(r"//\s*EXPECT_SPILLS:\s*(\w+)")
PROPS = re.compile(r"Function properties for (\w+)\s*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores, "
                   r"(\d+) bytes spill loads")


@pytest.mark.skipif(nvcc() is None, reason="nvcc not found (install the CUDA toolkit)")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_compiles_for_sm90_as_its_wrapper_does_without_spills(src):
    """The build's text alone in an empty folder, its options, sm_90 unless
    they name a target (sm_90a): no warnings; no kernel spills registers,
    except those a source marks `// EXPECT_SPILLS: name` (a lesson on
    register pressure), which must."""
    from kernels import sass

    for build in builds()[src.name]:
        flags = build.nvcc_flags("sm_90")
        rc, report, _ = sass.nvcc(build.code, [*flags, "-Xptxas", "-v", "-Werror", "all-warnings"], output="o")
        assert rc == 0, (flags, report)
        props = {m.group(1): (m.group(2), m.group(3)) for m in PROPS.finditer(report)}
        assert props, f"no ptxas report ({flags}):\n{report}"
        expected = set(EXPECT_SPILLS.findall(src.read_text()))
        for name, spill in props.items():
            if name in expected:
                assert spill != ("0", "0"), f"{name} is marked EXPECT_SPILLS but does not spill"
            else:
                assert spill == ("0", "0"), f"{name} spills registers ({flags}):\n{report}"
        assert expected <= set(props), f"EXPECT_SPILLS names unknown kernels: {expected - set(props)}"
        assert "warning" not in report.lower(), report


@pytest.mark.gpu
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_compiles_with_nvrtc_for_this_gpu_as_its_wrapper_does(src):
    """NVRTC, through the same build the wrappers use, for this GPU's
    compute capability: every extern "C" kernel of the file is there."""
    from kernels.device import device_info
    from kernels.occupancy import cuda_entry_points

    for build in builds(device_info(0)["cc"])[src.name]:
        module = build.module()
        module.compile()
        for name in cuda_entry_points(src.name):
            module.get_function(name)


def test_spill_check_sees_a_spill(tmp_path):
    """The spill parser is not vacuous: a kernel capped at 16 registers that
    keeps a large array live does spill, and the report says so."""
    if nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit)")
    src = tmp_path / "spill.cu"
    src.write_text("""
extern "C" __global__ void __launch_bounds__(1024, 2) spill(const float* x, float* out) {
    float v[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = x[threadIdx.x * 64 + i];
    float s = 0.f;
    #pragma unroll
    for (int i = 0; i < 64; ++i) s += v[i] * v[63 - i] + v[(i * 7) % 64];
    out[threadIdx.x] = s;
}
""")
    proc = subprocess.run([nvcc(), "-arch=sm_90", "-maxrregcount=16", "-Xptxas", "-v", "-c", str(src),
                           "-o", str(tmp_path / "s.o")], capture_output=True, text=True, timeout=300)
    spills = SPILLS.findall(proc.stdout + proc.stderr)
    assert any(s != ("0", "0") for s in spills), proc.stdout + proc.stderr


def cublas_include(tmp_path: Path) -> Path | None:
    """A folder holding cublas_v2.h: the CUDA toolkit's, an installed
    nvidia-cublas package's, or the headers unpacked from an nvidia-cublas
    wheel in a local package index (the CPU machines' image has one)."""
    import glob
    import site
    import zipfile

    tool = nvcc()
    dirs = [Path(tool).resolve().parent.parent / "include"] if tool else []
    dirs += [Path("/usr/local/cuda/include")]
    for sp in site.getsitepackages():
        dirs += [Path(p) for p in glob.glob(f"{sp}/nvidia/*/include")]
    for d in dirs:
        if (d / "cublas_v2.h").is_file():
            return d
    for whl in sorted(glob.glob("/opt/pypi*/files/nvidia_cublas-*.whl")):
        with zipfile.ZipFile(whl) as z:
            members = [m for m in z.namelist() if "/include/" in m and m.endswith(".h")]
            z.extractall(tmp_path / "cublas", members)
        found = list((tmp_path / "cublas").rglob("cublas_v2.h"))
        if found:
            return found[0].parent
    return None


@pytest.mark.skipif(nvcc() is None, reason="nvcc not found (install the CUDA toolkit)")
def test_cublas_snippet_compiles(tmp_path):
    """The cublasGemmEx call the matmul page shows (examples/cublas_sgemm.cpp)
    compiles against the real cuBLAS header, without warnings."""
    inc = cublas_include(tmp_path)
    if inc is None:
        pytest.skip("cublas_v2.h not found (the CUDA toolkit's cuBLAS, or pip install nvidia-cublas)")
    src = ROOT / "examples" / "cublas_sgemm.cpp"
    proc = subprocess.run([nvcc(), "-c", "-x", "cu", "-arch=sm_90", f"-I{inc}", "-Werror", "all-warnings",
                           str(src), "-o", str(tmp_path / "gemmex.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    sym = subprocess.run(["nm", str(tmp_path / "gemmex.o")], capture_output=True, text=True).stdout
    assert "sgemm_row_major" in sym and "cublasGemmEx" in sym, sym


# The architectures a reader's GPU may have: Turing, Ampere (A100, consumer
# Ampere), Ada, Hopper. A kernel that needs Hopper-only instructions would
# mark itself `// REQUIRES: sm_90a` and be compiled for that target alone.
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
REQUIRES = re.compile(r"//\s*REQUIRES:\s*(sm_\w+)")


@pytest.mark.slow
@pytest.mark.skipif(nvcc() is None, reason="nvcc not found (install the CUDA toolkit)")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_compiles_for_every_architecture_a_reader_may_have(src, tmp_path):
    """One nvcc run per build of a source (the text its wrapper compiles,
    with its defines: hopper_attention.cu comes after part of
    hopper_gemm.cu), a cubin per architecture (-gencode, built in parallel:
    --threads 0), warnings as errors: the kernels are not tied to the H200
    they were measured on."""
    required = REQUIRES.findall(src.read_text())
    archs = tuple(required) or ARCHS
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in archs]
    for i, build in enumerate(builds()[src.name]):
        text = tmp_path / f"{i}_{src.name}"
        text.write_text(build.code)
        options = build.nvcc_flags()[1:]  # the wrapper's options (-std, defines) without its one target
        proc = subprocess.run([nvcc(), "--threads", "0", *gencode, *options, "-Werror", "all-warnings",
                               "-c", str(text), "-o", str(tmp_path / "k.o")], capture_output=True, text=True,
                              timeout=600)
        report = proc.stdout + proc.stderr
        assert proc.returncode == 0, (options, report)
        assert "warning" not in report.lower(), (options, report)
