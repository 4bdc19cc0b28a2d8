"""Load-time checks of sweep.adaptive and stats.look_alpha (one line, exit 2; loader.py runs them)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from resomap.config.schema import Config


def check_adaptive(cfg: Config, fail: Callable[[str, str, Any], None]) -> None:
    """sweep.adaptive: a positive number of rounds, seeds per round (or "plan") and budget, a known spending rule
    (with the closest name suggested); stats.look_alpha: alphas in (0, 1)."""
    from resomap.stats.spending import RULES

    ad = cfg.sweep.adaptive
    if ad.max_rounds < 1:
        fail("sweep.adaptive.max_rounds", "an integer >= 1 (the planned looks)", ad.max_rounds)
    if ad.seeds_per_round != "plan" and ad.seeds_per_round < 1:
        fail("sweep.adaptive.seeds_per_round", "an integer >= 1 or 'plan'", ad.seeds_per_round)
    if ad.budget is not None and ad.budget <= 0:
        fail("sweep.adaptive.budget", "null or a positive number of trials", ad.budget)
    if ad.budget_hours is not None and not ad.budget_hours > 0:
        fail("sweep.adaptive.budget_hours", "null or a positive number of hours", ad.budget_hours)
    if ad.spending not in RULES:
        close = difflib.get_close_matches(ad.spending, RULES, n=1, cutoff=0.5)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        fail("sweep.adaptive.spending", f"one of {', '.join(RULES)}{hint}", ad.spending)
    for model, alpha in cfg.stats.look_alpha.items():
        if not 0 < alpha < 1:
            fail(f"stats.look_alpha.{model}", "a one-sided alpha in (0, 1)", alpha)
