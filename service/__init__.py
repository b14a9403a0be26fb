"""The FCL3 streaming microservice: a FastAPI app around the :mod:`core` engine.

``service.main:app`` is the ASGI app. Layout follows FastAPI's full-stack template:
``config.py`` (one pydantic-settings ``Settings``), ``db.py`` (engine and schema),
``models.py`` (SQLAlchemy tables), ``store.py`` (load / update / commit of a model),
``locks.py`` (Redis or in-process update lock), ``api/deps.py`` and ``api/routes/*``.
"""
