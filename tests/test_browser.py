"""The built site in a real browser, with the network cut off: every page of
both languages loads with no console error and no request outside the site,
renders its formulas (MathJax) and diagrams (mermaid), and does not scroll
sideways on a 390 px phone. Search finds whole English words and Chinese
words (a page of the searching language first); linked tabs switch
together; dark mode toggles; the copy button copies the code; the language
switch lands on the same page in the other language.

Uses Playwright for Python with the system's Chromium (no browser download).
Where Chromium or Playwright is missing these tests skip and say so; CI
installs Chromium from the OS packages (.ci/run).
"""

from __future__ import annotations

import contextlib
import re
import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from tests import pages as P

pytest.importorskip("mkdocs", reason="site tooling not installed (the browser tests run on the CPU side)")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install playwright)")
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = [pytest.mark.slow,  # make check
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (apt install chromium)")]


@pytest.fixture(scope="module")
def server(built_site):
    out = built_site
    handler = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    handler = functools.partial(handler, directory=str(out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def page_paths():
    out = []
    for zh in (p for p in P.pages() if not p.name.endswith(".en.md")):
        rel = zh.relative_to(P.DOCS).with_suffix("")
        path = "" if rel.name == "index" and rel.parent == Path(".") else f"{rel.as_posix()}/"
        out += [path, f"en/{path}"]
    return out


def test_the_404_page_renders_and_leads_home(browser, server):
    """A missing address gets the one 404 page, in both languages, and its
    English link leads to the English home page."""
    with opened(browser, server, "404.html") as (ctx, page):
        assert page.locator("h1").first.inner_text().startswith("404 - 页面不存在")
        assert "404 - Page not found" in page.locator("article").inner_text()
        page.locator('a.home-link[data-lang=en]').click()
        page.wait_for_load_state("load")
        assert page.url == f"{server}/en/" and page.evaluate("() => document.documentElement.lang") == "en"


def visit(browser, server, path, width=1280):
    """Open a page with every request outside the site aborted; return the
    page, its console errors and the requests that failed or left the site."""
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    page = ctx.new_page()
    # the longest page takes Chromium over 30 s (Playwright's default) to load on a
    # 2-core CI machine that runs the other tests beside it: a slow load is no fault
    page.set_default_navigation_timeout(120_000)
    errors, outside = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # a request of this site cut short by leaving the page (the favicon, while a test
    # navigates on) is no fault; any other failure is (a missing file answers 404 instead)
    page.on("requestfailed", lambda r: None if r.url.startswith(server) and "ERR_ABORTED" in (r.failure or "")
            else outside.append(f"failed: {r.url} ({r.failure})"))

    def route(r):
        if r.request.url.startswith(server):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()
    page.route("**/*", route)
    page.goto(f"{server}/{path}", wait_until="load")
    return ctx, page, errors, outside


@contextlib.contextmanager
def opened(browser, server, path, width=1280):
    """visit() for a test that acts on the page: yields (context, page);
    afterwards no console error and no request outside the site."""
    ctx, page, errors, outside = visit(browser, server, path, width)
    try:
        yield ctx, page
        assert not errors and not outside, (errors, outside)
    finally:
        ctx.close()


def overflowing_tables(page) -> list[dict]:
    return page.evaluate("""() => [...document.querySelectorAll('.md-typeset__scrollwrap')]
        .filter(w => w.offsetParent && w.scrollWidth > w.clientWidth + 1)
        .map(w => ({more: w.scrollWidth - w.clientWidth, cue: w.classList.contains('more-right'),
                    hint: !!(w.previousElementSibling && w.previousElementSibling.classList.contains('scroll-hint'))}))""")


@pytest.mark.parametrize("path", page_paths())
def test_page_renders_offline(browser, server, path):
    ctx, page, errors, outside = visit(browser, server, path)
    try:
        if page.locator(".arithmatex").count():
            page.wait_for_selector(".arithmatex mjx-container", timeout=20000)
            assert page.locator(".arithmatex mjx-container").count() == page.locator(".arithmatex").count()
        if page.locator("pre.mermaid, div.mermaid").count():
            # Material draws each diagram into a closed shadow root: it is drawn when it has a size
            page.wait_for_function("() => [...document.querySelectorAll('div.mermaid')].length =="
                                   " document.querySelectorAll('.mermaid').length && [...document.querySelectorAll"
                                   "('div.mermaid')].every(e => e.getBoundingClientRect().height > 40)", timeout=20000)
        page.wait_for_timeout(300)
        # every plot loaded; every results table outside a closed tab has a size
        broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                               ".map(i => i.src)")
        assert not broken, broken
        hidden = page.evaluate("() => [...document.querySelectorAll('.md-typeset table')].filter(t => "
                               "!t.closest('.tabbed-block') && t.getBoundingClientRect().height === 0).length")
        assert hidden == 0
        # no page taller than 40,000 px: long code scrolls in its own box (docs/stylesheets/extra.css)
        height = page.evaluate("() => document.documentElement.scrollHeight")
        assert height <= 40_000, f"{path}: {height} px tall"
        # At 1280 px a table fits the text column (a results table of many columns is split,
        # kernels/results.py's render_table); at most one per page may not, and it says it scrolls.
        tables = overflowing_tables(page)
        assert len(tables) <= 1 and all(t["cue"] and t["hint"] for t in tables), (path, tables)
        assert not outside, outside
        assert not errors, errors
    finally:
        ctx.close()


@pytest.mark.parametrize("path", [p for p in page_paths()])
def test_page_does_not_scroll_sideways_on_a_phone(browser, server, path):
    ctx, page, errors, outside = visit(browser, server, path, width=390)
    try:
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"{path}: {overflow} px wider than the screen"
    finally:
        ctx.close()


# (site language, query, a page that must be among the first three pages listed)
SEARCHES = [("en/", "coalescing", "memory-hierarchy/"), ("en/", "occupancy", "occupancy/"),
            ("en/", "tiling", "matmul/"), ("en/", "roofline", "occupancy/"), ("en/", "measured", None),
            ("en/", "TMA", "warp-specialization/"), ("en/", "wgmma", "warp-specialization/"),
            ("en/", "mbarrier", "warp-specialization/"), ("en/", "softmax", "algorithms/"),
            ("", "占用率", "occupancy/"), ("", "合并访问", "memory-hierarchy/"), ("", "共享内存", "memory-hierarchy/"),
            ("", "bank 冲突", "memory-hierarchy/"), ("", "bank冲突", "memory-hierarchy/"),
            ("", "存储体冲突", "memory-hierarchy/"), ("", "张量核心", "tensor-cores/"),
            ("", "线程束分化", "divergence/"), ("", "能耗", "memory-hierarchy/"), ("", "TMA", "warp-specialization/"),
            ("", "在线 softmax", "algorithms/"), ("", "稀疏矩阵", "algorithms/"),
            # a notebook page is found too, though ranked below the chapters (docs/hooks/notebooks.py)
            ("en/", "notebook transpose", "notebooks/transpose/"), ("", "笔记本 转置", "notebooks/transpose/")]


# what is left of a <mark> cut by the highlighter ("ark>共享", "<ma"), and TeX's \( \)
FRAGMENT = re.compile(r"(?:^|[\s\u200b])m?a?r?k>|</?m(?:a(?:rk?)?)?(?![\w])|\\[()]")


@pytest.mark.parametrize("lang, query, want", SEARCHES)
def test_search_finds_the_page_in_the_readers_language_and_shows_clean_text(browser, server, lang, query, want):
    """English words are found whole (the index is not stemmed: Material
    queries with a trailing wildcard, which lunr does not stem), Chinese
    words through jieba's segmentation. The first result is a page of the
    language searched from (docs/javascripts/search-language.js), the page
    that teaches the word is among the first three, and no title or snippet
    shows a piece of the highlighter's markup ("ark>", the index once held
    pages twice) or raw TeX (docs/hooks/search.py)."""
    with opened(browser, server, lang) as (ctx, page):
        page.wait_for_timeout(1000)  # the search worker loads the index
        page.keyboard.press("s")     # Material's shortcut: focus the search box
        page.fill("input.md-search__input", query)
        page.keyboard.press("End")
        page.wait_for_selector(".md-search-result__item > a", timeout=10000)
        page.wait_for_timeout(300)
        hrefs = page.eval_on_selector_all(".md-search-result__item > a", "as => as.map(a => a.pathname)")
        texts = page.eval_on_selector_all(".md-search-result__item > a", "as => as.map(a => a.innerText)")
        assert hrefs, query
        assert hrefs[0].startswith("/en/") == (lang == "en/"), hrefs[:3]
        pages = list(dict.fromkeys(h for h in hrefs))[:3]
        if want:
            assert f"/{lang}{want}" in pages, (query, pages)
        bad = [s for s in texts if FRAGMENT.search(s)]
        assert not bad, bad[:3]
        assert not page.locator(".md-search-result__terms:visible").count()  # no struck-out pieces of the word


def test_tabs_switch_together(browser, server):
    """content.tabs.link: choosing "Numba" in one tab set chooses it in every
    set on the page that has a tab of that name."""
    with opened(browser, server, "divergence/") as (ctx, page):
        def chosen():
            return page.eval_on_selector_all(
                ".tabbed-set", "ss => ss.map(s => { const i = [...s.querySelectorAll(':scope > input')]"
                               ".findIndex(x => x.checked); return s.querySelectorAll(':scope > .tabbed-labels > label')[i]"
                               ".innerText.trim(); })")
        labels = page.eval_on_selector_all(
            ".tabbed-set", "ss => ss.map(s => [...s.querySelectorAll(':scope > .tabbed-labels > label')]"
                           ".map(l => l.innerText.trim()))")
        before = chosen()
        linked = [k for k, names in enumerate(labels) if "Numba" in names]
        assert len(linked) >= 4 and all(before[k] != "Numba" for k in linked), before
        page.locator(".tabbed-labels > label", has_text="Numba").first.click()
        after = chosen()
        assert all(after[k] == "Numba" for k in linked), after
        # a set without a tab of that name keeps its choice
        assert all(after[k] == before[k] for k in range(len(labels)) if k not in linked), (before, after)


def test_dark_mode_toggles(browser, server):
    with opened(browser, server, "en/matmul/") as (ctx, page):
        scheme = lambda: page.evaluate("() => document.body.getAttribute('data-md-color-scheme')")  # noqa: E731
        first = scheme()
        page.locator("form[data-md-component=palette] label:visible").first.click()
        page.wait_for_timeout(200)
        second = scheme()
        assert {first, second} == {"default", "slate"}, (first, second)
        bg = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert bg != "rgb(255, 255, 255)" if second == "slate" else bg == "rgb(255, 255, 255)", bg


def test_copy_button_copies_the_code(browser, server):
    with opened(browser, server, "programming-model/") as (ctx, page):
        ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
        page.wait_for_selector("button[data-md-type=copy]", state="attached")
        button = page.locator("button[data-md-type=copy]:visible").first
        code = page.locator(button.get_attribute("data-clipboard-target")).text_content()
        button.hover()
        button.click()
        page.wait_for_timeout(200)
        copied = page.evaluate("() => navigator.clipboard.readText()")
        assert copied.strip() == code.strip() and len(copied) > 20


@pytest.mark.parametrize("path", ["notebooks/transpose/", "en/notebooks/transpose/"])
def test_a_notebook_page_shows_the_outputs_of_its_run(browser, server, path):
    """A notebook rendered as a page (docs/hooks/notebooks.py): its code and
    the outputs of the GPU run are on the page, in JupyterLab's styles
    (assets/notebook.css), with its images loaded."""
    with opened(browser, server, path) as (ctx, page):
        outputs = page.locator(".jupyter-wrapper .jp-OutputArea-output")
        assert outputs.count() > 0 and outputs.first.is_visible()
        assert page.locator(".jupyter-wrapper .jp-CodeCell").count() > 3
        assert page.evaluate("() => getComputedStyle(document.querySelector('.jupyter-wrapper'))"
                             ".getPropertyValue('--jp-cell-prompt-width').trim()") != ""
        assert "GPU:" in outputs.first.inner_text()  # the first output states where it ran
        assert page.evaluate("() => [...document.querySelectorAll('.jupyter-wrapper img')]"
                             ".every(i => i.complete && i.naturalWidth > 0)")


@pytest.mark.parametrize("start, other", [("matmul/", "en/matmul/"), ("en/occupancy/", "occupancy/"),
                                          ("notebooks/attention/", "en/notebooks/attention/"),
                                          ("", "en/"), ("appendix/glossary/", "en/appendix/glossary/")])
def test_language_switch_lands_on_the_same_page(browser, server, start, other):
    with opened(browser, server, start) as (ctx, page):
        lang = "en" if other.startswith("en/") else "zh"
        link = page.locator(f"a.md-select__link[hreflang={lang}]").first
        page.goto(link.evaluate("a => a.href"), wait_until="load")
        assert page.url == f"{server}/{other}", page.url
        assert page.evaluate("() => document.documentElement.lang") == lang


@pytest.mark.parametrize("path", [p for p in page_paths() if "algorithms" in p or "matmul" in p
                                  or "programming-model" in p or "occupancy" in p])
def test_display_formulas_have_their_size_on_a_phone(browser, server, path):
    """At 390 px every display formula keeps the size it has at 1280 px (its
    block scrolls sideways when wider than the screen), instead of shrinking
    to a pixel (docs/stylesheets/extra.css)."""
    with opened(browser, server, path, width=390) as (ctx, page):
        if not page.locator(".arithmatex").count():
            pytest.skip(f"{path} has no formula")
        page.wait_for_selector(".arithmatex mjx-container", timeout=20000)
        sizes = page.evaluate("() => [...document.querySelectorAll('div.arithmatex mjx-container svg')]"
                              ".map(s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
        assert sizes and all(w > 20 and h > 10 for w, h in sizes), sizes


@pytest.mark.parametrize("path", ["algorithms/", "en/matmul/"])
def test_a_table_wider_than_a_phone_says_it_scrolls(browser, server, path):
    with opened(browser, server, path, width=390) as (ctx, page):
        page.wait_for_timeout(300)
        tables = overflowing_tables(page)
        assert tables and all(t["cue"] and t["hint"] for t in tables), tables


@pytest.mark.parametrize("path", ["algorithms/", "en/matmul/", "programming-model/"])
def test_diagrams_keep_a_readable_width_on_a_phone(browser, server, path):
    """At 390 px a diagram is drawn at least 600 px wide in a box that
    scrolls sideways, not shrunk to the screen (6 px text)."""
    with opened(browser, server, path, width=390) as (ctx, page):
        page.wait_for_function("() => document.querySelectorAll('div.mermaid').length > 0 && [...document."
                               "querySelectorAll('div.mermaid')].every(e => e.getBoundingClientRect().height > 40)",
                               timeout=20000)
        boxes = page.evaluate("() => [...document.querySelectorAll('div.mermaid')].map(e => "
                              "[e.getBoundingClientRect().width, e.parentElement.classList.contains('diagram-scroll')])")
        assert boxes and all(w >= 600 and boxed for w, boxed in boxes), boxes
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1


@pytest.mark.parametrize("path", ["algorithms/", "en/memory-hierarchy/"])
def test_plots_keep_a_readable_width_on_a_phone(browser, server, path):
    """At 390 px a results plot is drawn at least 560 px wide, scrolling
    sideways in its own paragraph, and the page itself does not scroll."""
    with opened(browser, server, path, width=390) as (ctx, page):
        widths = page.evaluate("() => [...document.querySelectorAll('img[src*=\"assets/results/\"]')]"
                               ".map(i => i.getBoundingClientRect().width)")
        assert widths and all(w >= 560 for w in widths), widths
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1
