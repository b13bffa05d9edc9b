"""The notebooks (docs/notebooks/, made from examples/ by
docs/hooks/notebooks.py): committed up to date, self-contained, and run.

Each notebook is executed alone in an empty folder outside the repository
(a `kernels.py` that raises sits beside it): the Numba parts in the CUDA
simulator on the CPU, everything on a GPU. It runs through a Jupyter kernel
(nbclient + ipykernel) where those are installed; where they are not (a GPU
machine with only the runtime packages), its code cells run in order as one
script in a fresh interpreter, which is what a kernel does with them (these
runs are `make check`'s; `make test` checks that the notebooks hold the
examples' code, and runs the examples). Every
planted fault (tests/test_examples.py's FAULTS) in the example a notebook
is made from must reach the notebook (a text check, `make test`), and one
fault of each example must make the notebook fail through Jupyter
(`make check`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pages
from tests import record as R
from tests.test_examples import POISON, SMALL, _gpu, alone_env, copy_with_fault, fault_params

ROOT = Path(__file__).resolve().parent.parent


NB = pages.hook("notebooks")
EXAMPLES = NB.examples()


def runner() -> str:
    have = all(importlib.util.find_spec(m) is not None for m in ("nbclient", "ipykernel", "nbformat"))
    return "jupyter" if have else "script"


def execute(notebook_text: str, folder: Path) -> subprocess.CompletedProcess:
    """Run a notebook alone in `folder`; returncode 0 when every cell ran."""
    (folder / "kernels.py").write_text(POISON)
    (folder / "nb.ipynb").write_text(notebook_text)
    if runner() == "jupyter":
        code = ("import nbformat\nfrom nbclient import NotebookClient\n"
                "nb = nbformat.read('nb.ipynb', as_version=4)\n"
                "NotebookClient(nb, timeout=900, kernel_name='python3', "
                "resources={'metadata': {'path': '.'}}).execute()\n"
                "for c in nb.cells:\n"
                "    for o in c.get('outputs', []):\n"
                "        print(o.get('text', ''), end='')\n")
    else:
        cells = json.loads(notebook_text)["cells"]
        code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    (folder / "run.py").write_text(code)
    return subprocess.run([sys.executable, "run.py"], cwd=folder, env=alone_env(), capture_output=True, text=True,
                          timeout=1800)


def test_the_committed_notebooks_are_those_the_examples_make():
    bad = NB.stale()
    assert not bad, f"stale notebooks (run `make notebooks`): {[p.name for p in bad]}"
    assert {p.name for p in (ROOT / "docs/notebooks").glob("*.ipynb")} == \
        {f"{s.stem}{suffix}.ipynb" for s in EXAMPLES for suffix in ("", ".en")}
    assert {p.name for p in (ROOT / "docs/notebooks").glob("*.md")} == \
        {f"{s.stem}{suffix}.md" for s in EXAMPLES for suffix in ("", ".en")}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_both_languages_hold_the_same_code_and_their_own_words(example):
    zh, en = (NB._read(NB.notebook_path(example.stem, lang).read_text()) for lang in ("zh", "en"))
    assert NB.code_of(zh) == NB.code_of(en)
    words = [[c.source for c in nb.cells if c.cell_type == "markdown"] for nb in (zh, en)]
    for got, lang, text in ((words[0], "zh", NB.chinese_cells(example)), (words[1], "en", NB.english_cells(example))):
        # the example's title cell, the handbook's note, then the example's other cells
        assert got == [text[0], NB.INTRO[lang].format(name=example.name)] + text[1:]
    assert all(NB.CJK.search(t) for t in words[0])     # every Chinese cell is Chinese
    assert not any(NB.CJK.search(t) for t in words[1])  # and no English one is


def test_the_chinese_follows_the_english_or_the_build_stops(tmp_path):
    example = ROOT / "examples/transpose.py"
    english = NB.english_cells(example)
    assert NB.chinese_cells(example)  # up to date
    text = (NB.TEXT / "transpose.md").read_text()
    # the English of cell 2 changed: its old hash no longer matches
    changed = tmp_path / "transpose.py"
    changed.write_text(example.read_text().replace(english[1].splitlines()[-1], english[1].splitlines()[-1] + " More."))
    with pytest.raises(ValueError, match="cell 2 translates an older text"):
        NB.chinese_cells(changed)
    # a cell left in English, a cell missing, no file at all
    (tmp_path / "text").mkdir()
    first = NB.CELL_LINE.search(text).end()
    (tmp_path / "text/transpose.md").write_text(text[:first] + "\n\n# Matrix transpose\n" + text[text.index("<!-- cell 2/"):])
    with pytest.raises(ValueError, match="cell 1 has no Chinese"):
        NB.chinese_cells(example, tmp_path / "text")
    (tmp_path / "text/transpose.md").write_text(text[:text.index("<!-- cell 3/")])
    with pytest.raises(ValueError, match="2 cells, but transpose.py has 3"):
        NB.chinese_cells(example, tmp_path / "text")
    with pytest.raises(ValueError, match="is missing"):
        NB.chinese_cells(example, tmp_path / "none")
    assert NB.skeleton(example).count("<!-- cell ") == len(english)


def test_outputs_stay_only_with_the_code_that_made_them():
    import nbformat

    fresh = NB.to_notebook_json(ROOT / "examples/transpose.py", lang="en")
    nb = NB._read(fresh)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    nb.metadata[NB.RUN_KEY] = {"code_hash": NB.code_hash(nb)}
    ran = NB._write(nb)
    kept = NB._read(NB.with_outputs(fresh, ran))
    assert all(c.outputs for c in kept.cells if c.cell_type == "code") and NB.RUN_KEY in kept.metadata
    # the code changed since the run: its outputs are dropped, not shown beside other code
    other = NB._read(fresh)
    next(c for c in other.cells if c.cell_type == "code").source += "\nx = 1"
    assert NB.with_outputs(NB._write(other), ran) == NB._write(other)
    assert NB.with_outputs(fresh, None) == fresh
    # a run whose notebook raised, or grew past the limit, is refused
    bad = NB._read(ran)
    next(c for c in bad.cells if c.cell_type == "code").outputs = [
        nbformat.v4.new_output("error", ename="RuntimeError", evalue="wrong answer", traceback=[])]
    assert any("RuntimeError: wrong answer" in p for p in NB.output_problems(bad))
    big = NB._read(ran)
    next(c for c in big.cells if c.cell_type == "code").outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="x" * NB.MAX_NOTEBOOK_BYTES)]
    assert any("at most" in p for p in NB.output_problems(big))
    assert not NB.output_problems(NB._read(ran))


def test_every_notebook_holds_the_outputs_of_a_gpu_run_of_its_code():
    """make notebooks-run on a GPU: each notebook's outputs come from its
    present code (the hash), on a GPU, at a commit of this repository, with
    no error and within the size limit; both languages carry the same run."""
    assert not NB.unrun(), "run `make notebooks-run` on a GPU and commit the notebooks"
    for example in EXAMPLES:
        runs = []
        for lang in NB.LANGS:
            nb = NB._read(NB.notebook_path(example.stem, lang).read_text())
            stamp = nb.metadata[NB.RUN_KEY]
            assert stamp["gpu"] and stamp["driver"] and stamp["date"] and len(stamp["commit"]) == 40
            assert not NB.output_problems(nb)
            setup = next(c for c in nb.cells if c.cell_type == "code")
            said = "".join(o.get("text", "") for o in setup.outputs)
            assert stamp["gpu"] in said and stamp["commit"][:12] in said  # the first output states the run
            runs.append((stamp, [c.outputs for c in nb.cells if c.cell_type == "code"]))
        assert runs[0] == runs[1]


def test_every_notebook_ran_at_a_commit_of_this_repository():
    """The run's commit is one this repository holds. A full clone has the
    history; a shallow clone, or a copy of the tree (the GPU machine's: no
    .git, or a .git of its own whose HEAD is not the HANDBOOK_COMMIT it was
    copied from), cannot look it up."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    head = git("rev-parse", "HEAD")
    copied_from = os.environ.get("HANDBOOK_COMMIT")
    if (head.returncode != 0 or git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
            or (copied_from and copied_from != head.stdout.strip())):
        pytest.skip(R.NO_HISTORY)
    for example in EXAMPLES:
        for lang in NB.LANGS:
            stamp = NB._read(NB.notebook_path(example.stem, lang).read_text()).metadata[NB.RUN_KEY]
            assert subprocess.run(["git", "cat-file", "-e", f"{stamp['commit']}^{{commit}}"], cwd=ROOT,
                                  capture_output=True).returncode == 0, (example.stem, lang, stamp["commit"])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_notebook_starts_with_the_setup_and_carries_its_cuda(example):
    nb = json.loads((ROOT / "docs/notebooks" / f"{example.stem}.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert code[0].startswith("# Setup: a GPU, and the packages")
    names = NB.cuda_files(example.read_text())
    if names:
        assert code[1].startswith("# The CUDA C this notebook compiles")
        for name in names:
            assert (ROOT / "kernels/cuda" / name).read_text() in code[1]
    own = code[2:] if names else code[1:]  # the example's cells (the .cu files keep their markers)
    assert not any("--8<--" in c for c in own)
    assert code[-1].rstrip().splitlines()[-2] == "if __name__ == \"__main__\":"


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_notebook_runs_alone(example, tmp_path):
    proc = execute((ROOT / "docs/notebooks" / f"{example.stem}.ipynb").read_text(), tmp_path)
    assert proc.returncode == 0, f"{example.stem}.ipynb failed ({runner()}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if _gpu():
        assert "skipped" not in proc.stdout.lower(), proc.stdout[-3000:]


def at_test_size(notebook_text: str) -> str:
    """The notebook with a first cell that sets the examples' test size
    (tests/test_examples.py's SMALL): main() reads --size from sys.argv and
    ignores the kernel's own arguments."""
    nb = json.loads(notebook_text)
    nb["cells"].insert(0, {"cell_type": "code", "id": "size", "metadata": {}, "outputs": [], "execution_count": None,
                           "source": f"import sys\nsys.argv += ['--size', '{SMALL}']\n"})
    return json.dumps(nb)


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_notebook_runs_at_the_test_size(example, tmp_path):
    """The control for the planted faults below: unchanged, at the same size, it runs."""
    proc = execute(at_test_size((ROOT / "docs/notebooks" / f"{example.stem}.ipynb").read_text()), tmp_path)
    assert proc.returncode == 0, f"{example.stem}.ipynb failed ({runner()}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _cells(notebook_text: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(notebook_text)["cells"]]


@pytest.mark.parametrize("example, file, old, new, impl",
                         [pytest.param(*p.values, id=p.id) for p in fault_params()])  # text only: no GPU needed
def test_a_fault_in_the_example_is_in_its_notebook(example, file, old, new, impl, tmp_path):
    """Every planted fault of tests/test_examples.py (each proven there to
    make the example exit nonzero) reaches the notebook made from the
    example: each cell is the unmutated notebook's, or that cell with the
    same change, and the changed cells carry every place the fault changed
    in the file. With test_a_fault_in_the_example_fails_its_notebook (one
    fault per example run through Jupyter) this proves the notebooks catch
    them all, without running each fault through a Jupyter kernel."""
    pristine = _cells(NB.to_notebook_json(ROOT / "examples" / example, lang="en"))
    mutated = _cells(NB.to_notebook_json(copy_with_fault(example, file, old, new, tmp_path), cuda_dir=tmp_path,
                                        lang="en"))  # the code is every language's; a fault may touch the English
    assert len(mutated) == len(pristine)
    changed = [p for p, m in zip(pristine, mutated) if m != p]
    assert all(m in (p, p.replace(old, new)) for p, m in zip(pristine, mutated))
    wanted = (ROOT / ("examples" if file.endswith(".py") else "kernels/cuda") / file).read_text().count(old)
    assert sum(p.count(old) for p in changed) == wanted, "the notebook does not carry every change the fault made"


def one_fault_per_example():
    """One planted fault of each example: its first in the path this machine
    runs (CuPy on a GPU, Numba in the simulator without one), else its first."""
    prefer = "cupy" if _gpu() else "numba"
    chosen = {}
    for param in fault_params():
        example, impl = param.values[0], param.values[4]
        if example not in chosen or (impl == prefer and chosen[example].values[4] != prefer):
            chosen[example] = param
    return list(chosen.values())


@pytest.mark.slow
@pytest.mark.parametrize("example, file, old, new, impl", one_fault_per_example())
def test_a_fault_in_the_example_fails_its_notebook(example, file, old, new, impl, tmp_path):
    """Through a Jupyter kernel: a planted fault makes the notebook fail (an
    exception in a cell stops the run), one per example; the test above
    carries the rest of the faults to the notebooks."""
    src = tmp_path / "src"
    src.mkdir()
    script = copy_with_fault(example, file, old, new, src)
    run = tmp_path / "run"
    run.mkdir()
    proc = execute(at_test_size(NB.to_notebook_json(script, cuda_dir=src, lang="en")), run)
    assert proc.returncode != 0, f"{example}: the notebook ran with a planted fault ({runner()}):\n{proc.stdout[-2000:]}"


def test_colab_link_needs_a_github_repository():
    assert NB.colab_url("https://github.com/o/r", "main", "x.ipynb") == \
        "https://colab.research.google.com/github/o/r/blob/main/docs/notebooks/x.ipynb"
    assert NB.colab_url("https://github.com/o/r.git", "main", "x.ipynb").endswith("/o/r/blob/main/docs/notebooks/x.ipynb")
    assert NB.colab_url(None, "main", "x.ipynb") is None
    assert NB.colab_url("https://gitlab.com/o/r", "main", "x.ipynb") is None


def test_a_chapter_offers_the_notebooks_of_its_examples():
    md = "---\ntitle: t\n---\n# 矩阵乘法\n\ntext\n```python\n--8<-- \"examples/matmul.py:check\"\n```\n"
    out = NB.links(md, "matmul.md", "zh", "https://github.com/o/r")
    head, _, rest = out.partition("# 矩阵乘法\n")
    assert rest.lstrip().startswith("[看运行结果 matmul](notebooks/matmul.md){ .md-button .md-button--primary } "
                                    "[下载笔记本 matmul.ipynb](notebooks/matmul.ipynb){ .md-button download }")
    assert "colab.research.google.com/github/o/r/blob/main/docs/notebooks/matmul.ipynb" in rest
    en = NB.links(md.replace("矩阵乘法", "Matmul"), "matmul.en.md", "en", "https://github.com/o/r")
    assert "[See it run matmul](notebooks/matmul.md)" in en
    assert "[Download notebook matmul.ipynb](notebooks/matmul.ipynb)" in en
    assert "docs/notebooks/matmul.en.ipynb" in en  # Colab opens the English notebook from the English page
    assert NB.links("# x\nno example here\n", "x.md", "zh", None) == "# x\nno example here\n"


def test_notebooks_run_refuses_a_machine_without_a_gpu(monkeypatch):
    """make notebooks-run stores a GPU's outputs: without nvidia-smi (or
    without a GPU behind it) it stops before running anything."""
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="needs an NVIDIA GPU"):
        NB.run(["transpose"])
