"""Scrolling in a metadata field's order (``scroll(order_by=...)``, the service's ``"order_by"``): numbers, dates as
instants, strings, booleans; lists by their least (ascending) or greatest (descending) value; documents without a
value last either way; equal values in id order; pages that stay consistent while documents change; bad orders and
offsets refused."""

from __future__ import annotations

import json

import pytest

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of

VALUES = {"a": "2026-01-05", "b": "2025-12-31T23:00:00-02:00", "c": None, "d": "2026-01-05", "e": 7, "f": "abc",
          "g": [3, "2024-01-01"], "h": True, "i": {"x": 1}}


@pytest.fixture
def bm25(tmp_path):
    docs = [Document(doc_id, "statins", metadata={"published": value, "kind": "x" if doc_id < "e" else "y"})
            for doc_id, value in VALUES.items()]
    return BM25Retriever.build(docs + [Document("z", "no metadata")], tmp_path / "bm25")


def all_pages(retriever, limit, **options) -> list[str]:
    ids, offset = [], None
    while True:
        page = retriever.scroll(limit=limit, offset=offset, **options)
        ids += page.ids
        if page.next_offset is None:
            return ids
        offset = page.next_offset


def test_the_order_of_values(bm25):
    # numbers (g's least is 3), dates as instants (b is 01:00 on January 1st, UTC), strings, booleans; then none
    ascending = ["g", "e", "b", "a", "d", "f", "h", "c", "i", "z"]
    assert bm25.scroll(limit=20, order_by="published").ids == ascending
    descending = bm25.scroll(limit=20, order_by={"key": "published", "direction": "desc"}).ids
    # g's greatest is a date in 2024; a and d are equal: id order; without a value last, in id order
    assert descending == ["h", "f", "a", "d", "b", "g", "e", "c", "i", "z"]
    for limit in (1, 2, 3, 20):
        assert all_pages(bm25, limit, order_by="published") == ascending
        assert all_pages(bm25, limit, order_by={"key": "published", "direction": "desc"}) == descending
    assert bm25.scroll(limit=20, order_by="published", filter={"kind": "x"}).ids == ["b", "a", "d", "c"]


def test_pages_stay_consistent_while_documents_change(bm25):
    first = bm25.scroll(limit=3, order_by="published")
    assert first.ids == ["g", "e", "b"]
    bm25.add([Document("new", "x", metadata={"published": "2026-01-06"}), Document("old", "x", metadata={
        "published": 1})])  # one after the page's end, one before its start
    bm25.delete(["a"])
    rest = bm25.scroll(limit=20, offset=first.next_offset, order_by="published")
    assert rest.ids == ["d", "new", "f", "h", "c", "i", "z"]  # a deleted, old before the offset: not seen


def test_what_is_refused(bm25):
    for wrong, message in ((3, "field name"), ({"key": "published", "direction": "up"}, "asc or desc"),
                           ({"direction": "desc"}, "field name"), ({"key": ""}, "metadata field"),
                           ({"key": "a", "other": 1}, "field name")):
        with pytest.raises(SemiretError, match=message):
            bm25.scroll(order_by=wrong)
    for offset in ("a", "[1, 2]", '[[0, 1], 5]', "[[0, 1, 2], \"a\"]"):
        with pytest.raises(SemiretError, match="not a page offset"):
            bm25.scroll(order_by="published", offset=offset)


def test_the_service_and_its_client(bm25):
    settings = ServeSettings({"docs": str(bm25.index.path)}, write_process=False)
    with LocalClient(create_app(settings)) as http:
        answer = http.post("/indexes/docs/documents/scroll", json={"limit": 4, "order_by": {
            "key": "published", "direction": "desc"}, "with_text": False})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [d["_id"] for d in body["documents"]] == ["h", "f", "a", "d"]
        rest = http.post("/indexes/docs/documents/scroll", json={"limit": 10, "offset": body["next_page_offset"],
                                                                 "order_by": {"key": "published", "direction": "desc"}})
        assert [d["_id"] for d in rest.json()["documents"]] == ["b", "g", "e", "c", "i", "z"]
        assert client_of(http).scroll("docs", limit=2, order_by="published").ids == ["g", "e"]
        for body, status in (({"order_by": {"key": "published", "direction": "up"}}, 422),
                             ({"order_by": "published", "offset": "nope"}, 422)):
            answer = http.post("/indexes/docs/documents/scroll", json=body)
            assert answer.status_code == status and ("order_by" in json.dumps(answer.json()) or
                                                     "offset" in json.dumps(answer.json())), answer.text


def test_exact_keys_huge_numbers_infinity_and_tokens(tmp_path):
    values = {"a": 10 ** 400, "b": 2 ** 53 + 1, "c": 2 ** 53,
              "f": "9999-01-01T00:00:00.000002", "g": "9999-01-01T00:00:00.000001", "h": None}
    docs = [Document(doc_id, "x", metadata={"n": value}) for doc_id, value in values.items()]
    bm25 = BM25Retriever.build(docs, tmp_path / "exact")
    for number in (float("inf"), float("nan")):  # no JSON number: refused, as set_metadata and the API refuse them
        with pytest.raises(SemiretError, match="field 'n' of the metadata holds NaN or Infinity"):
            bm25.add([Document("d", "x", metadata={"n": number})])
    order = ["c", "b", "a", "g", "f", "h"]  # exact integers, microseconds apart, none last
    assert bm25.scroll(limit=20, order_by="n").ids == order
    for limit in (1, 3):
        assert all_pages(bm25, limit, order_by="n") == order
    token = bm25.scroll(limit=2, order_by="n").next_offset
    assert token.startswith("order:")
    for wrong, message in (({"order_by": {"key": "n", "direction": "desc"}}, "'n' asc, not by 'n' desc"),
                           ({"order_by": "m"}, "not by 'm'"), ({}, "give the same order_by")):
        with pytest.raises(SemiretError, match=message):
            bm25.scroll(offset=token, **wrong)
    import base64

    for record in ({"k": "n", "d": "asc", "v": ["a", 5], "id": "x"}, {"k": "n", "d": "asc", "v": [2, 5], "id": "x"},
                   {"k": "n", "d": "asc", "v": [0, 1]}, {"k": "n", "d": "asc", "v": [True, 1], "id": "x"}):
        forged = "order:" + base64.urlsafe_b64encode(json.dumps(record).encode()).decode()
        with pytest.raises(SemiretError, match="not a page offset"):
            bm25.scroll(order_by="n", offset=forged)
    with pytest.raises(SemiretError, match="not a page offset"):
        bm25.scroll(order_by="n", offset="order:!!!")
