"""MkDocs hook: render measured results into pages.

A page asks for results with HTML comments (invisible when not rendered):

    <!-- results-table topic=vector_add columns=impl,variant,n,ms,gbps,ratio where=n:65536|268435456 -->
    <!-- results-plot topic=vector_add alt="vector add bandwidth" -->
    <!-- results-plot topic=matmul plot=matmul_energy alt="..." -->  (a topic's second plot)
    <!-- results-table ... order=step -->  (sort by a key instead of impl, variant)
    <!-- results-table ... group=family,n -->  (one table, not one per matrix: a leading
        column names each family and size on its group's first row; order= sorts within)
    <!-- results-stamp topic=vector_add -->

They become a Markdown table, an image of the plot and the environment stamp,
read from docs/assets/results/<extra.results_gpu>.json (written by `make bench`).

A page with code blocks that the tests run also shows, under its title, the
newest GPU test run that ran them (docs/assets/results/test-runs/<gpu>.json,
written by `make test` on a GPU: tests/record.py); the build fails when the
page's code changed after that run, or a block of it failed there.
A topic not measured yet renders a note saying so, never a made-up number
(and tests/test_results.py fails until it is measured). An unknown topic,
a column no selected record has, or a `where=` that selects nothing fails
the build with the page and line.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernels import results  # noqa: E402
from tests import record  # noqa: E402

# the topics' names, column labels and words, read from kernels/bench without
# importing it (the site builds from the `docs` extra: no Numba, no CuPy)
TOPICS = results.declared_topics()


def _labels(topic: str) -> dict:
    return dict(TOPICS.get(topic, {}).get("labels", {}))


def _words(topic: str) -> dict:
    return dict(TOPICS.get(topic, {}).get("words", {}))


# [ \t]* at the end, not \s*: the blank line after a directive must survive,
# or the table below an image is glued to it and never renders.
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)<!--[ \t]*results-(?P<kind>table|plot|stamp)[ \t]+(?P<args>.*?)[ \t]*-->[ \t]*$", re.M)

MISSING = {
    "zh": '!!! note "尚未测量"\n    本节的结果还没有在 GPU 上测量：在有 GPU 的机器上运行 `make bench` 生成 `{file}`。',
    "en": '!!! note "Not measured yet"\n    These results have not been measured on a GPU yet: run `make bench` on a GPU machine to write `{file}`.',
}


def _lang(page) -> str:
    return "en" if page.file.src_uri.endswith(".en.md") else "zh"


def _args(text: str) -> dict:
    out = {}
    for part in shlex.split(text):
        key, _, value = part.partition("=")
        out[key] = value
    return out


class DirectiveError(ValueError):
    """A results directive that would render nothing, or a column of dashes."""


def check_table(data: dict, topic: str, args: dict) -> None:
    """Fail on a filter that selects nothing, or a column or key no record has."""
    rows = results.select(data, topic)

    def has(key):  # a field of some record, or one results.value derives from it (n, shape[i])
        return any(key in r or results.value(r, key) is not None for r in rows)

    where = dict(w.split(":", 1) for w in args.get("where", "").split(",") if w)
    for key, want in where.items():
        if not has(key):
            raise DirectiveError(f"where= names {key!r}, which no {topic} record has")
        values = {str(results.value(r, key)) for r in rows}
        unknown = [v for v in want.split("|") if v not in values]
        if unknown:
            raise DirectiveError(f"where={key}:{want}: no {topic} record has {key} = {unknown}")
    chosen = results.select(data, topic, where)
    if not chosen:
        raise DirectiveError(f"where={args.get('where')} selects no {topic} record")
    for c in args.get("columns", "").split(","):
        if results.derived(c):
            continue
        if c not in results.HEADERS["zh"] and c not in _labels(topic):
            raise DirectiveError(f"column {c!r} has no label: add it to LABELS in kernels/bench/{topic}.py")
        if not any(results.value(r, c) is not None for r in chosen):
            raise DirectiveError(f"column {c!r} is empty in every selected {topic} record")
    order = args.get("order", "").lstrip("-")
    if order and not has(order):
        raise DirectiveError(f"order={order}: no {topic} record has it")
    for key in (k for k in args.get("group", "").split(",") if k):
        if not any(results.value(r, key) is not None for r in chosen):
            raise DirectiveError(f"group={args['group']}: no selected {topic} record has {key!r}")
        if key not in results.HEADERS["zh"] and key not in _labels(topic):
            raise DirectiveError(f"group key {key!r} has no label: add it to LABELS in kernels/bench/{topic}.py")


def other_gpus(gpu: str) -> list[str]:
    """The results files of other GPUs beside this one's (a reader who
    measured their GPU and contributed docs/assets/results/<gpu>.json)."""
    return sorted(p.stem for p in results.RESULTS_DIR.glob("*.json") if p.stem != gpu)


def render(markdown: str, src_uri: str, lang: str, gpu: str) -> str:
    """Replace the directives; raise DirectiveError (naming page and line)
    on an unknown topic, column or key, or a filter that selects nothing in
    the main GPU's file (`gpu`). When other GPUs' files exist, each
    directive becomes one tab per GPU, the main GPU's first; a topic or
    filter another file lacks shows as not measured there."""
    known = set(TOPICS)
    files = {g: results.load(results.results_path(g)) for g in [gpu] + other_gpus(gpu)}

    def replace(m: re.Match) -> str:
        line = markdown.count("\n", 0, m.start()) + 1
        indent, kind, args = m.group("indent"), m.group("kind"), _args(m.group("args"))
        try:
            if args["topic"] not in known:
                raise DirectiveError(f"unknown topic {args['topic']!r} (kernels/bench knows {sorted(known)})")
            texts = {gpu: _one(files[gpu], gpu, kind, args, src_uri, lang)}
        except (DirectiveError, KeyError) as e:
            raise DirectiveError(f"{src_uri}:{line}: {m.group(0).strip()}: {e}") from None
        for other in list(files)[1:]:
            try:
                texts[other] = _one(files[other], other, kind, args, src_uri, lang)
            except (DirectiveError, KeyError):
                texts[other] = MISSING[lang].format(file=_rel(other))
        if len(texts) == 1:
            return _indent(texts[gpu], indent)
        out = []
        for g, text in texts.items():
            label = files[g].get("env", {}).get("gpu") or next(
                (t["env"]["gpu"] for t in files[g].get("topics", {}).values() if "gpu" in t.get("env", {})), g)
            out += [f'=== "{label}"', "", _indent(text, "    "), ""]
        return _indent("\n".join(out).rstrip("\n"), indent)

    return DIRECTIVE.sub(replace, markdown)


def _rel(gpu: str) -> str:
    path = results.results_path(gpu)
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


def _indent(text: str, indent: str) -> str:
    return "\n".join(indent + line if line else line for line in text.splitlines())


def _one(data: dict, gpu: str, kind: str, args: dict, src_uri: str, lang: str) -> str:
    """One directive rendered from one GPU's results file."""
    topic = args["topic"]
    if topic not in data.get("topics", {}):
        return MISSING[lang].format(file=_rel(gpu))
    if kind == "table":
        check_table(data, topic, args)
        where = dict(w.split(":", 1) for w in args.get("where", "").split(",") if w)
        return results.render_table(data, topic, args["columns"].split(","), lang, where, args.get("order"),
                                    labels=_labels(topic), words=_words(topic),
                                    group=[k for k in args.get("group", "").split(",") if k])
    if kind == "stamp":
        return results.render_stamp(data, topic, lang)
    # the Chinese copy of the plot on Chinese pages (kernels/bench/plotting.py draws both)
    svg = f"{args.get('plot', topic)}-{data['topics'][topic]['env']['gpu_slug']}{'-zh' if lang == 'zh' else ''}.svg"
    if not (results.RESULTS_DIR / svg).exists():
        raise DirectiveError(f"plot {svg} is missing (make bench, or --plots-only, draws it)")
    here = posixpath.dirname(src_uri)
    rel = posixpath.relpath(f"assets/results/{svg}", here or ".")
    return f"![{args.get('alt', topic)}]({rel})"


H1 = re.compile(r"^# .*$", re.M)


def test_run_line(markdown: str, src_uri: str, lang: str, gpu: str) -> str:
    """The page with its GPU test run's line under its title (a page with
    code blocks the tests run; the Chinese twin's record serves both).
    DirectiveError when the record does not cover the page's code as it is."""
    zh = ROOT / "docs" / (src_uri[: -len(".en.md")] + ".md" if src_uri.endswith(".en.md") else src_uri)
    if zh not in record.code_pages():
        return markdown
    try:
        line = record.page_line(record.load(gpu), zh, lang)
    except ValueError as e:
        raise DirectiveError(str(e)) from None
    m = H1.search(markdown)
    at = m.end() if m else 0
    return markdown[:at] + "\n\n" + line + markdown[at:]


def on_page_markdown(markdown, page, config, files):
    from mkdocs.exceptions import PluginError

    gpu = config.get("extra", {}).get("results_gpu", "nvidia-h200")
    try:
        markdown = render(markdown, page.file.src_uri, _lang(page), gpu)
        return test_run_line(markdown, page.file.src_uri, _lang(page), gpu)
    except DirectiveError as e:
        raise PluginError(str(e)) from None
