"""The Pareto front of (score, cost) points: the points no other point beats on both (at least as good a score AND
at most the cost, strictly better on one). One dominance rule for the sweep figures and the segmentation tables.

`paired_front`: the same question on any number of axes (the summary's score x cost x explanation quality per
model, summary.front), decided on tests of the differences between the points: a point is dropped only when
another is shown better on one axis and worse on none, Holm over every test of the front (the rule in words above
`Coordinate`)."""

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


# ------------------------------------------------------------------------------------------------ on evidence
# The front above compares bare numbers. The one below (`paired_front`) compares points on any number of axes
# (score, cost, explanation quality) and drops a point only on evidence, from tests of the differences between
# the points rather than from each point's own interval:
#
# - every pair of points on every axis is a `Difference` (b - a) with the two-sided p of a test that it is zero
#   (the caller's test: paired on the same images where the points were measured on the same images); a count
#   such as MACs is known without error and compared as it is (`exact`);
# - the tests of one front are one family: Holm over all of them (pairs x axes) at `alpha`. q is "shown better"
#   than p on an axis when the test rejects (Holm) and the difference is in q's favour (Holm's directional
#   decisions: Shaffer 1980), or when the axis is exact and q is strictly better;
# - p is dropped when some q is shown better on at least one axis and p is shown better than q on none, with a
#   test (or an exact comparison) on every axis: an axis with no test for the pair gives no evidence either way, so
#   it keeps p (p might be better there).
# - Two separate intervals that do not overlap is not the test of a difference (it is stricter where the points
#   are measured on the same images, and not a paired test at all): the intervals are for reading, not deciding.
# - The relation can run in a circle across axes (a drops b, b drops c, c drops a); a point is not
#   dropped by a point it itself reaches through such drops, so the front is never empty.


@dataclass(frozen=True)
class Coordinate:
    """One axis of a point, for reading: its estimate and interval (``low``/``high`` None: no interval; estimate
    None: not known)."""

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
class Difference:
    """Point ``b`` against point ``a`` on ``axis``: ``effect`` = b - a in the axis's units, ``p_value`` the
    two-sided p of the test that it is zero (None: not tested, ``reason`` says why); ``exact``: a count known
    without error (MACs), compared as it is; ``test`` names the test."""

    axis: str
    a: str
    b: str
    effect: float | None
    p_value: float | None = None
    exact: bool = False
    test: str = ""
    reason: str = ""


@dataclass(frozen=True)
class PairVerdict:
    """A difference decided in its family: ``p_holm`` its Holm-adjusted p (None: exact or not tested),
    ``better`` the point shown better (None: no difference shown), ``known``: tested or exact (evidence either
    way)."""

    difference: Difference
    p_holm: float | None
    better: str | None
    known: bool

    def to_dict(self) -> dict[str, Any]:
        d = self.difference
        out = {"axis": d.axis, "resolution_a": d.a, "resolution_b": d.b, "effect": d.effect, "p_value": d.p_value}
        return out | {"p_holm": self.p_holm, "shown_better": self.better, "test": d.test, "reason": d.reason}


@dataclass(frozen=True)
class Standing:
    """One point of the front: on it, or dropped by ``dropped_by``, which is shown better on the axes
    ``better_on`` (of those, ``exact_on`` compared exactly: counts; ``p_holm`` the others' Holm p) and worse on
    none."""

    name: str
    on_front: bool
    dropped_by: str | None = None
    better_on: tuple[str, ...] = ()
    exact_on: tuple[str, ...] = ()
    p_holm: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def decide_differences(differences: Sequence[Difference], axes: Sequence[Axis], alpha: float) -> list[PairVerdict]:
    """Each difference decided: Holm over the tested ones at two-sided ``alpha`` (stats.paired.holm), an exact one
    by its sign; the better point named in the axis's direction."""
    from resomap.stats.paired import holm

    if not 0 < alpha < 1:
        raise ConfigError(f"the front's alpha must be in (0, 1), got {alpha}")
    higher = {a.name: a.higher_is_better for a in axes}
    tested = [i for i, d in enumerate(differences) if not d.exact and _finite(d.p_value) and _finite(d.effect)]
    adjusted = dict(zip(tested, holm([differences[i].p_value for i in tested]).tolist(), strict=True))
    out = []
    for i, d in enumerate(differences):
        if d.axis not in higher:
            raise ConfigError(f"a difference on an axis the front does not have: {d.axis!r}")
        known = i in adjusted or (d.exact and _finite(d.effect))
        shown = known and d.effect != 0 and (d.exact or adjusted[i] <= alpha)
        better = (d.b if (d.effect > 0) == higher[d.axis] else d.a) if shown else None
        out.append(PairVerdict(d, adjusted.get(i), better, known))
    return out


def paired_front(
    names: Sequence[str], axes: Sequence[Axis], differences: Sequence[Difference], alpha: float
) -> tuple[list[Standing], list[PairVerdict]]:
    """Each point (by name, in input order) on the front or dropped, by the rule in the comment above, and every
    difference's verdict. A dropped point names the point that drops it shown better on the most axes (ties: the
    first)."""
    verdicts = decide_differences(differences, axes, alpha)
    index = {name: i for i, name in enumerate(names)}
    found: dict[tuple[int, int, str], PairVerdict] = {}
    for v in verdicts:
        a, b = index[v.difference.a], index[v.difference.b]
        found[(a, b, v.difference.axis)] = found[(b, a, v.difference.axis)] = v
    n = len(names)

    def drops(q: int, p: int) -> tuple[str, ...]:
        """The axes on which q is shown better than p, when q drops p; () otherwise."""
        better = []
        for axis in axes:
            v = found.get((q, p, axis.name))
            if v is None or not v.known or v.better == names[p]:
                return ()
            if v.better == names[q]:
                better.append(axis.name)
        return tuple(better)

    table = [[drops(q, p) if q != p else () for p in range(n)] for q in range(n)]
    reach = [[bool(table[q][p]) for p in range(n)] for q in range(n)]
    for k in range(n):  # reach[q][p]: q drops p, directly or through other points (Floyd-Warshall)
        for q in range(n):
            if reach[q][k]:
                reach[q] = [x or y for x, y in zip(reach[q], reach[k], strict=True)]
    out = []
    for p, name in enumerate(names):
        by = [q for q in range(n) if table[q][p] and not reach[p][q]]
        if not by:
            out.append(Standing(name, True))
            continue
        q = max(by, key=lambda j: (len(table[j][p]), -j))
        shown = [found[(q, p, axis)] for axis in table[q][p]]
        exact = tuple(v.difference.axis for v in shown if v.difference.exact)
        p_holm = tuple(float(v.p_holm) for v in shown if v.p_holm is not None)
        out.append(Standing(name, False, names[q], table[q][p], exact, p_holm))
    return out, verdicts
