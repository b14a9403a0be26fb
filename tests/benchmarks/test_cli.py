"""Every benchmark runs as ``python -m benchmarks.<name>`` and documents itself with --help."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Every module of benchmarks/ with a command line (a ``main``).
CLIS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if "\ndef main(" in p.read_text())


def help_text(name: str) -> str:
    r = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_benchmarks_are_found():
    assert {"paper", "speed", "service", "loadtest"} <= set(CLIS)
    assert not {"common", "datasets", "launcher"} & set(CLIS)  # libraries, no command line


@pytest.mark.parametrize("name", CLIS)
def test_help_exits_0_and_prints_usage(name):
    out = help_text(name)
    assert out.startswith(f"usage: python -m benchmarks.{name}")
    assert "--json" in out and "--quiet" in out  # results to a file; progress bar can be silenced
    for old in ("core.bench", "service.bench", "service.loadtest"):
        assert old not in out


def test_paper_without_dataset_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "benchmarks.paper"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "--dataset" in r.stderr
