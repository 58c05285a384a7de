"""How well a tree keeps each query's relevant documents together: GDR's average prefix overlap (Eq. 6)."""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import numpy as np

from semiret.errors import SemiretError


class Tree(Protocol):
    def paths(self) -> list[tuple[int, ...]]:
        """Each document's label sequence from the root (its row order is the clustered matrix's)."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def prefix_overlap(tree: Tree, document_ids: Sequence[str], qrels: Mapping[str, Mapping[str, int]]) -> float:
    """``O_pre = mean_q 1/|D_q|^2 sum_{i,j} |LCP(p_i, p_j)| / |p_i|`` over the queries with relevant documents
    in the tree (``document_ids[row]`` names the tree's rows); pairs i = j count, each 1, as in the paper.

    1 when every query's relevant documents share a leaf; near 0 when they part at the root."""
    paths = tree.paths()
    if len(paths) != len(document_ids):
        raise SemiretError(f"{len(document_ids)} document ids for a tree of {len(paths)} documents")
    row = {doc_id: i for i, doc_id in enumerate(document_ids)}
    per_query = []
    for judged in qrels.values():
        relevant = [paths[row[d]] for d, grade in judged.items() if grade > 0 and d in row]
        if relevant:
            per_query.append(np.mean([common_prefix(a, b) / len(a) for a in relevant for b in relevant]))
    if not per_query:
        raise SemiretError("no query has a relevant document in the tree: the prefix overlap is undefined")
    return float(np.mean(per_query))
