"""The ``semiret`` command line: index, search, add, delete, merge, info, eval, demo."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from semiret.errors import SemiretError

console = Console(stderr=True)


def _report(exc: SemiretError) -> None:
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)


class _Commands(TyperGroup):
    """Turns a :class:`SemiretError` from any command into a one-line message and exit code 2, so the app
    behaves the same however it is invoked (the ``semiret`` script, ``typer.testing.CliRunner``, ``python -m``)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SemiretError as exc:
            _report(exc)
            raise typer.Exit(2) from None


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Semi-parametric retrieval: index, search and evaluate.")

RetrieverOpt = typer.Option("bm25", "--retriever", "-r",
                            help="Retriever name (bm25, bot, idf, splade, inference-free, dense).")
K1Opt = typer.Option(None, help="BM25 k1 (default 1.5).")
BOpt = typer.Option(None, "--b", help="BM25 b (default 0.75).")
TokenizerOpt = typer.Option(None, help="Tokenizer for token-space retrievers: a registry name, directory or hub id.")
MaxLengthOpt = typer.Option(None, help="Truncate texts to this many tokens (token-space and neural retrievers).")
IdfOpt = typer.Option(None, help="Query token weights for `idf` and `inference-free`: 'corpus' or a JSON {token: weight} table ('msmarco' for the shared table).")
ModelOpt = typer.Option(None, help="Model for splade, inference-free, dense, sidr-*: a registry name (splade-tiny, minilm, sidr-scifact), directory or hub id.")
BatchSizeOpt = typer.Option(None, "--batch-size", help="Texts per encoder batch (neural retrievers; default 32).")
TopKOpt = typer.Option(None, "--top-k", help="Keep each document's k heaviest terms (splade, inference-free).")
ThresholdOpt = typer.Option(None, help="Drop document term weights below this (splade, inference-free; inference-free defaults to the threshold recorded with a trained model, 0 keeps all).")
QuantizeOpt = typer.Option(False, "--quantize", help="Store document term weights in 8 bits (splade, inference-free).")
AnnOpt = typer.Option(None, "--ann", help="Dense search structure: exact (default), flat, ivf, hnsw.")
PrecisionOpt = typer.Option(None, help="Dense encoder arithmetic: float32 (default), bfloat16, auto.")
NprobeOpt = typer.Option(None, help="IVF lists searched per query (dense --ann ivf; default 16).")
EfSearchOpt = typer.Option(None, help="HNSW candidate list size (dense --ann hnsw; default 128).")
QueryTopKOpt = typer.Option(None, "--query-top-k", help="sidr-beta(-rerank): terms kept per query vector in beta search (SiDR's query activation; default: the model's, 768).")
RerankDepthOpt = typer.Option(None, help="sidr-beta-rerank: documents re-ranked per query (m, default 100).")
RerankModelOpt = typer.Option(None, help="sidr-beta-rerank: second-stage encoder (default: the SiDR document encoder; e.g. minilm).")
CacheOpt = typer.Option(None, help="sidr-beta-rerank: embedding cache directory (default: inside the index).")
MinIdfOpt = typer.Option(None, "--min-idf", help="idf/inference-free: drop query tokens with a lower IDF (query-side stopwords; default 1.0, 0 keeps all).")
TwoPhaseOpt = typer.Option(None, "--two-phase", help="Two-phase search for idf/inference-free: 'on' (prune ratio 0.4, window 5k), 'RATIO' or 'RATIO,EXPANSION'; queries it cannot speed up are searched exactly unless ',always' follows.")


def _options(*, idf=None, batch_size=None, quantize=False, **given) -> dict:
    """CLI values as retriever options (names the retrievers use; unset ones are None)."""
    if idf == "msmarco":
        from semiret.data.paths import msmarco_idf

        idf = str(msmarco_idf())
    return {**given, "idf": idf, "encode_batch_size": batch_size, "quantize_bits": 8 if quantize else None}


def _corpus(path: Path):
    from semiret.data.collection import iter_corpus
    from semiret.data.paths import dataset

    return iter_corpus(dataset(str(path)))


@app.command()
def index(data: Path = typer.Option(..., help="A BEIR collection folder or a corpus file (.jsonl/.tsv)."),
          out: Path = typer.Option(..., help="Index directory to create."),
          retriever: str = RetrieverOpt, overwrite: bool = typer.Option(False, help="Replace an existing index."),
          store_texts: bool = typer.Option(True, help="Keep document texts for display and re-ranking."),
          k1: Optional[float] = K1Opt, b: Optional[float] = BOpt, tokenizer: Optional[str] = TokenizerOpt,
          max_length: Optional[int] = MaxLengthOpt, model: Optional[str] = ModelOpt,
          batch_size: Optional[int] = BatchSizeOpt, top_k: Optional[int] = TopKOpt,
          threshold: Optional[float] = ThresholdOpt, quantize: bool = QuantizeOpt, ann: Optional[str] = AnnOpt,
          precision: Optional[str] = PrecisionOpt):
    """Build an index from a corpus."""
    from semiret.search.retrievers import retriever_class

    cls = retriever_class(retriever)
    built = cls.build(_corpus(data), out, overwrite=overwrite, store_texts=store_texts,
                      **cls.build_options(_options(k1=k1, b=b, tokenizer=tokenizer, max_length=max_length,
                                                   model=model, batch_size=batch_size, top_k=top_k,
                                                   threshold=threshold, quantize=quantize, ann=ann,
                                                   precision=precision)))
    console.print_json(json.dumps(built.index.describe()))


@app.command()
def search(query: list[str] = typer.Argument(..., help="One or more queries."),
           index: Path = typer.Option(..., help="Index directory."),
           retriever: Optional[str] = typer.Option(None, "--retriever", "-r", help="Override the index's retriever."),
           k: int = typer.Option(10, "-k", help="Results per query."), idf: Optional[str] = IdfOpt,
           batch_size: Optional[int] = BatchSizeOpt, nprobe: Optional[int] = NprobeOpt,
           ef_search: Optional[int] = EfSearchOpt, two_phase: Optional[str] = TwoPhaseOpt,
           min_idf: Optional[float] = MinIdfOpt, model: Optional[str] = ModelOpt,
           query_top_k: Optional[int] = QueryTopKOpt,
           rerank_depth: Optional[int] = RerankDepthOpt,
           rerank_model: Optional[str] = RerankModelOpt, cache: Optional[str] = CacheOpt,
           as_json: bool = typer.Option(False, "--json", help="Print JSON lines."),
           show_text: bool = typer.Option(True, help="Show stored document texts.")):
    """Search an index."""
    from semiret.search.retrievers import open_retriever

    options = _options(idf=idf, batch_size=batch_size, nprobe=nprobe, ef_search=ef_search, two_phase=two_phase,
                       min_idf=min_idf, model=model, query_top_k=query_top_k, rerank_depth=rerank_depth,
                       rerank_model=rerank_model, cache=cache)
    searcher = open_retriever(index, retriever, **{k_: v for k_, v in options.items() if v is not None})
    hits = searcher.search(query, k=k)
    for text, ids, scores in zip(query, hits.ids, hits.scores):
        if as_json:
            print(json.dumps({"query": text, "hits": [{"id": i, "score": s} for i, s in zip(ids, scores)]}))
            continue
        table = Table(title=text, show_lines=False)
        table.add_column("#", justify="right")
        table.add_column("id")
        table.add_column("score", justify="right")
        if show_text:
            table.add_column("text", overflow="ellipsis", no_wrap=True, max_width=90)
        for rank, (doc_id, score) in enumerate(zip(ids, scores), 1):
            row = [str(rank), doc_id, f"{score:.3f}"]
            if show_text:
                doc = searcher.index.get_document(doc_id)
                row.append(doc.full_text if doc else "")
            table.add_row(*row)
        Console().print(table)


@app.command()
def add(corpus: Path = typer.Argument(..., help="Documents to add (.jsonl/.tsv)."),
        index: Path = typer.Option(..., help="Index directory."),
        replace: bool = typer.Option(False, help="Replace documents whose ids already exist.")):
    """Add documents to an index (searchable at once)."""
    from semiret.search.retrievers import open_retriever

    searcher = open_retriever(index)
    added = searcher.add(_corpus(corpus), replace=replace)
    console.print(f"added {added} documents; {searcher.index.n_docs} live in {len(searcher.index.segments)} segments")


@app.command()
def delete(doc_ids: list[str] = typer.Argument(..., help="Document ids to delete."),
           index: Path = typer.Option(..., help="Index directory.")):
    """Delete documents by id (they vanish from searches at once)."""
    from semiret.indexes import open_index

    deleted = open_index(index).delete(doc_ids)
    console.print(f"deleted {deleted} documents")


@app.command()
def merge(index: Path = typer.Option(..., help="Index directory.")):
    """Fold all segments into one and drop deleted documents."""
    from semiret.indexes import open_index

    opened = open_index(index)
    opened.merge()
    console.print_json(json.dumps(opened.describe()))


@app.command()
def info(index: Path = typer.Argument(..., help="Index directory.")):
    """Describe an index."""
    from semiret.indexes import open_index

    opened = open_index(index)
    console.print_json(json.dumps({**opened.describe(), "retriever": opened.meta.get("retriever"),
                                   "analyzer": opened.meta["analyzer"]}))


@app.command(name="cache-to-full")
def cache_to_full(index: Path = typer.Option(..., help="The bag-of-tokens index that sidr-beta-rerank searched."),
                  out: Path = typer.Option(..., help="The sidr-full index directory to write."),
                  model: str = typer.Option("sidr-scifact", help="The SiDR model whose document vectors the cache holds."),
                  cache: Optional[str] = CacheOpt, overwrite: bool = typer.Option(False, help="Replace --out.")):
    """Turn sidr-beta-rerank's embedding cache into the full parametric index (SiDR Appendix E): documents not
    yet embedded are embedded now, cached ones are never embedded again."""
    from semiret.search.retrievers import open_retriever
    from semiret.search.semiparametric import cache_to_full_index

    options = {k: v for k, v in _options(model=model, cache=cache).items() if v is not None}
    searcher = open_retriever(index, "sidr-beta-rerank", **options)
    cached = len(searcher.cache)
    built = cache_to_full_index(searcher, out, overwrite=overwrite)
    console.print(f"{cached} documents came from the cache, {searcher.documents_embedded} were embedded now")
    console.print_json(json.dumps(built.describe()))


@app.command(name="eval")
def evaluate_command(data: Path = typer.Option(..., help="A BEIR collection folder (or a name under shared/data)."),
                     split: str = typer.Option("test", help="Qrels split."), retriever: str = RetrieverOpt,
                     index: Optional[Path] = typer.Option(None, help="Reuse (or create) this index directory."),
                     rebuild: bool = typer.Option(False, help="Rebuild --index even if it exists."),
                     depth: int = typer.Option(100, help="Documents retrieved per query."),
                     measure: Optional[list[str]] = typer.Option(None, help="Measures (ir_measures names); repeatable."),
                     run: Optional[Path] = typer.Option(None, help="Write the TREC run here."),
                     baseline: Optional[Path] = typer.Option(None, help="A TREC run (e.g. BM25's --run) to compare with query by query: difference and paired t-test per measure."),
                     threads: int = typer.Option(1, help="Threads for the batch search."),
                     as_json: bool = typer.Option(False, "--json", help="Print one JSON object of figures."),
                     k1: Optional[float] = K1Opt, b: Optional[float] = BOpt, tokenizer: Optional[str] = TokenizerOpt,
                     max_length: Optional[int] = MaxLengthOpt, idf: Optional[str] = IdfOpt,
                     model: Optional[str] = ModelOpt, batch_size: Optional[int] = BatchSizeOpt,
                     top_k: Optional[int] = TopKOpt, threshold: Optional[float] = ThresholdOpt,
                     quantize: bool = QuantizeOpt, ann: Optional[str] = AnnOpt,
                     precision: Optional[str] = PrecisionOpt, nprobe: Optional[int] = NprobeOpt,
                     ef_search: Optional[int] = EfSearchOpt, two_phase: Optional[str] = TwoPhaseOpt,
                     min_idf: Optional[float] = MinIdfOpt, query_top_k: Optional[int] = QueryTopKOpt,
                     rerank_depth: Optional[int] = RerankDepthOpt,
                     rerank_model: Optional[str] = RerankModelOpt, cache: Optional[str] = CacheOpt):
    """Evaluate a retriever on a collection: quality, build time, size, latency."""
    from semiret.data.paths import dataset
    from semiret.evaluation.evaluate import evaluate

    figures = evaluate(dataset(str(data)), retriever, split=split, index=index, depth=depth, measures=measure,
                       run_path=run, rebuild=rebuild, n_threads=threads, baseline=baseline,
                       **_options(k1=k1, b=b, tokenizer=tokenizer, max_length=max_length, idf=idf, model=model,
                                  batch_size=batch_size, top_k=top_k, threshold=threshold, quantize=quantize,
                                  ann=ann, precision=precision, nprobe=nprobe, ef_search=ef_search,
                                  two_phase=two_phase, min_idf=min_idf, query_top_k=query_top_k,
                                  rerank_depth=rerank_depth,
                                  rerank_model=rerank_model, cache=cache))
    if as_json:
        print(json.dumps(figures))
        return
    table = Table(title=f"{retriever} on {figures['dataset']} ({split}, {figures['queries']} queries)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if key not in ("retriever", "dataset", "split", "queries", "vs_baseline") and value is not None:
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for name, versus in (figures["vs_baseline"] or {}).items():
        table.add_row(f"{name} vs baseline", f"{versus['delta']:+.4f} (p={versus['p_value']:.3g}; "
                                             f"{versus['better']} better, {versus['worse']} worse)")
    Console().print(table)


@app.command()
def demo(data: str = typer.Option("scifact", help="Collection to run on."),
         out: Path = typer.Option(Path("demo-output"), help="Folder for the table, JSON and plot."),
         baselines: bool = typer.Option(False, help="Also the off-the-shelf neural references (SPLADE-tiny, MiniLM): "
                                                 "they encode the corpus twice more (3 minutes on a fast 2-core "
                                                 "CPU, 13 on a slow one).")):
    """Build every available index on SciFact, evaluate, print a comparison and plot quality vs latency."""
    from semiret.demo import run_demo

    run_demo(data, out, baselines)


from semiret.training.cli import train_app  # noqa: E402  (sub-commands: semiret train <method>)

app.add_typer(train_app, name="train")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except SemiretError as exc:
        _report(exc)
        sys.exit(2)


if __name__ == "__main__":
    main()
