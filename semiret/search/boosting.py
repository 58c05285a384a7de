"""Scores boosted by the documents' metadata: fresher, more cited or more trusted documents first among the relevant
ones (OpenSearch's ``function_score``, Qdrant's score boosting).

A boost is a list of functions, each giving a hit a factor from its stored metadata; the factors multiply
(OpenSearch's ``score_mode: multiply``), and the product ``F`` boosts the retriever's score ``s`` to
``s + |s| * (F - 1)``: ``s * F`` for the scores of every sparse retriever (never negative), and for a negative score
(a dense retriever's cosine) a move the same way, so that a factor above 1 always raises a hit and one below 1
always lowers it. Three functions, as JSON objects:

- ``{"filter": FILTER, "weight": 2}``: the documents passing the filter (:mod:`semiret.indexes.filters`, as a
  search's ``filter``) get ``weight`` (0 buries them), the others 1;
- ``{"field": "citations", "modifier": "log1p", "factor": 1, "missing": 0}``: ``modifier(factor * value)`` of a
  numeric field (OpenSearch's ``field_value_factor`` and its modifiers); ``missing``: the value of a document
  without a number there (default: such a document is left as it is, factor 1, as is one for which the modifier
  gives no finite number of at least 0: ``log`` of 0, ``reciprocal`` of 0);
- ``{"decay": "gauss", "field": "published", "origin": "now", "scale": "30d", "offset": "1d", "midpoint": 0.5}``:
  1 within ``offset`` of ``origin``, ``midpoint`` at ``offset + scale`` from it, falling as a Gaussian, an
  exponential (``"exp"``) or a line (``"linear"``, 0 beyond twice as far when ``midpoint`` is 0.5), as OpenSearch's
  decay functions (whose ``decay`` is this ``midpoint``, Qdrant's name for it) compute. ``origin``: a number, or an
  ISO 8601 date or time (``"now"``: the time of the search), with ``scale`` and ``offset`` then durations such as
  ``"12h"``, ``"30d"``, ``"2w"`` (``ms``, ``s``, ``m``, ``h``, ``d``, ``w``); dates and times are read as filters
  read them (no offset: UTC). A document without such a value is left as it is (factor 1); of a list of values, the
  nearest counts.

Only the best ``candidates`` hits of the unboosted search (default 100, or ``k`` when more) are boosted and ranked
again, as Qdrant boosts the hits its query prefetches and OpenSearch rescores a window: a boost orders the relevant
documents, it does not bring in irrelevant ones. Written here because no library applies such functions to a ranked
list: a loop over a few hundred hits.
"""

from __future__ import annotations

import datetime
import math
import numbers
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from semiret.errors import SemiretError
from semiret.indexes.filters import MISSING, MetadataFilter, hit_metadata, parse_instant

MODIFIERS: dict[str, Callable[[float], float]] = {
    "none": lambda x: x,
    "log": lambda x: math.log10(x) if x > 0 else math.nan,
    "log1p": lambda x: math.log10(1 + x) if x > -1 else math.nan,
    "log2p": lambda x: math.log10(2 + x) if x > -2 else math.nan,
    "ln": lambda x: math.log(x) if x > 0 else math.nan,
    "ln1p": lambda x: math.log1p(x) if x > -1 else math.nan,
    "ln2p": lambda x: math.log(2 + x) if x > -2 else math.nan,
    "square": lambda x: x * x,
    "sqrt": lambda x: math.sqrt(x) if x >= 0 else math.nan,
    "reciprocal": lambda x: 1 / x if x != 0 else math.nan,
}
"""OpenSearch's ``field_value_factor`` modifiers (``log``: base 10)."""

DECAYS = ("gauss", "exp", "linear")

DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)\s*$")
SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _number(value, what: str, minimum: float | None = None, above: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise SemiretError(f"{what} must be a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if above else value < minimum):
        raise SemiretError(f"{what} must be {'above' if above else 'at least'} {minimum:g}, got {value!r}")
    return float(value)


def _keys(spec: dict, allowed: tuple[str, ...], what: str) -> None:
    unknown = [key for key in spec if key not in allowed]
    if unknown:
        raise SemiretError(f"{what}: unknown key {unknown[0]!r} (it takes {', '.join(allowed)})")


def _path(spec: dict, what: str) -> tuple[str, ...]:
    field = spec.get("field")
    if not isinstance(field, str) or not field or "" in field.split("."):
        raise SemiretError(f"{what}: 'field' must be a metadata field name (names joined by dots for nested fields), "
                           f"got {field!r}")
    return tuple(field.split("."))


def _values(value) -> list:
    """A field's value as the list of values it holds (a list: its elements; missing: none)."""
    if value is MISSING:
        return []
    return list(value) if isinstance(value, list) else [value]


@dataclass(frozen=True)
class FilterBoost:
    """``weight`` for the documents passing ``wanted``, 1 for the others."""

    wanted: MetadataFilter
    weight: float

    def factors(self, metadata, ids: list[str]) -> np.ndarray:
        passing = metadata.passing(self.wanted)
        return np.array([self.weight if doc_id in passing else 1.0 for doc_id in ids])


@dataclass(frozen=True)
class FieldBoost:
    """``modifier(factor * value)`` of a numeric field (the largest, of a list)."""

    path: tuple[str, ...]
    factor: float
    modifier: str
    missing: float | None

    def factors(self, metadata, ids: list[str]) -> np.ndarray:
        values = metadata.values(self.path)
        return np.array([self._factor(values.get(doc_id, MISSING)) for doc_id in ids])

    def _factor(self, value) -> float:
        numbers_held = [v for v in _values(value) if isinstance(v, (int, float)) and not isinstance(v, bool)
                        and math.isfinite(v)]
        if numbers_held:
            value = max(numbers_held)
        elif self.missing is not None:
            value = self.missing
        else:
            return 1.0
        try:
            found = MODIFIERS[self.modifier](self.factor * value)
        except OverflowError:
            return 1.0
        return found if math.isfinite(found) and found >= 0 else 1.0


@dataclass(frozen=True)
class DecayBoost:
    """A decay with distance from ``origin`` (seconds since the epoch for dates; ``None``: now)."""

    path: tuple[str, ...]
    shape: str
    origin: float | None
    dates: bool
    scale: float
    offset: float
    midpoint: float

    def factors(self, metadata, ids: list[str]) -> np.ndarray:
        values = metadata.values(self.path)
        origin = time.time() if self.origin is None else self.origin
        return np.array([self._factor(values.get(doc_id, MISSING), origin) for doc_id in ids])

    def _position(self, value) -> float | None:
        if self.dates:
            moment = parse_instant(value) if isinstance(value, str) else None
            return moment.timestamp() if moment is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        return None

    def _factor(self, value, origin: float) -> float:
        positions = [p for p in map(self._position, _values(value)) if p is not None]
        if not positions:
            return 1.0
        distance = max(0.0, min(abs(p - origin) for p in positions) - self.offset)
        if self.shape == "gauss":
            return math.exp(math.log(self.midpoint) * (distance / self.scale) ** 2)
        if self.shape == "exp":
            return math.exp(math.log(self.midpoint) * distance / self.scale)
        return max(0.0, 1.0 - (1.0 - self.midpoint) * distance / self.scale)


def _origin(value, what: str) -> tuple[float | None, bool]:
    """(the origin, whether it is a date): ``"now"`` (None), an ISO 8601 date or time, a Python date, or a number."""
    if isinstance(value, datetime.datetime):
        value = value.isoformat()
    elif isinstance(value, datetime.date):
        value = value.isoformat()
    if value == "now":
        return None, True
    if isinstance(value, str):
        moment = parse_instant(value)
        if moment is None:
            raise SemiretError(f"{what}: 'origin' {value!r} is neither \"now\" nor an ISO 8601 date or time "
                               "(2026-01-31, 2026-01-31T09:30:00Z)")
        return moment.timestamp(), True
    return _number(value, f"{what}: 'origin'"), False


def _distance(value, dates: bool, what: str, name: str) -> float:
    if not dates:
        return _number(value, f"{what}: {name!r}", 0.0)
    found = DURATION.match(value) if isinstance(value, str) else None
    if found is None:
        raise SemiretError(f"{what}: {name!r} must be a duration such as \"12h\", \"30d\" or \"2w\" (units ms, s, m, "
                           f"h, d, w) for a date origin, got {value!r}")
    return float(found.group(1)) * SECONDS[found.group(2)]


def boost_function(spec: Any, number: int) -> FilterBoost | FieldBoost | DecayBoost:
    """One function of a boost, checked (``number``: its place in the boost, for errors)."""
    what = f"boost function {number}"
    if not isinstance(spec, dict):
        raise SemiretError(f"{what} must be an object ({{\"filter\": ..., \"weight\": ...}}, {{\"field\": ...}} or "
                           f"{{\"decay\": ...}}), got {spec!r}")
    if "filter" in spec:
        _keys(spec, ("filter", "weight"), what)
        if not isinstance(spec["filter"], dict) or not spec["filter"]:
            raise SemiretError(f"{what}: 'filter' must be a non-empty filter object, got {spec['filter']!r}")
        if "weight" not in spec:
            raise SemiretError(f"{what}: a filter's boost needs a 'weight' (the factor of the documents passing it)")
        return FilterBoost(MetadataFilter(spec["filter"]), _number(spec["weight"], f"{what}: 'weight'", 0.0))
    if "decay" in spec:
        _keys(spec, ("decay", "field", "origin", "scale", "offset", "midpoint"), what)
        if spec["decay"] not in DECAYS:
            raise SemiretError(f"{what}: 'decay' must be one of {', '.join(DECAYS)}, got {spec['decay']!r}")
        for needed in ("origin", "scale"):
            if needed not in spec:
                raise SemiretError(f"{what}: a decay needs {needed!r}")
        path = _path(spec, what)
        origin, dates = _origin(spec["origin"], what)
        scale = _distance(spec["scale"], dates, what, "scale")
        if scale <= 0:
            raise SemiretError(f"{what}: 'scale' must be above 0, got {spec['scale']!r}")
        offset = _distance(spec.get("offset", "0s" if dates else 0), dates, what, "offset")
        midpoint = _number(spec.get("midpoint", 0.5), f"{what}: 'midpoint'", 0.0, above=True)
        if midpoint >= 1:
            raise SemiretError(f"{what}: 'midpoint' must lie between 0 and 1 (the factor at offset + scale), "
                               f"got {midpoint!r}")
        return DecayBoost(path, spec["decay"], origin, dates, scale, offset, midpoint)
    if "field" in spec:
        _keys(spec, ("field", "factor", "modifier", "missing"), what)
        modifier = spec.get("modifier", "none")
        if modifier not in MODIFIERS:
            raise SemiretError(f"{what}: 'modifier' must be one of {', '.join(MODIFIERS)}, got {modifier!r}")
        missing = spec.get("missing")
        return FieldBoost(_path(spec, what), _number(spec.get("factor", 1.0), f"{what}: 'factor'"), modifier,
                          None if missing is None else _number(missing, f"{what}: 'missing'"))
    raise SemiretError(f"{what} names no function: give 'filter' (with 'weight'), 'field' or 'decay'")


class Boost:
    """A checked boost (a list of functions, or one): :meth:`rescored` boosts a ranking's hits and sorts them again."""

    def __init__(self, spec: "dict | Sequence[dict]"):
        functions = [spec] if isinstance(spec, dict) else spec
        if isinstance(functions, (str, bytes)) or not isinstance(functions, Sequence) or not functions:
            raise SemiretError(f"a boost is a function object or a non-empty list of them, got {spec!r}")
        self.functions = [boost_function(function, n) for n, function in enumerate(functions, 1)]

    @property
    def filters(self) -> list[MetadataFilter]:
        """The filters the boost tests documents with (checked against an index before a search)."""
        return [function.wanted for function in self.functions if isinstance(function, FilterBoost)]

    def factors(self, index, ids: list[str]) -> np.ndarray:
        """Each hit's factor: the product of the functions' factors (the hits' metadata read once)."""
        metadata = hit_metadata(index, ids)
        product = np.ones(len(ids))
        for function in self.functions:
            product *= function.factors(metadata, ids)
        return product

    def rescored(self, index, ids: list[str], scores: list[float], k: int) -> tuple[list[str], list[float]]:
        """One ranking's hits boosted (``s + |s| (F - 1)``) and the best ``k`` of them, best first; equal scores
        keep the ranking's order."""
        if not ids:
            return [], []
        base = np.asarray(scores, np.float64)
        boosted = base + np.abs(base) * (self.factors(index, ids) - 1.0)
        order = np.argsort(-boosted, kind="stable")[:k]
        return [ids[i] for i in order.tolist()], boosted[order].tolist()

