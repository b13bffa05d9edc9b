"""What the compiler made of a kernel: ptxas resource reports and SASS.

Works without a GPU: nvcc compiles for sm_90, cuobjdump (with nvdisasm)
disassembles; `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`
provides both where the CUDA toolkit lacks them (the `test` extra does).

Which listings the pages embed is each topic's LISTINGS (kernels/bench);
`python -m kernels.bench.listings` rewrites them in docs/assets/sass/.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CUDA = ROOT / "kernels" / "cuda"
LISTINGS = ROOT / "docs" / "assets" / "sass"
ARCH = "sm_90"


def _search_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(Path(os.environ[env]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    for entry in sys.path:  # pip wheels: nvidia/cu13/bin/{cuobjdump,nvdisasm}
        for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm"):
            dirs.append(Path(entry) / "nvidia" / sub / "bin")
    return dirs


@functools.cache
def tool(name: str) -> str | None:
    for d in _search_dirs():
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


def available() -> bool:
    return all(tool(t) for t in ("nvcc", "cuobjdump", "nvdisasm"))


def _run(cmd: list[str]) -> str:
    env = dict(os.environ)
    nvdisasm = tool("nvdisasm")
    if nvdisasm:  # cuobjdump looks for nvdisasm on PATH
        env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr


def arch_flag(arch: str) -> str:
    """nvcc's flag for one target. An arch-specific target (sm_90a) is named
    by -gencode: nvcc 13.0's -arch=sm_90a shorthand also runs a plain sm_90
    pass, which rejects wgmma and setmaxnreg."""
    if arch.endswith("a"):
        return f"-gencode=arch=compute_{arch[3:]},code={arch}"
    return f"-arch={arch}"


CACHE = ROOT / "build" / "nvcc"  # nvcc's outputs and reports, by a hash of everything that made them
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


@functools.cache
def nvcc_version() -> str:
    return _run([tool("nvcc"), "--version"])


def _closure(code: str, include_dir: Path | None) -> list[str]:
    """The text and every file it includes with quotes from include_dir, recursively."""
    texts, todo, seen = [code], [code], set()
    while include_dir is not None and todo:
        for name in QUOTED_INCLUDE.findall(todo.pop()):
            path = include_dir / name
            if name not in seen and path.is_file():
                seen.add(name)
                texts.append(path.read_text())
                todo.append(texts[-1])
    return texts


def nvcc(code: str, flags: list[str], include_dir: Path | None = None, output: str = "cubin") -> tuple[int, str, bytes]:
    """nvcc over `code` (a temporary k.cu; quoted includes found in
    include_dir) with `flags`, making a .cubin ("cubin"), an object ("o") or
    PTX ("ptx"): (return code, ptxas/nvcc report, output bytes). A successful
    compile is kept under build/nvcc/, keyed by a hash of the text, every file
    it includes with quotes, the flags and nvcc's version, so each source is
    compiled once however many tests and processes ask for it."""
    mode = {"cubin": "-cubin", "o": "-c", "ptx": "-ptx"}[output]
    args = [*flags, mode] + ([f"-I{include_dir}"] if include_dir else [])
    key = hashlib.sha256(json.dumps([nvcc_version(), args, _closure(code, include_dir)]).encode()).hexdigest()[:24]
    out, log = CACHE / f"{key}.{output}", CACHE / f"{key}.log"
    if out.is_file() and log.is_file():
        return 0, log.read_text(), out.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        src, made = Path(tmp) / "k.cu", Path(tmp) / f"k.{output}"
        src.write_text(code)
        proc = subprocess.run([tool("nvcc"), *args, "-o", str(made), str(src)], capture_output=True, text=True,
                              timeout=900)
        report = proc.stdout + proc.stderr
        if proc.returncode != 0:
            return proc.returncode, report, b""
        data = made.read_bytes()
    CACHE.mkdir(parents=True, exist_ok=True)
    for path, blob in ((out, data), (log, report.encode())):  # atomic: other processes may read it now
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_bytes(blob)
        os.replace(part, path)
    return 0, report, data


@functools.cache
def _cubin(src: str, flags: tuple[str, ...] = (), arch: str = ARCH) -> tuple[bytes, str]:
    rc, report, cubin = nvcc((CUDA / src).read_text(), [arch_flag(arch), "-std=c++17", "-Xptxas", "-v", *flags],
                             include_dir=CUDA)
    if rc != 0:
        raise RuntimeError(f"nvcc {src} failed:\n{report}")
    return cubin, report


def resources(src: str) -> dict[str, dict[str, int]]:
    """Per kernel: registers, stack frame and spill bytes from ptxas -v."""
    _, report = _cubin(src)
    out = {}
    for m in re.finditer(r"Function properties for (\w+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill "
                         r"stores, (\d+) bytes spill loads\s*\n.*?Used (\d+) registers", report):
        out[m.group(1)] = {"stack": int(m.group(2)), "spill_stores": int(m.group(3)),
                           "spill_loads": int(m.group(4)), "registers": int(m.group(5))}
    return out


LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def sass(src: str, kernel: str, arch: str = ARCH) -> list[str]:
    """The kernel's SASS for `arch`, one instruction per line ("/*0110*/ @!P0 FMUL R3, R0, 0.5")."""
    cubin, _ = _cubin(src, arch=arch)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        text = _run([tool("cuobjdump"), "-sass", "-fun", kernel, str(path)])
    lines = []
    for m in LINE.finditer(text):
        addr, ins = m.group(1), m.group(2)
        if ins == "NOP" or ins == f"BRA 0x{int(addr, 16):x}":  # padding after the last EXIT
            continue
        lines.append(f"/*{addr}*/ {ins}")
    return lines


def opcode(line: str) -> str:
    """The opcode of one SASS line, with its modifiers, without its predicate
    ("/*0110*/ @!P0 FMUL.FTZ R3, R0, 0.5" -> "FMUL.FTZ")."""
    ins = line.split("*/", 1)[1].strip()
    if ins.startswith("@"):
        ins = ins.split(None, 1)[1]
    return ins.split()[0]


def opcodes(lines: list[str]) -> collections.Counter:
    """Count instructions by opcode (predicate and modifiers dropped: FMUL.FTZ -> FMUL)."""
    return collections.Counter(opcode(ln).split(".")[0] for ln in lines)


def listing_text(src: str, kernel: str) -> str:
    return (f"// {kernel} ({src}), SASS for {ARCH}: nvcc -arch={ARCH} -cubin, cuobjdump -sass\n"
            + "\n".join(sass(src, kernel)) + "\n")


# Instruction-count tables the pages include: (file name, source, kernels).
def counts_table(src: str, kernels: tuple[str, ...]) -> str:
    """A Markdown table: instructions per opcode in each kernel's SASS (whole kernel)."""
    counts = {k: opcodes(sass(src, k)) for k in kernels}
    ops = sorted(set().union(*counts.values()), key=lambda o: (-sum(c[o] for c in counts.values()), o))
    lines = ["| SASS | " + " | ".join(f"`{k}`" for k in kernels) + " |",
             "|---|" + "---:|" * len(kernels)]
    for op in ops:
        lines.append(f"| `{op}` | " + " | ".join(str(counts[k][op]) for k in kernels) + " |")
    lines.append("| **Σ** | " + " | ".join(f"**{sum(counts[k].values())}**" for k in kernels) + " |")
    return "\n".join(lines) + "\n"


def ptxas_verbose(src: str, instances: tuple[str, ...], params: str) -> str:
    """ptxas -v's report for explicit template instantiations of kernels in
    kernels/cuda/<src>: a temporary file includes the source and instantiates
    each `template __global__ void <instance><params>;`."""
    lines = [f'#include "{CUDA / src}"'] + [f"template __global__ void {inst}{params};" for inst in instances]
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "instances.cu"
        cu.write_text("\n".join(lines) + "\n")
        return _run([tool("nvcc"), f"-arch={ARCH}", "-std=c++17", "-cubin", "-Xptxas", "-v",
                     "-o", str(Path(tmp) / "k.cubin"), str(cu)])
