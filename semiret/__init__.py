"""semiret: semi-parametric retrieval (BM25, tokenizer-only bag-of-tokens, learned sparse and dense search).

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
    user = getattr(_os, "getuid", lambda: "user")()
    _os.environ["NUMBA_CACHE_DIR"] = str(_Path(_tempfile.gettempdir()) / f"semiret-numba-{user}")


_numba_cache_fallback()
