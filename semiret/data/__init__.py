"""Data and formats: collections, corpora, queries, qrels and TREC runs."""

from semiret.data.collection import Collection, Document, iter_corpus, read_qrels, read_queries
from semiret.data.trec import read_trec_run, write_trec_run

__all__ = ["Collection", "Document", "iter_corpus", "read_qrels", "read_queries", "read_trec_run", "write_trec_run"]
