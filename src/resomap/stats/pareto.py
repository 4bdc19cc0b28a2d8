"""The Pareto front of (score, cost) points: the points no other point beats on both (at least as good a score AND
at most the cost, strictly better on one). One dominance rule for the sweep figures and the segmentation tables."""

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
