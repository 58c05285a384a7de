"""``semiret demo``: every retriever that exists so far, on one collection, in one table and one plot."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from semiret.data.collection import Collection
from semiret.data.paths import dataset, msmarco_idf
from semiret.errors import SemiretError
from semiret.evaluation.evaluate import evaluate

log = logging.getLogger(__name__)

FROM_RERANK_CACHE = "from_rerank_cache"
"""A demo option of ``sidr-full``: build its index from the embedding cache the ``sidr-beta-rerank`` row filled."""
AROUND = "around"
"""A demo option of ``hybrid``: assemble its index around the index this retriever built in a row above (BM25 from
the texts it stores; ``semiret hybrid-index``), so no document is encoded again."""
LEARNED_FROM = "learned_from"
"""A demo option: rank the row's best hits again by a learned ranking (``semiret ltr``) whose features are the
indexes of the rows above with these (retriever, options), trained on the collection's train split."""
QUALITY = "nDCG@10"
LATENCY = "latency_ms_median"


def demo_systems(baselines: bool = False, dense: bool = False) -> list[tuple[str, str, dict]]:
    """(label, retriever, options) for each system the demo compares; grows as methods land.

    ``baselines``: also the neural references that encode the whole corpus with an off-the-shelf model
    (SPLADE-tiny siamese, MiniLM, SPLADE-tiny document vectors under IDF queries). ``dense``: also the packaged
    HCE-J and GDR models, each of which encodes the corpus with a MiniLM-sized network (2-3 minutes each on a fast
    2-core CPU, 6-7 on a slow one: the default demo stays within 10 minutes on both).
    """
    neural = [("SPLADE-tiny (siamese)", "splade", {"model": "splade-tiny"}),
              ("MiniLM dense", "dense", {"model": "minilm"}),
              ("inference-free, SPLADE-tiny docs", "inference-free", {"model": "splade-tiny"}),
              # the untrained references' scores of BM25's best 100, ranked by LambdaMART learned on train queries
              ("learned ranking: BM25 + MiniLM + SPLADE-tiny", "bm25",
               {LEARNED_FROM: [("dense", {"model": "minilm"}), ("splade", {"model": "splade-tiny"})]})
              ] if baselines else []
    return [
        ("BM25", "bm25", {}),
        ("bag-of-tokens overlap", "bot", {}),
        ("IDF, corpus", "idf", {}),
        ("IDF, MS MARCO", "idf", {"idf": str(msmarco_idf())}),
        *neural,
        *sidr_systems(),
        *inference_free_systems(),
        *(hce_systems() + packaged_gdr_systems() if dense else []),
    ]


def sidr_systems() -> list[tuple[str, str, dict]]:
    """SiDR's three pipelines with the packaged trained checkpoint (``semiret train sidr``), when installed."""
    from semiret.data.packaged import packaged_checkpoint_installed
    from semiret.models.checkpoints import SIDR

    if not packaged_checkpoint_installed(SIDR.default):
        return []
    return [("SiDR beta", "sidr-beta", {"model": SIDR.default}),
            ("SiDR beta + re-rank m=100", "sidr-beta-rerank", {"model": SIDR.default}),
            # Appendix E: the full index comes from the re-rank cache, so cached documents are not embedded again
            ("SiDR full (from the cache)", "sidr-full", {"model": SIDR.default, FROM_RERANK_CACHE: True})]


def inference_free_systems() -> list[tuple[str, str, dict]]:
    """The packaged trained inference-free model (``semiret train inference-free``), when it is installed."""
    from semiret.data.packaged import packaged_checkpoint_installed
    from semiret.models.checkpoints import INFERENCE_FREE

    if not packaged_checkpoint_installed(INFERENCE_FREE.default):
        return []
    model = INFERENCE_FREE.default
    return [("inference-free, trained", "inference-free", {"model": model}),
            ("inference-free, trained, two-phase", "inference-free", {"model": model, "two_phase": "on"}),
            ("hybrid: BM25 + inference-free", "hybrid", {"model": model, AROUND: "inference-free"})]


HCE_MODEL = "hce-scifact"


def hce_systems() -> list[tuple[str, str, dict]]:
    """The packaged HCE-J encoder (``semiret train hce``), a plain dense retriever, when it is installed
    (``semiret demo --dense``)."""
    from semiret.data.packaged import packaged_checkpoint_installed

    if not packaged_checkpoint_installed(HCE_MODEL):
        return []
    return [("HCE-J dense (hce-scifact)", "dense", {"model": HCE_MODEL})]


def nail_systems(model: str) -> list[tuple[str, str, dict]]:
    """NAIL's pipelines with one saved model (``semiret demo --nail MODEL``: they score the corpus twice, a few
    minutes): BM25 re-ranked and exhaustive scoring share one index."""
    return [("BM25 + NAIL re-rank 100", "bm25+nail", {"model": model}),
            ("NAIL-exh", "nail-exh", {"model": model}),
            ("NAIL sparse, top 2000 tokens", "nail-sparse", {"model": model})]


GDR_BEAMS = 100


def gdr_systems(model: str) -> list[tuple[str, str, dict]]:
    """GDR with one saved model (``semiret demo --gdr MODEL``): cluster ids decoded by beam search, E_D's vectors
    scored inside them (the index embeds the corpus with E_D, a few minutes)."""
    return [(f"GDR, {GDR_BEAMS} beams", "gdr", {"model": model, "beams": GDR_BEAMS})]


def packaged_gdr_systems() -> list[tuple[str, str, dict]]:
    """The packaged ``gdr-scifact`` (``semiret train gdr``), when it is installed (``semiret demo --dense``)."""
    from semiret.data.packaged import packaged_checkpoint_installed
    from semiret.models.checkpoints import GDR

    return gdr_systems(GDR.default) if packaged_checkpoint_installed(GDR.default) else []


def run_demo(data: str, out: Path, baselines: bool = False, nail: str | None = None,
             gdr: str | None = None, dense: bool = False) -> list[dict]:
    console = Console()
    out.mkdir(parents=True, exist_ok=True)
    root = dataset(data)
    index_dir = out / "indexes"
    rows = []
    from semiret.search.retrievers import retriever_class

    def index_path(retriever: str, options: dict) -> Path:
        # systems sharing an index kind (and model) reuse the index built first
        suffix = f"-{Path(options['model']).name}" if "model" in options else ""
        return index_dir / f"{root.name}-{retriever_class(retriever).documents.index_kind}{suffix}"

    searched = []  # (label, retriever, index, options) of each row, for the example below the table
    for label, retriever, options in demo_systems(baselines, dense) + (nail_systems(nail) if nail else []) + \
            (gdr_systems(gdr) if gdr else []):
        console.print(f"[bold]{label}[/bold] ...")
        options = dict(options)
        build_seconds = None
        from_rerank_cache, around = options.pop(FROM_RERANK_CACHE, False), options.pop(AROUND, None)
        learned_from = options.pop(LEARNED_FROM, None)
        index = index_path(retriever, options)
        if learned_from is not None:
            if "train" not in Collection(root).splits():
                console.print(f"  skipped: {root.name} has no train split to learn from")
                continue
            options["rerank"] = _learned_ranking(root, index, [index_path(r, o) for r, o in learned_from],
                                                 out / "learned-ranking")
        if from_rerank_cache:
            build_seconds = _full_index_from_rerank_cache(index_path("sidr-beta-rerank", options), index,
                                                          options["model"])
        if around is not None:
            build_seconds = _hybrid_around(index_path(around, options), index)
            options.pop("model", None)  # the model of the index it was assembled around, not an option of its search
        figures = evaluate(root, retriever, index=index, **options)
        if build_seconds is not None:
            figures["index_build_s"] = round(build_seconds, 3)
        rows.append({"system": label, **figures})
        if "rerank" not in options:  # (a learned ranking's scores are no sum of terms to explain)
            searched.append((label, retriever, index, options))
    columns = {QUALITY: QUALITY, "R@100": "R@100", "MRR@10": "MRR@10", "index_build_s": "build s",
               "index_size_mb": "MB", LATENCY: "ms/query", "flops": "FLOPS"}
    table = Table(title=f"semiret demo: {root.name} test",
                  caption="build s: (reused) = an index built above; FLOPS: posting multiply-adds per query-document "
                          "pair (inverted indexes)")
    table.add_column("system", min_width=20)
    for header in columns.values():
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(row["system"], *(_fmt(row[key], "(reused)" if key == "index_build_s" else "-")
                                       for key in columns))
    console.print(table)
    explain_example(console, root, searched)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    plot = plot_quality_latency(rows, out / "quality_vs_latency.png", title=f"{root.name} test")
    console.print(f"wrote {out / 'results.json'} and {plot}")
    return rows


def explain_example(console: Console, root: Path, searched: list[tuple[str, str, Path, dict]],
                    terms: int = 6) -> dict | None:
    """The collection's first test query searched by the last row whose scores add up term by term (the learned
    sparse model where the demo has one): its best hit's highlighted passage and the terms its score is made of
    (``semiret explain``, ``search --highlight``). Returns what it showed (None: no such row)."""
    from semiret.data.collection import Collection
    from semiret.search.retrievers import open_retriever, retriever_class

    query = next(iter(Collection(root).queries("test").values()), None)
    for label, retriever, index, options in reversed(searched):
        try:
            opened = open_retriever(index, retriever, **retriever_class(retriever).split_options(options)[1])
            if query is None or not opened._sums_term_weights or not opened.index.stores_texts:
                continue
            best = opened.search(query, k=1)
            if not best:
                continue
            explained = opened.explain(query, best[0].id)
            pieces = next(iter(opened.highlight(query, best[0].id, fragments=1, tags=None)), [])
        except (SemiretError, OSError) as exc:  # (a model saved without its tokenizer names no terms): the next row
            log.info("no example from %s: %s", label, exc)
            continue
        shown = Text.assemble(Text(f"\nOne query, explained ({label}): ", style="bold"), query,
                              f"\nbest hit {best[0].id}: ", *((piece, "bold" if hit else "") for piece, hit in pieces),
                              "\nits score, term by term (query weight x document weight): ",
                              "; ".join(f"{t.term} {t.query_weight:.2f} x {t.document_weight:.2f}"
                                        for t in explained.terms[:terms] if t.contribution > 0))
        console.print(shown)
        return {"system": label, "query": query, "hit": best[0].id,
                "passage": "".join(f"**{piece}**" if hit else piece for piece, hit in pieces),
                "terms": [vars(t) for t in explained.terms[:terms]]}
    return None


def _learned_ranking(root: Path, first_stage: Path, features: list[Path], path: Path):
    """A learned ranking over ``first_stage`` with ``features`` (indexes of rows above), trained on the collection's
    train split (``semiret ltr``) and saved in ``path``."""
    from semiret.data.collection import searched_qrels
    from semiret.evaluation.learned_ranking import fit_learned_ranking
    from semiret.search.retrievers import open_retriever

    collection = Collection(root)
    queries = collection.queries("train")
    ranking, report = fit_learned_ranking(open_retriever(first_stage), [open_retriever(f) for f in features],
                                          queries, searched_qrels(collection, "train", queries))
    ranking.save(path, overwrite=True)
    log.info("learned ranking: %d trees from %d train queries in %.0f s", report["trees"], report["queries"],
             report["seconds"])
    return ranking


def _hybrid_around(neural_index: Path, hybrid_index: Path) -> float | None:
    """The hybrid index assembled around ``neural_index`` (BM25 built beside a copy of it); the seconds it took,
    None if it exists."""
    from semiret.search.hybrid import HybridRetriever

    if (hybrid_index / "meta.json").is_file():
        return None
    started = time.perf_counter()
    HybridRetriever.around(neural_index, hybrid_index, overwrite=True)
    return time.perf_counter() - started


def _full_index_from_rerank_cache(rerank_index: Path, full_index: Path, model: str) -> float | None:
    """Build the sidr-full index from the re-rank cache (SiDR Appendix E); seconds taken, None if it exists."""

    from semiret.indexes.storage import META_FILE
    from semiret.search.retrievers import open_retriever
    from semiret.search.semiparametric import cache_to_full_index

    if (full_index / META_FILE).is_file():
        return None
    start = time.perf_counter()
    cache_to_full_index(open_retriever(rerank_index, "sidr-beta-rerank", model=model), full_index)
    return time.perf_counter() - start


def plot_quality_latency(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        ax.scatter(row[LATENCY], row[QUALITY], s=50)
        ax.annotate(row["system"], (row[LATENCY], row[QUALITY]), textcoords="offset points", xytext=(6, 4),
                    fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("median query latency (ms, one query at a time, log scale)")
    ax.set_ylabel(QUALITY)
    ax.set_title(f"Quality vs latency: {title}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _fmt(value, missing: str) -> str:
    if value is None:
        return missing
    return f"{value:.4g}" if isinstance(value, float) else str(value)
