"""What a searcher loads at its first use (a model, a tokenizer) is loaded once however many threads search at once,
and a load that fails is not kept: the next search tries again and fails alike."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from semiret.search.neural import loaded_once


class Searcher:
    def __init__(self, fail: bool = False):
        self.loads, self.fail = 0, fail

    @loaded_once
    def model(self):
        self.loads += 1
        time.sleep(0.05)  # long enough for every thread to ask before the first load ends
        if self.fail:
            raise ValueError("the model does not fit the index")
        return object()


def test_threads_asking_at_once_share_one_load():
    searcher = Searcher()
    start = threading.Barrier(8)

    def first_search(_):
        start.wait()
        return searcher.model

    with ThreadPoolExecutor(8) as pool:
        models = list(pool.map(first_search, range(8)))
    assert searcher.loads == 1 and all(m is models[0] for m in models)


def test_a_failed_load_is_not_kept():
    searcher = Searcher(fail=True)
    for attempt in (1, 2):
        with pytest.raises(ValueError, match="does not fit"):
            searcher.model
        assert searcher.loads == attempt
