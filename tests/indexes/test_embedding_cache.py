"""The embedding cache's chunks: a flush that crashed before its commit is invisible and does not block the next."""

from __future__ import annotations

import numpy as np
import pytest

from semiret.indexes import embedding_cache
from semiret.indexes.embedding_cache import EmbeddingCache

from helpers import leftovers


def test_a_flush_interrupted_before_its_commit_is_invisible_and_later_flushes_work(tmp_path, monkeypatch):
    cache = EmbeddingCache(tmp_path / "c", "dense", "enc", dim=2)
    cache.put(["a"], [np.array([1.0, 0.0], np.float32)])
    cache.flush()

    def crash(path, data):
        raise OSError("simulated crash before the commit")

    cache.put(["b"], [np.array([0.0, 1.0], np.float32)])
    with monkeypatch.context() as patch:
        patch.setattr(embedding_cache, "atomic_write_json", crash)
        with pytest.raises(OSError):
            cache.flush()
    assert (tmp_path / "c" / "chunk-000001").is_dir()  # written, never committed
    reopened = EmbeddingCache(tmp_path / "c", "dense", "enc", dim=2)
    assert len(reopened) == 1 and "b" not in reopened
    reopened.put(["c"], [np.array([0.5, 0.5], np.float32)])
    reopened.flush()  # takes the uncommitted chunk's name
    again = EmbeddingCache(tmp_path / "c", "dense", "enc", dim=2)
    assert again.missing(["a", "b", "c"]) == ["b"]
    np.testing.assert_array_equal(again.get("c"), [0.5, 0.5])
    assert leftovers(tmp_path) == []


def test_threads_adding_and_flushing_at_once_keep_every_embedding_with_its_id(tmp_path):
    """Concurrent searches of a server re-rank with one shared cache: each chunk's ids and vectors must agree."""
    import threading

    cache = EmbeddingCache(tmp_path / "c", "sparse", "enc")

    def embed(thread: int) -> None:
        for n in range(40):
            doc_id = f"t{thread}-{n}"
            cache.put([doc_id], [(np.array([thread, n], np.int32), np.array([n + 0.5, thread + 0.5], np.float32))])
            cache.flush()

    threads = [threading.Thread(target=embed, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reopened = EmbeddingCache(tmp_path / "c", "sparse", "enc")
    assert len(reopened) == 160
    for t in range(4):
        for n in range(40):
            terms, weights = reopened.get(f"t{t}-{n}")
            assert terms.tolist() == [t, n] and weights.tolist() == [n + 0.5, t + 0.5]
