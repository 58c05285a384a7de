"""semiret inside other frameworks: each module an adapter to one of them, imported only where it is used (the
framework is an extra of its own: ``pip install semiret[langchain]``)."""
