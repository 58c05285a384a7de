"""Scores boosted by the documents' metadata: fresher, more cited or more trusted documents first among the relevant
ones (OpenSearch's ``function_score``, Qdrant's score boosting).

A boost is a list of functions, each giving a hit a factor from its stored metadata; the factors multiply
(OpenSearch's ``score_mode: multiply``), and the product ``F`` boosts the retriever's score ``s`` to
``s + |s| * (F - 1)``: ``s * F`` for the scores of every sparse retriever (never negative), and for a negative score
(a dense retriever's cosine) a move the same way, so that a factor above 1 raises a hit and one below 1 lowers it
(a score of 0 stays 0). A hit whose factor is 0 ranks below every other candidate (its score put just below
theirs where it was not already). Scores stay finite (factors and scores are capped at float32's largest). Three
functions, as JSON objects:

- ``{"filter": FILTER, "weight": 2}``: the documents passing the filter (:mod:`semiret.indexes.filters`, as a
  search's ``filter``) get ``weight`` (0 buries them), the others 1;
- ``{"field": "citations", "modifier": "ln2p", "factor": 1, "missing": 0}``: ``modifier(factor * value)`` of a
  numeric field (OpenSearch's ``field_value_factor`` and its modifiers; a number written as a string, ``"12"``,
  counts; of a list of numbers the smallest, as OpenSearch reads a multi-valued field); ``missing``: the value of a
  document without a number there (default: such a document is left as it is, factor 1, as is one for which the
  modifier gives no finite number of at least 0: ``log`` of 0, ``reciprocal`` of 0). A factor below 1 lowers a
  score: ``log1p`` of any count below 9 does;
- ``{"decay": "gauss", "field": "published", "origin": "now", "scale": "30d", "offset": "1d", "midpoint": 0.5}``:
  1 within ``offset`` of ``origin``, ``midpoint`` at ``offset + scale`` from it, falling as a Gaussian, an
  exponential (``"exp"``) or a line (``"linear"``, 0 beyond twice as far when ``midpoint`` is 0.5), as OpenSearch's
  decay functions (whose ``decay`` is this ``midpoint``, Qdrant's name for it) compute. ``origin``: a number, or an
  ISO 8601 date or time (``"now"``: the time of the search), with ``scale`` and ``offset`` then durations such as
  ``"12h"``, ``"30d"``, ``"2w"`` (``ms``, ``s``, ``m``, ``h``, ``d``, ``w``); dates and times are read as filters
  read them (no offset: UTC). A document without such a value is left as it is (factor 1); of a list of values, the
  nearest counts.

A function that finds no value it can read among a search's hits (a misspelled field, dates where a numeric origin
expects numbers) changes nothing, and says so in a warning, once per index and function. At most
:data:`~semiret.indexes.segments.FIELDS_KEPT` fields are read by one boost (the values a segment keeps in memory).

Only the best ``candidates`` hits of the unboosted search (default 100, or ``k`` when more) are boosted and ranked
again, as Qdrant boosts the hits its query prefetches and OpenSearch rescores a window: a boost orders the relevant
documents, it does not bring in irrelevant ones. Written here because no library applies such functions to a ranked
list: a loop over a few hundred hits.
"""

from __future__ import annotations

import datetime
import logging
import math
import numbers
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from semiret.errors import SemiretError
from semiret.indexes.filters import MISSING, MetadataFilter, field_path, hit_metadata, parse_instant
from semiret.indexes.segments import FIELDS_KEPT, HitMetadata

log = logging.getLogger(__name__)

LARGEST = float(np.finfo(np.float32).max)
"""The cap on factors and boosted scores: what a float32 score and JSON can carry."""

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


def _finite(value) -> float | None:
    """A stored value as a finite float: a number (not a boolean), or a string that reads as one; else None."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return value if math.isfinite(value) else None


def _number(value, what: str, minimum: float | None = None, above: bool = False) -> float:
    if isinstance(value, str) or _finite(value) is None:
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10 ** 30 else "a number beyond any float"
        raise SemiretError(f"{what} must be a finite number, got {shown}")
    if minimum is not None and (value <= minimum if above else value < minimum):
        raise SemiretError(f"{what} must be {'above' if above else 'at least'} {minimum:g}, got {value!r}")
    return float(value)


def _keys(spec: dict, allowed: tuple[str, ...], what: str) -> None:
    unknown = [key for key in spec if key not in allowed]
    if unknown:
        raise SemiretError(f"{what}: unknown key {unknown[0]!r} (it takes {', '.join(allowed)})")


def _path(spec: dict, what: str) -> tuple[str, ...]:
    path = field_path(spec.get("field"))
    if path is None:
        raise SemiretError(f"{what}: 'field' must be a metadata field name (names joined by dots for nested fields), "
                           f"got {spec.get('field')!r}")
    return path


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

    def factors(self, passing: set[str], ids: list[str]) -> np.ndarray:
        return np.array([self.weight if doc_id in passing else 1.0 for doc_id in ids])


@dataclass(frozen=True)
class FieldBoost:
    """``modifier(factor * value)`` of a numeric field (the smallest, of a list)."""

    path: tuple[str, ...]
    factor: float
    modifier: str
    missing: float | None

    def factors(self, values: dict, ids: list[str]) -> tuple[np.ndarray, bool]:
        """Each hit's factor, and whether any hit held a value this function reads."""
        read = [self._number(values.get(doc_id, MISSING)) for doc_id in ids]
        return np.array([self._factor(number) for number in read]), any(n is not None for n in read)

    @staticmethod
    def _number(value) -> float | None:
        held = [n for n in map(_finite, _values(value)) if n is not None]
        return min(held) if held else None

    def _factor(self, number: float | None) -> float:
        if number is None:
            if self.missing is None:
                return 1.0
            number = self.missing
        found = MODIFIERS[self.modifier](self.factor * number)  # float arithmetic: inf, never an error
        if math.isnan(found) or found < 0:
            return 1.0
        return min(found, LARGEST)


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

    def factors(self, values: dict, ids: list[str]) -> tuple[np.ndarray, bool]:
        """Each hit's factor, and whether any hit held a value this function reads."""
        origin = time.time() if self.origin is None else self.origin
        read = [self._positions(values.get(doc_id, MISSING)) for doc_id in ids]
        return np.array([self._factor(positions, origin) for positions in read]), any(read)

    def _positions(self, value) -> list[float]:
        """Where a field's values lie: seconds since the epoch for dates, else the numbers."""
        if self.dates:
            moments = [parse_instant(v) if isinstance(v, str) else None for v in _values(value)]
            return [moment.timestamp() for moment in moments if moment is not None]
        return [n for n in map(_finite, _values(value)) if n is not None]

    def _factor(self, positions: list[float], origin: float) -> float:
        if not positions:
            return 1.0
        distance = max(0.0, min(abs(p - origin) for p in positions) - self.offset)
        ratio = distance / self.scale  # inf rather than an error, for a tiny scale
        if self.shape == "gauss":
            return math.exp(math.log(self.midpoint) * ratio * ratio)
        if self.shape == "exp":
            return math.exp(math.log(self.midpoint) * ratio)
        return max(0.0, 1.0 - (1.0 - self.midpoint) * ratio)

    def describe(self) -> str:
        return (f"a date or time (an origin {'now' if self.origin is None else 'given as a date'})" if self.dates
                else "a number")


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
        if not isinstance(spec["decay"], str) or spec["decay"] not in DECAYS:
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
                               f"got {spec['midpoint']!r}")
        return DecayBoost(path, spec["decay"], origin, dates, scale, offset, midpoint)
    if "field" in spec:
        _keys(spec, ("field", "factor", "modifier", "missing"), what)
        modifier = spec.get("modifier", "none")
        if not isinstance(modifier, str) or modifier not in MODIFIERS:
            raise SemiretError(f"{what}: 'modifier' must be one of {', '.join(MODIFIERS)}, got {modifier!r}")
        missing = spec.get("missing")
        return FieldBoost(_path(spec, what), _number(spec.get("factor", 1.0), f"{what}: 'factor'"), modifier,
                          None if missing is None else _number(missing, f"{what}: 'missing'"))
    raise SemiretError(f"{what} names no function: give 'filter' (with 'weight'), 'field' or 'decay'")


class Boost:
    """A checked boost (a list of functions, or one): :meth:`rescored` boosts a ranking's hits and sorts them again."""

    def __init__(self, spec: "Boost | dict | Sequence[dict]"):
        if isinstance(spec, Boost):
            self.functions = spec.functions
            return
        functions = [spec] if isinstance(spec, dict) else spec
        if isinstance(functions, (str, bytes)) or not isinstance(functions, Sequence) or not functions:
            raise SemiretError(f"a boost is a function object or a non-empty list of them, got {spec!r}")
        self.functions = [boost_function(function, n) for n, function in enumerate(functions, 1)]
        fields = {function.path for function in self.functions if not isinstance(function, FilterBoost)}
        if len(fields) > FIELDS_KEPT:
            raise SemiretError(f"a boost reads at most {FIELDS_KEPT} fields (the values a segment keeps at hand), "
                               f"this one {len(fields)}")

    @property
    def filters(self) -> list[MetadataFilter]:
        """The filters the boost tests documents with (checked against an index before a search)."""
        return [function.wanted for function in self.functions if isinstance(function, FilterBoost)]

    def factors(self, index, ids: list[str], located=None) -> np.ndarray:
        """Each hit's factor: the product of the functions' factors (the hits' metadata read once, every field
        together; ``located``: where a search found them, :meth:`~semiret.indexes.segments.SegmentHits.located`, so
        that no id is looked up again), capped at :data:`LARGEST`; 0 where any function gives 0."""
        metadata = HitMetadata(located) if located is not None else hit_metadata(index, ids)
        fields = metadata.values(list(dict.fromkeys(
            function.path for function in self.functions if not isinstance(function, FilterBoost))))
        product, zero = np.ones(len(ids)), np.zeros(len(ids), bool)
        for function in self.functions:
            if isinstance(function, FilterBoost):
                factors = function.factors(metadata.passing(function.wanted), ids)
            else:
                factors, read = function.factors(fields[function.path], ids)
                if not read and getattr(function, "missing", None) is None:
                    _say_nothing_read(index, function)
            zero |= factors == 0
            with np.errstate(over="ignore", invalid="ignore"):
                product = np.minimum(product * factors, LARGEST)  # capped as it goes: never inf, so never 0 x inf
        product[zero] = 0.0
        return product

    def rescored(self, index, ids: list[str], scores: list[float], k: int,
                 located=None) -> tuple[list[str], list[float]]:
        """One ranking's hits boosted (``s + |s| (F - 1)``) and the best ``k`` of them, best first; those with a
        factor of 0 after every other; equal scores keep the ranking's order (``located``: as :meth:`factors`)."""
        if not ids:
            return [], []
        base = np.asarray(scores, np.float64)
        factors = self.factors(index, ids, located)
        boosted = np.clip(base + np.abs(base) * (factors - 1.0), -LARGEST, LARGEST)
        buried = factors == 0
        if buried.any() and not buried.all():
            below = np.nextafter(boosted[~buried].min(), -math.inf)
            boosted[buried] = np.minimum(boosted[buried], below)
        order = np.argsort(-boosted, kind="stable")[:k]
        return [ids[i] for i in order.tolist()], boosted[order].tolist()


_SAID_NOTHING_READ: set = set()


def _say_nothing_read(index, function: "FieldBoost | DecayBoost") -> None:
    """A warning, once per index and function, that a function read no value among a search's hits."""
    key = (str(getattr(index, "path", "")), function)
    if key in _SAID_NOTHING_READ:
        return
    _SAID_NOTHING_READ.add(key)
    wanted = function.describe() if isinstance(function, DecayBoost) else "a number"
    log.warning("%s: no hit holds %s at %r, so the boost's function on it changed nothing (a misspelled field? "
                "values of another kind? said once)", getattr(index, "path", "the index"), wanted,
                ".".join(function.path))
