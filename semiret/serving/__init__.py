"""``semiret serve``: index directories over HTTP (FastAPI and uvicorn), searched while documents are added and
deleted, every write durable before it is acknowledged. A layer beside ``evaluation`` and ``training``: it
uses the search layer and below.

- :mod:`~semiret.serving.settings`: what is served, the API key and the limits;
- :mod:`~semiret.serving.served`: one index behind the server (refresh, search, upsert, delete, merge policy);
- :mod:`~semiret.serving.schemas`: request and response bodies;
- :mod:`~semiret.serving.app`: the HTTP API (:func:`create_app`);
- :mod:`~semiret.serving.client`: a Python client of that API (:class:`Client`, and :class:`AsyncClient` for asyncio).
"""

from semiret.serving.settings import ServeSettings, parse_index_specs, parse_retriever_specs

__all__ = ["AsyncClient", "Client", "ServeSettings", "ServerError", "create_app", "parse_index_specs",
           "parse_retriever_specs"]


def __getattr__(name: str):
    """``create_app`` on first use: FastAPI is imported only by what serves (the CLI reads the settings'
    defaults for every command, and training machines need not have FastAPI); the client's names
    (``Client``, ``AsyncClient``, ``ServerError``: what an error answer raises) on first use too."""
    if name == "create_app":
        from semiret.serving.app import create_app

        return create_app
    if name in ("Client", "AsyncClient", "ServerError"):
        from semiret.serving import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
