"""The Pareto front of (score, cost) points: the points no other point beats on both (at least as good a score AND
at most the cost, strictly better on one). One dominance rule for the sweep figures and the segmentation tables.

`uncertain_front`: the same question on any number of axes whose coordinates carry intervals (the summary's
score x cost x explanation quality per model, reports.tradeoff): a point is dropped only when another is shown
better on one axis and worse on none (the rule in words above `Coordinate`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from resomap.errors import ConfigError
from resomap.stats.checks import to_dict


@dataclass(frozen=True)
class ParetoPoint:
    name: str
    accuracy: float
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _dominates(cost_q: float, score_q: float, cost_p: float, score_p: float) -> bool:
    """q dominates p: at least as good a score and at most the cost, strictly better on one."""
    return score_q >= score_p and cost_q <= cost_p and (score_q > score_p or cost_q < cost_p)


def pareto_indices(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (cost, score) points not dominated by another, by cost (ties in input order). A point with a
    non-finite cost or score is neither on the front nor dominates any point."""
    usable = [i for i, (c, s) in enumerate(points) if math.isfinite(c) and math.isfinite(s)]
    front = [i for i in usable if not any(j != i and _dominates(*points[j], *points[i]) for j in usable)]
    return sorted(front, key=lambda i: points[i][0])


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[ParetoPoint]:
    """The (name, accuracy, cost) points no other point dominates, by cost then accuracy (descending) then name.
    Exact ties are kept (neither dominates the other); a non-finite accuracy or cost is a ConfigError."""
    pts = []
    for item in points:
        try:
            name, accuracy, cost = item
            pt = ParetoPoint(str(name), float(accuracy), float(cost))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"a Pareto point must be (name, accuracy, cost), got {item!r}") from err
        if not (math.isfinite(pt.accuracy) and math.isfinite(pt.cost)):
            raise ConfigError(f"a Pareto point needs a finite accuracy and cost, got {item!r}")
        pts.append(pt)
    front = [pts[i] for i in pareto_indices([(p.cost, p.accuracy) for p in pts])]
    return sorted(front, key=lambda p: (p.cost, -p.accuracy, p.name))


# ------------------------------------------------------------------------------------------------ with uncertainty
# The front above compares bare numbers. The one below compares points whose coordinates carry intervals, on any
# number of axes (score, cost, explanation quality), and drops a point only on evidence:
#
# - q is "shown better" than p on an axis when both have an interval there and the intervals do not overlap in q's
#   favour (higher is better: q's low above p's high; lower is better: q's high below p's low). Two separate
#   intervals that do not overlap is a stricter test than one test of the difference at the same level, so the
#   rule errs towards keeping a point. Where one of the two has no interval on the axis (a cost measured once, a
#   count such as MACs) their estimates are compared (strictly) and the comparison says so (`by_estimate`).
# - p is dropped when some q is shown better on at least one axis and p is shown better than q on none. An axis
#   where either of them has no estimate gives no evidence, so it blocks the drop (p might be better there).
# - With overlapping intervals this relation can run in a circle (a drops b, b drops c, c drops a); a point is not
#   dropped by a point it itself reaches through such drops, so the front is never empty.


@dataclass(frozen=True)
class Coordinate:
    """One axis of a point: its estimate and interval (``low``/``high`` None: no interval; estimate None: not
    known)."""

    estimate: float | None
    low: float | None = None
    high: float | None = None

    @property
    def known(self) -> bool:
        return _finite(self.estimate)

    @property
    def has_interval(self) -> bool:
        return _finite(self.low) and _finite(self.high)


@dataclass(frozen=True)
class Axis:
    """An axis of the front: its name and direction (score and quality: higher is better; cost: lower)."""

    name: str
    higher_is_better: bool = True


@dataclass(frozen=True)
class Standing:
    """One point of an uncertain front: on it, or dropped by ``dropped_by``, which is shown better on the axes
    ``better_on`` (of those, ``by_estimate`` compared by their estimates: no interval on one side) and worse on
    none."""

    name: str
    on_front: bool
    dropped_by: str | None = None
    better_on: tuple[str, ...] = ()
    by_estimate: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def shown_better(q: Coordinate, p: Coordinate, higher_is_better: bool = True) -> bool | None:
    """Is q shown better than p on this axis? Intervals on both sides: they do not overlap in q's favour; else the
    estimates, strictly. None when either estimate is not known (no evidence either way)."""
    if not (q.known and p.known):
        return None
    if q.has_interval and p.has_interval:
        return q.low > p.high if higher_is_better else q.high < p.low
    return q.estimate > p.estimate if higher_is_better else q.estimate < p.estimate


def _drops(q: Sequence[Coordinate], p: Sequence[Coordinate], axes: Sequence[Axis]) -> tuple[str, ...]:
    """The axes on which q is shown better than p, when it drops p (shown better on one at least, p on none, every
    axis known for both); () otherwise."""
    better = []
    for axis, qc, pc in zip(axes, q, p, strict=True):
        q_better, p_better = shown_better(qc, pc, axis.higher_is_better), shown_better(pc, qc, axis.higher_is_better)
        if q_better is None or p_better:
            return ()
        if q_better:
            better.append(axis.name)
    return tuple(better)


def uncertain_front(points: Sequence[tuple[str, Sequence[Coordinate]]], axes: Sequence[Axis]) -> list[Standing]:
    """Each (name, one Coordinate per axis) point on the front or dropped, in input order (the rule: the comment
    above). A dropped point names the point that drops it shown better on the most axes (ties: the first)."""
    if any(len(coords) != len(axes) for _, coords in points):
        raise ConfigError(f"every point needs one coordinate per axis ({len(axes)})")
    n = len(points)
    drops = [[_drops(points[q][1], points[p][1], axes) if q != p else () for p in range(n)] for q in range(n)]
    reach = [[bool(drops[q][p]) for p in range(n)] for q in range(n)]
    for k in range(n):  # reach[q][p]: q drops p, directly or through other points (Floyd-Warshall)
        for q in range(n):
            if reach[q][k]:
                reach[q] = [a or b for a, b in zip(reach[q], reach[k], strict=True)]
    out = []
    for p, (name, coords) in enumerate(points):
        by = [q for q in range(n) if drops[q][p] and not reach[p][q]]
        if not by:
            out.append(Standing(name, True))
            continue
        q = max(by, key=lambda j: (len(drops[j][p]), -j))
        better = drops[q][p]
        estimate = tuple(
            a.name for a, qc, pc in zip(axes, points[q][1], coords, strict=True)
            if a.name in better and not (qc.has_interval and pc.has_interval)
        )  # fmt: skip
        out.append(Standing(name, False, points[q][0], better, estimate))
    return out
