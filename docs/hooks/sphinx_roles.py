"""An mkdocs hook: the Sphinx roles of the docstrings (``:class:`x```, ``:meth:`x```) as plain code."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj|py:\w+):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    return ROLE.sub("", html)
