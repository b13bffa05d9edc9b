"""MkDocs hook: the site's one 404.html, in Chinese, with a language switch
that leads home.

A server has one 404 page for every missing address. The i18n plugin
builds each language in turn and the last one writes 404.html (mkdocs.yml
builds zh last, the default audience). Its language switch is left over
from the last page built (it pointed at the notebook); here it is pointed
at each language's home page instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SWITCH = re.compile(r'href="([^"]*)"(\s+hreflang="(zh|en)")')


def on_post_build(config):
    path = Path(config["site_dir"]) / "404.html"
    if not path.exists():
        return
    text = path.read_text()
    hrefs = {m.group(3): m.group(1) for m in SWITCH.finditer(text)}
    if set(hrefs) != {"zh", "en"}:
        return
    root = os.path.commonprefix([hrefs["zh"], hrefs["en"]])
    homes = {"zh": root, "en": root + "en/"}
    path.write_text(SWITCH.sub(lambda m: f'href="{homes[m.group(3)]}"{m.group(2)}', text))
