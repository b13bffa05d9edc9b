"""A topic is one unit: adding one touches no shared file.

The test copies the package, the results hook and the claims test into a
temporary tree, adds one module `kernels/bench/toy.py` there and a results
file holding its records, and checks in a fresh interpreter (so nothing
is cached) that every generic consumer finds it: the bench lists it, the
results hook renders its table with its own labels in both languages, the
roofline draws its points, the claims test runs its claims (and fails when
they are false), and the sanitizer driver runs its launches. Every shared
file in the tree is byte-identical to the repository's.
"""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TOY = '''
"""Topic `toy`: a made-up topic for tests/test_topics.py."""

from pathlib import Path

from .. import results

TOPIC = "toy"
ORDER = 999
LABELS = {"widgets": ("小部件数", "widgets")}
ROOFLINE = ("P", 7)


def measure(quick: bool = False) -> list[dict]:
    raise RuntimeError("the toy topic measures nothing")


def plot(data: dict, out_dir: Path) -> list[Path]:
    return []


def summary(data: dict) -> list[str]:
    return [f"toy: {len(results.select(data, TOPIC))} records"]


def roofline_points(data: dict) -> list[tuple[str, float, float]]:
    return [(f"toy {r['variant']}", 2.0, r["gflops"]) for r in results.select(data, TOPIC)]


def claims(data: dict) -> None:
    """docs/toy.md: "the fast toy makes more widgets than the slow one"."""
    w = {r["variant"]: r["widgets"] for r in results.select(data, TOPIC)}
    assert w["fast"] > w["slow"]


def sanitize() -> None:
    print("toy launches")
'''

PROBE = '''
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
from kernels import results
from kernels.bench import TOPICS, roofline
from tests.gpu_driver import drivers
sys.path.insert(0, str(Path.cwd() / "docs" / "hooks"))
import results as hook

out = {"topics": list(TOPICS), "drivers": list(drivers())}
md = "<!-- results-table topic=toy columns=variant,widgets,ms where=impl:cupy order=-widgets -->\\n"
out["zh"] = hook.render(md, "toy.md", "zh", "nvidia-h200")
out["en"] = hook.render(md, "toy.en.md", "en", "nvidia-h200")
data = results.load(results.results_path("nvidia-h200"))
out["points"] = [p for p in roofline.points(data) if p["topic"] == "toy"]
from tests import test_results
try:
    test_results.test_page_claims_hold("toy")
    out["claims"] = "held"
except AssertionError:
    out["claims"] = "failed"
print(json.dumps(out, ensure_ascii=False))
'''


def _tree(tmp: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("kernels", "docs/hooks"):
        shutil.copytree(ROOT / d, tmp / d, ignore=ignore)
    (tmp / "tests").mkdir()
    for f in ("__init__.py", "test_results.py", "gpu_driver.py", "record.py", "pages.py"):
        shutil.copy(ROOT / "tests" / f, tmp / "tests" / f)
    (tmp / "kernels" / "bench" / "toy.py").write_text(TOY)
    return tmp


def _results(tmp: Path, fast_widgets: int) -> None:
    from kernels import results

    env = {"gpu": "NVIDIA H200", "gpu_slug": "nvidia-h200", "compute_capability": "9.0", "driver": "1",
           "cuda_runtime": "13.0", "cupy": "14", "numba": "0.68", "numba_cuda": "0.30",
           "date": "2026-11-30T00:00:00Z", "commit": "toy"}
    recs = [results.record("toy", "cupy", v, [1024], "float32", ms=ms, ref="toy/cupy/slow/1024/float32",
                           rel_err=0.0, ratio=1.0, widgets=w, gflops=g)
            for v, ms, w, g in (("slow", 2.0, 3, 10.0), ("fast", 1.0, fast_widgets, 20.0))]
    data = results.merge({}, env, recs, {"toy": {"sources": {}}})
    path = tmp / "docs" / "assets" / "results" / "nvidia-h200.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _probe(tmp: Path) -> dict:
    env = {"HANDBOOK_FORCE_CPU": "1", "NUMBA_ENABLE_CUDASIM": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_new_topic_is_found_everywhere_with_no_shared_edit(tmp_path):
    tmp = _tree(tmp_path)
    _results(tmp, fast_widgets=5)
    out = _probe(tmp)
    assert out["topics"][-1] == "toy" and "toy" in out["drivers"]
    assert "| 变体 | 小部件数 | 时间 (ms) |" in out["zh"] and "| fast | 5 |" in out["zh"]
    assert "| variant | widgets | time (ms) |" in out["en"]
    assert out["zh"].index("| fast |") < out["zh"].index("| slow |")            # order=-widgets
    assert sorted(p["gflops"] for p in out["points"]) == [10.0, 20.0]
    assert out["claims"] == "held"
    # the same tree, a results file that contradicts the page: its claim fails
    _results(tmp, fast_widgets=1)
    assert _probe(tmp)["claims"] == "failed"
    # and nothing shared was edited to get there
    for f in sorted((tmp / "kernels").rglob("*.py")) + sorted((tmp / "docs" / "hooks").rglob("*.py")):
        rel = f.relative_to(tmp)
        if rel != Path("kernels/bench/toy.py"):
            assert f.read_bytes() == (ROOT / rel).read_bytes(), rel


TOY_CHAPTER = '''
"""tests/test_toy.py: a made-up chapter's tests, for tests/test_topics.py."""

EXAMPLE_FAULTS = [("toy.py", "a + b", "a - b", "numba"), ("toy.cu", "a + b", "a - b", "cupy")]
MUTANT_OVERRIDES = {"examples/toy.py:toy:toy_add": ("a + b", "a - b", "made up")}
OVERLAP_EXEMPT = {"toy_fill": "made up"}


def overlap_cases() -> list:
    from tests.overlap import N, cupy_case

    return [cupy_case("examples/toy.toy_add", call=lambda i, out: None, inputs={"a": (N,)}, out_shape=(N,))]
'''

CHAPTER_PROBE = '''
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
import kernels  # the simulator before numba
from tests import chapters, mutants
from tests import test_examples, test_overlap
print(json.dumps({
    "faults": test_examples.FAULTS.get("toy.py"),
    "fault_params": [p.id for p in test_examples.fault_params() if p.id.startswith("toy.py")],
    "overrides": mutants.overrides().get("examples/toy.py:toy:toy_add"),
    "cases": [p.id for p in test_overlap.params() if "toy" in p.id],
    "exempt": chapters.overlap_exempt().get("toy_fill"),
}))
'''


def test_a_new_chapter_gives_the_shared_proofs_its_tests_with_no_shared_edit(tmp_path):
    """A chapter's planted faults, mutant overrides and overlap cases live in
    its own tests/test_<topic>.py: adding one (tests/test_toy.py here) reaches
    the example, page and overlap proofs, and no shared test file changes."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("kernels", "tests", "examples"):
        shutil.copytree(ROOT / d, tmp_path / d, ignore=ignore)
    (tmp_path / "tests" / "test_toy.py").write_text(TOY_CHAPTER)
    env = {"HANDBOOK_FORCE_CPU": "1", "NUMBA_ENABLE_CUDASIM": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHAPTER_PROBE)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["faults"] == [["toy.py", "a + b", "a - b", "numba"], ["toy.cu", "a + b", "a - b", "cupy"]]
    assert out["fault_params"] == ["toy.py-numba-0", "toy.py-cupy-1"]
    assert out["overrides"] == ["a + b", "a - b", "made up"]
    assert out["cases"] == ["examples/toy.toy_add[a]"]
    assert out["exempt"] == "made up"
    for f in sorted((tmp_path / "tests").glob("*.py")):
        if f.name != "test_toy.py":
            assert f.read_bytes() == (ROOT / "tests" / f.name).read_bytes(), f.name
