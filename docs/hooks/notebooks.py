"""MkDocs hook: turn examples into notebooks before the site is built.

Each script named under `extra.notebooks` in mkdocs.yml (jupytext "percent"
format: `# %%` cells) becomes docs/notebooks/<name>.ipynb, which
mkdocs-jupyter renders as a page; this hook copies the .ipynb next to the
page and sets page.nb_url for the download button (docs/hooks/templates). The snippet
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


def on_config(config):
    """mkdocs-static-i18n rebuilds every File, dropping mkdocs-jupyter's
    NotebookFile wrapper, and then treats a notebook as a static asset (the
    raw .ipynb lands where the page should be, in one language only). Make
    MkDocs itself count .ipynb files as pages, so that i18n builds them in
    both languages and mkdocs-jupyter renders them."""
    import mkdocs.utils

    if ".ipynb" not in mkdocs.utils.markdown_extensions:
        mkdocs.utils.markdown_extensions = (*mkdocs.utils.markdown_extensions, ".ipynb")
    return config


def _is_notebook(page) -> bool:
    return page.file.src_uri.startswith("notebooks/") and page.file.src_uri.endswith(".ipynb")


def on_page_context(context, page, config, nav):
    if _is_notebook(page):
        page.nb_url = Path(page.file.src_uri).name  # relative to the page's directory
    return context


def on_post_page(output, page, config):
    if _is_notebook(page):
        import shutil

        target = Path(config["site_dir"]) / page.url / Path(page.file.src_uri).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(config["docs_dir"]) / page.file.src_uri, target)
    return output
