"""The FCL3 client side: the API's schemas (:mod:`fcl3.schemas`, the one definition the
service also uses), the Python client (:mod:`fcl3.client`) and the ``fcl3`` command
(:mod:`fcl3.cli`). Needs httpx and pydantic only: no numpy, no server dependencies.
"""
