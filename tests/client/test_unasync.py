"""One source for both clients: the committed sync client is what ``python -m fcl3._unasync``
writes from the async one."""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("unasync")

from fcl3 import AsyncClient, Client  # noqa: E402
from fcl3._unasync import MODULES, PACKAGE, SOURCE, TARGET, generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", MODULES)
def test_the_committed_sync_module_is_generated_from_the_async_one(tmp_path, name):
    source = tmp_path / name
    source.write_bytes((PACKAGE / "_async" / name).read_bytes())  # regenerated from a copy, in a temporary directory
    text = generate(source)
    assert text.startswith(f"# Generated from fcl3/_async/{name}") and "do not edit" in text.splitlines()[0]
    assert (PACKAGE / "_sync" / name).read_text("utf-8") == text, \
        f"fcl3/_sync/{name} is stale or edited: run python -m fcl3._unasync"
    r = subprocess.run([sys.executable, "-m", "fcl3._unasync", "--check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_changed_source_is_caught(tmp_path):
    source = tmp_path / "client.py"
    source.write_text(SOURCE.read_text("utf-8").replace("(the older name)", "(an older name)"), "utf-8")
    assert generate(source) != TARGET.read_text("utf-8")


def test_both_clients_have_the_same_methods():
    renamed = {"aclose": "close"}
    public = lambda cls: {n for n in vars(cls) if not n.startswith("_")}  # noqa: E731
    assert {renamed.get(n, n) for n in public(AsyncClient)} == public(Client)
    for name in public(AsyncClient) - {"url"}:
        asynchronous, sync = getattr(AsyncClient, name), getattr(Client, renamed.get(name, name))
        assert inspect.signature(sync).parameters.keys() == inspect.signature(asynchronous).parameters.keys(), name
        assert not inspect.iscoroutinefunction(sync) and not inspect.isasyncgenfunction(sync), name
        assert inspect.iscoroutinefunction(asynchronous) or inspect.isasyncgenfunction(asynchronous), name
