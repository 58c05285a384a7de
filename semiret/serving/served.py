"""One index directory behind the server: its retriever, and what each request does with it.

Concurrency comes from the index itself (:mod:`semiret.indexes.segments`): a search reads one snapshot and
never waits; a write takes the index's write lock (threads and processes alike: several ``--workers``
share an index safely) and publishes a new snapshot once committed. Every request first :meth:`refresh`\\ es
the index (one ``stat`` of ``meta.json``), so each worker process sees what the others committed.
"""

from __future__ import annotations

import glob
import itertools
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

import numpy as np

from semiret.data.chunking import PARENT_FIELD
from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes import open_index
from semiret.indexes.filters import (MISSING, checked_filter, documents_by_id, field_values, metadata_targets,
                                     passage_ids)
from semiret.indexes.segments import build_of
from semiret.indexes.storage import META_FILE, commit_stamp, read_commit
from semiret.search.learned_ranking import LearnedRanking, feature_name
from semiret.search.operators import query_filter, scored_text
from semiret.search.retrievers import DOCUMENT_READING, FACET_DEPTH, Retriever, open_retriever
from semiret.serving.data_dir import IndexGone
from semiret.serving.schemas import HIT_FIELDS

log = logging.getLogger(__name__)

OPTION_VARIANTS = 32
"""Retrievers kept for distinct search options asked for (least recently used dropped first)."""
SEARCH_TIME_SMOOTHING = 0.05
"""Weight of the newest search in :attr:`ServedIndex.query_ms` (an exponential moving average)."""
SEARCH_TIME_JUMP = 4.0
"""A search counts in :attr:`ServedIndex.query_ms` as at most this many times the average: one slow search (the
first with new options, the first after a merge) does not move it far; an index that got several times
slower raises it within some ten searches (the first ones still on the event loop)."""


BACKUP_NAME = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z(-\d+)?")
"""What follows ``NAME-`` in the name of a backup the server took: when it was taken (UTC), and a number when
several were taken within a second."""
BACKUP_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A backup a client may name to restore: one folder of ``--backup-dir`` (no path, nothing hidden)."""


def _backup_info(path: Path, stamp: re.Match) -> dict:
    created = "{}-{}-{}T{}:{}:{}Z".format(*stamp.groups()[:6])
    return {"name": path.name, "created": created, "documents": open_index(path).n_docs}


class Written(NamedTuple):
    """What a write of documents did, as the API answers it: ``documents``, how many of those sent (an upsert), or
    of the ids asked for that the index held (a delete; by a filter, the documents whose passages or selves it
    deleted), as a client counts what it sent; and, where the index holds passages (``--chunk-words``), the
    ``passages`` added or deleted (None otherwise)."""

    documents: int
    passages: int | None = None

    def answer(self, key: str) -> dict:
        """The answer's counts: ``{key: documents}``, and ``passages`` beside it where the index holds them."""
        return {key: self.documents, **({"passages": self.passages} if self.passages is not None else {})}

    def most(self, other: "Written") -> "Written":
        """Each count the larger of the two (what a write done again answers: :meth:`ServedIndex._redo_answer`)."""
        return Written(max(self.documents, other.documents),
                       None if self.passages is None else max(self.passages, other.passages or 0))


def _held(index, doc_ids: list[str]) -> tuple[set[str], set[str]]:
    """Of ``doc_ids``, those an index of passages holds (a document's id, or a passage's), and the ids of the
    passages they name (what a delete of them deletes: :func:`~semiret.indexes.filters.delete_documents`)."""
    of_documents = passage_ids(index, list(doc_ids))
    parents = set(field_values(index, of_documents, (PARENT_FIELD,)).values())
    direct = {doc_id for doc_id in doc_ids if doc_id in index}
    return {doc_id for doc_id in doc_ids if doc_id in direct or doc_id in parents}, direct | set(of_documents)


def _documents_of(index, passages: list[str]) -> int:
    """How many documents the live ``passages`` of an index of passages belong to."""
    return len({passage if parent is MISSING else parent
                for passage, parent in field_values(index, passages, (PARENT_FIELD,)).items()})


def _matching(index, wanted) -> list[str]:
    """The ids of the live documents (passages) of ``index`` passing the filter ``wanted``."""
    if hasattr(index, "restricted"):
        return index.pinned().restricted(wanted).live_ids()
    return [document.id for document in index.iter_documents(wanted)]  # (Milvus: read through)


class _TakeBack(Exception):
    """Ends an ``index.writing()`` block that must leave nothing behind (``writing`` discards what a failed
    block added to the vocabulary)."""


class ServedIndex:
    """An index directory opened with the retriever recorded in its ``meta.json``, or with ``retriever``; with a
    ``backend`` (:class:`~semiret.indexes.milvus.MilvusBackend`), the collection ``path`` there."""

    def __init__(self, name: str, path: str | Path, max_segments: int, retriever: str | None = None,
                 backend=None):
        self.name = name
        self.path = Path(path)
        self.retriever_name = retriever
        """The retriever asked for (None: the one the index records)."""
        self._seen = commit_stamp(self.path) if backend is None else None  # meta.json as last checked
        self.retriever = open_retriever(self.path, retriever, backend=backend)
        self._build = build_of(self.index.meta) if backend is None else None  # the index opened, of those made there
        self.max_segments = max_segments
        self.writer = None
        """A :class:`~semiret.serving.writer.WriterProcess` that does this index's writes; None: this process."""
        self.in_data_dir = False
        """Whether the index lives in the server's ``--data-dir`` (made and deleted over HTTP), not ``--index``."""
        self.query_ms: float | None = None
        """What one query of a search has cost lately, in ms (a moving average; None before the first search):
        the server answers cheap searches on its event loop and sends costly ones to its thread pool."""
        self._variants: OrderedDict[tuple, Retriever] = OrderedDict()
        self._variants_lock = threading.Lock()

    @property
    def index(self):
        return self.retriever.index

    def replaced(self) -> bool:
        """Whether the directory no longer holds the index open here: removed, or another index made there since
        (a ``stat`` while nothing was committed, else ``meta.json`` read)."""
        stamp = commit_stamp(self.path)
        if stamp is None:
            return True
        if stamp == self._seen:
            return False
        try:
            meta, stamp = read_commit(self.path, None)
        except (SemiretError, OSError):
            return True
        if build_of(meta) != self._build:
            return True
        self._seen = stamp  # a commit of the same index
        return False

    def refresh(self, wait: bool = False) -> None:
        """Pick up what other processes committed (a ``stat`` when nothing was); ``wait``: see
        :meth:`SegmentedIndex.refresh`. An index of the data directory deleted meanwhile (``DELETE /indexes/{name}``
        renames its folder away while a read holds it): :class:`~semiret.serving.data_dir.IndexGone`, a 404 (not a
        broken index's 503)."""
        try:
            self.index.refresh(wait)
        except (IndexFormatError, OSError):
            if self.in_data_dir and not self.path.is_dir():
                raise IndexGone(f"no index {self.name!r}: deleted meanwhile") from None
            raise

    def warm_up(self, searches: bool = True, writes: bool = False) -> None:
        """Compile the search kernels (numba) and load and run the document encoder, so the first requests
        do not pay for either. Words the trial encoding gave ids to are taken back."""
        if searches:  # (an index of vectors brought by the user reads no text: a vector of its own)
            side = self.retriever.query_side
            self.retriever.search(["warm up"] if side.reads_texts else [{"warm up": 1.0}]
                                  if side.vector_kind == "sparse" else np.ones((1, self.index.meta["dim"])), k=1)
        if writes and not self.retriever.document_side.takes_vectors:  # (no model to load and run)
            try:
                with self.index.writing():
                    self.retriever.document_side.encode([Document("warm-up", "warm up")])
                    raise _TakeBack
            except _TakeBack:
                pass

    # ------------------------------------------------------------------ reads
    def describe(self) -> dict:
        """What ``GET /indexes/{name}`` answers: the index's kind, size and options, and how it reads the documents
        added to it (``chunking``; the fields ``metadata_fields``, ``id_field`` and ``text_field`` as an upsert reads
        them, :meth:`Retriever.corpus_fields <semiret.search.retrievers.Retriever.corpus_fields>`)."""
        self.refresh()
        search_options = [f.name for f in fields(self.retriever.queries.Options)]
        return {"name": self.name, "retriever": self.retriever.name, **self.index.describe(),
                **({"analyzer": self.index.meta["analyzer"]} if self.index.meta.get("analyzer") else {}),
                "search_options": search_options,
                **{key: self.index.meta[key] for key in DOCUMENT_READING if self.index.meta.get(key)},
                **self.retriever.corpus_fields().record()}

    def search(self, queries: list[str], k: int, options: dict, with_text: bool | list[str],
               filter: dict | None = None, offset: int = 0, group_by: str | None = None,
               group_size: int = 1, score_threshold: float | None = None,
               highlight: dict | None = None, picking: dict | None = None,
               context: int | None = None, explain: bool = False, operators: bool = False) -> list[list[dict]]:
        """One list of hits per query, best first, all from one commit (stored title, text and metadata with
        ``with_text``, those of them it lists where a list; only documents whose metadata passes ``filter``; from
        rank ``offset`` + 1 on; grouped by the metadata field ``group_by``, ``k`` groups from the ``offset``-th on;
        none scoring below ``score_threshold``; each with its ``highlights`` when ``highlight`` is given: the keyword
        arguments of
        :meth:`Retriever.highlight <semiret.search.retrievers.Retriever.highlight>`; picked by maximal marginal
        relevance or boosted by metadata with ``picking``: ``{"diversity", "boost", "candidates"}``, as
        :meth:`Retriever.search` takes them; each
        with its ``context`` of that many passages on each side: :meth:`Retriever.context
        <semiret.search.retrievers.Retriever.context>`; and its ``explanation`` with ``explain``; the queries read
        for a search box's operators with ``operators``: :mod:`semiret.search.operators`)."""
        retriever = self._with_options(options)  # made once per distinct options: not a search's own time
        if explain:
            retriever.check_explainable()  # before any search (the API checks it first)
        started = time.perf_counter()
        self.refresh()
        rerank = (picking or {}).get("rerank")
        if isinstance(rerank, LearnedRanking):  # its feature indexes as they stand now, each pinned for the search
            _refresh_features(rerank)
        retriever = retriever.pinned()
        results = []
        found = retriever.search(queries, k=k + offset, filter=filter, group_by=group_by, group_size=group_size,
                                 score_threshold=score_threshold, operators=operators, **(picking or {}))
        for number, (query, hits) in enumerate(zip(queries, found)):
            read_with = query_filter(query, operators, filter)  # the filter the search read the query with
            if highlight is not None:  # what highlights read: the query's scored words
                scored = scored_text(query, operators, retriever.query_side)
            if group_by is not None:  # the offset counts groups (a group's hits come together, groups best first)
                skipped = set(list(dict.fromkeys(repr(hit.group) for hit in hits))[:offset])
                hits = [hit for hit in hits if repr(hit.group) not in skipped]
            else:
                hits = hits[offset:]
            stored = _stored(found, number, retriever.index, [hit.id for hit in hits]) if with_text else None
            rows = _rows(hits, with_text, group_by is not None, stored)
            if highlight is not None:
                for row in rows:
                    row["highlights"] = retriever.highlight(scored, row["id"], **highlight, filter=read_with)
            if context is not None:
                for row in rows:
                    row["context"] = retriever.context(row["id"], context)
            if explain:
                boost = (picking or {}).get("boost")
                factors = boost.factors(retriever.index, [row["id"] for row in rows]).tolist() if boost else None
                for n, row in enumerate(rows):
                    explained = retriever.explain(query, row["id"], filter=filter, operators=operators)
                    if factors is not None:
                        explained.boost_factor = factors[n]
                    row["explanation"] = explained.to_json()
            results.append(rows)
        self._took((time.perf_counter() - started) * 1000 / max(1, len(queries)))
        return results

    def recommend(self, positive: list[str], negative: list[str], k: int, options: dict, with_text: bool,
                  filter: dict | None = None, score_threshold: float | None = None) -> list[dict]:
        """The hits of :meth:`Retriever.recommend <semiret.search.retrievers.Retriever.recommend>`, as rows."""
        retriever = self._with_options(options)
        self.refresh()
        hits = retriever.pinned().recommend(positive, negative, k=k, filter=filter, score_threshold=score_threshold)
        return _rows(hits, with_text, False)

    def check_explainable(self, options: dict) -> None:
        """An error unless a search with these options can explain its hits."""
        self._with_options(options).check_explainable()

    def explain(self, query: "str | dict[str, float]", doc_id: str, options: dict, filter: dict | None = None,
                operators: bool = False) -> dict:
        """:meth:`Retriever.explain <semiret.search.retrievers.Retriever.explain>` of a query text or a sparse query
        vector, as the API answers it."""
        retriever = self._with_options(options)
        self.refresh()
        return retriever.explain(query, doc_id, filter=filter, operators=operators).to_json()

    def analyze(self, text: str | None, doc_id: str | None, side: str, limit: int | None, options: dict) -> dict:
        """:meth:`Retriever.analyze <semiret.search.retrievers.Retriever.analyze>` of a text, or
        :meth:`~semiret.search.retrievers.Retriever.document_terms` of a stored document, as the API answers it."""
        retriever = self._with_options(options)
        self.refresh()
        terms = retriever.document_terms(doc_id) if doc_id is not None else retriever.analyze(text, side)
        return {"terms": [vars(term) for term in terms[:limit or None]], "total": len(terms)}

    def suggest(self, text: str, k: int, filter: dict | None) -> dict:
        """:meth:`Retriever.suggest <semiret.search.retrievers.Retriever.suggest>`, as the API answers it."""
        self.refresh()
        return {"suggestions": [vars(each) for each in self.retriever.pinned().suggest(text, k, filter)]}

    def _took(self, per_query: float) -> None:
        """Fold a search's milliseconds per query into :attr:`query_ms`."""
        average = self.query_ms
        if average is None:
            self.query_ms = per_query
        else:
            self.query_ms = average + SEARCH_TIME_SMOOTHING * (min(per_query, SEARCH_TIME_JUMP * average) - average)

    def document(self, doc_id: str) -> dict | None:
        """The stored document (only its id when the index keeps no texts), or None if there is no such id."""
        found, _ = self.documents([doc_id])
        return found[0] if found else None

    def documents(self, doc_ids: list[str]) -> tuple[list[dict], list[str]]:
        """(the stored documents of those ids the index holds, in the order given, each once, only its id where the
        index keeps no texts; the ids it does not hold), from one commit."""
        self.refresh()
        index = self.index.pinned()
        wanted = list(dict.fromkeys(doc_ids))
        stored = documents_by_id(index, wanted)
        found, missing = [], []
        for doc_id in wanted:
            if doc_id in stored:
                found.append(stored[doc_id].to_record())
            elif doc_id in index:  # an index that keeps no texts: the id alone
                found.append({"_id": doc_id})
            else:
                missing.append(doc_id)
        return found, missing

    def count(self, filter: dict | None, query: "str | dict | None" = None) -> int:
        """Live documents, or those whose metadata passes ``filter`` (and that ``query``, a text or a sparse query
        vector, matches)."""
        self.refresh()
        return self.retriever.count(filter, query)

    def facet(self, field: str, filter: dict | None, limit: int, ranges: list[dict] | None = None, query=None,
              depth: int = FACET_DEPTH, operators: bool = False, options: dict | None = None) -> list[dict]:
        """The values of a metadata field the most documents hold (or how many in each of ``ranges``), counted; among
        a ``query``'s best ``depth`` hits where given, searched with ``operators`` and the search ``options``."""
        retriever = self._with_options(options or {})
        self.refresh()
        return [{"value": value, "count": count}
                for value, count in retriever.facet(field, filter, limit, ranges, query, depth, operators)]

    def scroll(self, filter: dict | None, limit: int, offset: str | None, with_text: bool,
               order_by: "str | dict | None" = None) -> dict:
        """A page of documents in id order (or ``order_by``'s) from ``offset`` on, and the next page's offset (all
        from one commit)."""
        self.refresh()
        page = self.retriever.scroll(filter, limit, offset, order_by)
        if page.documents is None or not with_text:
            rows = [{"_id": doc_id} for doc_id in page.ids]
        else:
            rows = [document.to_record() for document in page.documents]
        return {"documents": rows, "next_page_offset": page.next_offset}

    # ------------------------------------------------------------------ writes (each durable when it returns)
    def upsert(self, documents: list[Document]) -> Written:
        """Add documents, replacing those whose ids exist, in one commit; returns how many (and their passages)."""
        return self._write("_upsert", documents)

    def delete(self, doc_ids: list[str]) -> Written:
        """Delete the documents of these ids that exist; returns how many did (and their passages)."""
        return self._write("_delete", doc_ids)

    def delete_where(self, filter: dict) -> Written:
        """Delete the documents whose stored metadata passes ``filter``; returns how many did (in an index of
        passages: the documents whose passages it deleted, and the passages)."""
        self._check_filter(filter, "delete by")
        return self._write("_delete_where", filter)

    def set_metadata(self, metadata: dict, doc_ids: list[str] | None, filter: dict | None, overwrite: bool) -> int:
        """New metadata for the documents of these ids (unknown ones skipped) or passing ``filter``, no document
        encoded again; returns how many changed."""
        self._check_filter(filter, "update by")
        return self._write("_set_metadata", metadata, doc_ids, filter, overwrite)

    def _check_filter(self, filter: dict | None, doing: str) -> None:
        """Where the writer process does a write by ``filter``, check the filter here first, as a count does
        (:func:`~semiret.indexes.filters.checked_filter`), so that its warnings (a field no document holds) reach
        the caller: those of the writer process's own check stay there."""
        if self.writer is not None and filter is not None:
            self.refresh()
            checked_filter(self.index, filter, doing)

    def merge(self) -> dict:
        self._write("_merge")
        return self.describe()

    def synonyms(self) -> list[str]:
        """The synonym rules set on the index, as set (:meth:`Retriever.synonyms`)."""
        self.refresh()
        return self.retriever.synonyms()

    def set_synonyms(self, rules: list[str]) -> int:
        """Set the index's synonym rules (``[]``: none) in one commit, once checked here (a malformed rule is an
        error naming its line among ``rules``, before anything is written); returns how many are set."""
        lines = self.retriever.check_synonyms(rules, "rules")
        count = self._write("_set_synonyms", lines)
        index, side = self.retriever.query_side.synonym_target(self.index)
        side.of(index)  # compiled now, for every variant, not by the next search (on the event loop, if quick)
        return count

    def backup(self, directory: Path) -> dict:
        """A backup of the index's last commit in ``directory``, named after the index and the time (UTC)
        (:meth:`Retriever.backup`: writers wait meanwhile, searches go on)."""
        self.refresh()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for number in itertools.count(1):  # several backups within a second: numbered, whoever takes them
            target = directory / (f"{self.name}-{stamp}" + (f"-{number}" if number > 1 else ""))
            if target.exists():
                continue
            try:
                self.retriever.backup(target)
            except IndexFormatError:
                if target.exists():  # another request published this name first
                    continue
                raise
            return _backup_info(target, BACKUP_NAME.fullmatch(target.name[len(self.name) + 1:]))

    def backups(self, directory: Path) -> list[dict]:
        """The backups of this index in ``directory``, oldest first."""
        listed = []
        for path in directory.glob(f"{glob.escape(self.name)}-*"):
            stamp = BACKUP_NAME.fullmatch(path.name[len(self.name) + 1:])
            if stamp and (path / META_FILE).is_file():
                try:
                    listed.append(_backup_info(path, stamp))
                except (SemiretError, OSError):  # a folder of that name that is not (or no longer) an index
                    continue
        return sorted(listed, key=lambda info: (info["created"], len(info["name"]), info["name"]))

    def _write(self, method: str, *args):
        """``method(*args)`` here, or in the writer process and then this process's snapshot refreshed (so the
        next search sees the write). An index deleted under the write (``DELETE /indexes/{name}``):
        :class:`~semiret.serving.data_dir.IndexGone`."""
        try:
            if self.writer is None:
                return getattr(self, method)(*args)
            result = self.writer.write(self.name, (str(self.path), self.retriever_name), method, *args,
                                       on_redo=self._redo_answer(method, *args))
        except (IndexFormatError, OSError):
            # its folder went (a delete renames it away), or holds another index (a backup restored over it, deleted
            # and made again: this write reached neither); a meta.json alone gone is a broken index
            if not self.path.is_dir():
                raise IndexGone(f"no index {self.name!r}: deleted meanwhile") from None
            if (self.path / META_FILE).is_file() and self.replaced():
                if self.in_data_dir:  # deleted and made again over HTTP: the index asked for is gone
                    raise IndexGone(f"no index {self.name!r}: deleted meanwhile") from None
                raise IndexFormatError(f"index {self.name!r} was replaced by another (a backup restored over it, a "
                                       "rebuild) while this write ran: nothing of it was written; send it again "
                                       "(the next request opens the new one)") from None
            raise
        try:
            self.refresh(wait=True)
        except (IndexFormatError, IndexGone):
            if not self.replaced():
                raise
            # the writer process wrote to the index made there since this process opened it (a backup restored
            # over it): the write stands, and the next request opens that index here
        return result

    def _redo_answer(self, method: str, *args):
        """What a write done again answers (:meth:`WriterProcess.write`'s ``on_redo``), where the first attempt may
        have landed and died before answering, so that the second finds its work done: a delete's count of what the
        index held before the first attempt (a view of that commit, kept, read only if the write is done again) and
        no longer holds; a metadata update by filter, of what passed it then and holds other metadata now (an update
        that makes its own filter fail finds nothing to do again). None for the writes that answer alike twice (an
        add replaces by id; an update by ids finds the same documents)."""
        if method == "_delete":
            doc_ids = args[0]

            def gone(before, now) -> Written:
                if self.retriever.chunking is None:
                    return Written(sum(doc_id in before and doc_id not in now for doc_id in set(doc_ids)))
                (documents, passages), (documents_now, passages_now) = _held(before, doc_ids), _held(now, doc_ids)
                return Written(len(documents - documents_now), len(passages - passages_now))

            return self._answer_landed(gone)
        if method == "_delete_where":
            def deleted(before, now) -> Written:
                wanted = checked_filter(self.index, args[0], "delete by")
                passages = [doc_id for doc_id in before.restricted(wanted).live_ids() if doc_id not in now]
                if self.retriever.chunking is None:
                    return Written(len(passages))
                return Written(_documents_of(before, passages), len(passages))

            return self._answer_landed(deleted)
        if method == "_set_metadata" and args[1] is None:
            def updated(before, now) -> int:
                targets = metadata_targets(before, None, checked_filter(self.index, args[2], "update by"))
                then, later = before.get_documents(targets), now.get_documents(targets)
                return sum(doc_id in later and later[doc_id].metadata != then[doc_id].metadata for doc_id in targets)

            return self._answer_landed(updated)
        return None

    def _answer_landed(self, landed):
        """``on_redo`` answering the larger of the redone write's count and ``landed(before, now)``: what the first
        attempt did, read from the commit before it and the one after the redo."""
        self.refresh()
        before = self.index.pinned()

        def answer(redone):
            self.refresh(wait=True)
            first = landed(before, self.index.pinned())
            return redone.most(first) if isinstance(redone, Written) else max(redone, first)

        return answer

    def _upsert(self, documents: list[Document]) -> Written:
        added = self.retriever.add(documents, replace=True)  # (passages, where the index holds them)
        self._merge_small_segments()
        return Written(added) if self.retriever.chunking is None else Written(len(documents), added)

    def _delete(self, doc_ids: list[str]) -> Written:
        if self.retriever.chunking is None:
            written = Written(self.retriever.delete(doc_ids, missing_ok=True))
        else:
            with self.index.writing():  # the ids it holds, and their delete, one step for other writers
                held = _held(self.index, doc_ids)[0]
                written = Written(len(held), self.retriever.delete(doc_ids, missing_ok=True))
        self._merge_small_segments()  # a segment mostly deleted is folded
        return written

    def _delete_where(self, filter: dict) -> Written:
        if self.retriever.chunking is None:
            written = Written(self.retriever.delete_where(filter))
        else:
            with self.index.writing():  # the documents of the passages it deletes, read before they go
                wanted = checked_filter(self.index, filter, "delete by")
                documents = _documents_of(self.index, _matching(self.index, wanted)) if wanted is not None else 0
                written = Written(documents, self.retriever.delete_where(filter))
        self._merge_small_segments()
        return written

    def _set_metadata(self, metadata: dict, doc_ids: list[str] | None, filter: dict | None, overwrite: bool) -> int:
        changed = self.retriever.set_metadata(metadata, doc_ids, filter, overwrite, missing_ok=True)
        self._merge_small_segments()
        return changed

    def _merge(self) -> None:
        self.index.merge()

    def _set_synonyms(self, lines: list[str]) -> int:
        return self.retriever.set_synonyms(lines)

    def _merge_small_segments(self) -> None:
        """Keep at most ``max_segments`` segments besides those that filled the index's buffer
        (:meth:`~semiret.indexes.segments.SegmentedIndex.merge_small_segments`): housekeeping after a write has
        committed, so a failure (a full disk) is logged and the write answered as done, as it is (a merge commits
        whole or not at all; the next write tries again)."""
        if getattr(self.index, "segments", None) is None:  # none in Milvus, which merges its own
            return
        try:
            self.index.merge_small_segments(self.max_segments)
        except (OSError, SemiretError) as exc:
            log.warning("%s: a write committed, then folding small segments failed (the next write tries again): %s",
                        self.path, exc)

    # ------------------------------------------------------------------ search options
    def ready_for(self, options: dict) -> bool:
        """Whether a search with these options is ready: no retriever variant to make first, nor synonym rules
        (another process's, just committed) to compile."""
        retriever = self._variants.get(self._options_key(options)) if options else self.retriever
        if retriever is None:
            return False
        target = retriever.query_side.synonym_target(retriever.index)
        if target is None:
            return True
        self.refresh()  # a stat, as the search's own
        return target[1].ready(target[0])

    @staticmethod
    def _options_key(options: dict) -> tuple:
        return tuple(sorted((name, repr(value)) for name, value in options.items()))

    def _with_options(self, options: dict) -> Retriever:
        """The retriever with these search options (made once per distinct options, on the same index and
        document side)."""
        if not options:
            return self.retriever
        key = self._options_key(options)
        with self._variants_lock:
            variant = self._variants.get(key)
            if variant is not None:
                self._variants.move_to_end(key)
                return variant
        variant = self.retriever.with_options(**options)  # may load a token-weight table: outside the lock
        with self._variants_lock:
            self._variants[key] = variant
            while len(self._variants) > OPTION_VARIANTS:
                self._variants.popitem(last=False)
        return variant


def _refresh_features(ranking: LearnedRanking) -> None:
    """Pick up what was committed to a learned ranking's feature indexes since they were last read (a ``stat`` each
    when nothing was): an index that no longer opens is a 503 naming the feature, not the server's folder."""
    for retriever in ranking.features:
        try:
            retriever.index.refresh()
        except (IndexFormatError, OSError):
            raise IndexFormatError(f"the learned ranking's feature index {feature_name(retriever)} no longer opens: "
                                   "the server's learned ranking (--ltr) cannot rank hits until it is restored"
                                   ) from None


def _stored(found, query: int, index, doc_ids: list[str]) -> dict:
    """``index.get_documents(doc_ids)`` for ids among query ``query``'s hits of ``found`` (a search of ``index``),
    read at once, from where the search found them when it tells."""
    located = found.located(index, doc_ids, query) if hasattr(found, "located") else None
    if located is None:
        return index.get_documents(doc_ids)
    return {doc_id: document for segment, ids, locals_ in located if segment.texts is not None
            for doc_id, document in zip(ids, segment.documents(locals_))}


def _rows(hits, with_text: bool | list[str], grouped: bool, stored: dict | None = None) -> list[dict]:
    """Hits as the API answers them: id and score (and group), with the stored title, text and metadata (from
    ``stored``, the hits' documents by id, where given); ``with_text`` a list (a search's ``with_fields``): only those
    of them (``metadata.FIELD``: that field of the metadata, nested as stored)."""
    rows = []
    fields = HIT_FIELDS if with_text is True else with_text or ()
    for hit in hits:
        row = {"id": hit.id, "score": hit.score, **({"group": hit.group} if grouped else {})}
        if fields:
            document = hit.document if stored is None else stored.get(hit.id)
            for name in fields:
                if name in ("title", "text"):
                    row[name] = getattr(document, name) if document is not None else None
                elif document is not None and document.metadata:
                    _copy_field(document.metadata, row, name.split(".")[1:])
        rows.append(row)
    return rows


def _copy_field(metadata: dict, row: dict, path: list[str]) -> None:
    """``metadata`` (``path`` empty), or its value at ``path`` where it has one, into ``row["metadata"]`` at the same
    place (a field inside a list of objects is not picked out: name the list)."""
    value = metadata
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return
        value = value[key]
    if not path:
        row["metadata"] = {**row.get("metadata", {}), **metadata}
        return
    node = row.setdefault("metadata", {})
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
