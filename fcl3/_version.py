"""The version of the ``fcl3`` package (a leaf module: the client's modules read it without
importing the package's ``__init__``)."""

__version__ = "0.1.0"
