"""Write the sync client from the async one: ``python -m fcl3._unasync`` (``--check``: fail
if the committed ``fcl3/_sync/client.py`` differs from what it would write).

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
SOURCE = PACKAGE / "_async" / "client.py"
TARGET = PACKAGE / "_sync" / "client.py"

#: Async names and their sync twins, beyond unasync's defaults.
RULES = {
    "AsyncClient": "Client",             # ours and httpx's
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    "aread": "read",
    "aconnect_sse": "connect_sse",
    "aiter_sse": "iter_sse",
    "asyncio": "time",                   # import asyncio; asyncio.sleep(...) -> time.sleep(...)
}

HEADER = ("# Generated from fcl3/_async/client.py by `python -m fcl3._unasync`: do not edit.\n"
          "# Change the async source and run the script again (tests/client/test_unasync.py checks it).\n")


def generate(source: Path = SOURCE) -> str:
    """The text of the sync client made from ``source``."""
    import unasync

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "_async" / "client.py"
        src.parent.mkdir()
        shutil.copyfile(source, src)
        unasync.unasync_files([str(src)], [unasync.Rule("/_async/", "/_sync/", additional_replacements=RULES)])
        return HEADER + (Path(tmp) / "_sync" / "client.py").read_text("utf-8")


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        if TARGET.read_text("utf-8") != text:
            print(f"{TARGET} is not what fcl3/_async/client.py generates: run python -m fcl3._unasync", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, "utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
