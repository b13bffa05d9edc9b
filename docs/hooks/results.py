"""MkDocs hook: render measured results into pages.

A page asks for results with HTML comments (invisible when not rendered):

    <!-- results-table topic=vector_add columns=impl,variant,n,ms,gbps,ratio where=n:65536|268435456 -->
    <!-- results-plot topic=vector_add alt="vector add bandwidth" -->
    <!-- results-plot topic=matmul plot=matmul_energy alt="..." -->  (a topic's second plot)
    <!-- results-table ... order=step -->  (sort by a key instead of impl, variant)
    <!-- results-stamp topic=vector_add -->

They become a Markdown table, an image of the plot and the environment stamp,
read from docs/assets/results/<extra.results_gpu>.json (written by `make bench`).
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


def _known_topics() -> set[str]:
    from kernels.bench import TOPICS

    return set(TOPICS)


def _labels(topic: str) -> dict:
    from kernels.bench import labels

    return labels(topic)


def _words(topic: str) -> dict:
    from kernels.bench import TOPICS

    return dict(getattr(TOPICS.get(topic), "WORDS", {}))


def check_table(data: dict, topic: str, args: dict) -> None:
    """Fail on a filter that selects nothing, or a column or key no record has."""
    rows = results.select(data, topic)
    keys = {k for r in rows for k in r} | {"n"}
    where = dict(w.split(":", 1) for w in args.get("where", "").split(",") if w)
    for key, want in where.items():
        if key not in keys:
            raise DirectiveError(f"where= names {key!r}, which no {topic} record has")
        values = {str(results._value(r, key)) for r in rows}
        unknown = [v for v in want.split("|") if v not in values]
        if unknown:
            raise DirectiveError(f"where={key}:{want}: no {topic} record has {key} = {unknown}")
    chosen = results.select(data, topic, where)
    if not chosen:
        raise DirectiveError(f"where={args.get('where')} selects no {topic} record")
    for c in args.get("columns", "").split(","):
        if results._derived(c):
            continue
        if c not in results.HEADERS["zh"] and c not in _labels(topic):
            raise DirectiveError(f"column {c!r} has no label: add it to LABELS in kernels/bench/{topic}.py")
        if not any(results._value(r, c) is not None for r in chosen):
            raise DirectiveError(f"column {c!r} is empty in every selected {topic} record")
    order = args.get("order", "").lstrip("-")
    if order and order not in keys:
        raise DirectiveError(f"order={order}: no {topic} record has it")


def render(markdown: str, src_uri: str, lang: str, gpu: str) -> str:
    """Replace the directives; raise DirectiveError (naming page and line)
    on an unknown topic, column or key, or a filter that selects nothing."""
    path = results.results_path(gpu)
    data = results.load(path)
    rel_file = path.relative_to(ROOT).as_posix()
    known = _known_topics()

    def replace(m: re.Match) -> str:
        line = markdown.count("\n", 0, m.start()) + 1
        try:
            return _replace(m)
        except (DirectiveError, KeyError) as e:
            raise DirectiveError(f"{src_uri}:{line}: {m.group(0).strip()}: {e}") from None

    def _replace(m: re.Match) -> str:
        indent, kind, args = m.group("indent"), m.group("kind"), _args(m.group("args"))
        topic = args["topic"]
        if topic not in known:
            raise DirectiveError(f"unknown topic {topic!r} (kernels/bench knows {sorted(known)})")
        if topic not in data.get("topics", {}):
            text = MISSING[lang].format(file=rel_file)
        elif kind == "table":
            check_table(data, topic, args)
            where = dict(w.split(":", 1) for w in args.get("where", "").split(",") if w)
            text = results.render_table(data, topic, args["columns"].split(","), lang, where, args.get("order"),
                                        labels=_labels(topic), words=_words(topic))
        elif kind == "stamp":
            text = results.render_stamp(data, topic, lang)
        else:
            svg = f"{args.get('plot', topic)}-{data['topics'][topic]['env']['gpu_slug']}.svg"
            if not (results.RESULTS_DIR / svg).exists():
                raise DirectiveError(f"plot {svg} is missing (make bench, or --plots-only, draws it)")
            else:
                here = posixpath.dirname(src_uri)
                rel = posixpath.relpath(f"assets/results/{svg}", here or ".")
                text = f"![{args.get('alt', topic)}]({rel})"
        return "\n".join(indent + line if line else line for line in text.splitlines())

    return DIRECTIVE.sub(replace, markdown)


def on_page_markdown(markdown, page, config, files):
    from mkdocs.exceptions import PluginError

    gpu = config.get("extra", {}).get("results_gpu", "nvidia-h200")
    try:
        return render(markdown, page.file.src_uri, _lang(page), gpu)
    except DirectiveError as e:
        raise PluginError(str(e)) from None
