"""``python -m fcl3.cli``: the ``fcl3`` command."""

from .commands import main

main()
