"""The ``fcl3`` command: run the service, manage models, learn and predict from CSV files,
and replay a whole data set into a running service.

:mod:`.commands` holds the commands (click), :mod:`.files` reads and checks the input files,
:mod:`.replay` plans a replay, sends it and sums it up, :mod:`.errors` has the two ways a
command fails (a bad file: exit status 2; the service's refusal: exit status 1).
"""

from .commands import main

__all__ = ["main"]
