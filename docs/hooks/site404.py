"""MkDocs hook: the site's one 404.html (Chinese, then English; the
template is docs/hooks/templates/404.html), whose links lead home.

A server has one 404 page for every missing address. The i18n plugin
builds each language in turn and the last one writes 404.html (mkdocs.yml
builds zh last, the default audience). Its language switch is left over
from the last page built (it pointed at the notebook); here it is pointed
at each language's home page instead.

It also removes sitemap.xml (and .gz) when no SITE_URL was given: a
sitemap holds absolute addresses, and without one MkDocs writes "None./".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SWITCH = re.compile(r'href="([^"]*)"(\s+hreflang="(zh|en)")')
HOME = re.compile(r'(<a class="home-link" data-lang="(zh|en)" )href="[^"]*"')


def on_post_build(config):
    if not config.get("site_url"):
        for name in ("sitemap.xml", "sitemap.xml.gz"):
            (Path(config["site_dir"]) / name).unlink(missing_ok=True)
    path = Path(config["site_dir"]) / "404.html"
    if not path.exists():
        return
    text = path.read_text()
    hrefs = {m.group(3): m.group(1) for m in SWITCH.finditer(text)}
    if set(hrefs) != {"zh", "en"}:
        return
    root = os.path.commonprefix([hrefs["zh"], hrefs["en"]])
    homes = {"zh": root, "en": root + "en/"}
    text = SWITCH.sub(lambda m: f'href="{homes[m.group(3)]}"{m.group(2)}', text)
    text = HOME.sub(lambda m: f'{m.group(1)}href="{homes[m.group(2)]}"', text)  # the page's own links home
    path.write_text(text)
