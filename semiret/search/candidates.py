"""How many of a search's best hits a second look at them chooses among: a diversified search's picks
(:mod:`semiret.search.diversity`) and a boosted search's new order (:mod:`semiret.search.boosting`)."""

from __future__ import annotations

import numbers

from semiret.errors import SemiretError

CANDIDATES = 100
"""Hits a diversified or boosted search chooses from by default (or ``k``, when more)."""


def check_candidates(candidates) -> None:
    if candidates is not None and (isinstance(candidates, bool) or not isinstance(candidates, numbers.Integral)
                                   or candidates < 1):
        raise SemiretError(f"candidates (--candidates) must be a positive whole number, got {candidates!r}")


def candidate_depth(k: int, candidates: int | None, group_size: int = 1) -> int:
    """How many of the best hits to search for, to choose ``k`` among (given ``candidates``: at least ``k``; else
    :data:`CANDIDATES`, or room for ``k`` groups of ``group_size`` hits when more)."""
    check_candidates(candidates)
    if candidates is None:
        return max(k * group_size, CANDIDATES)
    if candidates < k:
        raise SemiretError(f"candidates (--candidates) must be at least k ({k}) to choose k hits from, got {candidates}")
    return int(candidates)
