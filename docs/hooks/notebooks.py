"""Notebooks: every example becomes docs/notebooks/<name>.ipynb, and every
chapter page that embeds an example offers its notebook (a download link,
and "Open in Colab" when the site knows its GitHub repository).

    python docs/hooks/notebooks.py          # (make notebooks) rewrite the notebooks
    python docs/hooks/notebooks.py --check  # exit 1 if one is stale

An example is a jupytext "percent" script (`# %%` cells). Its notebook is:
1. a note on where it comes from, in both languages;
2. a setup cell that checks for a GPU and the packages (and installs the
   missing ones on Colab, which has no handbook checkout);
3. when the example compiles CUDA C, a cell that writes those .cu files
   beside the notebook (the example looks there first), so the notebook
   runs anywhere without the repository;
4. the example's own cells, with the snippet markers (`--8<--`) dropped.

The notebooks are committed (Colab opens them from GitHub). The build does
not rewrite them: it stops when one is stale, and tests/test_notebooks.py
checks them too.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OUT = ROOT / "docs" / "notebooks"
CUDA = ROOT / "kernels" / "cuda"

INTRO = """\
本笔记本由《GPU 优化手册》的 `examples/{name}` 生成，代码与章节中展示的完全相同。\
第一个代码单元检查 GPU 和依赖包：有 GPU 时 CUDA C（CuPy）与 Numba kernel 都在 GPU 上运行；\
没有 GPU 时 Numba kernel 在 Numba 的 CUDA 模拟器中运行，CuPy 部分跳过。

Generated from `examples/{name}` of the GPU Optimization Handbook; the code is the code the chapter shows. \
The first code cell checks for a GPU and the packages: with a GPU, the CUDA C (CuPy) and Numba kernels run on it; \
without one, the Numba kernels run in Numba's CUDA simulator and the CuPy parts are skipped."""

SETUP = '''\
# Setup: a GPU, and the packages this notebook needs. On Colab the missing
# ones are installed; elsewhere the cell says what to install.
import importlib.util
import shutil
import subprocess
import sys

GPU = shutil.which("nvidia-smi") is not None and subprocess.run(
    ["nvidia-smi", "-L"], capture_output=True).returncode == 0
NEEDED = {{"numpy": "numpy", "numba": "numba", "numba_cuda": "numba-cuda[cu12]"}}
if GPU:
    NEEDED |= {needed}
missing = [pip for module, pip in NEEDED.items() if importlib.util.find_spec(module) is None]
if missing and "google.colab" in sys.modules:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *missing])
elif missing:
    raise ModuleNotFoundError("this notebook needs: pip install " + " ".join(missing))
print("GPU:", "yes" if GPU else "none (Numba runs in its CUDA simulator; the CuPy parts are skipped)")
'''

SOURCES = '''\
# The CUDA C this notebook compiles (kernels/cuda/ in the handbook), written
# beside the notebook, where the example looks for it first.
from pathlib import Path

CUDA_SOURCES = {{
{entries}
}}
for name, text in CUDA_SOURCES.items():
    if not Path(name).is_file() or Path(name).read_text() != text:
        Path(name).write_text(text)
'''


def copy_with_it(script_text: str) -> list[str]:
    """The .cu files an example's docstring says to copy with it: its
    "Copy with it: kernels/cuda/a.cu and kernels/cuda/b.cu (beside this
    file)." sentence, which may run over several lines."""
    m = re.search(r"Copy with it:(.*?)(?:\(|\.\s)", script_text, re.S)
    return sorted(set(re.findall(r"kernels/cuda/(\w+\.cuh?)", m.group(1)))) if m else []


def cuda_files(script_text: str) -> list[str]:
    """The .cu files the example compiles: those it loads by name
    (load_cuda / find_cuda_source) and those it says to copy with it."""
    loaded = re.findall(r'(?:load_cuda|find_cuda_source)\("(\w+\.cuh?)"\)', script_text)
    return sorted(set(loaded) | set(copy_with_it(script_text)))


def to_notebook_json(script: Path, cuda_dir: Path = CUDA) -> str:
    """The notebook of one example, as .ipynb text."""
    import jupytext
    import nbformat

    text = script.read_text()
    body = "".join(line for line in text.splitlines(keepends=True) if "--8<-- [" not in line)
    nb = jupytext.reads(body, fmt="py:percent")
    gpu_only = {"cupy": "cupy-cuda12x"}
    cells = [nbformat.v4.new_markdown_cell(INTRO.format(name=script.name)),
             nbformat.v4.new_code_cell(SETUP.format(needed=repr(gpu_only)))]
    names = cuda_files(text)
    if names:
        entries = []
        for name in names:
            source = (cuda_dir / name).read_text()
            if "'''" in source or source.endswith("\\"):
                raise ValueError(f"{name} cannot be written as a raw ''' string")
            entries.append(f"    {name!r}: r'''{source}''',")
        cells.append(nbformat.v4.new_code_cell(SOURCES.format(entries="\n".join(entries))))
    nb.cells = cells + nb.cells
    for k, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{k}"  # stable ids: the file changes only when the example does
        cell.pop("outputs", None) if cell["cell_type"] != "code" else cell.update(outputs=[], execution_count=None)
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    return jupytext.writes(nb, fmt="ipynb")


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.py"))


def stale() -> list[Path]:
    """Committed notebooks that differ from what their example makes now
    (or are missing, or have no example)."""
    out = [OUT / f"{s.stem}.ipynb" for s in examples()
           if not (OUT / f"{s.stem}.ipynb").is_file() or (OUT / f"{s.stem}.ipynb").read_text() != to_notebook_json(s)]
    stems = {s.stem for s in examples()}
    return out + [p for p in sorted(OUT.glob("*.ipynb")) if p.stem not in stems]


def write() -> list[Path]:
    OUT.mkdir(exist_ok=True)
    stems = {s.stem for s in examples()}
    for p in OUT.glob("*.ipynb"):
        if p.stem not in stems:
            p.unlink()
    written = []
    for script in examples():
        target, text = OUT / f"{script.stem}.ipynb", to_notebook_json(script)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
            written.append(target)
    return written


# --- MkDocs hook ----------------------------------------------------------

LINKS = {
    "zh": ("下载笔记本 {nb}", "在 Colab 中打开"),
    "en": ("Download notebook {nb}", "Open in Colab"),
}


def colab_url(repo_url: str | None, branch: str, nb: str) -> str | None:
    """Colab opens notebooks from GitHub: github.com/<owner>/<repo> only."""
    m = re.match(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", repo_url or "")
    if not m:
        return None
    return f"https://colab.research.google.com/github/{m[1]}/{m[2]}/blob/{branch}/docs/notebooks/{nb}"


def links(markdown: str, src_uri: str, lang: str, repo_url: str | None, branch: str = "main") -> str:
    """The buttons for each example the page embeds, after its title."""
    stems = sorted(set(re.findall(r"examples/(\w+)\.py", markdown)))
    if not stems:
        return markdown
    here = posixpath.dirname(src_uri) or "."
    download, colab = LINKS[lang]
    buttons = []
    for stem in stems:
        nb = f"{stem}.ipynb"
        buttons.append(f"[{download.format(nb=nb)}]({posixpath.relpath('notebooks/' + nb, here)})"
                       "{ .md-button download }")
        url = colab_url(repo_url, branch, nb)
        if url:
            buttons.append(f"[{colab}]({url}){{ .md-button }}")
    line = " ".join(buttons)
    m = re.search(r"^# .*$", markdown, re.M)
    if not m:
        return line + "\n\n" + markdown
    return markdown[:m.end()] + "\n\n" + line + "\n" + markdown[m.end():]


def on_pre_build(config):
    from mkdocs.exceptions import PluginError

    bad = stale()
    if bad:
        raise PluginError("notebooks out of date with their examples (run `make notebooks`): "
                          + ", ".join(str(p.relative_to(ROOT)) for p in bad))


def on_page_markdown(markdown, page, config, files):
    lang = "en" if page.file.src_uri.endswith(".en.md") else "zh"
    branch = config.get("extra", {}).get("notebook_branch", "main")
    return links(markdown, page.file.src_uri, lang, config.get("repo_url"), branch)


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        bad = stale()
        for p in bad:
            print(f"stale: {p.relative_to(ROOT)}")
        sys.exit(1 if bad else 0)
    for p in write():
        print(f"wrote {p.relative_to(ROOT)}")
