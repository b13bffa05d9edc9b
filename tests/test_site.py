"""The site builds with `mkdocs build --strict` and works as a reader needs.

Runs where the site tooling is installed (the CPU side: `make test` installs
it into .venv); on an interpreter without mkdocs these tests say so and skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pages as P

pytest.importorskip("mkdocs", reason="site tooling not installed (mkdocs builds run on the CPU side)")
pytest.importorskip("material", reason="site tooling not installed (mkdocs builds run on the CPU side)")


@pytest.fixture(scope="module")
def site(built_site):
    return built_site


def html(site: Path, rel: str) -> str:
    return (site / rel).read_text()


def page_dirs():
    out = []
    for zh in (p for p in P.pages() if not p.name.endswith(".en.md")):
        rel = zh.relative_to(P.DOCS).with_suffix("")
        out.append("" if rel.name == "index" and rel.parent == Path(".") else f"{rel.as_posix()}/")
    return out


@pytest.mark.parametrize("rel", page_dirs())
def test_every_page_is_built_in_both_languages(site, rel):
    zh, en = html(site, f"{rel}index.html"), html(site, f"en/{rel}index.html")
    assert '<html lang="zh"' in zh and '<html lang="en"' in en


@pytest.mark.parametrize("rel", page_dirs())
def test_language_switch_leads_to_the_same_page(site, rel):
    zh, en = html(site, f"{rel}index.html"), html(site, f"en/{rel}index.html")
    # the switcher's links are hreflang alternates of this very page
    assert re.search(r'href="[^"]*/en/%s"[^>]*hreflang="en"' % re.escape(rel), zh), rel
    assert re.search(r'href="[^"]*/%s"[^>]*hreflang="zh"' % re.escape(rel), en), rel


@pytest.mark.parametrize("zh", [p for p in P.pages() if not p.name.endswith(".en.md")], ids=lambda p: p.name)
def test_heading_anchors_are_the_same_in_both_languages(site, zh):
    rel = zh.relative_to(P.DOCS).with_suffix("")
    rel = "" if rel.as_posix() == "index" else rel.as_posix() + "/"
    ids = [hid for lvl, hid in P.structure(zh.read_text()).headings if hid]
    for lang_prefix in ("", "en/"):
        page = html(site, f"{lang_prefix}{rel}index.html")
        for hid in ids:
            assert f'id="{hid}"' in page, f"{lang_prefix}{rel}: no anchor #{hid}"


def test_chinese_search_finds_chinese_words(site):
    index = json.loads(html(site, "search/search_index.json"))
    assert index["config"]["pipeline"] == []  # unstemmed (mkdocs.yml says why); the browser tests search
    texts = [d["text"] + " " + d["title"] for d in index["docs"]]
    # jieba segments Chinese into words, separated by zero-width spaces in the
    # index; the search's separator splits on them, so words are findable
    sep = "[\\s\u200b>]"
    assert "\\u200b" in index["config"]["separator"]  # a JavaScript regex escape
    assert any(re.search(f"(^|{sep})线程({sep}|$)", t) for t in texts), "no segmented 线程 in the zh index"
    assert any(re.search(f"(^|{sep})边界({sep}|$)", t) for t in texts), "no segmented 边界 in the zh index"


def test_english_search_works(site):
    # one index for both languages; English pages are the entries under en/
    index = json.loads(html(site, "search/search_index.json"))
    assert "en" in index["config"]["lang"]
    en = [d for d in index["docs"] if d["location"].startswith("en/")]
    assert any("grid-stride" in d["text"].lower() for d in en if "programming-model" in d["location"])
    assert not any(re.search(r"[\u4e00-\u9fff]{4,}", d["text"]) for d in en
                   if d["location"].startswith("en/programming-model")), "Chinese text in an English entry"


def test_embedded_code_is_on_the_page(site):
    page = html(site, "programming-model/index.html")
    assert "vector_add_grid_stride" in page and "cuda.grid(1)" in page
    assert "--8&lt;--" not in page and "--8<--" not in page, "an include was not expanded"


def test_features(site):
    page = html(site, "en/programming-model/index.html")
    assert 'class="mermaid"' in page
    assert 'class="arithmatex"' in page
    assert "tabbed-set" in page
    assert 'class="admonition warning"' in page
    assert "content.code.copy" in html(site, "index.html")
    assert "results-table" not in page, "a results directive was left unrendered"


def test_every_chapter_offers_its_notebooks(site):
    """A chapter that embeds examples/<x>.py links <x>.ipynb, and the link
    lands on the notebook in the built site, in both languages."""
    import posixpath
    import re

    seen = 0
    for page in P.pages():
        stems = sorted(set(re.findall(r"examples/(\w+)\.py", page.read_text())))
        if not stems:
            continue
        lang = "en/" if page.name.endswith(".en.md") else ""
        slug = page.name.removesuffix(".en.md").removesuffix(".md")
        out = f"{lang}{slug}/index.html"
        text = html(site, out)
        for stem in stems:
            m = re.search(rf'<a(?=[^>]* download)[^>]* href="([^"]*/{stem}\.ipynb)"', text)
            assert m, f"{out}: no download link for {stem}.ipynb"
            target = posixpath.normpath(posixpath.join(posixpath.dirname(out), m[1]))
            assert (site / target).is_file(), f"{out}: {m[1]} leads nowhere"
            assert json.loads((site / target).read_text())["cells"]
            seen += 1
    assert seen >= 18  # nine examples, two languages


def test_every_notebook_is_a_page_in_both_languages_with_its_run(site):
    """docs/notebooks/<x>.md and <x>.en.md: the notebook of the page's
    language rendered (mkdocs-jupyter's converter), the run's GPU and commit
    stated above it, its download and the language switch beside it."""
    import html as html_lib
    import posixpath

    nb = P.hook("notebooks")
    for example in nb.examples():
        for lang, prefix in (("zh", ""), ("en", "en/")):
            out = f"{prefix}notebooks/{example.stem}/index.html"
            text = html(site, out)
            stamp = nb._read(nb.notebook_path(example.stem, lang).read_text()).metadata[nb.RUN_KEY]
            assert 'class="jupyter-wrapper"' in text and "jp-OutputArea-output" in text, out
            assert stamp["gpu"] in text and stamp["commit"][:12] in text, out
            assert html_lib.escape(nb.PAGE_WORDS[lang]["prefix"] + nb.title_of(example, lang), quote=False) in text
            css = re.search(r'<link rel="stylesheet" href="([^"]*notebook\.css)"', text)
            assert css and (site / posixpath.normpath(posixpath.join(posixpath.dirname(out), css[1]))).is_file()
            m = re.search(rf'<a(?=[^>]* download)[^>]* href="([^"]*{example.stem}\.ipynb)"', text)
            target = site / posixpath.normpath(posixpath.join(posixpath.dirname(out), m[1]))
            cells = json.loads(target.read_text())["cells"]
            chinese = any(re.search(r"[\u4e00-\u9fff]", "".join(c["source"])) for c in cells if c["cell_type"] == "markdown")
            assert chinese == (lang == "zh"), f"{out}: the download is not the {lang} notebook"
    # the chapters lead to them: "see it run" lands on the notebook page of the same language
    for out in ("matmul/index.html", "en/matmul/index.html"):
        m = re.search(r'href="([^"]*notebooks/matmul/)"[^>]*>(看运行结果|See it run) matmul', html(site, out))
        assert m and (site / posixpath.normpath(posixpath.join(posixpath.dirname(out), m[1])) / "index.html").is_file()


def test_results_render_from_the_file(site):
    from kernels import results

    data = results.load(results.results_path("nvidia-h200"))
    page = html(site, "en/programming-model/index.html")
    assert "vector_add" in data.get("topics", {}), "no vector_add results committed (make bench writes them)"
    env = data["topics"]["vector_add"]["env"]
    assert env["gpu"] in page and env["driver"] in page
    top = max(r["shape"][0] for r in data["records"] if r["topic"] == "vector_add")
    rec = next(r for r in data["records"] if r["id"] == f"vector_add/cupy/guard/{top}/float32")
    assert f"{rec['gbps']:,.1f}" in page, "the table shows the file's number"
    assert "vector_add-" in page and ".svg" in page


EXTERNAL = re.compile(r"""<(script|link|img|iframe|source|audio|video)\b[^>]*?\b(src|href)=["']((?:https?:)?//[^"']+)["']""", re.I)


def test_no_page_asks_for_anything_outside_the_site(site):
    """Scripts, styles, fonts and images are the site's own (docs/assets/vendor/):
    a page renders math and diagrams offline, and where a CDN is blocked.
    Links a reader may click (<a href>) are not requests and may point out."""
    found = []
    for f in sorted(site.rglob("*.html")):
        text = f.read_text(errors="replace")
        for m in EXTERNAL.finditer(text):
            if m.group(1).lower() == "link" and re.search(r'rel=["\'](?:canonical|alternate)["\']', m.group(0)):
                continue  # metadata, never fetched
            found.append(f"{f.relative_to(site)}: <{m.group(1)} {m.group(2)}={m.group(3)}>")
    assert not found, "\n".join(found[:20])
    for css in sorted((site / "assets").rglob("*.css")):
        assert not re.search(r"@import\s+url\(\s*['\"]?(?:https?:)?//", css.read_text(errors="replace")), css


def test_math_and_diagrams_come_from_the_site(site):
    """Every page loads the vendored mermaid (so Material does not fetch it from
    unpkg) and MathJax; a page with a diagram or formula has what draws it."""
    for rel in page_dirs():
        for lang in ("", "en/"):
            text = html(site, f"{lang}{rel}index.html")
            assert "assets/vendor/mermaid/mermaid.min.js" in text and "assets/vendor/mathjax/tex-svg-full.js" in text
            assert 'fonts.googleapis.com' not in text and 'unpkg.com' not in text, (lang, rel)
    for f in ("mermaid/mermaid.min.js", "mathjax/tex-svg-full.js", "mermaid/LICENSE", "mathjax/LICENSE"):
        assert (site / "assets" / "vendor" / f).stat().st_size > 1000, f


def test_workflows_build_test_and_host_the_site():
    """The workflows in .github/workflows parse and do what the README says:
    Pages from main with a strict build, .ci/run on a CPU runner, and on a
    self-hosted `gpu` runner make check with no GPU test skipped, make
    sanitize and the freshness of the results file. (actionlint is not in
    this registry as a wheel; this checks their structure.)"""
    import yaml

    wf = {p.stem: yaml.safe_load(p.read_text()) for p in (P.ROOT / ".github" / "workflows").glob("*.yml")}
    assert set(wf) == {"pages", "cpu", "gpu"}
    for name, w in wf.items():
        on = w.get("on", w.get(True))  # YAML 1.1 reads the key `on` as True
        assert on and w["jobs"], name
        for job in w["jobs"].values():
            assert job["runs-on"] and (job.get("steps") or job.get("uses")), name
    runs = {n: "\n".join(s.get("run", "") for j in w["jobs"].values() for s in j.get("steps", [])) for n, w in wf.items()}
    assert "make build" in runs["pages"] and any("deploy-pages" in s.get("uses", "")
                                                 for j in wf["pages"]["jobs"].values() for s in j["steps"])
    assert ".ci/run" in runs["cpu"]
    assert wf["gpu"]["jobs"]["test"]["runs-on"] == ["self-hosted", "gpu"]
    assert "make check" in runs["gpu"] and "make sanitize" in runs["gpu"] and "stale" in runs["gpu"]
    assert "needs a CUDA GPU" in runs["gpu"]  # a skipped GPU test fails the GPU job


@pytest.mark.slow  # a second build: make check
def test_site_and_repo_url_from_the_environment(tmp_path, site):
    """The Pages workflow passes the published address as SITE_URL and the
    repository as REPO_URL: pages get canonical links, sitemap.xml real
    addresses, a repository link that asks GitHub's API for nothing, and
    "Open in Colab" beside each notebook (unset, none of these)."""
    url, repo = "https://example.github.io/handbook/", "https://github.com/example/handbook"
    P.build_site(tmp_path, SITE_URL=url, REPO_URL=repo)
    page = (tmp_path / "en/matmul/index.html").read_text()
    assert f'<link rel="canonical" href="{url}en/matmul/">' in page
    assert f"<loc>{url}</loc>" in (tmp_path / "sitemap.xml").read_text()
    assert f'href="{repo}"' in page and 'data-md-component="source"' not in page
    colab = "https://colab.research.google.com/github/example/handbook/blob/main/docs/notebooks/matmul.ipynb"
    assert f'href="{colab}"' in (tmp_path / "matmul/index.html").read_text()
    assert f'href="{colab.replace(".ipynb", ".en.ipynb")}"' in page  # the English page: the English notebook
    nb_page = (tmp_path / "en/notebooks/matmul/index.html").read_text()
    assert f'href="{colab.replace(".ipynb", ".en.ipynb")}"' in nb_page
    assert "colab.research.google.com" not in html(site, "en/matmul/index.html")


def test_the_404_page_speaks_both_languages_and_leads_home(site):
    """A server has one 404 page: it says so in Chinese, then in English,
    and its links and language switch lead to each language's home."""
    text = html(site, "404.html")
    assert '<html lang="zh"' in text
    assert "404 - 页面不存在" in text and "404 - Page not found" in text
    links = dict((lang, href) for href, lang in re.findall(r'href="([^"]*)"\s+hreflang="(zh|en)"', text))
    assert links and links["en"] == links["zh"] + "en/" and "notebooks" not in text.split("<main")[0]
    homes = dict(re.findall(r'<a class="home-link" data-lang="(zh|en)" href="([^"]*)"', text))
    assert homes == links, (homes, links)


DOCS_ONLY_PROBE = '''
import importlib.abc, importlib.util, json, sys
BLOCKED = ("numba", "cupy", "cupyx", "pynvml", "pytest", "pytest_codeblocks", "pyflakes", "matplotlib")


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name}: not in the docs extra")
        return None


sys.meta_path.insert(0, Block())
out = {}
for name in ("results", "notebooks", "site404"):
    spec = importlib.util.spec_from_file_location(f"{name}_hook", f"docs/hooks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out[name] = module
hook = out["results"]
for src in ("algorithms.md", "algorithms.en.md", "matmul.md"):
    text = open("docs/" + src).read()
    lang = "en" if src.endswith(".en.md") else "zh"
    md = hook.test_run_line(hook.render(text, src, lang, "nvidia-h200"), src, lang, "nvidia-h200")
    assert "<!-- results-" not in md and "!!! success" in md, src
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("kernels", "tests"))))
'''


def test_the_hooks_need_only_the_docs_extra():
    """`pip install -e '.[docs]'` then `mkdocs build`: the hooks render tables
    and the GPU test line without Numba, CuPy, NVML, pytest or matplotlib (an
    import of any of them fails here), reading the topics' labels from
    kernels/bench's source instead of importing it."""
    proc = subprocess.run([sys.executable, "-c", DOCS_ONLY_PROBE], cwd=P.ROOT, capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "kernels.bench" not in loaded and not any(m.startswith("kernels.bench.") for m in loaded), loaded


def test_no_sitemap_without_an_address(site):
    """Built without SITE_URL there is no address to put in a sitemap: no
    sitemap.xml (MkDocs would write "None./"); with it, test_site_and_repo_url_...
    checks a real one."""
    assert not (site / "sitemap.xml").exists() and not (site / "sitemap.xml.gz").exists()
    assert "None./" not in "".join(p.read_text(errors="ignore") for p in site.glob("*.xml"))
