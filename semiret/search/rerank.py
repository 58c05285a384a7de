"""A second stage for any retriever whose index stores its documents: the best hits of a search scored again by a
cross-encoder reading the query and each hit's stored title and text together (sentence-transformers'
``CrossEncoder.rank``, OpenSearch's ``rerank`` response processor, PyTerrier's ``retriever >> reranker``), or by
late interaction, each encoded alone into token vectors and compared by MaxSim (a ColBERT model's, or any encoder's:
RAGatouille's and PyLate's ``rerank``; :mod:`semiret.models.late_interaction`).
``Retriever.search(..., rerank=Reranking("cross-encoder/ms-marco-MiniLM-L-6-v2", depth=50))``,
``Reranking("colbert-ir/colbertv2.0")``, ``Reranking("minilm", kind="late-interaction")``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from semiret.data.collection import Document
from semiret.data.trec import Run
from semiret.errors import SemiretError
from semiret.types import SearchHits

if TYPE_CHECKING:
    from semiret.search.retrievers import Retriever

log = logging.getLogger(__name__)


RERANKING_KINDS = ("cross-encoder", "late-interaction")


class Reranking:
    """The best ``depth`` hits of each query (or ``k``, when more) scored by ``model``, ranked by that score, the
    first stage's order breaking ties. ``model``: a folder or hub id, loaded once and kept, as ``kind`` says: a
    ``cross-encoder`` (:class:`~semiret.models.cross_encoder.CrossEncoder`; ``max_length`` tokens of a pair, default
    the model's, at most 512) or ``late-interaction`` (:class:`~semiret.models.late_interaction.LateInteraction`: a
    ColBERT checkpoint, or any encoder's token vectors); None: a ColBERT checkpoint (PyLate's or Stanford's) is read
    by late interaction, any other model as a cross-encoder. Or a model already loaded. ``batch_size`` texts read at
    once; ``cache_mb``: late interaction's documents' vectors kept between searches (default 256 MB); ``cache``: a
    folder where late interaction keeps them for good instead (every document encoded once, across searches and
    runs; read memory-mapped: an :class:`~semiret.indexes.embedding_cache.EmbeddingCache` of token vectors, bound
    to the model's weights)."""

    def __init__(self, model, depth: int = 100, batch_size: int = 32, max_length: int | None = None,
                 kind: str | None = None, cache_mb: float | None = None, cache: "str | Path | None" = None):
        for name, value in (("depth", depth), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SemiretError(f"the re-ranking {name} must be a whole number, at least 1, got {value!r}")
        if kind is not None and kind not in RERANKING_KINDS:
            raise SemiretError(f"a re-ranking's kind is one of {', '.join(RERANKING_KINDS)}, got {kind!r}")
        if isinstance(model, str):
            model = reranking_model(model, kind, max_length, cache_mb)
        elif cache_mb is not None:
            raise SemiretError("cache_mb is a late-interaction model's, given when it is loaded (a name, not a model)")
        if cache is not None:
            from semiret.indexes.embedding_cache import EmbeddingCache
            from semiret.models.late_interaction import LateInteraction

            if not isinstance(model, LateInteraction):
                raise SemiretError("cache keeps late interaction's token vectors; a cross-encoder reads each pair "
                                   "anew")
            model.store = EmbeddingCache(cache, "tokens", model.identity)
        self.model, self.depth, self.batch_size = model, depth, batch_size

    reads_texts = True
    """It reads the candidates' stored texts (a learned ranking reads indexes instead)."""

    def check_first_stage(self, retriever: "Retriever") -> None:
        """Refuse a first stage whose index keeps no texts to read."""
        if not retriever.index.stores_texts:
            raise SemiretError(f"{retriever.index.path} keeps no stored documents (built with --no-store-texts): "
                               "there is no text to re-rank by")

    def describe(self) -> dict:
        """What an evaluation records of it (the kind only where it is late interaction: a cross-encoder's record
        reads as before)."""
        from semiret.models.late_interaction import LateInteraction

        late = {"kind": "late-interaction"} if isinstance(self.model, LateInteraction) else {}
        return {"model": self.model.name, **late, "depth": self.depth}


    def reranked(self, queries: list[str], found: SearchHits, documents: Callable[[list[str]], dict[str, Document]],
                 k: int, n_threads: int = 1) -> SearchHits:
        """Each query's hits in ``found`` ranked by the model's score of the query and the hit's stored document
        (``documents(ids)``: by id), the best ``k``, each with that score. ``n_threads`` is not read: the model
        reads with torch's threads."""
        ids, scores = [], []
        for query, hit_ids in zip(queries, found.ids):
            stored = documents(hit_ids)
            if len(stored) < len(hit_ids):
                raise SemiretError(f"hit {next(d for d in hit_ids if d not in stored)!r} has no stored text to "
                                   "re-rank by")
            given = self.model.score(query, [stored[d].full_text for d in hit_ids], self.batch_size)
            order = sorted(range(len(hit_ids)), key=lambda j: (-given[j], j))[:k]
            ids.append([hit_ids[j] for j in order])
            scores.append([float(given[j]) for j in order])
        return SearchHits(ids, scores)


def reranking_model(name: str, kind: str | None = None, max_length: int | None = None,
                    cache_mb: float | None = None):
    """The model ``name`` loaded as ``kind`` says (None: by its files, :class:`Reranking`); torch is imported only
    here, where a search re-ranks."""
    from semiret.data.packaged import model_directory
    from semiret.models.late_interaction import LateInteraction, checkpoint_kind

    if kind is None:
        kind = "late-interaction" if checkpoint_kind(model_directory(name)) != "encoder" else "cross-encoder"
    if kind == "late-interaction":
        if max_length is not None:
            raise SemiretError("max_length is a cross-encoder's; a late-interaction model reads its own lengths")
        return LateInteraction.from_pretrained(name) if cache_mb is None else \
            LateInteraction.from_pretrained(name, cache_mb)
    if cache_mb is not None:
        raise SemiretError("cache_mb is a late-interaction model's; a cross-encoder reads each pair anew")
    from semiret.models.cross_encoder import CrossEncoder

    return CrossEncoder.from_pretrained(name, max_length)


def rerank_run(retriever: "Retriever", run: Run, queries: dict[str, str], depth: int = 100, k: int | None = None,
               rerank: Reranking | None = None) -> Run:
    """Each query's best ``depth`` documents of ``run`` (another system's ranking, in trec_eval's order) ranked again
    by ``retriever`` (its score of each; PyTerrier's ``run >> retriever``, Anserini's re-ranking of a run), or by
    ``rerank``'s cross-encoder reading each of them with the query: the best ``k`` (default: all of them). Candidates
    the retriever does not score (BM25: no word of the query) follow the scored ones at 0 (or the lowest score, where
    below). A query the run ranks but ``queries`` lacks is an error; documents the index does not hold are left out,
    and said. (``rerank``'s own depth is not read: ``depth`` is.)"""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1 or (k is not None and k < 1):
        raise SemiretError(f"the depth and k of a re-ranked run must be at least 1, got depth {depth!r}, k {k!r}")
    missing = [query_id for query_id in run if query_id not in queries]
    if missing:
        raise SemiretError(f"the run ranks {len(missing)} queries the queries given lack ({', '.join(missing[:3])}"
                           f"{', ...' if len(missing) > 3 else ''}): give the queries the run was made of")
    view = retriever.pinned()  # every query's candidates from one commit
    ranked, unheld = {}, 0
    for query_id, first in run.items():
        candidates = [doc_id for doc_id, _ in sorted(first.items(), key=lambda item: (item[1], item[0]),
                                                     reverse=True)[:depth]]
        wanted = min(k or len(candidates), len(candidates))
        held = [doc_id for doc_id in candidates if doc_id in view.index]
        unheld += len(candidates) - len(held)
        if rerank is not None:  # every candidate read with the query, whether the retriever scores it or not
            if not view.index.stores_texts:
                raise SemiretError(f"{view.index.path} keeps no stored documents: there is no text to re-rank by")
            found = rerank.reranked([queries[query_id]], SearchHits([held], [[0.0] * len(held)]),
                                    view.get_documents, wanted)
            ranked[query_id] = dict(zip(found.ids[0], found.scores[0]))
            continue
        hits = view.search(queries[query_id], k=wanted, filter={"$id": held}) if held else []
        scores = {hit.id: hit.score for hit in hits}
        floor = min(0.0, *scores.values()) if scores else 0.0
        for doc_id in held:
            if len(scores) >= wanted:
                break
            scores.setdefault(doc_id, floor)
        ranked[query_id] = scores
    if unheld:
        log.warning("%d of the run's documents are not in %s: left out of the re-ranked run", unheld, view.index.path)
    return ranked
