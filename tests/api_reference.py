"""The route tables of docs/api.md, made from the service's OpenAPI document.

``python -m tests.api_reference`` writes them into docs/api.md (between its ``routes`` markers);
``tests/test_docs.py`` fails when the page and the document differ."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"
BEGIN, END = "<!-- routes: made by python -m tests.api_reference -->", "<!-- /routes -->"
NAMED = "/models/{name}"
METHODS = ("get", "post", "put", "patch", "delete")


def openapi() -> dict[str, Any]:
    from service.config import Settings
    from service.main import create_app

    with tempfile.TemporaryDirectory() as tmp:
        return create_app(Settings(SQLITE_PATH=f"{tmp}/api.db")).openapi()


def _first_line(text: str | None) -> str:
    line = (text or "").strip().split("\n\n")[0].replace("\n", " ")
    return line.replace("|", "\\|")


def _first_sentence(text: str | None) -> str:
    line = _first_line(text)
    end = re.search(r"\.(\s|$)", line)
    return line[: end.start() + 1].rstrip(":;") if end else line


def tables(document: dict[str, Any]) -> str:
    """One table per tag: method and path, what it does, the statuses it answers."""
    paths = document["paths"]
    by_tag: dict[str, list[str]] = {}
    for path, operations in paths.items():
        short = path[len(NAMED) :] if path.startswith(NAMED + "/") else None
        if short is not None and short in paths:
            continue  # the same route on a named model: listed with its default-model form
        for method in METHODS:
            op = operations.get(method)
            if op is None:
                continue
            also = f" (also `{NAMED}{path}`)" if f"{NAMED}{path}" in paths else ""
            statuses = ", ".join(sorted(op.get("responses", {})))
            what = _first_sentence(op.get("description")) or _first_line(op.get("summary"))
            row = f"| `{method.upper()} {path}`{also} | {what} | {statuses} |"
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append(row)
    out = []
    for tag in sorted(by_tag):
        out += [f"### {tag.capitalize()}", "", "| route | what | statuses |", "|---|---|---|", *by_tag[tag], ""]
    return "\n".join(out).rstrip() + "\n"


def page_tables() -> str:
    text = PAGE.read_text()
    found = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    assert found, f"docs/api.md has no {BEGIN!r} ... {END!r} block"
    return found.group(1)


def write() -> None:
    text = PAGE.read_text()
    start, end = text.index(BEGIN) + len(BEGIN) + 1, text.index(END)
    PAGE.write_text(text[:start] + tables(openapi()) + text[end:])


if __name__ == "__main__":
    write()
    sys.stdout.write(f"wrote {PAGE}\n")
