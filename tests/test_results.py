"""The results file: its schema, merging by topic, and rendering into pages."""

import copy
import math
from pathlib import Path

import pytest

from kernels import results
from kernels.bench import TOPICS

ENV = {"gpu": "NVIDIA H200", "gpu_slug": "nvidia-h200", "compute_capability": "9.0",
       "driver": "580.0", "cuda_runtime": "13.0", "cupy": "14.2.0", "numba": "0.68.1",
       "numba_cuda": "0.30.4", "date": "2026-11-30T00:00:00Z", "commit": "abc"}


def rec(topic, impl, variant, n, gbps, ref_gbps):
    ref = results.record_id(topic, "cuda_memcpy", "ceiling", [1 << 28], "float32")
    return {"id": results.record_id(topic, impl, variant, [n], "float32"), "topic": topic,
            "impl": impl, "variant": variant, "shape": [n], "dtype": "float32",
            "ms": 12 * n / gbps / 1e6, "gbps": gbps, "ref": ref, "ratio": gbps / ref_gbps,
            "rel_err": 1e-8}


def ceiling(topic, gbps):
    r = rec(topic, "cuda_memcpy", "ceiling", 1 << 28, gbps, gbps)
    return r


def run(topic, gbps=3000.0, env=ENV):
    return env, [ceiling(topic, 4000.0), rec(topic, "cupy", "guard", 1024, gbps, 4000.0)]


def test_merge_replaces_only_the_measured_topics():
    data = results.merge(results.load("/nonexistent.json"), *run("vector_add"))
    data = results.merge(data, *run("transpose"))
    env2 = dict(ENV, date="2026-12-01T00:00:00Z")
    data = results.merge(data, *run("vector_add", gbps=3500.0, env=env2))
    assert results.validate(data) == []
    va = results.select(data, "vector_add")
    assert len(va) == 2 and any(r["gbps"] == 3500.0 for r in va)
    assert len(results.select(data, "transpose")) == 2
    assert data["topics"]["vector_add"]["env"]["date"].startswith("2026-12-01")
    assert data["topics"]["transpose"]["env"]["date"].startswith("2026-11-30")


def test_topics_measured_elsewhere_are_taken_whole():
    """make bench --gpus: each GPU writes its own file; the results file takes
    each topic's records and stamp from the file that measured it."""
    base = results.merge(results.load("/nonexistent.json"), *run("vector_add"))
    base = results.merge(base, *run("transpose"), per_topic={"transpose": {"seconds": 9.0}})
    env2 = dict(ENV, date="2026-12-01T00:00:00Z", commit="def")
    other = results.merge(copy.deepcopy(base), *run("vector_add", gbps=3600.0, env=env2),
                          per_topic={"vector_add": {"seconds": 3.0, "sources": {"k.py": "0123"}}})
    data = results.take_topics(base, other, ["vector_add"])
    assert results.validate(data) == []
    assert any(r["gbps"] == 3600.0 for r in results.select(data, "vector_add"))
    assert data["topics"]["vector_add"]["env"]["commit"] == "def"
    assert data["topics"]["vector_add"]["env"]["sources"] == {"k.py": "0123"}
    assert data["topics"]["transpose"] == base["topics"]["transpose"]      # untouched
    assert len(results.select(data, "transpose")) == 2
    with pytest.raises(ValueError, match="not measured"):
        results.take_topics(base, other, ["reduction"])
    from kernels.bench.__main__ import schedule

    assert schedule(["vector_add", "transpose"], other) == ["transpose", "vector_add"]  # 9 s before 3 s


@pytest.mark.parametrize("breakage", ["no_env", "no_ms", "bad_ref", "bad_ratio", "no_unit", "shape", "dup"])
def test_validate_catches(breakage):
    data = results.merge(results.load("/nonexistent.json"), *run("vector_add"))
    assert results.validate(data) == []
    bad = copy.deepcopy(data)
    r = bad["records"][-1]
    if breakage == "no_env":
        del bad["env"]["driver"]
    elif breakage == "no_ms":
        del r["ms"]
    elif breakage == "bad_ref":
        r["ref"] = "vector_add/x/y/1/float32"
    elif breakage == "bad_ratio":
        r["ratio"] *= 1.5
    elif breakage == "no_unit":
        del r["gbps"]
    elif breakage == "shape":
        r["shape"] = "1024"
    elif breakage == "dup":
        bad["records"].append(dict(r))
    assert results.validate(bad), breakage


def test_render_table_and_stamp():
    data = results.merge(results.load("/nonexistent.json"), *run("vector_add"))
    t = results.render_table(data, "vector_add", ["impl", "variant", "n", "gbps", "ratio"], "en",
                             where={"impl": "cupy"})
    lines = t.splitlines()
    assert len(lines) == 3 and "| cupy |" in lines[2] and "2¹⁰" in lines[2] and "3,000.0" in lines[2]
    assert "0.75" in lines[2]
    two = [dict(r, shape=[4, 8 if k else 9]) for k, r in enumerate(results.select(data, "vector_add")[:2])]
    assert [results.value(r, "shape[1]") for r in two] == [9, 8] and results.value(two[0], "shape[2]") is None
    picked = results.select({"records": two}, "vector_add", {"shape[1]": "8"})
    assert [r["shape"] for r in picked] == [[4, 8]]
    zh = results.render_table(data, "vector_add", ["impl", "gbps"], "zh")
    assert "带宽" in zh
    assert "NVIDIA H200" in results.render_stamp(data, "vector_add", "en")
    assert "驱动 580.0" in results.render_stamp(data, "vector_add", "zh")
    assert results.render_table(data, "nothing", ["impl"], "en") == ""


def test_a_wide_table_is_split_repeating_the_columns_that_name_a_row():
    data = results.merge(results.load("/nonexistent.json"), *run("vector_add"))
    cols = ["impl", "variant", "n", "gbps", "ratio", "ms", "gbps", "ratio", "ms", "n"]
    tables = results.render_table(data, "vector_add", cols, "en", where={"impl": "cupy"}, max_columns=7).split("\n\n")
    heads = [t.splitlines()[0].strip("| ").split(" | ") for t in tables]
    assert len(tables) == 2 and all(len(h) <= 7 for h in heads)
    assert all(h[:2] == heads[0][:2] for h in heads)  # impl and variant name each row in both
    assert sum(len(h) - 2 for h in heads) == len(cols) - 2  # every number shown once
    one = results.render_table(data, "vector_add", cols[:7], "en", where={"impl": "cupy"}, max_columns=7)
    assert "\n\n" not in one


def test_committed_results_files_are_valid():
    files = sorted(results.RESULTS_DIR.glob("*.json"))
    for f in files:
        data = results.load(f)
        assert results.validate(data) == [], f.name
        for r in data["records"]:
            if r["rel_err"] is None:  # a record that computes no value says why
                assert r.get("no_rel_err") in results.NO_REL_ERR, r["id"]
            else:
                bound = getattr(TOPICS.get(r["topic"]), "rel_err_bound", lambda r: 1e-3)(r)
                assert math.isfinite(r["rel_err"]) and r["rel_err"] < bound, (r["id"], r["rel_err"], bound)
            assert r["ms"] > 0 if not r.get("check") else r["ms"] is None  # a check times nothing
    assert files, "no results file committed (make bench on a GPU writes one)"


@pytest.fixture(scope="module")
def hook():
    """docs/hooks/results.py, loaded as MkDocs loads it (by path)."""
    from tests import pages

    return pages.hook("results")


def test_hook_renders_directives_and_missing_topics(hook):
    md = "a\n<!-- results-table topic=vector_add columns=impl -->\nb\n"
    out = hook.render(md, "x.en.md", "en", "no-such-gpu")
    assert "Not measured yet" in out and "results-table" not in out
    out = hook.render(md, "x.md", "zh", "no-such-gpu")
    assert "尚未测量" in out


@pytest.mark.parametrize("directive,complaint", [
    ("results-table topic=no_such_topic columns=impl", "unknown topic"),
    ("results-table topic=vector_add columns=impl,no_such_column", "no_such_column"),
    ("results-table topic=vector_add columns=impl where=variant:no_such_variant", "no_such_variant"),
    ("results-table topic=vector_add columns=impl where=no_such_key:1", "no_such_key"),
    ("results-table topic=vector_add columns=impl where=shape[1]:1", "shape"),
    ("results-table topic=vector_add columns=impl order=no_such_key", "no_such_key"),
    ("results-table topic=vector_add columns=impl group=no_such_key", "no_such_key"),
    ("results-plot topic=vector_add plot=no_such_plot", "missing"),
])
def test_hook_fails_loudly_on_a_directive_that_renders_nothing(hook, directive, complaint):
    md = "# t\n\nsome text\n\n<!-- " + directive + " -->\n"
    with pytest.raises(hook.DirectiveError, match=complaint) as e:
        hook.render(md, "page.en.md", "en", "nvidia-h200")
    assert "page.en.md:5" in str(e.value), "the error names the page and line"


def test_every_directive_on_every_page_renders_measured_data(hook):
    """Each page's directives name topics the results file has (a page that
    renders an unmeasured topic fails here, not with a skip) and render
    without complaint."""
    from tests import pages as P

    data = results.load(results.results_path("nvidia-h200"))
    missing = []
    for page in P.pages():
        text = page.read_text()
        for m in hook.DIRECTIVE.finditer(text):
            topic = hook._args(m.group("args"))["topic"]
            if topic not in data.get("topics", {}):
                missing.append(f"{page.name}: {topic}")
        hook.render(text, page.name, "en", "nvidia-h200")
    assert not missing, "pages render topics the results file lacks:\n" + "\n".join(missing)


def _rendered_topics() -> list[str]:
    """The topics some page (docs/**/*.md, as tests/pages.py finds them) renders
    a results table or plot for."""
    import re

    directive = re.compile(r"<!--[ \t]*results-(?:table|plot)[ \t]+[^>]*?\btopic=([\w-]+)")
    pages = (p for p in (results.ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)
    return sorted({t for page in pages for t in directive.findall(page.read_text())})


@pytest.mark.parametrize("topic", [t for t, m in TOPICS.items() if hasattr(m, "claims")])
def test_page_claims_hold(topic):
    """Each topic's claims(data): the sentences its pages say about the committed results."""
    data = results.load(results.results_path("nvidia-h200"))
    assert topic in data.get("topics", {}), f"no {topic} results committed (make bench on a GPU writes them)"
    TOPICS[topic].claims(data)


@pytest.mark.parametrize("topic", _rendered_topics())
def test_every_rendered_topic_has_claims(topic):
    """A page that shows a topic's table or plot says something about it; the
    topic's module checks that in claims(data) (kernels/bench/__init__.py)."""
    assert topic in TOPICS, f"a page renders {topic}, which no module of kernels/bench declares"
    assert hasattr(TOPICS[topic], "claims"), \
        f"kernels/bench/{TOPICS[topic].__name__.rsplit('.', 1)[-1]}.py has no claims(data)"


def test_hook_keeps_blank_lines_between_directives(hook):
    md = "<!-- results-plot topic=vector_add -->\n\n<!-- results-table topic=vector_add columns=impl -->\n\nnext\n"
    out = hook.render(md, "a.md", "en", "no-such-gpu")
    assert out.count("\n\n") >= 2 and out.endswith("\n\nnext\n"), repr(out)


def test_table_order_and_derived_columns():
    env = {"gpu": "G", "gpu_slug": "g", "date": "d", "commit": "c"}
    recs = [{"id": f"t/cupy/{v}/4/float32", "topic": "t", "impl": "cupy", "variant": v, "shape": [4],
             "dtype": "float32", "ms": ms, "tflops": 1 / ms, "ref": "t/cupy/naive/4/float32", "ratio": r,
             "rel_err": 0.0, "step": s, "energy_j_per_gflop": 2 * ms}
            for v, ms, r, s in (("naive", 8.0, 0.1, 1), ("fast", 2.0, 0.4, 2), ("mid", 4.0, 0.2, None))]
    data = results.merge({}, env, recs)
    by_step = results.render_table(data, "t", ["variant"], "en", order="step").splitlines()[2:]
    assert by_step == ["| naive |", "| fast |", "| mid |"]                 # missing key last
    by_ratio = results.render_table(data, "t", ["variant"], "en", order="-ratio").splitlines()[2:]
    assert by_ratio == ["| fast |", "| mid |", "| naive |"]
    table = results.render_table(data, "t", ["variant", "time_vs_naive", "energy_vs_mid"], "en", order="step")
    assert "| fast | 0.250 | 0.500 |" in table and "time / naive" in table and "energy / mid" in table
    speed = results.render_table(data, "t", ["variant", "speedup_vs_naive"], "en", order="step")
    assert "| fast | 4.000 |" in speed and "| naive | 1.000 |" in speed and "speed-up over naive" in speed
    assert "加速比（相对 naive）" in results.render_table(data, "t", ["speedup_vs_naive"], "zh")


def test_check_records_need_no_rate():
    """occupancy_check compares two answers: `check: true` stands in for a rate."""
    rid = results.record_id("occupancy_check", "cupy", "k", [256, 0], "n/a")
    r = {"id": rid, "topic": "occupancy_check", "impl": "cupy", "variant": "k", "shape": [256, 0],
         "dtype": "n/a", "ms": None, "ref": rid, "ratio": 1.0, "rel_err": 0.0, "check": True}
    data = results.merge({}, ENV, [r])
    assert results.validate(data) == []
    del data["records"][0]["check"]
    assert any("has no rate" in p for p in results.validate(data))


def test_roofline_points_stay_under_the_measured_roof():
    """kernels/bench/roofline.py counts FLOPs and bytes per topic; a point far
    above min(peak, intensity x bandwidth) would mean a counting error."""
    from kernels.bench import TOPICS, roofline

    data = results.load(results.results_path("nvidia-h200"))
    roof = roofline.roofs(data)
    assert None not in roof.values(), "a roof (bandwidth or FMA peak) is not measured"
    pts = roofline.points(data)
    on_it = {t for t, m in TOPICS.items() if hasattr(m, "roofline_points") and t in data["topics"]}
    assert len(on_it) >= 6 and {p["topic"] for p in pts} == on_it  # every topic that counts FLOPs has points
    for p in pts:
        bound = min(roof["gflops"], p["intensity"] * roof["gbps"])
        assert p["gflops"] <= 1.1 * bound, p  # read-only streams may beat the copy a little


def test_no_topic_is_stale():
    """Each topic's stamp holds a hash of the code of the kernel sources it
    measured (kernels/results.py: topic_sources). A kernel change ships with
    its re-measurement: `make bench BENCH_ARGS="--topics <topic>"` on a GPU."""
    from kernels.bench import TOPICS

    data = results.load(results.results_path("nvidia-h200"))
    stale = results.stale_topics(data, {t: m.__file__ for t, m in TOPICS.items()})
    assert not stale, "topics measured with other kernel code than today's (re-measure them):\n" + \
        "\n".join(f"  {t}: {', '.join(files)}" for t, files in sorted(stale.items()))


def test_freshness_hash_sees_code_not_comments():
    a = "def f(x):\n    return x + 1\n"
    assert results.code_hash("k.py", a) == results.code_hash("k.py", '# a comment\ndef f(x):\n    """doc"""\n    return x + 1\n')
    assert results.code_hash("k.py", a) != results.code_hash("k.py", a.replace("+ 1", "+ 2"))
    c = "__global__ void k(float* o) { o[0] = 1.0f; }"
    assert results.code_hash("k.cu", c) == results.code_hash("k.cu", "// note\n" + c.replace("{ ", "{\n  /* x */ "))
    assert results.code_hash("k.cu", c) != results.code_hash("k.cu", c.replace("1.0f", "2.0f"))


def test_no_record_types_its_error():
    """Every record is built by results.record, with a rel_err computed from
    an output (or a named no_rel_err reason): no bench writes a literal
    rel_err, builds a record dict by hand, or sets an error variable to a
    constant."""
    import ast

    bad = []
    for f in sorted((results.ROOT / "kernels" / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            where = f"{f.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "rel_err"
                                                  for k in node.keys):
                bad.append(f"{where}: a record dict written by hand")
            if isinstance(node, ast.keyword) and node.arg == "rel_err" and isinstance(node.value, ast.Constant):
                bad.append(f"{where}: rel_err={node.value.value!r}")
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and any(isinstance(t, ast.Name) and t.id in ("err", "rel_err") for t in node.targets)):
                bad.append(f"{where}: an error set to a constant")
    assert not bad, "\n".join(bad)


def test_record_helper_requires_a_measured_error():
    with pytest.raises(ValueError, match="measured rel_err"):
        results.record("t", "cupy", "v", [1], "float32", ms=1.0)
    with pytest.raises(ValueError, match="no_rel_err must be one of"):
        results.record("t", "cupy", "v", [1], "float32", ms=1.0, no_rel_err="trust me")
    with pytest.raises(ValueError, match="finite"):
        results.record("t", "cupy", "v", [1], "float32", ms=1.0, rel_err=float("nan"))
    r = results.record("t", "cupy", "v", [3], "float32", ms=1.0, rel_err=1e-7, gbps=2.0)
    assert r["id"] == "t/cupy/v/3/float32" and r["ref"] == r["id"] and r["gbps"] == 2.0


def test_stamps_follow_definitions_not_files(tmp_path):
    """Moving a definition between kernel modules keeps a topic's stamp;
    changing its code, or a bench definition measure() reaches, changes it;
    a bench definition measure() does not reach (claims, plots) does not."""
    k = tmp_path / "kernels"
    (k / "bench").mkdir(parents=True)
    (k / "cuda").mkdir()
    (k / "cuda" / "t.cu").write_text('extern "C" __global__ void f() {}\n')
    bench = k / "bench" / "t.py"

    def write(a: str, b: str, bench_text: str):
        (k / "a.py").write_text("from . import b\n" + a)
        (k / "b.py").write_text('"""b"""\nCUDA = "t.cu"\n' + b)
        bench.write_text("from .. import a\n" + bench_text)
        return results.topic_sources(bench, k)

    f = "def f(x):\n    return x + 1\n"
    g = "def g(x):\n    # a comment\n    return 2 * x\n"
    m = "N = 3\n\n\ndef measure(quick=False):\n    return [N]\n\n\ndef claims(data):\n    assert data\n"
    base = write(f + g, "", m)
    assert set(base) == {"f", "g", "CUDA", "cuda/t.cu", "N", "measure"}
    assert write(f, g, m) == base                                              # g moved from a to b
    assert write(f.replace("+ 1", "+ 2"), g, m) != base                        # f's code changed
    assert write(f, g.replace("# a comment", "# another"), m) == base          # a comment is not code
    assert write(f, g, m.replace("N = 3", "N = 4")) != base                    # reached from measure()
    assert write(f, g, m.replace("assert data", "assert not data")) == base    # claims are not measured
    (k / "cuda" / "t.cu").write_text('// x\nextern "C"\n  __global__ void f() {}\n')
    assert write(f, g, m) == base                                              # layout and comments only


def test_words_of_a_text_column_are_translated():
    """A topic's WORDS translate the " + "-joined words of a text column; a
    word it does not list stays as it is."""
    env = {"gpu": "G", "gpu_slug": "g", "date": "d", "commit": "c"}
    r = {"id": "t/cupy/v/4/float32", "topic": "t", "impl": "cupy", "variant": "v", "shape": [4], "dtype": "float32",
         "ms": 1.0, "ref": "t/cupy/v/4/float32", "ratio": 1.0, "rel_err": 0.0, "binding": "warps + registers + odd"}
    data = results.merge({}, env, [r])
    words = {"binding": {"warps": ("warp 数", "warps"), "registers": ("寄存器", "registers")}}
    assert "| warp 数 + 寄存器 + odd |" in results.render_table(data, "t", ["binding"], "zh", words=words)
    assert "| warps + registers + odd |" in results.render_table(data, "t", ["binding"], "en", words=words)


def test_occupancy_limits_read_in_chinese_on_the_chinese_page():
    """Every value of occupancy_check's `binding` is made of words it translates."""
    from kernels.bench import TOPICS

    words = TOPICS["occupancy_check"].WORDS["binding"]
    data = results.load(results.results_path("nvidia-h200"))
    seen = {w for r in results.select(data, "occupancy_check") for w in r["binding"].split(" + ")}
    assert seen and seen <= set(words), seen - set(words)


def test_one_tab_per_gpu_when_several_results_files_exist(hook, tmp_path, monkeypatch):
    """A reader's GPU beside the H200: every directive becomes one tab per GPU
    (the main GPU first, tabs labelled by GPU so Material links them); a
    topic the other file lacks reads as not measured there. The second file
    is synthetic and lives only in a temporary folder."""
    import json
    import shutil

    real = results.results_path("nvidia-h200")
    shutil.copy(real, tmp_path / real.name)
    data = json.loads(real.read_text())
    other = {"topics": {"vector_add": json.loads(json.dumps(data["topics"]["vector_add"]))},
             "records": [dict(r) for r in data["records"] if r["topic"] == "vector_add"]}
    other["topics"]["vector_add"]["env"].update(gpu="Test GPU 9000", gpu_slug="test-gpu")
    (tmp_path / "test-gpu.json").write_text(json.dumps(other))
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    md = ("<!-- results-table topic=vector_add columns=impl,variant,n,gbps where=n:268435456 -->\n\n"
          "<!-- results-stamp topic=matmul -->\n")
    out = hook.render(md, "programming-model.en.md", "en", "nvidia-h200")
    tabs = [ln for ln in out.splitlines() if ln.startswith("=== ")]
    assert tabs == ['=== "NVIDIA H200"', '=== "Test GPU 9000"'] * 2, tabs
    first, second = out.split('=== "Test GPU 9000"', 1)
    assert "    | impl | variant |" in first and "    | impl | variant |" in second.split("===")[0]
    assert "Not measured yet" in out.split('=== "Test GPU 9000"')[-1]   # matmul: not in the second file
    monkeypatch.setattr(results, "RESULTS_DIR", real.parent)
    assert "===" not in hook.render(md, "programming-model.en.md", "en", "nvidia-h200")  # one file: no tabs


def test_the_site_reads_each_topic_as_the_bench_declares_it():
    """docs/hooks/results.py reads the topics' names, labels and words from
    kernels/bench's source (results.declared_topics), importing nothing: it
    must find what importing the modules finds."""
    from kernels.bench import TOPICS, labels, words

    declared = results.declared_topics()
    assert list(declared) == list(TOPICS)
    for topic in TOPICS:
        assert declared[topic]["labels"] == labels(topic), topic
        assert declared[topic]["words"] == words(topic), topic


def test_a_column_of_numbers_has_one_format():
    """A measured clock is an int or, as the median of an even count of
    readings, a whole float: the column writes them alike (tc_cublas's
    1440 beside 1965.0); a column with a fraction writes its ints as floats."""
    env = {"gpu": "G", "gpu_slug": "g", "date": "d", "commit": "c"}
    recs = [{"id": f"t/cupy/{v}/4/float32", "topic": "t", "impl": "cupy", "variant": v, "shape": [4],
             "dtype": "float32", "ms": 1.0, "ref": "t/cupy/a/4/float32", "ratio": 1.0, "rel_err": 0.0,
             "sm_clock_mhz": clk, "datasheet": peak, "regs": 40}
            for v, clk, peak in (("a", 1440, 989.5), ("b", 1965.0, 67), ("c", 1290.0, 1979.0))]
    data = results.merge({}, env, recs)
    rows = results.render_table(data, "t", ["variant", "sm_clock_mhz", "datasheet", "regs"], "en").splitlines()[2:]
    assert rows == ["| a | 1,440 | 989.5 | 40 |", "| b | 1,965 | 67 | 40 |", "| c | 1,290 | 1,979.0 | 40 |"], rows
    committed = results.load(results.results_path("nvidia-h200"))
    table = results.render_table(committed, "tc_cublas", ["variant", "sm_clock_mhz"], "en", where={"n": "8192"})
    cells = [ln.split("|")[2].strip() for ln in table.splitlines()[2:]]
    assert cells and all(c.replace(",", "").isdigit() for c in cells), cells


def test_a_text_column_sorts_in_the_order_its_words_are_listed():
    """order= on a text column the topic's WORDS list (a ladder's steps)
    sorts the rows in the listed order, not alphabetically; rows of one step
    keep their size order; a word not listed goes after those listed."""
    env = {"gpu": "G", "gpu_slug": "g", "date": "d", "commit": "c"}
    recs = [{"id": f"t/cupy/{s}/{k}/float32", "topic": "t", "impl": "cupy", "variant": f"{s}/k{k}", "shape": [k],
             "dtype": "float32", "ms": 1.0, "ref": "t/cupy/sync/8/float32", "ratio": 1.0, "rel_err": 0.0,
             "step": s, "k": k} for s in ("cpasync", "odd", "regbuf", "sync") for k in (256, 8)]
    data = results.merge({}, env, recs)
    words = {"step": {"sync": ("sync", "sync"), "regbuf": ("regbuf", "regbuf"), "cpasync": ("cpasync", "cpasync")}}
    rows = results.render_table(data, "t", ["step", "k"], "en", order="step", words=words).splitlines()[2:]
    assert rows == [f"| {s} | {k} |" for s in ("sync", "regbuf", "cpasync", "odd") for k in (8, 256)], rows


def _tables(hook, page: str, topic: str) -> list[tuple[str, dict]]:
    """The results tables docs/<page> renders for `topic`, found as the hook
    finds them (indented ones in content tabs too): (directive, its arguments)."""
    text = (Path(results.ROOT) / "docs" / page).read_text()
    found = [(m.group(0).strip(), hook._args(m.group("args"))) for m in hook.DIRECTIVE.finditer(text)
             if m.group("kind") == "table"]
    return [(line, args) for line, args in found if args.get("topic") == topic]


def test_the_warp_specialization_tables_list_the_ladder_in_order(hook):
    """docs/warp-specialization*.md: both tables of the ladder list its steps
    in the ladder's order (kernels.warp_specialization.STEPS, then Numba's)."""
    from kernels import warp_specialization as ws

    ladder = [*ws.STEPS, *TOPICS["warp_specialization"].NUMBA_STEPS]
    assert list(TOPICS["warp_specialization"].WORDS["step"]) == ladder
    for page in ("warp-specialization.md", "warp-specialization.en.md"):
        lines = [line for line, _ in _tables(hook, page, "warp_specialization")]
        assert len(lines) == 2, page
        for line in lines:
            out = hook.render(line, page, "en" if page.endswith(".en.md") else "zh", "nvidia-h200")
            for table in out.split("\n\n"):  # a wide table is split in parts, each in the same row order
                steps = [row.split("|")[2].strip() for row in table.splitlines()[2:]]
                seen = list(dict.fromkeys(steps))
                assert len(seen) == len(ladder) and seen == [s for s in ladder if s in seen], (page, seen)


def test_spmv_tables_name_the_row_count_rows():
    """An SpMV record's shape[0] (column n) is the matrix's row count, beside
    its nonzeros: the column says rows, not elements."""
    data = results.load(results.results_path("nvidia-h200"))
    for lang, want in (("zh", "行数"), ("en", "rows")):
        table = results.render_table(data, "spmv", ["family", "n", "nnz"], lang, where={"impl": "cusparse"},
                                     labels=TOPICS["spmv"].LABELS, words=TOPICS["spmv"].WORDS)
        head = [h.strip() for h in table.splitlines()[0].strip("|").split("|")]
        assert head[1] == want, head
        assert results.HEADERS[lang]["n"] not in head


def test_group_makes_one_table_of_a_run_of_tables():
    """group=family,n: one table where there would be one per matrix; the
    groups come in the order `words` lists a text key and ascending for a
    number, `order` sorts within a group, a leading column (headed by the
    keys' labels, its words translated) names each group on its first row
    only; the group's column counts toward the split of a wide table."""
    env = {"gpu": "G", "gpu_slug": "g", "date": "d", "commit": "c"}
    recs = [{"id": f"t/cupy/{f}/{s}/{n}/float32", "topic": "t", "impl": "cupy", "variant": f"{f}/{s}", "shape": [n],
             "dtype": "float32", "ms": ms * n, "ref": f"t/cupy/{f}/slow/{n}/float32", "ratio": 1.0, "rel_err": 0.0,
             "family": f, "step": s}
            for f in ("power_law", "banded") for n in (3000, 700) for s, ms in (("slow", 2.0), ("fast", 1.0))]
    data = results.merge({}, env, recs)
    labels = {"family": ("矩阵", "matrix"), "n": ("行数", "rows")}
    words = {"family": {"banded": ("带状", "banded"), "power_law": ("幂律", "power-law")}}
    table = results.render_table(data, "t", ["step", "ms"], "en", order="ms", labels=labels, words=words,
                                 group=["family", "n"])
    assert "\n\n" not in table
    lines = table.splitlines()
    assert lines[0] == "| matrix, rows | step | time (ms) |" and lines[1] == "|---|---:|---:|"
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [c[0] for c in cells] == ["banded, 700", "", "banded, 3,000", "", "power-law, 700", "",
                                     "power-law, 3,000", ""], cells
    assert [c[1] for c in cells] == ["fast", "slow"] * 4  # order=ms within each matrix
    zh = results.render_table(data, "t", ["step"], "zh", labels=labels, words=words, group=["family", "n"])
    assert zh.splitlines()[0] == "| 矩阵，行数 | 步 |" and "| 带状，700 |" in zh and "幂律，3,000" in zh
    cols = ["step", "ms", "ratio", "ms", "ratio", "ms", "ratio"]  # 7 columns and the group's: split
    parts = results.render_table(data, "t", cols, "en", labels=labels, words=words, group=["family", "n"]).split("\n\n")
    heads = [t.splitlines()[0].strip("| ").split(" | ") for t in parts]
    assert len(parts) == 2 and all(len(h) <= results.MAX_COLUMNS and h[:2] == ["matrix, rows", "step"] for h in heads)


def test_the_spmv_results_are_one_table_grouped_by_matrix(hook):
    """docs/algorithms*.md: the SpMV results are one table, grouped by matrix
    (not six with one header), the same directive in both languages, and
    the Chinese one names the matrices in Chinese."""
    found = {}
    for page in ("algorithms.md", "algorithms.en.md"):
        lines = [line for line, args in _tables(hook, page, "spmv") if "group" in args and "where" not in args]
        assert len(lines) == 1 and "group=family,n" in lines[0], (page, lines)
        found[page] = lines[0]
    assert found["algorithms.md"] == found["algorithms.en.md"]
    zh = hook.render(found["algorithms.md"], "algorithms.md", "zh", "nvidia-h200")
    assert "\n\n" not in zh and zh.splitlines()[0].startswith("| 矩阵，行数 |")
    named = [ln.split("|")[1].strip() for ln in zh.splitlines()[2:] if ln.split("|")[1].strip()]
    assert len(named) == 6 and all(n.split("，")[0] in ("带状", "均匀随机", "幂律") for n in named), named


def test_a_legend_over_data_is_moved_clear_of_it(tmp_path):
    """kernels/bench/plotting.py: place_legends finds a legend that covers a
    line's points, a bar or a text, and moves it where it covers none; one
    that has no clear place inside its axes goes outside them."""
    from kernels.bench import plotting

    fig, ax = plotting.new_figure(5, 3)
    ax.plot([0, 1, 2, 3], [0, 1, 2, 3], "o-", label="rising")
    ax.legend(loc="lower right")                                  # clear of a rising line
    assert not plotting.legend_overlaps(fig, ax.get_legend())
    ax.legend(loc="upper right")
    ax.plot([2.5, 3], [2.2, 2.3], "s", label="points under the legend")
    assert plotting.legend_overlaps(fig, ax.get_legend())        # detected
    assert plotting.place_legends(fig) is False                   # moved, inside its axes
    assert not plotting.legend_overlaps(fig, ax.get_legend())

    fig, ax = plotting.new_figure(5, 3)                           # data everywhere: no clear corner
    for i in range(12):
        ax.bar(i, 10, label="a bar" if i == 0 else None)
    ax.text(0, 5, "a note")
    ax.legend(loc="upper left")
    assert plotting.legend_overlaps(fig, ax.get_legend())
    assert plotting.place_legends(fig) is True                    # outside the axes
    box, axes = ax.get_legend().get_window_extent(), ax.bbox
    assert box.y1 <= axes.y0 or box.x0 >= axes.x1
    assert not plotting.legend_overlaps(fig, ax.get_legend())
    fig.savefig(tmp_path / "out.svg", bbox_inches="tight")        # the whole legend is kept
    import matplotlib.pyplot as plt

    plt.close("all")


def test_no_page_has_a_run_of_tables_with_one_header():
    """Two results tables one after the other (nothing but a short line
    between) with the same topic and columns, selecting by the same keys
    with other values, are one table split by hand: group= them instead."""
    import re
    from pathlib import Path

    def where_keys(ln: str) -> set:
        m = re.search(r"where=(\S+)", ln)
        return {w.split(":")[0] for w in m.group(1).split(",")} if m else set()

    for page in sorted((Path(results.ROOT) / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        tables = [(i, m.group(1), m.group(2)) for i, ln in enumerate(lines)
                  if (m := re.match(r"<!-- results-table topic=(\S+) columns=(\S+)", ln))]
        for (i, t1, c1), (j, t2, c2) in zip(tables, tables[1:]):
            between = [ln for ln in lines[i + 1:j] if ln.strip()]
            split = t1 == t2 and c1 == c2 and where_keys(lines[i]) == where_keys(lines[j])
            assert not (split and len(between) <= 1), (page.name, lines[i], lines[j])
