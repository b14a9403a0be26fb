"""The FCL3 streaming microservice: a FastAPI app around the :mod:`core` engine
(``service.main:app``); its packages are its features, README's map of the code says which is which."""
