"""MkDocs hook: turn examples into notebooks before the site is built.

Each script named under `extra.notebooks` in mkdocs.yml (jupytext "percent"
format: `# %%` cells) becomes docs/notebooks/<name>.ipynb, which
mkdocs-jupyter renders as a page with a download button. The snippet
markers (`# --8<-- [start:...]`) are dropped. Files are rewritten only when
their content changes, so `mkdocs serve` does not rebuild in a loop.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def to_notebook_json(script: Path) -> str:
    import jupytext

    text = "".join(line for line in script.read_text().splitlines(keepends=True)
                   if "--8<-- [" not in line)
    nb = jupytext.reads(text, fmt="py:percent")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    return jupytext.writes(nb, fmt="ipynb")


def on_pre_build(config):
    out_dir = Path(config["docs_dir"]) / "notebooks"
    out_dir.mkdir(exist_ok=True)
    for rel in config.get("extra", {}).get("notebooks", []):
        script = ROOT / rel
        target = out_dir / (script.stem + ".ipynb")
        text = to_notebook_json(script)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
