"""Statistics a reviewer can trust: intervals, paired and permutation tests, the resolution recommendation, the
Pareto front and the timing intervals, in one place (issues 13 and 17).

Inputs are plain numpy arrays of per-test-image outcomes: ``correct`` is bool ``[N]`` (one run) or ``[S, N]`` (S
seeds, each tested on the same N images, in the same order), or any per-image score (IoU, Dice) where a function
says so. Nothing here trains or loads a model, and nothing of resomap is imported but :mod:`resomap.errors`: this
is the bottom layer (settings come in as plain values).

- :mod:`~resomap.stats.bootstrap`: :func:`bootstrap_accuracy`, :func:`bootstrap_scores`, :func:`bootstrap_metric`,
  :func:`macro_f1` (numpy, vectorized over resamples),
  :func:`pooled_macro_f1`: bootstrap intervals over test images (``scipy.stats.bootstrap``);
  :func:`twoway_bootstrap`: the grand mean over test images and training seeds, both resampled (>= 3 seeds).
- :mod:`~resomap.stats.intervals`: :class:`Interval`; :func:`seed_interval` (mean, std and Student-t interval across
  seeds), :func:`t_interval`, :func:`crossed_interval` (seeds x images, both random), :func:`wilson_interval` (a
  count of images as a share of them, statsmodels' Wilson interval), :func:`timing_interval` (a timing over the
  seeds' trials from each trial's timed calls: the range of their intervals of the median, never below zero).
- :mod:`~resomap.stats.paired`: :func:`paired_test` (McNemar's exact test, ``statsmodels``, clustered over images
  with several seeds, or a paired bootstrap
  with a sign-flip p-value), :func:`paired_score_test` (any per-image score), :func:`holm`.
- :mod:`~resomap.stats.permutation`: :func:`sign_flip` / :func:`sign_flip_test` (exact on 1/k lattices such as
  seed-averaged 0/1 outcomes, else Monte Carlo with a stated standard error), :func:`relabel_test` (resolution
  labels within seeds).
- :mod:`~resomap.stats.margin`: :func:`~resomap.stats.margin.margin_test` and
  :func:`~resomap.stats.margin.margin_verdicts` (paired differences against a margin, three ways: shown within,
  shown beyond, undecided; one-sided sign-flip tests with the bounds they give, Holm per direction: the map
  decision, resomap.explain.evaluation.where), :func:`~resomap.stats.margin.detectable_margin`.
- :mod:`~resomap.stats.interaction`: :func:`interaction_test` (does a step's per-image difference to the reference
  differ between the values of a group: each pair of values, test images and training seeds as replicates, unequal
  sizes and spreads allowed, Bonferroni over the pairs).
- :mod:`~resomap.stats.recommend`: :func:`compare_resolutions` (every pair, Holm-adjusted: descriptive) and
  :func:`smallest_sufficient_resolution` (the "not significantly below the best" reading, kept for comparison).
- :mod:`~resomap.stats.decide`: :func:`noninferiority` (the summary's decision: each resolution against a fixed
  reference at a stated margin, fixed-sequence, with the detectable margin).
- :mod:`~resomap.stats.design`: what a design can show: :func:`plan_power` (before training), :func:`design_needs`
  (what an observed design would need at another alpha), :func:`relabel_min_p`, :func:`relabel_seeds_needed`.
- :mod:`~resomap.stats.pareto`: :func:`pareto_front`, :func:`pareto_indices`; :func:`paired_front` (points on any
  axes, each pair's differences tested, Holm over the front: dropped only when shown worse on one axis and better
  on none), :func:`decide_differences`.
- :mod:`~resomap.stats.median`: :func:`median_interval`, :class:`MedianInterval`, :func:`ratio_interval` (timings).

A bad setting (confidence level outside (0, 1), resamples < 1, arrays of mismatched shapes or non-0/1 values) raises
:class:`~resomap.errors.ConfigError`; a sample too small for the statistic gives a result with ``available=False`` and a
plain ``reason``. Results never hold NaN: a value that cannot be computed is ``None`` (the tuple helpers
``t_interval``, ``crossed_interval``, ``median_interval`` excepted, as their docstrings say).

scipy and statsmodels are imported inside the functions that use them (they take seconds to import).
"""

from resomap.stats.bootstrap import (
    BOOTSTRAP_METHODS,
    METRICS,
    MIN_BOOTSTRAP_IMAGES,
    TWOWAY_MIN_SEEDS,
    bootstrap_accuracy,
    bootstrap_metric,
    bootstrap_scores,
    macro_f1,
    pooled_macro_f1,
    twoway_bootstrap,
)
from resomap.stats.decide import (
    ABOVE_VERDICTS,
    VERDICTS,
    Decision,
    Settings,
    Step,
    Verdict,
    better_or_noninferior,
    fixed_sequence,
    noninferiority,
    replicate_differences,
)
from resomap.stats.design import design_needs, plan_power, relabel_min_p, relabel_seeds_needed
from resomap.stats.interaction import Interaction, interaction_test
from resomap.stats.intervals import (
    Interval,
    calls_needed,
    crossed_interval,
    seed_interval,
    t_interval,
    timing_interval,
    wilson_interval,
)
from resomap.stats.median import MedianInterval, median_interval, ratio_interval
from resomap.stats.paired import PAIRED_METHODS, PairedTest, holm, paired_score_test, paired_test
from resomap.stats.pareto import (
    Axis,
    Coordinate,
    Difference,
    PairVerdict,
    ParetoPoint,
    Standing,
    decide_differences,
    paired_front,
    pareto_front,
    pareto_indices,
)
from resomap.stats.permutation import RelabelTest, SignFlip, relabel_test, sign_flip, sign_flip_test
from resomap.stats.recommend import (
    PairComparison,
    Recommendation,
    compare_resolutions,
    smallest_sufficient_resolution,
)

__all__ = [
    "VERDICTS",
    "Decision",
    "Verdict",
    "design_needs",
    "noninferiority",
    "better_or_noninferior",
    "ABOVE_VERDICTS",
    "fixed_sequence",
    "replicate_differences",
    "Step",
    "Settings",
    "plan_power",
    "relabel_min_p",
    "relabel_seeds_needed",
    "BOOTSTRAP_METHODS",
    "METRICS",
    "MIN_BOOTSTRAP_IMAGES",
    "TWOWAY_MIN_SEEDS",
    "PAIRED_METHODS",
    "Interaction",
    "Interval",
    "MedianInterval",
    "PairComparison",
    "PairedTest",
    "Axis",
    "Coordinate",
    "Difference",
    "PairVerdict",
    "ParetoPoint",
    "Standing",
    "Recommendation",
    "RelabelTest",
    "SignFlip",
    "macro_f1",
    "bootstrap_accuracy",
    "bootstrap_metric",
    "bootstrap_scores",
    "compare_resolutions",
    "crossed_interval",
    "holm",
    "interaction_test",
    "median_interval",
    "paired_score_test",
    "paired_test",
    "pareto_front",
    "pareto_indices",
    "decide_differences",
    "paired_front",
    "pooled_macro_f1",
    "ratio_interval",
    "relabel_test",
    "seed_interval",
    "twoway_bootstrap",
    "sign_flip",
    "sign_flip_test",
    "smallest_sufficient_resolution",
    "t_interval",
    "timing_interval",
    "calls_needed",
    "wilson_interval",
]
