"""MkDocs hook: render measured results into pages.

A page asks for results with HTML comments (invisible when not rendered):

    <!-- results-table topic=vector_add columns=impl,variant,n,ms,gbps,ratio where=n:65536|268435456 -->
    <!-- results-plot topic=vector_add alt="vector add bandwidth" -->
    <!-- results-plot topic=matmul plot=matmul_energy alt="..." -->  (a topic's second plot)
    <!-- results-table ... order=step -->  (sort by a key instead of impl, variant)
    <!-- results-stamp topic=vector_add -->

They become a Markdown table, an image of the plot and the environment stamp,
read from docs/assets/results/<extra.results_gpu>.json (written by `make bench`).
A topic not measured yet renders a note saying so, never a made-up number.
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


def render(markdown: str, src_uri: str, lang: str, gpu: str) -> str:
    path = results.results_path(gpu)
    data = results.load(path)
    rel_file = path.relative_to(ROOT).as_posix()

    def replace(m: re.Match) -> str:
        indent, kind, args = m.group("indent"), m.group("kind"), _args(m.group("args"))
        topic = args["topic"]
        if topic not in data.get("topics", {}):
            text = MISSING[lang].format(file=rel_file)
        elif kind == "table":
            where = dict(w.split(":", 1) for w in args.get("where", "").split(",") if w)
            text = results.render_table(data, topic, args["columns"].split(","), lang, where, args.get("order"))
        elif kind == "stamp":
            text = results.render_stamp(data, topic, lang)
        else:
            svg = f"{args.get('plot', topic)}-{data['topics'][topic]['env']['gpu_slug']}.svg"
            if not (results.RESULTS_DIR / svg).exists():
                text = MISSING[lang].format(file=f"docs/assets/results/{svg}")
            else:
                here = posixpath.dirname(src_uri)
                rel = posixpath.relpath(f"assets/results/{svg}", here or ".")
                text = f"![{args.get('alt', topic)}]({rel})"
        return "\n".join(indent + line if line else line for line in text.splitlines())

    return DIRECTIVE.sub(replace, markdown)


def on_page_markdown(markdown, page, config, files):
    gpu = config.get("extra", {}).get("results_gpu", "nvidia-h200")
    return render(markdown, page.file.src_uri, _lang(page), gpu)
