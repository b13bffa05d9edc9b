"""The code on the pages: complete, exercised, checked.

Each page's python blocks (includes expanded, `cont` blocks joined, exactly
as pytest-codeblocks runs them) are checked statically and by planted faults:

- the zh and en twins hold the same blocks, so only the zh page's blocks are
  run (conftest.py) and both languages are covered by that one run;
- pyflakes finds no undefined name in any block: what a reader copies is
  complete; no block imports this repository's `kernels` package or uses a
  private (`_name`) helper;
- every function a block defines is used in that block;
- for every function of every embedded section, a `raise` at the top of its
  body and a wrong-result mutation (tests/mutants.py) make the blocks that
  hold it fail. Numba and other CPU blocks: in this process (the simulator
  without a GPU). CUDA C sections (```cuda fences): the .cu file is mutated
  in a copy of the tree and the page's GPU blocks that load it must fail;
  GPU blocks run in a separate process (tests/fault_driver.py), since a
  planted fault may leave a CUDA context unusable.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import fault_driver
from tests import mutants as M
from tests import pages as P

ZH = [p for p in P.pages() if not p.name.endswith(".en.md")]
ids = lambda p: str(p.relative_to(P.DOCS))  # noqa: E731


def blocks(page: Path, replace=None) -> list:
    try:
        return P.code_blocks(page.read_text(), replace=replace)
    except P.SnippetError:
        return []  # tests/test_pages.py::test_includes_resolve reports it


is_gpu = P.is_gpu


def python_blocks(page: Path) -> list:
    return [b for b in blocks(page) if b.syntax == "python"]


# ---------------------------------------------------------------- twins --

@pytest.mark.parametrize("zh", ZH, ids=ids)
def test_twins_run_the_same_code(zh):
    """Only the zh page's blocks are run; the en page must hold the same ones."""
    a = [(b.syntax, b.code, b.marks) for b in blocks(zh)]
    b = [(b.syntax, b.code, b.marks) for b in blocks(P.twin(zh))]
    assert a == b, f"{zh.name} and {P.twin(zh).name} run different code"


# --------------------------------------------------------------- static --

def block_params():
    out = []
    for page in ZH:
        for b in python_blocks(page):
            out.append(pytest.param(page, b, id=f"{ids(page)}:{b.lineno}"))
    return out


@pytest.mark.parametrize("page,block", block_params())
def test_block_has_no_undefined_name(page, block):
    from pyflakes import messages

    from tests.test_lint import flakes

    found = [str(f) for f in flakes(block.code, f"{ids(page)}:{block.lineno}")
             if isinstance(f, str) or isinstance(f, (messages.UndefinedName, messages.UndefinedLocal,
                                                     messages.UndefinedExport))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page,block", block_params())
def test_block_is_self_contained(page, block):
    """No import of this repository's package, no private helper."""
    tree = ast.parse(block.code)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in ("kernels", "tests")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("kernels", "tests"):
            bad.append(f"from {node.module}")
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name and name.startswith("_") and not name.startswith("__") and name != "_":
            bad.append(name)
        if isinstance(node, ast.alias) and node.name.startswith("_") and not node.name.startswith("__"):
            bad.append(node.name)
    assert not bad, f"block at line {block.lineno} uses {sorted(set(bad))}"


@pytest.mark.parametrize("page,block", block_params())
def test_every_function_a_block_defines_is_used(page, block):
    tree = ast.parse(block.code)
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
    unused = sorted(set(defined) - used)
    assert not unused, f"block at line {block.lineno} defines {unused} and never calls them"


# -------------------------------------------------------- planted faults --

def page_sections(page: Path) -> list[tuple[str, str]]:
    """(target, fence language) for every section a page embeds."""
    out = []
    for f in P.fences(P.split_front_matter(page.read_text())[1]):
        lang = f.info.split()[0] if f.info else ""
        for t in f.includes:
            if (t, lang) not in out:
                out.append((t, lang))
    return out


UNMUTABLE: list[str] = []


@functools.cache
def page_mutants(page: Path) -> tuple:
    """(mutant, lang) for every function of every section the page embeds,
    built when a test asks (collection builds none)."""
    out = []
    for target, lang in page_sections(page):
        if not target.split(":")[0].endswith((".py", ".cu", ".cuh")) or ":" not in target:
            continue
        try:
            text = "\n".join(P.read_section(target)) + "\n"
            if lang == "python":
                out += [(m, "python") for m in M.python_mutants(target, text)]
            elif lang == "cuda":
                file, _, section = target.partition(":")
                full = (P.ROOT / file).read_text()
                out += [(m, "cuda") for m in _file_mutants(file, section, full)]
        except (ValueError, SyntaxError, P.SnippetError) as e:
            UNMUTABLE.append(f"{ids(page)}: {target}: {e}")
    return tuple(out)


def all_mutants():
    """(page, mutant, lang) for every function of every embedded section."""
    return [(page, m, lang) for page in ZH for m, lang in page_mutants(page)]


def _file_mutants(file: str, section: str, full: str) -> list[M.Mutant]:
    """CUDA mutants of one section, as whole-file texts (the kernel is
    compiled from the file, not from the page)."""
    lines = full.splitlines(keepends=True)
    start = end = None
    for i, ln in enumerate(lines):
        m = P.MARKER.search(ln)
        if m and m.group("name") == section:
            if m.group("kind") == "start":
                start = i + 1
            else:
                end = i
    head, body, tail = "".join(lines[:start]), "".join(lines[start:end]), "".join(lines[end:])
    return [M.Mutant(m.target, m.function, m.kind, head + m.text + tail, m.what)
            for m in M.cuda_mutants(f"{file}:{section}", body)]


@functools.cache
def section_runs_in(page: Path) -> dict[str, set[bool]]:
    """python section -> is_gpu of each python block that holds it: a
    section changed (a comment added) changes exactly those blocks, whatever
    the fault planted in it."""
    before = blocks(page)
    out = {}
    for target, lang in page_sections(page):
        if lang != "python" or ":" not in target or not target.split(":")[0].endswith(".py"):
            continue
        try:
            text = "\n".join(P.read_section(target)) + "\n# changed\n"
        except P.SnippetError:
            continue
        after = blocks(page, replace=(target, text))
        out[target] = {is_gpu(b) for a, b in zip(before, after) if a.code != b.code and b.syntax == "python"}
    return out


def fault_kinds(page: Path) -> set[bool]:
    """Which of the page's blocks planted faults must fail: True for its GPU
    blocks (a CUDA C section, or a section in a GPU block), False for its
    CPU blocks. Cheap: no mutant is built."""
    kinds = set().union(*section_runs_in(page).values()) if section_runs_in(page) else set()
    if any(lang == "cuda" for _, lang in page_sections(page)):
        kinds.add(True)
    return kinds


def test_a_page_that_shows_cuda_c_runs_it_on_a_gpu():
    """A planted fault in shown CUDA C can only fail a GPU block: a page that
    shows CUDA C must have GPU blocks, or its kernels' faults would go unseen."""
    for page in ZH:
        if any(lang == "cuda" for _, lang in page_sections(page)):
            assert any(is_gpu(b) for b in blocks(page)), f"{ids(page)} shows CUDA C but has no GPU block"


def test_every_embedded_function_has_mutants():
    mutants = all_mutants()
    assert not UNMUTABLE, "\n".join(UNMUTABLE)
    assert len(mutants) > 100, f"only {len(mutants)} mutants: are the sections found?"


def test_every_override_is_used():
    """An override names a function by file:section:function; one that no
    page embeds any more would protect nothing, so it must go."""
    used = {f"{m.target}:{m.function}" for _, m, _ in all_mutants()}
    unused = sorted(set(M.overrides()) - used)
    assert not unused, f"overrides for functions no page shows: {unused}"


def _specs(page: Path, gpu: bool) -> list[dict]:
    specs = []
    runs_in = section_runs_in(page)
    for mut, lang in page_mutants(page):
        if lang == "cuda" and not gpu:
            continue
        if lang == "python" and gpu not in runs_in.get(mut.target, set()):
            continue
        specs.append({"id": mut.id, "what": mut.what, "lang": lang, "target": mut.target, "text": mut.text})
    return specs


def run_driver(page: Path, specs: list[dict], blocks: str, tmp_path: Path, env_extra: dict,
               on_result=None) -> dict:
    """Run tests/fault_driver.py over `specs`, split among a few processes
    (each in its own copy of the tree: a CUDA C mutant rewrites its .cu
    there), restarting a process after a fault that left its CUDA context
    unusable. on_result(answer) is called as each mutant's answer comes."""
    from concurrent.futures import ThreadPoolExecutor

    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(P.ROOT)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    workers = max(1, min(8, (os.cpu_count() or 2) // 2, len(specs)))
    lock = threading.Lock()

    def report(d: dict) -> None:
        with lock:
            if os.environ.get("HANDBOOK_TIMES"):  # each mutant's time beside the tests' (conftest.py)
                with open(os.environ["HANDBOOK_TIMES"], "a") as f:
                    f.write(f"{d.get('seconds', 0):8.2f} mutant   {'caught' if d['failed'] else 'SURVIVED'} "
                            f"{ids(page)} {blocks} {d['id']}\n")
            if on_result is not None:
                on_result(d)

    def worker(k: int) -> dict:
        root = tmp_path / f"w{k}"
        for name in ("kernels", "examples", "docs"):
            shutil.copytree(P.ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "notebooks"))
        todo, results = specs[k::workers], {}
        while todo:
            spec = root / "spec.json"
            spec.write_text(json.dumps({"page": str(page.relative_to(P.ROOT)), "blocks": blocks, "mutants": todo}))
            done, out = [], []
            with open(root / "stderr.txt", "w+") as err, subprocess.Popen(
                    [sys.executable, "-m", "tests.fault_driver", str(spec)], cwd=root, env=env,
                    stdout=subprocess.PIPE, stderr=err, text=True) as proc:
                for ln in proc.stdout:  # one answer per line, as each mutant ends
                    out.append(ln)
                    if ln.startswith("{"):
                        done.append(json.loads(ln))
                        report(done[-1])
                proc.wait()
                err.seek(0)
                stderr = err.read()
            if not done and proc.returncode < 0:  # killed by a signal in its first mutant: that mutant failed the page
                done = [{"id": todo[0]["id"], "what": todo[0]["what"], "failed": True, "blocks": [],
                         "error": [f"the process died of signal {-proc.returncode}"]}]
                report(done[-1])
            if not done:
                raise RuntimeError(f"fault driver made no progress:\n{''.join(out)[-2000:]}\n{stderr[-3000:]}")
            results.update((d["id"], d) for d in done)
            todo = [t for t in todo if t["id"] not in results]
        return results

    results = {}
    with ThreadPoolExecutor(workers) as pool:
        for part in pool.map(worker, range(workers)):
            results.update(part)
    return results


def _survivors(results: dict) -> list[str]:
    return [f"{r['id']}: {r['what']} (blocks {r['blocks']})" for r in results.values() if not r["failed"]]


GPU_PAGES = [p for p in ZH if True in fault_kinds(p)]
CPU_PAGES = [p for p in ZH if False in fault_kinds(p)]


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("page", GPU_PAGES, ids=ids)
def test_planted_faults_fail_the_gpu_blocks(page, tmp_path):
    """Every GPU mutant of the page (code shown in GPU blocks, and every CUDA
    C function the page shows, mutated in its .cu file) makes the page's
    GPU blocks fail. Answers proven before on this GPU with the same code
    are reused from the ledger (tests/fault_ledger.py), and said so."""
    from kernels.harness import env_stamp
    from tests import fault_ledger

    specs = _specs(page, gpu=True)
    assert specs, f"{ids(page)}: no fault to plant in its GPU blocks"
    env, rel, text = env_stamp(), page.relative_to(P.ROOT).as_posix(), page.read_text()
    keys = {s["id"]: fault_ledger.mutant_key(fault_ledger.mutant_inputs(text, s), s["id"], s["text"]) for s in specs}
    fault_ledger.keep_only(env["gpu_slug"], rel, set(keys.values()))
    reused = fault_ledger.reusable(env["gpu_slug"], rel, keys)
    todo = [s for s in specs if s["id"] not in reused]

    def keep(d: dict) -> None:  # each answer into the ledger as it comes
        fault_ledger.add(env["gpu_slug"], rel, keys[d["id"]], {
            "id": d["id"], "caught": bool(d["failed"]), "seconds": d.get("seconds"), "error": d["error"][:1],
            "commit": env["commit"], "date": env["date"]})

    survivors = _survivors(run_driver(page, todo, "gpu", tmp_path, {}, on_result=keep)) if todo else []
    assert not survivors, "planted faults that the GPU blocks did not catch:\n" + "\n".join(survivors)
    if reused:
        commits = sorted({e["commit"][:12] for e in reused.values()})
        note = (f"{len(reused)} of {len(specs)} planted faults proven caught on {env['gpu']} before, with this "
                f"same code (ledger {fault_ledger.path(env['gpu_slug']).relative_to(P.ROOT)}, commits "
                f"{', '.join(commits)}); HANDBOOK_FAULTS=all runs them again")
        if not todo:
            pytest.skip(note)
        print(f"{ids(page)}: {len(todo)} run now; {note}")


@pytest.mark.slow
@pytest.mark.parametrize("page", CPU_PAGES, ids=ids)
def test_planted_faults_fail_the_cpu_blocks(page, tmp_path):
    """Every mutant of code in the page's CPU blocks makes each block that
    holds it fail. In Numba's simulator: in this process without a GPU; on a
    GPU machine in a separate simulator process (a planted fault in a
    compiled kernel could break this process's CUDA context)."""
    specs = _specs(page, gpu=False)
    assert specs, f"{ids(page)}: no fault to plant in its CPU blocks"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        text = page.read_text()
        results = {s["id"]: fault_driver.run_mutant(text, s, gpu=False) for s in specs}
    else:
        results = run_driver(page, specs, "cpu", tmp_path,
                             {"NUMBA_ENABLE_CUDASIM": "1", "HANDBOOK_FORCE_CPU": "1"})
    survivors = _survivors(results)
    assert not survivors, "planted faults that the CPU blocks did not catch:\n" + "\n".join(survivors)


# ------------------------------------------------- the proofs' machinery --

WATCHDOG_SCRIPT = """
import sys, time, types
from pathlib import Path
compiler = types.ModuleType("cupy.cuda.compiler")
compiler.compile_using_nvrtc = lambda *a, **k: time.sleep(1.5) or "ptx"
cupy, cuda = types.ModuleType("cupy"), types.ModuleType("cupy.cuda")
cupy.cuda, cuda.compiler = cuda, compiler
sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.compiler": compiler})
from tests import fault_driver as F
F.stop_the_clock_while_compiling()
w = F.Watchdog({"id": "m", "what": "w", "lang": "python", "target": "t"}, Path("."), 1.0)
F.COMPILING["watchdog"] = w
w(7)
compiler.compile_using_nvrtc()   # 1.5 s compiling: the clock is stopped
time.sleep(0.5)
print("alive after the compile", flush=True)
time.sleep(2.0)                  # 2.5 s of running: past the 1 s limit
print("not reached", flush=True)
"""


def test_the_watchdog_stops_a_hung_block_but_not_a_long_compile():
    proc = subprocess.run([sys.executable, "-c", WATCHDOG_SCRIPT], cwd=P.ROOT, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(P.ROOT)))
    lines = proc.stdout.splitlines()
    assert lines[0] == "alive after the compile", proc.stdout + proc.stderr
    answer = json.loads(lines[1])
    assert answer["failed"] and answer["blocks"] == [7] and "hung" in answer["error"][0]
    assert proc.returncode == 4 and "not reached" not in proc.stdout


def test_the_fault_ledger_reuses_only_caught_faults_of_the_same_code(tmp_path, monkeypatch):
    from tests import fault_ledger as L

    monkeypatch.setattr(L, "DIR", tmp_path)
    monkeypatch.delenv("HANDBOOK_FAULTS", raising=False)
    code = {"block 1 (python)": "aaa", "cuda/x.cu": "bbb"}
    keys = {m: L.mutant_key(code, m, f"text of {m}") for m in ("caught", "survived", "new")}
    L.add("gpu", "docs/x.md", keys["caught"], {"id": "caught", "caught": True, "commit": "c1"})
    L.add("gpu", "docs/x.md", keys["survived"], {"id": "survived", "caught": False, "commit": "c1"})
    assert set(L.reusable("gpu", "docs/x.md", keys)) == {"caught"}
    assert L.reusable("other-gpu", "docs/x.md", keys) == {}
    changed = {**code, "cuda/x.cu": "ccc"}  # a kernel the page loads changed: nothing is reused
    assert L.reusable("gpu", "docs/x.md", {m: L.mutant_key(changed, m, f"text of {m}") for m in keys}) == {}
    assert L.mutant_key(code, "caught", "other text") != keys["caught"]
    monkeypatch.setenv("HANDBOOK_FAULTS", "all")
    assert L.reusable("gpu", "docs/x.md", keys) == {}
    monkeypatch.delenv("HANDBOOK_FAULTS")
    L.keep_only("gpu", "docs/x.md", {keys["survived"]})
    assert set(L.load("gpu")["pages"]["docs/x.md"]) == {keys["survived"]}


def test_every_mutant_of_a_page_has_its_own_id():
    """Answers are keyed by id (the driver's results, the ledger): two mutants
    under one id would let one's answer stand for the other's."""
    for page in ZH:
        mids = [m.id for m, _ in page_mutants(page)]
        assert len(mids) == len(set(mids)), sorted({i for i in mids if mids.count(i) > 1})


def test_a_mutants_ledger_key_follows_only_the_code_it_runs():
    """tests/fault_ledger.mutant_inputs: the GPU blocks that load the mutated
    file and the kernels they load (with their #includes); another block's
    change leaves the key, a change in its own block or kernel moves it."""
    from tests import fault_ledger as L

    def page(a: str, b: str) -> str:
        return (f"<!--pytest.mark.gpu-->\n```python\nsrc = 'spmv.cu'\n{a}\n```\n\n"
                f"<!--pytest.mark.gpu-->\n```python\nsrc = 'attention.cu'\n{b}\n```\n")

    spec = {"lang": "cuda", "target": "kernels/cuda/spmv.cu:spmv_merge", "id": "m", "text": "mutated"}
    key = lambda text: L.mutant_key(L.mutant_inputs(text, spec), "m", "mutated")  # noqa: E731
    base = page("x = 1", "y = 1")
    assert set(L.mutant_inputs(base, spec)) == {"block 0", "cuda/spmv.cu"}
    assert key(page("x = 1", "y = 2")) == key(base)   # a block that does not load spmv.cu
    assert key(page("x = 2", "y = 1")) != key(base)   # the block that does
    other = dict(spec, target="kernels/cuda/attention.cu:attention_fp16")
    assert {"cuda/attention.cu", "cuda/tensor_cores.cu"} <= set(L.mutant_inputs(base, other))  # its #include
