"""The async client: the one source of both clients (``python -m fcl3._unasync`` writes the
sync one from it into ``fcl3/_sync``)."""
