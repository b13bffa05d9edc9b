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

import os
import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OUT = ROOT / "docs" / "notebooks"
CUDA = ROOT / "kernels" / "cuda"

INTRO = {
    "zh": "本笔记本由《GPU 优化手册》的 `examples/{name}` 生成，代码与章节中展示的完全相同。"
          "第一个代码单元检查 GPU 和依赖包：有 GPU 时 CUDA C（CuPy）与 Numba 核函数都在 GPU 上运行；"
          "没有 GPU 时 Numba 核函数在 Numba 的 CUDA 模拟器中运行，CuPy 部分跳过。",
    "en": "Generated from `examples/{name}` of the GPU Optimization Handbook; the code is the code the chapter "
          "shows. The first code cell checks for a GPU and the packages: with a GPU, the CUDA C (CuPy) and Numba "
          "kernels run on it; without one, the Numba kernels run in Numba's CUDA simulator and the CuPy parts "
          "are skipped.",
}

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
# What this run ran on: the GPU and its driver, the packages, and (from the
# handbook's `make notebooks-run`) the date and the handbook's commit.
import datetime
import os
import platform
from importlib.metadata import PackageNotFoundError, version

if GPU:
    print("GPU:", subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip().replace(", ", ", driver "))
else:
    print("GPU: none (Numba runs in its CUDA simulator; the CuPy parts are skipped)")
found = []
for package in ("numpy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x"):
    try:
        found.append(f"{{package}} {{version(package)}}")
    except PackageNotFoundError:
        pass
print("Python", platform.python_version() + ";", ", ".join(found))
print("Run", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
      + (f", handbook commit {{os.environ['HANDBOOK_COMMIT'][:12]}}" if os.environ.get("HANDBOOK_COMMIT") else ""))
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


# --- the Chinese of the examples' markdown cells ---------------------------

TEXT = EXAMPLES / "zh"  # examples/zh/<example>.md: beside the examples it translates (not a page of the site)
LANGS = ("zh", "en")  # zh: <example>.ipynb, the default site's; en: <example>.en.ipynb
CELL_LINE = re.compile(r"^<!-- cell (\d+)/(\d+) en:([0-9a-f]{12}) -->$", re.M)
TEXT_HEADER = ("<!-- examples/{name}: the Chinese of its markdown cells, in order. Each section begins with a "
               "line naming the English cell it translates (cell k of n, and a hash of that cell's text): when the "
               "English changes, the notebooks stop building until the Chinese follows it. A paragraph is one "
               "line. -->\n")
CJK = re.compile(r"[\u4e00-\u9fff]")


def notebook_path(stem: str, lang: str, out: Path = OUT) -> Path:
    return out / (f"{stem}.ipynb" if lang == "zh" else f"{stem}.{lang}.ipynb")


def text_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]


def example_notebook(script_text: str):
    """The example as jupytext reads it, the snippet markers (--8<--) dropped."""
    import jupytext

    body = "".join(line for line in script_text.splitlines(keepends=True) if "--8<-- [" not in line)
    return jupytext.reads(body, fmt="py:percent")


def english_cells(script: Path) -> list[str]:
    return [c.source for c in example_notebook(script.read_text()).cells if c.cell_type == "markdown"]


def skeleton(script: Path) -> str:
    """A text file for the Chinese of `script`'s markdown cells, the English
    in place (python docs/hooks/notebooks.py --skeleton NAME)."""
    english = english_cells(script)
    return TEXT_HEADER.format(name=script.name) + "".join(
        f"\n<!-- cell {k}/{len(english)} en:{text_hash(e)} -->\n\n{e}\n" for k, e in enumerate(english, 1))


def chinese_cells(script: Path, text_dir: Path = TEXT) -> list[str]:
    """The Chinese of the example's markdown cells, in order; ValueError when
    the text file is missing, has another number of cells, translates an
    older English text, or leaves a cell untranslated."""
    english = english_cells(script)
    path = text_dir / f"{script.stem}.md"
    if not path.is_file():
        raise ValueError(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} is missing: the Chinese "
                         f"of {script.name}'s markdown cells (`python docs/hooks/notebooks.py --skeleton "
                         f"{script.stem}` writes one with the English in place)")
    parts = CELL_LINE.split(path.read_text())[1:]
    cells = [parts[i:i + 4] for i in range(0, len(parts), 4)]
    if len(cells) != len(english):
        raise ValueError(f"{path.name}: {len(cells)} cells, but {script.name} has {len(english)} markdown cells")
    out = []
    for i, ((k, n, h, body), en) in enumerate(zip(cells, english), 1):
        if (int(k), int(n)) != (i, len(english)):
            raise ValueError(f"{path.name}: section {i} is headed cell {k}/{n}, not {i}/{len(english)}")
        if h != text_hash(en):
            raise ValueError(f"{path.name}: cell {i} translates an older text of {script.name}'s markdown cell {i} "
                             f"(now {text_hash(en)}): bring the Chinese up to date and its hash with it")
        body = body.strip()
        if not CJK.search(body):
            raise ValueError(f"{path.name}: cell {i} has no Chinese")
        out.append(body)
    return out


def to_notebook_json(script: Path, cuda_dir: Path = CUDA, lang: str = "zh", text_dir: Path = TEXT) -> str:
    """The notebook of one example in one language, as .ipynb text, without
    outputs (the code cells are the same in every language)."""
    import jupytext
    import nbformat

    text = script.read_text()
    nb = example_notebook(text)
    if lang == "zh":
        chinese = iter(chinese_cells(script, text_dir))
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = next(chinese)
    gpu_only = {"cupy": "cupy-cuda12x"}
    cells = [nbformat.v4.new_markdown_cell(INTRO[lang].format(name=script.name)),
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
    own = list(nb.cells)
    title = [own.pop(0)] if own and own[0].cell_type == "markdown" else []  # its "# Title" and summary first
    nb.cells = title + cells + own
    for k, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{k}"  # stable ids: the file changes only when the example does
        cell.pop("outputs", None) if cell["cell_type"] != "code" else cell.update(outputs=[], execution_count=None)
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    return jupytext.writes(nb, fmt="ipynb")


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.py"))


# --- outputs of a real run -------------------------------------------------
#
# `make notebooks-run` (a GPU) executes each notebook through a Jupyter
# kernel and stores its outputs in both languages' notebooks, with the run's
# stamp in the notebook's metadata ("handbook_run": GPU, driver, commit,
# date, and the hash of the code it ran). Regenerating a notebook keeps those
# outputs only while its code is the code that ran; the build stops on a
# notebook whose outputs are missing or came from other code.

RUN_KEY = "handbook_run"
MAX_NOTEBOOK_BYTES = 200_000  # a notebook with its outputs


def _read(text: str):
    import nbformat

    return nbformat.reads(text, as_version=4)


def _write(nb) -> str:
    import jupytext

    return jupytext.writes(nb, fmt="ipynb")


def code_of(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def code_hash(nb) -> str:
    import json

    return text_hash(json.dumps(code_of(nb)))


def with_outputs(fresh_text: str, ran_text: str | None) -> str:
    """The fresh notebook (no outputs) with the outputs and run stamp of
    `ran_text` (a committed notebook) when both hold the same code; else the
    fresh one as it is."""
    if ran_text is None:
        return fresh_text
    fresh, ran = _read(fresh_text), _read(ran_text)
    if RUN_KEY not in ran.metadata or code_of(fresh) != code_of(ran):
        return fresh_text
    code = [c for c in ran.cells if c.cell_type == "code"]
    for cell, old in zip((c for c in fresh.cells if c.cell_type == "code"), code):
        cell.outputs, cell.execution_count = old.outputs, old.execution_count
    fresh.metadata[RUN_KEY] = ran.metadata[RUN_KEY]
    return _write(fresh)


def expected(script: Path, lang: str) -> str:
    """What docs/notebooks/ should hold for `script` in `lang`: the notebook
    made now, with the committed outputs when its code is the code that ran."""
    path = notebook_path(script.stem, lang)
    return with_outputs(to_notebook_json(script, lang=lang), path.read_text() if path.is_file() else None)


# --- the notebook pages ----------------------------------------------------
#
# Each notebook is a page of the site in each language: docs/notebooks/
# <example>.md and <example>.en.md, written by `make notebooks` (front matter
# with the title, and one directive). The hook below replaces the directive
# with the notebook of the page's language, rendered by mkdocs-jupyter's
# converter (code, outputs and images as JupyterLab shows them). The pages
# are ordinary Markdown pages, so the i18n plugin pairs them, search indexes
# them, and the language switch leads between them (mkdocs-jupyter's own
# plugin cannot: mkdocs-static-i18n treats .ipynb pages as static files).

DIRECTIVE = re.compile(r"^<!-- notebook (\w+) -->$", re.M)
PAGE_WORDS = {
    "zh": {"prefix": "笔记本：", "see": "看运行结果", "ran": "下面的输出来自 {gpu}（驱动 {driver}）上的一次运行，{date}，"
           "手册提交 {commit}。", "unrun": "这个笔记本还没有在 GPU 上运行过：下面只有代码，没有输出。"},
    "en": {"prefix": "Notebook: ", "see": "See it run", "ran": "The outputs below come from one run on {gpu} "
           "(driver {driver}), {date}, handbook commit {commit}.",
           "unrun": "This notebook has not run on a GPU yet: code only, no outputs below."},
}


def title_of(script: Path, lang: str) -> str:
    """The notebook's title: its first heading, in `lang`."""
    cell = (chinese_cells(script) if lang == "zh" else english_cells(script))[0]
    m = re.search(r"^# (.+)$", cell, re.M)
    return m[1].strip() if m else script.stem


def page_path(stem: str, lang: str, out: Path = OUT) -> Path:
    return out / (f"{stem}.md" if lang == "zh" else f"{stem}.{lang}.md")


SEARCH_BOOST = 0.2  # Material's search: a notebook page's weight beside a chapter's 1.0


def page_text(script: Path, lang: str) -> str:
    """The page: its title (the notebook's, whose own heading the page then
    leaves out) and the directive the hook renders. Search ranks it below the
    chapters (boost < 1): the chapter explains a term, its notebook only uses it."""
    return (f"---\nsearch:\n  boost: {SEARCH_BOOST}\n---\n\n"
            f"# {PAGE_WORDS[lang]['prefix']}{title_of(script, lang)}\n\n"
            f"<!-- Written by docs/hooks/notebooks.py (make notebooks); the hook renders the notebook here. -->\n\n"
            f"<!-- notebook {script.stem} -->\n")


NOTEBOOK_CSS = "assets/notebook.css"  # mkdocs-jupyter's styles, written once per build (on_post_build)


def _converted(path: Path, drop_title: bool = False) -> tuple[str, list[str]]:
    """mkdocs-jupyter's HTML of a notebook: (body, its inline <style>s).
    drop_title: without the first cell's "# Title" line (the page has it)."""
    import logging
    import tempfile

    from mkdocs_jupyter.nbconvert2 import nb2html

    import json
    from importlib.metadata import version

    # a conversion takes seconds and every build (and test build) asks again: kept in .cache/ by content
    key = text_hash(json.dumps([path.read_text(), drop_title, version("mkdocs-jupyter"), version("nbconvert")]))
    cached = ROOT / ".cache" / "notebook-html" / f"{key}.json"
    if cached.is_file():
        body, styles = json.loads(cached.read_text())
        return body, styles
    logging.getLogger("mkdocs_jupyter").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        if drop_title:
            nb = _read(path.read_text())
            first = nb.cells[0]
            if first.cell_type == "markdown" and first.source.startswith("# "):
                first.source = first.source.partition("\n")[2].lstrip("\n")
            path = Path(folder) / path.name
            path.write_text(_write(nb))
        html = nb2html(str(path), theme="light", include_requirejs=False, custom_mathjax_url="")
    styles = re.findall(r"<style[^>]*>(.*?)</style>", html, re.S)
    body = re.sub(r"<style[^>]*>.*?</style>|<script[^>]*>.*?</script>|<!--.*?-->", "", html, flags=re.S).strip()
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")  # parallel builds (test workers) write their own, then rename
    tmp.write_text(json.dumps([body, styles]))
    tmp.replace(cached)
    return body, styles


def render(stem: str, lang: str, page_url: str, repo_url: str | None, branch: str = "main") -> str:
    """The page body of one notebook: where its outputs come from, the
    buttons, then the notebook as mkdocs-jupyter renders it."""
    import html as html_lib
    import posixpath

    path = notebook_path(stem, lang)
    nb = _read(path.read_text())
    stamp = nb.metadata.get(RUN_KEY)
    words = PAGE_WORDS[lang]
    note = (words["ran"].format(gpu=stamp["gpu"], driver=stamp["driver"], date=stamp["date"][:10],
                                commit=f"`{stamp['commit'][:12]}`") if stamp else words["unrun"])
    buttons = notebook_buttons(stem, lang, "notebooks", repo_url, branch)
    body, _ = _converted(path, drop_title=True)
    css = posixpath.relpath(NOTEBOOK_CSS, page_url or ".")  # one file at the site's root, for every language
    return (f"{note}\n\n{' '.join(buttons)}\n\n"
            f'<link rel="stylesheet" href="{html_lib.escape(css)}">\n\n'
            f'<div class="handbook-notebook" markdown="0">\n{body}\n</div>\n')


def stale() -> list[Path]:
    """Committed notebooks that differ from what their example makes now
    (or are missing, or have no example)."""
    out = []
    for s in examples():
        for lang in LANGS:
            path = notebook_path(s.stem, lang)
            if not path.is_file() or path.read_text() != expected(s, lang):
                out.append(path)
        for lang in LANGS:
            page = page_path(s.stem, lang)
            if not page.is_file() or page.read_text() != page_text(s, lang):
                out.append(page)
    known = {f(s.stem, lang).name for s in examples() for lang in LANGS for f in (notebook_path, page_path)}
    return out + [p for p in sorted(OUT.glob("*.ipynb")) + sorted(OUT.glob("*.md")) if p.name not in known]


def unrun() -> list[Path]:
    """Committed notebooks without outputs from a run of their present code."""
    out = []
    for s in examples():
        for lang in LANGS:
            path = notebook_path(s.stem, lang)
            nb = _read(path.read_text()) if path.is_file() else None
            if nb is None or nb.metadata.get(RUN_KEY, {}).get("code_hash") != code_hash(nb):
                out.append(path)
    return out


def write() -> list[Path]:
    OUT.mkdir(exist_ok=True)
    known = {f(s.stem, lang).name for s in examples() for lang in LANGS for f in (notebook_path, page_path)}
    for p in list(OUT.glob("*.ipynb")) + list(OUT.glob("*.md")):
        if p.name not in known:
            p.unlink()
    written = []
    for script in examples():
        for lang in LANGS:
            for target, text in ((notebook_path(script.stem, lang), expected(script, lang)),
                                 (page_path(script.stem, lang), page_text(script, lang))):
                if not target.is_file() or target.read_text() != text:
                    target.write_text(text)
                    written.append(target)
    return written


def output_problems(nb) -> list[str]:
    """What keeps a run's outputs from being shown: an error in a cell, or
    the notebook past MAX_NOTEBOOK_BYTES."""
    problems = [f"cell {k}: {o.get('ename')}: {o.get('evalue')}" for k, c in enumerate(nb.cells)
                if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    size = len(_write(nb).encode())
    if size > MAX_NOTEBOOK_BYTES:
        problems.append(f"{size} bytes with its outputs (at most {MAX_NOTEBOOK_BYTES})")
    return problems


def run(stems=None, commit: str | None = None, timeout: int = 1800) -> list[Path]:
    """make notebooks-run: execute each example's notebook through a Jupyter
    kernel, alone in an empty folder, at its default sizes, and store the
    outputs and the run's stamp in both languages' notebooks. GPU only."""
    import datetime
    import os
    import shutil
    import subprocess
    import tempfile
    import time

    from nbclient import NotebookClient

    smi = shutil.which("nvidia-smi")
    query = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True) if smi else None
    if query is None or query.returncode != 0 or not query.stdout.strip():
        raise SystemExit("make notebooks-run needs an NVIDIA GPU: the outputs it stores are a GPU's")
    gpu, driver = [x.strip() for x in query.stdout.strip().splitlines()[0].split(",")]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from kernels.harness import git_commit  # HANDBOOK_COMMIT on a copied tree, else HEAD (+dirty)

    commit = commit or git_commit()
    os.environ["HANDBOOK_COMMIT"] = commit  # the setup cell prints it
    # the kernel sees no checkout: a notebook stands alone (its .cu files are in it)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and not Path(p).resolve().is_relative_to(ROOT))
    written = []
    for script in examples():
        if stems and script.stem not in stems:
            continue
        nb = _read(to_notebook_json(script, lang="en"))
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:  # outside the repository: the notebook stands alone
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": folder}}).execute()
        problems = output_problems(nb)
        if problems:
            raise RuntimeError(f"{script.stem}: " + "; ".join(problems))
        stamp = {"gpu": gpu, "driver": driver, "commit": commit, "code_hash": code_hash(nb),
                 "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "seconds": round(time.perf_counter() - started, 1)}
        nb.metadata[RUN_KEY] = stamp
        ran = _write(nb)
        for lang in LANGS:
            target = notebook_path(script.stem, lang)
            target.write_text(with_outputs(to_notebook_json(script, lang=lang), ran))
            written.append(target)
        print(f"{script.stem}: ran in {stamp['seconds']} s on {gpu}", flush=True)
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


def notebook_buttons(stem: str, lang: str, here: str, repo_url: str | None, branch: str = "main") -> list[str]:
    """Download (the i18n plugin serves <stem>.en.ipynb as <stem>.ipynb on the
    English site) and, for a GitHub repository, Colab: links from a page in
    docs/<here>/."""
    download, colab = LINKS[lang]
    buttons = [f"[{download.format(nb=f'{stem}.ipynb')}]({posixpath.relpath(f'notebooks/{stem}.ipynb', here)})"
               "{ .md-button download }"]
    url = colab_url(repo_url, branch, notebook_path(stem, lang).name)
    if url:
        buttons.append(f"[{colab}]({url}){{ .md-button }}")
    return buttons


def links(markdown: str, src_uri: str, lang: str, repo_url: str | None, branch: str = "main") -> str:
    """The buttons for each example the page embeds, after its title: its
    notebook page (the outputs of a run), the notebook to download, Colab."""
    stems = sorted(set(re.findall(r"examples/(\w+)\.py", markdown)))
    if not stems:
        return markdown
    here = posixpath.dirname(src_uri) or "."
    buttons = []
    for stem in stems:
        page = posixpath.relpath(f"notebooks/{stem}.md", here)  # the i18n plugin leads it to the page's language
        buttons.append(f"[{PAGE_WORDS[lang]['see']} {stem}]({page}){{ .md-button .md-button--primary }}")
        buttons += notebook_buttons(stem, lang, here, repo_url, branch)
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
    bad = unrun()
    if bad:
        raise PluginError("notebooks without the outputs of a GPU run of their present code "
                          "(run `make notebooks-run` on a GPU and commit them): "
                          + ", ".join(str(p.relative_to(ROOT)) for p in bad))


def on_page_markdown(markdown, page, config, files):
    lang = "en" if page.file.src_uri.endswith(".en.md") else "zh"
    branch = config.get("extra", {}).get("notebook_branch", "main")
    m = DIRECTIVE.search(markdown)
    if m and page.file.src_uri.startswith("notebooks/"):
        return DIRECTIVE.sub(lambda _: render(m[1], lang, page.url, config.get("repo_url"), branch), markdown)
    return links(markdown, page.file.src_uri, lang, config.get("repo_url"), branch)


def notebook_css() -> str:
    """mkdocs-jupyter's styles for its notebook HTML, and the site's dark
    scheme for it."""
    import tempfile

    import nbformat

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), str(path))
        _, styles = _converted(path)
    dark = """
[data-md-color-scheme="slate"] .jupyter-wrapper {
  --jp-layout-color0: var(--md-default-bg-color); --jp-layout-color1: var(--md-default-bg-color);
  --jp-content-font-color0: var(--md-default-fg-color); --jp-content-font-color1: var(--md-default-fg-color);
  --jp-ui-font-color1: var(--md-default-fg-color); --jp-cell-editor-background: var(--md-code-bg-color);
  --jp-cell-editor-border-color: var(--md-default-fg-color--lightest);
  --jp-rendermime-error-background: transparent;
}
[data-md-color-scheme="slate"] .jupyter-wrapper .highlight pre { color: var(--md-code-fg-color); }
/* long code (a notebook carries its .cu files) and long outputs scroll in their own box */
.jupyter-wrapper .jp-InputArea-editor pre, .jupyter-wrapper .jp-OutputArea-output pre { max-height: 40em; overflow: auto; }
.jupyter-wrapper .jp-OutputArea-output pre { white-space: pre; }
"""
    return "\n".join(styles) + dark


def on_post_build(config):
    target = Path(config["site_dir"]) / NOTEBOOK_CSS
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(notebook_css())


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--check" in args:
        bad = stale()
        for p in bad:
            print(f"stale: {p.relative_to(ROOT)}")
        for p in unrun():
            print(f"no outputs of a GPU run of its present code: {p.relative_to(ROOT)}")
        sys.exit(1 if bad else 0)
    if "--skeleton" in args:
        TEXT.mkdir(parents=True, exist_ok=True)
        for stem in args[args.index("--skeleton") + 1:]:
            target = TEXT / f"{stem}.md"
            if target.exists():
                sys.exit(f"{target.relative_to(ROOT)} exists: edit it")
            target.write_text(skeleton(EXAMPLES / f"{stem}.py"))
            print(f"wrote {target.relative_to(ROOT)}: put the Chinese in place of the English")
        sys.exit(0)
    if "--run" in args:
        names = [a for a in args if not a.startswith("--")]
        for p in run(names or None):
            print(f"ran {p.relative_to(ROOT)}")
        sys.exit(0)
    for p in write():
        print(f"wrote {p.relative_to(ROOT)}")
