"""The deployment test's steps run in order on one deployment: a step after a failed one is
skipped (the failure is the finding), and every step's time is printed at the end of the run."""
from __future__ import annotations

import contextlib
import time

import pytest

STEPS = pytest.StashKey[list]()  # (name, seconds)
FAILED = pytest.StashKey[list]()
NOTES = pytest.StashKey[list]()  # lines printed above the steps


def pytest_configure(config):
    config.stash[STEPS] = []
    config.stash[FAILED] = []
    config.stash[NOTES] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and item.path.parent.name == "deploy":
        item.config.stash[FAILED].append(item.name)
    return report


@pytest.fixture
def step(request):
    """Skips this step when an earlier one failed; ``with step("name"):`` times a part of it."""
    failed = request.config.stash[FAILED]
    if failed:
        pytest.skip(f"an earlier step failed: {', '.join(failed)}")
    return timer(request.config)


def timer(config):
    @contextlib.contextmanager
    def timed(name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            config.stash[STEPS].append((name, time.monotonic() - t0))

    return timed


def pytest_terminal_summary(terminalreporter, config):
    steps = config.stash.get(STEPS, [])
    if steps:
        terminalreporter.section("deployment test: steps and their times")
        for line in config.stash.get(NOTES, []):
            terminalreporter.write_line(line)
        for name, seconds in steps:
            terminalreporter.write_line(f"{seconds:7.1f} s  {name}")
        terminalreporter.write_line(f"{sum(s for _, s in steps):7.1f} s  in all")
