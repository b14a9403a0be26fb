"""The ``fcl3`` command's two errors: a bad input file (exit status 2, nothing sent) and a
refusal or failure of the service (exit status 1, with the service's reason)."""

from __future__ import annotations

import os
from typing import IO, Any

import click

from ..client import APIError, FCL3Error


class BadFile(click.ClickException):
    """An input file that cannot be used; exit status 2, nothing was sent."""

    exit_code = 2

    def __init__(
        self,
        path: str | os.PathLike[str],
        message: str,
        line: int | None = None,
        column: int | None = None,
        name: str | None = None,
    ):
        where = str(path) + (f":{line}" if line is not None else "")
        if column is not None:
            where += f": column {column}" + (f" ({name})" if name else "")
        super().__init__(f"{where}: {message}")

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"fcl3: {self.format_message()}", err=True)


def command_error(exc: FCL3Error, what: str, hint: str = "") -> click.ClickException:
    """``exc`` of the client as the command's error: ``what`` failed, the service's answer
    (status and reason), and a ``hint`` of what to do next on a line of its own."""
    msg = f"{what}: {exc.message if isinstance(exc, APIError) else exc}"
    if isinstance(exc, APIError):
        msg = f"{what}: the server answered {exc.status}: {exc.message}"
    return click.ClickException(msg + (f"\n{hint}" if hint else ""))
