"""The user's documentation: the README's quick start, the site's pages, and what git ignores."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _quick_start() -> list[str]:
    text = README.read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S)
    assert block, "the README has a quick start with a bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_quick_start_works_when_pasted_whole() -> None:
    # `a && b &` sends both to the background: the next line would run before `a` is done.
    for line in _quick_start():
        if line.rstrip().endswith("&") and not line.rstrip().endswith("&&"):
            assert "&&" not in line and ";" not in line, f"only the server goes to the background: {line!r}"
    lines = _quick_start()
    assert lines[0].startswith("pip install") and not lines[0].endswith("&")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("path", ["fcl3.db", "fcl3.db.locks/held", "fcl3.db.migrate.lock"])
def test_the_embedded_database_files_are_ignored(path: str) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
    assert done.returncode == 0, f"{path} is not ignored by git"


# ----------------------------------------------------------------------------- the site
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"


def _nav_pages() -> list[str]:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(MKDOCS.read_text().replace("!!python", "#"))
    pages: list[str] = []

    def walk(items: object) -> None:
        if isinstance(items, str):
            pages.append(items)
        elif isinstance(items, list):
            for item in items:
                walk(item)
        elif isinstance(items, dict):
            for value in items.values():
                walk(value)

    walk(config["nav"])
    return pages


def test_every_page_of_the_navigation_exists_and_is_at_most_600_lines() -> None:
    pages = _nav_pages()
    assert len(pages) >= 12
    for page in pages:
        path = DOCS / page
        assert path.exists(), page
        assert not page.startswith("lab/"), f"{page}: measurements stay out of the navigation"
        n = len(path.read_text().splitlines())
        assert n <= 600, f"{page} has {n} lines"


def test_no_title_cites_an_issue() -> None:
    for path in [README, *DOCS.rglob("*.md")]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("#"):
                assert not re.search(r"\bissue\s*#?\d+", line, re.I), f"{path.relative_to(ROOT)}:{i}: {line}"


def test_every_setting_is_in_the_configuration_reference_with_its_default() -> None:
    from service.config import Settings

    text = (DOCS / "configuration.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([A-Z0-9_]+)` \| `([^`]*)` \|", text, re.M)}
    for name, field in Settings.model_fields.items():
        assert name in rows, f"setting {name} is not documented in docs/configuration.md"
        default = field.get_default(call_default_factory=True)
        if default is None:
            written = "unset"
        elif isinstance(default, bool):
            written = str(default).lower()
        elif isinstance(default, float) and default.is_integer():
            written = str(int(default))
        elif isinstance(default, (dict, list)):
            written = "{}" if isinstance(default, dict) else "[]"
        else:
            written = str(default)
        assert rows[name] == written, f"{name}: docs/configuration.md says {rows[name]!r}, the default is {written!r}"
    assert not set(rows) - set(Settings.model_fields), "docs/configuration.md lists settings that do not exist"


def test_the_api_reference_lists_every_route_of_the_openapi_document() -> None:
    from tests import api_reference

    made = api_reference.tables(api_reference.openapi())
    assert api_reference.page_tables() == made, "docs/api.md is out of date: run python -m tests.api_reference"


def test_the_openapi_document_declares_the_error_envelope_for_every_error() -> None:
    from tests import api_reference

    document = api_reference.openapi()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            for status, response in op.get("responses", {}).items():
                if status[0] in "45":
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (method, path, status)


@pytest.mark.skipif(shutil.which("mkdocs") is None, reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        ["mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
