"""The sync client and transport, generated from ``fcl3/_async`` by ``python -m fcl3._unasync``."""
