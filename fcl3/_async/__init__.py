"""The async client and transport: the one source of both clients and both transports
(``python -m fcl3._unasync`` writes the sync ones from them into ``fcl3/_sync``)."""
