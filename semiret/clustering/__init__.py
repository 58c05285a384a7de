"""Corpus hierarchies over any embedding matrix (numpy and faiss only), shared by the methods that train against
them or search with them: HCE's equal-depth agglomerative tree, GDR's divisive cluster identifiers, and the
prefix-overlap statistic that compares trees against relevance judgements."""

from semiret.clustering.divisive import (BRANCHING, TERMINAL, ClusterIds, divisive_cluster_ids, leaf_threshold,
                                        nearest_means, per_document_ids)
from semiret.clustering.equal_depth import EqualDepthTree, agglomerative_tree, branching_for_depth, depth_for
from semiret.clustering.kmeans import kmeans
from semiret.clustering.overlap import prefix_overlap

__all__ = ["BRANCHING", "TERMINAL", "ClusterIds", "EqualDepthTree", "agglomerative_tree", "branching_for_depth",
           "depth_for", "divisive_cluster_ids", "kmeans", "leaf_threshold", "nearest_means", "per_document_ids",
           "prefix_overlap"]
