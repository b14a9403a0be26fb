"""Write the sync client and transport from the async ones: ``python -m fcl3._unasync``
(``--check``: fail if a committed file of ``fcl3/_sync`` differs from what it would write).

unasync drops ``async``/``await`` and renames tokens by the rules below (its own defaults
cover ``__aenter__``, ``AsyncIterator`` and the like); the result is committed with a header
saying it is generated. Needs the ``unasync`` package (the test extra), never at run time.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
#: The modules written once, async: each generates its namesake in ``fcl3/_sync``.
MODULES = ("client.py", "hosts.py")
SOURCE = PACKAGE / "_async" / "client.py"
TARGET = PACKAGE / "_sync" / "client.py"

#: Async names and their sync twins, beyond unasync's defaults.
RULES = {
    "AsyncClient": "Client",  # ours and httpx's
    "AsyncSpread": "Spread",
    "AsyncBaseTransport": "BaseTransport",
    "AsyncHTTPTransport": "HTTPTransport",
    "handle_async_request": "handle_request",
    "aclose": "close",
    "aread": "read",
    "aconnect_sse": "connect_sse",
    "aiter_sse": "iter_sse",
    "asyncio": "time",  # import asyncio; asyncio.sleep(...) -> time.sleep(...)
}

HEADER = (
    "# Generated from fcl3/_async/{name} by `python -m fcl3._unasync`: do not edit.\n"
    "# Change the async source and run the script again (tests/client/test_unasync.py checks it).\n"
)


def generate(source: Path = SOURCE, name: str | None = None) -> str:
    """The text of the sync module made from ``source`` (the async module ``name``, by default
    the source's own file name)."""
    import unasync

    name = name or source.name
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "_async" / name
        src.parent.mkdir()
        shutil.copyfile(source, src)
        unasync.unasync_files([str(src)], [unasync.Rule("/_async/", "/_sync/", additional_replacements=RULES)])
        return HEADER.format(name=name) + (Path(tmp) / "_sync" / name).read_text("utf-8")


def main(argv: list[str]) -> int:
    stale = 0
    for name in MODULES:
        target = PACKAGE / "_sync" / name
        text = generate(PACKAGE / "_async" / name)
        if "--check" in argv:
            if target.read_text("utf-8") != text:
                print(
                    f"{target} is not what fcl3/_async/{name} generates: run python -m fcl3._unasync", file=sys.stderr
                )
                stale += 1
            continue
        target.write_text(text, "utf-8")
        print(f"wrote {target}")
    return 1 if stale else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
