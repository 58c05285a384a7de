"""The corpus tree as the dense index's search structure (``ann="tree"``, beam descent) against faiss IVF and
HNSW, at equal recall: recall@10 against exact search, share of the documents scored, median single-query
latency (query encoding excluded), build time.

``python bench/tree_ann.py [--model runs/hce-scifact/model] [--synthetic 1000000] [--tree-branching 0 8] [--quick]``
prints
one JSON object.

- ``scifact``: the corpus and test queries embedded by ``--model`` (cached under the bench cache directory);
- ``synthetic``: ``--synthetic`` unit vectors of ``--dim`` dimensions drawn around ``--centers`` random
  centers (a mixture of clustered unit vectors, not text), queries drawn the same way.

Each structure is swept over its knob (tree: beam width; IVF: nprobe; HNSW: efSearch); ``at_recall`` gives,
for each, the cheapest setting reaching ``--target`` recall and its latency in the sweep. Those settings are then
timed again side by side (``at_recall_rotated``: ``--rounds`` rounds over the same queries, the structures' order
rotating between rounds, as ``corpus.timed_rounds`` does; the sweep times them one after another, the first setting
with whatever was still cold), and ``tree_over_ivf`` gives each tree's ratio of those medians to IVF's. The tree is built once per
``--tree-branching`` value (0: the index's default, the BEIR rule's depth 3; results under ``tree`` or
``tree-b<value>``): smaller branching, smaller lowest clusters, a finer choice of what to scan.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from corpus import CACHE_ROOT, QUICK_SCIFACT_DOCS, SCIFACT, emit, load_documents, machine, model_key, timed_rounds

SWEEPS = {"tree": ("beam", [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]),
          "ivf": ("nprobe", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
          "hnsw": ("ef_search", [16, 32, 64, 128, 256, 512])}
LATENCY_QUERIES = 200


def scifact_vectors(model: str, cache: Path, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(document vectors, test query vectors) of SciFact (its first ``limit`` documents) by ``model``, cached by
    the model's path and files."""
    from semiret.data.collection import Collection
    from semiret.models.encoders import load_encoder

    file = cache / f"scifact-{model_key(model)}{'' if limit is None else f'-{limit}'}.npz"
    if file.is_file():
        saved = np.load(file)
        return saved["documents"], saved["queries"]
    collection = Collection(SCIFACT)
    encoder = load_encoder(model, "dense")
    documents = encoder.encode_document([d.full_text for d in load_documents(SCIFACT, limit)], batch_size=64)
    queries = encoder.encode_query(list(collection.queries("test").values()))
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(file, documents=documents, queries=queries)
    return documents, queries


def synthetic_vectors(n: int, dim: int, centers: int, queries: int, spread: float,
                      seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around random unit centers, Gaussian noise of norm about ``spread`` added before
    normalising (1.0: a vector's cosine to its center is about 0.7); documents, then queries."""
    rng = np.random.default_rng(seed)
    middle = rng.normal(size=(centers, dim)).astype(np.float32)
    middle /= np.linalg.norm(middle, axis=1, keepdims=True)

    def draw(count):
        points = middle[rng.integers(0, centers, count)] + spread * rng.normal(size=(count, dim)).astype(np.float32) \
            / np.sqrt(dim)
        return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)

    return np.concatenate([draw(min(n - s, 100_000)) for s in range(0, n, 100_000)]), draw(queries)


def exact_top(documents: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    tops = []
    for start in range(0, len(queries), 64):
        scores = queries[start: start + 64] @ documents.T
        tops.append(np.argsort(-scores, axis=1)[:, :k])
    return np.concatenate(tops)


def sweep(name: str, documents: np.ndarray, queries: np.ndarray, truth: np.ndarray, workdir: Path,
          target: float, branching: int | None = None) -> tuple[dict, object]:
    """The structure ``name`` built (under ``workdir``) and swept over its knob: its figures, and the index."""
    from semiret.indexes.dense import DenseIndex
    from semiret.types import Embeddings

    ids = [str(i) for i in range(len(documents))]
    started = time.perf_counter()
    index = DenseIndex.build(workdir / name, "dense", [Embeddings(ids, documents)], dim=documents.shape[1], ann=name,
                             store_texts=False, analyzer={}, tree_branching=branching)
    build = time.perf_counter() - started
    knob, values = SWEEPS[name]
    rows = []
    for value in values:
        for segment in index.segments:
            if segment.tree is not None:
                segment.tree.scored = 0
        found = [[int(i) for i in row] for row in index.search(queries, k=10, **{knob: value}).ids]
        recall = float(np.mean([len(set(f) & set(t.tolist())) / 10 for f, t in zip(found, truth)]))
        scored = (sum(s.tree.scored for s in index.segments if s.tree is not None) / len(queries) / len(documents)
                  if name == "tree" else None)
        latencies = []
        for q in queries[:LATENCY_QUERIES]:
            t0 = time.perf_counter()
            index.search(q[None, :], k=10, **{knob: value})
            latencies.append((time.perf_counter() - t0) * 1000)
        rows.append({knob: value, "recall@10": round(recall, 4),
                     "latency_ms_median": round(statistics.median(latencies), 3),
                     **({"scored_fraction": round(scored, 4)} if scored is not None else {})})
        if recall >= 0.999:
            break
    reached = next((r for r in rows if r["recall@10"] >= target), None)
    tree = index.segments[0].tree.tree if name == "tree" else None
    shape = {"tree_nodes": [tree.size(t) for t in range(tree.depth + 1)]} if tree is not None else {}
    return {"build_s": round(build, 1), "memory_mb": round(index.memory_bytes() / 2**20, 2), **shape, "sweep": rows,
            "at_recall": reached}, index


def run(label: str, documents: np.ndarray, queries: np.ndarray, workdir: Path, target: float,
        tree_branchings: list[int], rounds: int) -> dict:
    truth = exact_top(documents, queries, 10)
    swept = {(f"tree-b{b}" if b else "tree"): sweep("tree", documents, queries, truth, workdir / label / f"tree-b{b}",
                                                    target, b or None) for b in tree_branchings}
    swept.update({name: sweep(name, documents, queries, truth, workdir / label / name, target)
                  for name in SWEEPS if name != "tree"})
    searches = {}
    for name, (figures, index) in swept.items():
        if figures["at_recall"] is not None:
            knob = SWEEPS["tree" if name.startswith("tree") else name][0]
            setting = {knob: figures["at_recall"][knob]}
            searches[name] = lambda query, index=index, setting=setting: index.search(query[None, :], k=10, **setting)
    times = timed_rounds(searches, list(queries[:LATENCY_QUERIES]), rounds=rounds)
    rotated = {name: {**{k: v for k, v in swept[name][0]["at_recall"].items() if k in ("beam", "nprobe", "ef_search")},
                      "latency_ms_median": round(statistics.median(measured), 4)} for name, measured in times.items()}
    shutil.rmtree(workdir / label, ignore_errors=True)
    ratio = {name: round(figures["latency_ms_median"] / rotated["ivf"]["latency_ms_median"], 3)
             for name, figures in rotated.items() if name.startswith("tree") and "ivf" in rotated}
    return {"documents": len(documents), "queries": len(queries), "dim": documents.shape[1],
            **{name: figures for name, (figures, _) in swept.items()}, "at_recall_rotated": rotated,
            "rotated_rounds": rounds, "tree_over_ivf": ratio}


def main() -> None:
    from semiret import progress

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--synthetic", type=int, default=0, help="synthetic vectors (0: none)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--centers", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--tree-branching", type=int, nargs="+", default=[0],
                        help="tree branching factors to compare (0: the index's default)")
    parser.add_argument("--workdir", type=Path, default=CACHE_ROOT / "tree-ann")
    parser.add_argument("--rounds", type=int, default=4, help="rotated rounds timing the settings at --target recall")
    parser.add_argument("--quick", action="store_true",
                        help=f"SciFact's first {QUICK_SCIFACT_DOCS} documents only (a smoke run)")
    args = parser.parse_args()

    result = {"benchmark": "tree_ann", "target_recall@10": args.target, "machine_before": machine()}
    documents, queries = scifact_vectors(args.model, args.workdir / "vectors",
                                         QUICK_SCIFACT_DOCS if args.quick else None)
    result["scifact"] = {"model": args.model,
                         **run("scifact", documents, queries, args.workdir, args.target, args.tree_branching,
                               args.rounds)}
    if args.synthetic:
        documents, queries = synthetic_vectors(args.synthetic, args.dim, args.centers, 1000, args.spread)
        result["synthetic"] = {"centers": args.centers, "spread": args.spread,
                               **run("synthetic", documents, queries, args.workdir, args.target,
                                   args.tree_branching, args.rounds)}
    result["machine_after"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
