"""semiret: semi-parametric retrieval (BM25, tokenizer-only bag-of-tokens, learned sparse and dense search).

Start with ``semiret.search`` (``BM25Retriever.build(documents, path)``, ``open_retriever(path)``, every retriever)
and ``semiret.data`` (``Document``, ``iter_corpus``, ``Collection``); over HTTP, ``semiret.serving.client.Client``.
The layers and how a method composes them: docs/architecture.md."""

import os as _os
import tempfile as _tempfile
from pathlib import Path as _Path

__version__ = "0.1.0"


def _numba_cache_fallback() -> None:
    """numba caches compiled kernels beside their modules, else in the user's cache folder; with neither writable (a
    read-only install run by a user without a home, as in many containers) ``cache=True`` fails at import. Then the
    cache goes to a folder in the temporary directory instead (set before numba is first imported)."""
    if "NUMBA_CACHE_DIR" in _os.environ:
        return
    try:
        user_cache = _Path(_os.environ.get("XDG_CACHE_HOME") or _Path.home() / ".cache")
    except RuntimeError:  # no home folder to be found
        user_cache = None
    writable = [_Path(__file__).parent] + ([user_cache if user_cache.exists() else user_cache.parent]
                                            if user_cache is not None else [])
    if any(_os.access(folder, _os.W_OK) for folder in writable):
        return
    uid = getattr(_os, "getuid", lambda: None)()
    folder = _Path(_tempfile.gettempdir()) / f"semiret-numba-{uid}"
    try:  # numba reads its cache index with pickle: only a folder of this user's own, closed to others
        folder.mkdir(mode=0o700, exist_ok=True)
        status = folder.stat()
        private = uid is None or (status.st_uid == uid and not status.st_mode & 0o077)
    except OSError:
        private = False
    _os.environ["NUMBA_CACHE_DIR"] = str(folder if private else _tempfile.mkdtemp(prefix="semiret-numba-"))


_numba_cache_fallback()
