"""The results file, docs/assets/results/<gpu>.json: read, merge, check, render.

Layout:
    {"schema": 1,
     "env": {...stamp of the latest run...},
     "topics": {"vector_add": {"env": {...stamp of the run that measured it...}}},
     "records": [{"id", "topic", "impl", "variant", "shape", "dtype", "ms",
                  "gbps" or "tflops", "ref", "ratio", "rel_err", ...}, ...]}

A run replaces the records of the topics it measured and keeps the rest.
Pages render tables from this file (docs/hooks/results.py calls
`render_table` and `render_stamp`); nothing on a page is typed by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "docs" / "assets" / "results"
SCHEMA = 1
REQUIRED = ("id", "topic", "impl", "variant", "shape", "dtype", "ms", "ref", "ratio", "rel_err")
ENV_REQUIRED = ("gpu", "compute_capability", "driver", "cuda_runtime", "cupy", "numba",
                "numba_cuda", "date", "commit")


# ------------------------------------------------------------- freshness --
# Each topic's stamp records what it measured: a hash of the code of each
# definition it runs. That is every top-level definition (function, class,
# assignment) of the kernels/<x>.py modules its bench module imports (found
# by their imports, transitively), the bench module's own definitions that
# its measure() reaches, and each .cu file those name. Definitions are keyed
# by name, not by file, so moving one between modules (a refactor) keeps the
# stamp, while changing its code changes it. Comments, docstrings, imports
# and layout do not count. tests/test_results.py lists the topics whose
# code changed since they were measured.

NOT_KERNELS = {"harness", "results", "checks", "device", "standalone", "sass", "__init__"}
KERNELS_DIR = ROOT / "kernels"


def _imported_modules(path: Path, kernels_dir: Path = KERNELS_DIR) -> set[str]:
    """Names of the kernels/<x>.py modules (not the infrastructure in
    NOT_KERNELS) that a module imports, relatively or as kernels.<x>."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        parts = [p for p in (node.module or "").split(".") if p]
        if node.level:
            pkg = path.parent.parents[node.level - 2] if node.level > 1 else path.parent
        elif parts[:1] == ["kernels"]:
            pkg, parts = kernels_dir, parts[1:]
        else:
            continue
        target = pkg.joinpath(*parts)
        files = ([target.with_suffix(".py")] if parts else []) + [target / f"{a.name}.py" for a in node.names]
        out.update(f.stem for f in files
                   if f.parent == kernels_dir and f.is_file() and f.stem not in NOT_KERNELS)
    return out


def topic_source_files(bench_module_file: str | Path, kernels_dir: Path = KERNELS_DIR) -> list[Path]:
    """The kernel sources a bench module measures: the kernel modules it
    imports (and those they import), and the .cu files they name."""
    import re

    todo, seen = list(_imported_modules(Path(bench_module_file), kernels_dir)), set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += list(_imported_modules(kernels_dir / f"{m}.py", kernels_dir))
    files = [kernels_dir / f"{m}.py" for m in sorted(seen)]
    for f in list(files) + [Path(bench_module_file)]:
        for cu in sorted(set(re.findall(r"\b(\w+\.cuh?)\b", f.read_text()))):
            if (kernels_dir / "cuda" / cu).is_file() and kernels_dir / "cuda" / cu not in files:
                files.append(kernels_dir / "cuda" / cu)
    return files


def _definitions(text: str) -> list[tuple[str, str, set[str]]]:
    """(name, source, names it uses) of each top-level statement of a module
    but its imports and docstring; an assignment is named by its targets, any
    other statement by its code hash."""
    import ast

    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    out = []
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the module docstring
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        src = "".join(lines[first - 1:node.end_lineno])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            name = ",".join(sorted(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)))
        else:
            name = "<" + code_hash("s.py", src) + ">"
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        out.append((name, src, used))
    return out


def topic_sources(bench_module_file: str | Path, kernels_dir: Path = KERNELS_DIR) -> dict[str, str]:
    """{definition name or .cu file: code hash} of what a topic measures (see
    above). Two modules defining one name: their hashes joined, sorted."""
    bench = Path(bench_module_file)
    found: dict[str, list[str]] = {}
    files = topic_source_files(bench, kernels_dir)
    for f in files:
        if f.suffix == ".py":
            for name, src, _ in _definitions(f.read_text()):
                found.setdefault(name, []).append(code_hash("d.py", src))
        else:
            found[f"cuda/{f.name}"] = [code_hash(f.name, f.read_text())]
    defs = {name: (src, used) for name, src, used in _definitions(bench.read_text())}
    todo, reached = ["measure"], set()
    while todo:  # the bench module's definitions that measure() reaches
        name = todo.pop()
        if name in reached or name not in defs:
            continue
        reached.add(name)
        todo += [d for d in defs if set(d.split(",")) & defs[name][1]]
    for name in sorted(reached):
        found.setdefault(name, []).append(code_hash("d.py", defs[name][0]))
    return {k: "+".join(sorted(v)) for k, v in sorted(found.items())}


def code_hash(name: str, text: str) -> str:
    """sha256 (12 hex digits) of a source's code: comments, docstrings and
    layout removed, the same on every Python version (Python: comment and
    docstring spans found by tokenize and ast, then whitespace runs
    collapsed; CUDA C: comments stripped, whitespace runs collapsed)."""
    import ast
    import hashlib
    import io
    import re
    import tokenize

    if name.endswith(".py"):
        lines = text.splitlines(keepends=True)
        starts = [0]
        for ln in lines:
            starts.append(starts[-1] + len(ln))
        spans = []
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                spans.append((starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1]))
        for node in ast.walk(ast.parse(text)):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                d = body[0]
                spans.append((starts[d.lineno - 1] + d.col_offset, starts[d.end_lineno - 1] + d.end_col_offset))
        for a, b in sorted(spans, reverse=True):
            text = text[:a] + " " + text[b:]
        norm = " ".join(text.split())
    else:
        norm = " ".join(re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S).split())
    return hashlib.sha256(norm.encode()).hexdigest()[:12]


def stale_topics(data: dict, bench_files: dict[str, Path]) -> dict[str, list[str]]:
    """topic -> the sources whose code changed since it was measured (or
    that it has no record of)."""
    out = {}
    for topic, entry in data.get("topics", {}).items():
        if topic not in bench_files:
            continue
        then = entry.get("env", {}).get("sources")
        now = topic_sources(bench_files[topic])
        if then is None:
            out[topic] = ["(no sources stamp)"]
            continue
        changed = sorted(p for p in set(now) | set(then) if now.get(p) != then.get(p))
        if changed:
            out[topic] = changed
    return out


def restamp(data: dict, topic: str, sources: dict[str, str], reason: str) -> list[str]:
    """Record `sources` as what `topic` measured, without measuring: for a
    refactor that moved or renamed code but changed no measured behaviour.
    The stamp keeps each restamp (date, reason, the definitions whose hash
    changed), so the results file says that its numbers predate the code.
    Returns the changed definitions."""
    import datetime

    env = data["topics"][topic]["env"]
    old = env.get("sources", {})
    changed = sorted(k for k in set(old) | set(sources) if old.get(k) != sources.get(k))
    if changed:
        env.setdefault("restamped", []).append({"date": datetime.date.today().isoformat(), "reason": reason,
                                                 "changed": changed})
        env["sources"] = sources
    return changed


# ------------------------------------------------------ topic declarations --

def _literal(node, kernels_dir: Path):
    """A module-level value as the bench modules write them: a literal, or a
    dict literal that unpacks `**module.NAME` (a literal of kernels/<module>.py)."""
    import ast

    if isinstance(node, ast.Dict) and any(k is None for k in node.keys):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                if not (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name)):
                    raise ValueError(f"cannot read {ast.unparse(v)} without importing it")
                out.update(_module_literals(kernels_dir / f"{v.value.id}.py", kernels_dir)[v.attr])
            else:
                out[ast.literal_eval(k)] = ast.literal_eval(v)
        return out
    return ast.literal_eval(node)


def _module_literals(path: Path, kernels_dir: Path, names=None) -> dict:
    import ast

    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if names is None or name in names:
                try:
                    out[name] = _literal(node.value, kernels_dir)
                except ValueError:
                    if names is not None:
                        raise
    return out


def declared_topics(kernels_dir: Path = KERNELS_DIR) -> dict[str, dict]:
    """{topic: {"labels": LABELS, "words": WORDS, "order": ORDER}} of every
    bench module that defines TOPIC, in the bench's order, read from their
    source without importing them: the site builds from the `docs` extra
    alone (no Numba, no CuPy). tests/test_results.py checks it against the
    imported modules."""
    found = []
    for path in sorted((kernels_dir / "bench").glob("*.py")):
        if path.name.startswith("_"):
            continue
        lits = _module_literals(path, kernels_dir, {"TOPIC", "LABELS", "WORDS", "ORDER"})
        if "TOPIC" in lits:
            found.append((lits.get("ORDER", 1000), lits["TOPIC"],
                          {"labels": lits.get("LABELS", {}), "words": lits.get("WORDS", {}),
                           "order": lits.get("ORDER", 1000)}))
    return {topic: decl for _, topic, decl in sorted(found, key=lambda f: (f[0], f[1]))}


def record_id(topic: str, impl: str, variant: str, shape, dtype: str) -> str:
    return f"{topic}/{impl}/{variant}/{'x'.join(str(s) for s in shape)}/{dtype}"


# A record without a relative error says why, by one of these names.
NO_REL_ERR = {
    "pointer_chase": "a latency probe computes no value; where the chase ended is compared with the "
                     "chain instead (the bench raises if it differs)",
    "throughput_only": "an instruction-throughput probe on register operands computes no product to compare; "
                       "the bench checks that what it wrote is finite",
    "nonfinite": "the format overflowed: the output holds inf or NaN, so the record gives the fraction of "
                 "non-finite entries (`nonfinite`) instead of an error",
}


def record(topic: str, impl: str, variant: str, shape, dtype: str, *, ms, ref: str | None = None,
           rel_err: float | None = None, no_rel_err: str | None = None, **fields) -> dict:
    """One measured thing; every bench builds its records here.

    rel_err is the error of this run's output against a reference, as
    measured (harness.rel_err: 0.0 for an exact copy that matched); a record
    that computes no value names the reason in `no_rel_err` (a key of
    NO_REL_ERR) instead. ref: the id of the reference measured in the same
    run (None: the record is its own reference)."""
    if (rel_err is None) == (no_rel_err is None):
        raise ValueError(f"{topic}/{impl}/{variant}: give a measured rel_err, or no_rel_err with a reason")
    if no_rel_err is not None and no_rel_err not in NO_REL_ERR:
        raise ValueError(f"no_rel_err must be one of {sorted(NO_REL_ERR)}, got {no_rel_err!r}")
    if rel_err is not None and not (isinstance(rel_err, float) and math.isfinite(rel_err)):
        raise ValueError(f"{topic}/{impl}/{variant}: rel_err must be a finite float, got {rel_err!r}")
    rid = record_id(topic, impl, variant, shape, dtype)
    out = {"id": rid, "topic": topic, "impl": impl, "variant": variant, "shape": [int(s) for s in shape],
           "dtype": dtype, "ms": ms, "ref": ref or rid, "rel_err": rel_err}
    if no_rel_err is not None:
        out["no_rel_err"] = no_rel_err
    out.update(fields)
    return out


def results_path(gpu_slug: str) -> Path:
    return RESULTS_DIR / f"{gpu_slug}.json"


def load(path: Path) -> dict:
    if not Path(path).exists():
        return {"schema": SCHEMA, "env": {}, "topics": {}, "records": []}
    return json.loads(Path(path).read_text())


def merge(old: dict, env: dict, records: list[dict], per_topic: dict[str, dict] | None = None) -> dict:
    """Replace the topics present in `records`; keep every other topic.
    per_topic: topic -> what its stamp adds to `env` (`sources`: {path: code
    hash} of what it measured; `seconds`: how long it took)."""
    topics = {r["topic"] for r in records}
    kept = [r for r in old.get("records", []) if r["topic"] not in topics]
    topic_env = dict(old.get("topics", {}))
    for t in topics:
        topic_env[t] = {"env": dict(env, **(per_topic or {}).get(t, {}))}
    merged = sorted(kept + list(records), key=lambda r: (r["topic"], r["id"]))
    return {"schema": SCHEMA, "env": env, "topics": dict(sorted(topic_env.items())),
            "records": merged}


def take_topics(base: dict, src: dict, topics) -> dict:
    """`base` with the records and stamps of `topics` taken from `src` (a
    results file written by another run, e.g. on another GPU of the host)."""
    topics = set(topics)
    missing = topics - set(src.get("topics", {}))
    if missing:
        raise ValueError(f"{sorted(missing)} not measured in the other file")
    records = [r for r in base.get("records", []) if r["topic"] not in topics]
    records += [r for r in src["records"] if r["topic"] in topics]
    stamps = dict(base.get("topics", {}))
    stamps.update({t: src["topics"][t] for t in topics})
    newest = max((src["topics"][t]["env"] for t in topics), key=lambda e: e.get("date", ""))
    return {"schema": SCHEMA, "env": newest, "topics": dict(sorted(stamps.items())),
            "records": sorted(records, key=lambda r: (r["topic"], r["id"]))}


def save(path: Path, data: dict) -> None:
    problems = validate(data)
    if problems:
        raise ValueError("results file would be invalid:\n  " + "\n  ".join(problems))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def validate(data: dict) -> list[str]:
    """Everything wrong with a results file (empty list: valid)."""
    problems = []
    for key in ENV_REQUIRED:
        if not data.get("env", {}).get(key):
            problems.append(f"env lacks {key}")
    ids = {}
    for r in data.get("records", []):
        rid = r.get("id", "?")
        for key in REQUIRED:
            if key not in r:
                problems.append(f"{rid}: lacks {key}")
        if not ("gbps" in r or "tflops" in r or "gops" in r or r.get("check") is True):
            problems.append(f"{rid}: has no rate (gbps, tflops, or gops for integer operations; "
                            f"or check: true for a record that compares two answers, not a speed)")
        if not isinstance(r.get("shape"), list) or not all(isinstance(s, int) for s in r.get("shape", [])):
            problems.append(f"{rid}: shape must be a list of ints")
        if r.get("rel_err") is None and r.get("no_rel_err") not in NO_REL_ERR:
            problems.append(f"{rid}: rel_err is null and no_rel_err names no known reason")
        if r.get("topic") not in data.get("topics", {}):
            problems.append(f"{rid}: topic {r.get('topic')!r} has no env stamp")
        if rid in ids:
            problems.append(f"{rid}: duplicate id")
        ids[rid] = r
    for r in data.get("records", []):
        ref = ids.get(r.get("ref"))
        if ref is None:
            problems.append(f"{r.get('id')}: ref {r.get('ref')!r} is not a record")
            continue
        if ref["topic"] != r["topic"]:
            problems.append(f"{r['id']}: ref is from another topic (another run)")
        unit = next((u for u in ("gbps", "tflops", "gops") if u in r), None)
        if unit is None:
            continue  # reported above
        if unit in ref and ref[unit] and r.get("ratio") is not None:
            want = r[unit] / ref[unit]
            if not math.isclose(want, r["ratio"], rel_tol=1e-6):
                problems.append(f"{r['id']}: ratio {r['ratio']} != {unit}/{unit} of ref = {want}")
    return problems


# ------------------------------------------------------------- rendering --

# Labels of the keys every record can have (kernels.results.record, the
# energy fields of kernels.harness, the kernel attributes of kernels.device).
# A topic labels the keys it adds itself (LABELS in its kernels/bench module).
HEADERS = {
    "zh": {"impl": "实现", "variant": "变体", "shape": "规模", "n": "元素数", "dtype": "类型",
           "ms": "时间 (ms)", "gbps": "带宽 (GB/s)", "tflops": "TFLOP/s", "ratio": "相对参考",
           "ref": "参考", "rel_err": "相对误差", "energy_j_per_gflop": "能耗 (J/GFLOP)",
           "energy_pj_per_byte": "能耗 (pJ/B)", "avg_power_w": "平均功率 (W)",
           "local_bytes": "局部内存 (B)", "step": "步", "regs": "寄存器", "smem_bytes": "共享内存 (B)",
           "occupancy": "占用率", "blocks_per_sm": "每 SM 块数", "energy_ratio_to_naive": "能耗 / 朴素版",
           "dynamic_smem": "动态共享内存 (B)", "threads": "线程数", "energy_j_per_call": "每次调用能耗 (J)",
           # kernels.harness.paired_rounds: a ratio measured round by round beside its reference
           "paired_ratio": "逐轮配对比值（中位数）", "ratio_min": "各轮最小", "ratio_max": "各轮最大",
           "rounds": "轮数"},
    "en": {"impl": "impl", "variant": "variant", "shape": "shape", "n": "elements", "dtype": "dtype",
           "ms": "time (ms)", "gbps": "bandwidth (GB/s)", "tflops": "TFLOP/s", "ratio": "ratio to ref",
           "ref": "reference", "rel_err": "rel. error", "energy_j_per_gflop": "energy (J/GFLOP)",
           "energy_pj_per_byte": "energy (pJ/B)", "avg_power_w": "avg. power (W)",
           "local_bytes": "local memory (B)", "step": "step", "regs": "registers", "smem_bytes": "shared (B)",
           "occupancy": "occupancy", "blocks_per_sm": "blocks/SM", "energy_ratio_to_naive": "energy / naive",
           "dynamic_smem": "dynamic shared (B)", "threads": "threads", "energy_j_per_call": "energy per call (J)",
           "paired_ratio": "paired ratio (median)", "ratio_min": "lowest round", "ratio_max": "highest round",
           "rounds": "rounds"},
}

def _fmt(key: str, value) -> str:
    if value is None:
        return "—"
    if key == "shape":
        return "×".join(str(s) for s in value)
    if key == "n":
        n = int(value)
        sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
        return f"2{str(n.bit_length() - 1).translate(sup)}" if n & (n - 1) == 0 else f"{n:,}"
    if (derived(key) or key == "energy_ratio_to_naive") and isinstance(value, float):
        return f"{value:.3f}"
    if key.endswith(("_bytes", "_bytes_model")) and key not in ("smem_bytes", "local_bytes") \
            and isinstance(value, (int, float)):
        # sizes set by a program (footprints, buffers) in binary units where exact; traffic and
        # other large counts in decimal gigabytes
        if isinstance(value, int) and value >= 1 << 30 and value % (1 << 30) == 0:
            return f"{value >> 30} GiB"
        if value >= 1e8:
            return f"{value / 1e9:.3g} GB"
        if isinstance(value, int):
            for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
                if value >= size and value % size == 0:
                    return f"{value // size} {unit}"
            return f"{value:,}"
    if key == "ref":
        return str(value).split("/")[1] + " " + str(value).split("/")[2]
    if isinstance(value, float):
        if key == "rel_err":
            return f"{value:.1e}"
        if key == "ratio":
            return f"{value:.2f}"
        if key == "ms":
            return f"{value:.4g}"
        return f"{value:,.1f}" if value >= 100 else f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"  # thousands grouped, as in the floats of 100 and more
    return str(value)


def _fmt_column(key: str, values: list) -> list[str]:
    """A table column's cells, in one number format whatever Python type each
    number came as: a column that mixes ints and floats (a median of clock
    readings is an int, or a float when their count is even) writes them all
    as integers where every one is whole, else all as floats, by _fmt's
    rule for floats. So 1440 and 1965.0 do not stand as "1440" and
    "1,965.0" in one column."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    nums = [v for v in values if number(v)]
    mixed = any(isinstance(v, int) for v in nums) and any(isinstance(v, float) for v in nums)
    if mixed and key not in ("shape", "n"):
        whole = all(float(v).is_integer() for v in nums) and not (
            key in ("rel_err", "ratio", "ms", "energy_ratio_to_naive") or derived(key))  # floats by their nature
        values = [(int(v) if whole else float(v)) if number(v) else v for v in values]
    return [_fmt(key, v) for v in values]


def select(data: dict, topic: str, where: dict | None = None) -> list[dict]:
    """A topic's records (filtered by where={key: "v1|v2"}), ordered by
    impl, variant and size."""
    rows = sorted((r for r in data.get("records", []) if r["topic"] == topic),
                  key=lambda r: (r["impl"], r["variant"], r["shape"]))
    for key, want in (where or {}).items():
        rows = [r for r in rows if str(value(r, key)) in want.split("|")]
    return rows


def value(r: dict, key: str):
    """A record's value for a table column or where= key: "n" is shape[0],
    "shape[i]" the shape's i-th entry (e.g. N of a (BH, N, d) attention)."""
    if key == "n":
        return r["shape"][0]
    if key.startswith("shape[") and key.endswith("]") and key[6:-1].isdigit():
        i = int(key[6:-1])
        return r["shape"][i] if i < len(r["shape"]) else None
    return r.get(key)


# Columns derived at render time from other records of the same run:
# time (or energy per GFLOP) of a row over that of the same implementation's
# step <variant> at the same shape, e.g. time_vs_naive, energy_vs_coalesced
# (the form of the source chapters' tables).
# speedup_vs_<variant> is the inverse of time_vs_: that step's time over
# this row's (higher is faster; the "relative performance" of a source table).
DERIVED = {"time_vs_": "ms", "energy_vs_": "energy_j_per_gflop", "speedup_vs_": "ms"}


def derived(key: str):
    return next(((p, f) for p, f in DERIVED.items() if key.startswith(p)), None)


def _derive(data: dict, topic: str, r: dict, key: str):
    prefix, field = derived(key)
    variant = key[len(prefix):]
    base = next((b for b in data.get("records", []) if b["topic"] == topic and b["impl"] == r["impl"]
                 and b["variant"] == variant and b["shape"] == r["shape"]), None)
    if base is None or not r.get(field) or not base.get(field):
        return None
    return base[field] / r[field] if prefix == "speedup_vs_" else r[field] / base[field]


MAX_COLUMNS = 7  # wider tables do not fit the text column (1280 px screen); they are split


def render_table(data: dict, topic: str, columns: list[str], lang: str = "zh",
                 where: dict | None = None, order: str | None = None, labels: dict | None = None,
                 words: dict | None = None, max_columns: int = MAX_COLUMNS,
                 group: list[str] | None = None) -> str:
    """A markdown table of a topic's records; `order` names a key to sort by
    ("-key": descending; records without it last; a text column that `words`
    lists sorts in the order listed, e.g. a ladder's steps), else impl,
    variant, size. `labels` ({key: (Chinese, English)}) names the topic's
    own columns; `words` ({key: {word: (Chinese, English)}}) translates the
    words of a text column, joined by " + " (e.g. what bounds an occupancy).

    `group` (keys, e.g. ["family", "n"]) makes one table of what would be a
    run of tables, one per value of those keys: the rows come group by group
    (each key sorted as `order` sorts it: a text key in the order `words`
    lists it, a number ascending), `order` sorts within a group, and a
    leading column, headed by the keys' labels, names the group on its
    first row ("banded, 650,000") and is blank on the rest.

    More than max_columns columns (the group's column counted) make several
    tables, one after another: each repeats the leading columns that name a
    row (those before the first numeric one) and takes the next numbers in
    the order given."""
    rows = select(data, topic, where)
    if not rows:
        return ""
    group = list(group or [])
    if len(columns) + bool(group) > max_columns:
        return _split(data, topic, columns, lang, where, order, labels, words, max_columns - bool(group), group)
    if order:  # "-key": largest first
        key, sign = (order[1:], -1) if order.startswith("-") else (order, 1)
        def rank(r):
            v = _listed(key, value(r, key), words)
            return (v is None, sign * (v or 0), r["shape"])
        rows.sort(key=rank)
    if group:  # stable: `order` still holds within a group
        rows.sort(key=lambda r: tuple(_group_rank(r, k, words) for k in group))
    head = dict(HEADERS[lang])
    head.update({k: v[lang == "en"] for k, v in (labels or {}).items()})
    sep = "，" if lang == "zh" else ", "

    def header(c):
        if derived(c) and c not in head:
            prefix = derived(c)[0]
            base = c[len(prefix):]
            if prefix == "speedup_vs_":
                return f"加速比（相对 {base}）" if lang == "zh" else f"speed-up over {base}"
            what = {"time_vs_": ("时间", "time"), "energy_vs_": ("能耗", "energy")}[prefix][lang == "en"]
            return f"{what} / {base}"
        return head.get(c, c)
    names = [sep.join(header(k) for k in group)] if group else []
    lines = ["| " + " | ".join(names + [header(c) for c in columns]) + " |",
             "|" + "|".join(["---"] * len(names) + ["---:" if c not in ("impl", "variant", "ref") else "---"
                                                      for c in columns]) + "|"]
    cells = []
    for r in rows:
        values = [_derive(data, topic, r, c) if derived(c) else value(r, c) for c in columns]
        values = [" + ".join(words[c][w][lang == "en"] if w in words[c] else w for w in v.split(" + "))
                  if words and c in words and isinstance(v, str) else v for c, v in zip(columns, values)]
        cells.append(values)
    text = [_fmt_column(c, [row[i] for row in cells]) for i, c in enumerate(columns)]  # one format a column
    if group:  # the group's name on its first row only
        named = [sep.join(_word(k, value(r, k), lang, words) for k in group) for r in rows]
        text.insert(0, [t if k == 0 or t != named[k - 1] else "" for k, t in enumerate(named)])
    lines += ["| " + " | ".join(col[k] for col in text) + " |" for k in range(len(cells))]
    return "\n".join(lines)


def _listed(key: str, v, words: dict | None):
    """A text value of a column that `words` lists, as its place in that
    list (unlisted: after them); anything else as it is."""
    listed = list((words or {}).get(key, {}))
    if isinstance(v, str) and listed:
        return listed.index(v) if v in listed else len(listed)
    return v


def _group_rank(r: dict, key: str, words: dict | None):
    """Where a record's group comes for one key: a text value in the order
    `words` lists it (others after, alphabetically), a number ascending."""
    v = value(r, key)
    if isinstance(v, str):
        return (False, _listed(key, v, words), v)
    return (v is None, 0, v if v is not None else 0)


def _word(key: str, v, lang: str, words: dict | None) -> str:
    """A value as a table cell writes it: a text key's word translated, a number formatted."""
    if isinstance(v, str) and words and v in words.get(key, {}):
        return words[key][v][lang == "en"]
    return _fmt(key, v)


def _split(data, topic, columns, lang, where, order, labels, words, max_columns, group) -> str:
    """render_table's table of more than max_columns columns (the group's
    column not counted) as several: each repeats the leading columns that
    name a row (those before the first numeric one) and takes the next
    numbers in the order given."""
    first = select(data, topic, where)[0]
    keys = 0
    while keys < len(columns) - 1 and not isinstance(
            _derive(data, topic, first, columns[keys]) if derived(columns[keys]) else value(first, columns[keys]),
            (int, float)):
        keys += 1
    keys = max(1, min(keys, max_columns - 1))
    rest, width = columns[keys:], max_columns - keys
    parts = -(-len(rest) // width)
    size = -(-len(rest) // parts)  # even parts: 9 numbers in two tables are 5 and 4, not 6 and 3
    return "\n\n".join(render_table(data, topic, columns[:keys] + rest[k:k + size], lang, where, order,
                                      labels, words, max_columns=len(columns) + bool(group), group=group)
                        for k in range(0, len(rest), size))


def render_stamp(data: dict, topic: str, lang: str = "zh") -> str:
    env = data.get("topics", {}).get(topic, {}).get("env")
    if not env:
        return ""
    commit = str(env.get("commit", ""))[:10]
    if lang == "zh":
        return (f"测量环境：{env['gpu']}（计算能力 {env['compute_capability']}），驱动 {env['driver']}，"
                f"CUDA {env['cuda_runtime']}，CuPy {env['cupy']}，Numba {env['numba']}，"
                f"numba-cuda {env['numba_cuda']}；日期 {env['date'][:10]}，提交 `{commit}`。")
    return (f"Measured on {env['gpu']} (compute capability {env['compute_capability']}), driver "
            f"{env['driver']}, CUDA {env['cuda_runtime']}, CuPy {env['cupy']}, Numba {env['numba']}, "
            f"numba-cuda {env['numba_cuda']}; date {env['date'][:10]}, commit `{commit}`.")
