"""Does a resolution effect differ between groups of test images? The group x resolution interaction on per-image
differences: each test image's score at one resolution minus its score at the reference (seeds averaged), and the
question whether their mean is the same for every value of the group (ELPV: mono and poly cells).

Two separate verdicts (one value shown non-inferior, the other not) are no evidence of a difference: a value with
fewer images or more discordant images simply has less power. This test asks the difference itself, two-sided:
the Alexander-Govern test of equal means (scipy.stats.alexandergovern), which allows the values different sizes and
spreads (a value with more discordant images has more spread under the same mean). Where a value's differences do
not vary at all (scipy's statistic needs a spread in each), the same hypothesis by an ordinary least-squares Wald F
with HC3 standard errors (statsmodels); where none varies, the means are compared as they are (p 0 or 1). A seeded
simulation (tests/test_stats_interaction.py) shows the test holds its level on 0/1 outcomes of 2 seeds with values
of unequal size and spread, and finds a real difference. The test images are its units: a training seed's shift
of every image cancels in the contrast, but a seed that shifts one value's images and not the other's is not part
of its error (with 2 seeds that part cannot be estimated); the sentence names the test."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import to_dict


@dataclass(frozen=True)
class Interaction:
    """``p``: two-sided, any difference between the values' mean differences; ``values``: the codes compared (those
    with at least 2 images), ascending; ``means`` / ``sizes``: each one's mean difference and image count;
    ``method``: the test that gave p."""

    p: float
    values: list[int]
    means: list[float]
    sizes: list[int]
    method: str

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def interaction_test(differences: Any, codes: Any) -> Interaction:
    """The interaction test (module doc) of per-image `differences` [N] between the values of `codes` [N] (an
    integer per image; the values with at least 2 finite differences are compared; two such values are needed)."""
    d = np.asarray(differences, dtype=np.float64).ravel()
    c = np.asarray(codes).ravel()
    if d.shape != c.shape:
        raise ConfigError(f"interaction test: {d.size} differences for {c.size} group codes")
    keep = np.isfinite(d)
    values = [v for v in np.unique(c[keep]) if np.count_nonzero(keep & (c == v)) >= 2]
    if len(values) < 2:
        raise ConfigError("interaction test: needs two group values with at least 2 images each")
    samples = [d[keep & (c == v)] for v in values]
    means, sizes = [float(s.mean()) for s in samples], [int(s.size) for s in samples]
    spread = [bool(np.ptp(s) > 0) for s in samples]
    if all(spread):
        from scipy.stats import alexandergovern

        with warnings.catch_warnings():  # scipy warns of precision loss when the means are equal to the last digit
            warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)  # (p is then 1: checked against HC3)
            p, method = float(alexandergovern(*samples).pvalue), "Alexander-Govern test of equal means"
    elif any(spread):
        p, method = _hc3_wald(samples), "Wald F of equal means, HC3 standard errors (a value without spread)"
    else:
        p, method = float(np.ptp(means) == 0), "no spread within any value: the means compared as they are"
    codes = [int(v) for v in values]
    return Interaction(p=min(1.0, max(0.0, p)), values=codes, means=means, sizes=sizes, method=method)


def _hc3_wald(samples: list[np.ndarray]) -> float:
    """p of the Wald F that every sample's mean is the first's (OLS on value indicators, HC3 covariance)."""
    import statsmodels.api as sm

    d = np.concatenate(samples)
    k = len(samples)
    x = np.zeros((d.size, k))
    x[np.arange(d.size), np.repeat(np.arange(k), [s.size for s in samples])] = 1.0
    fit = sm.OLS(d, x).fit(cov_type="HC3")
    contrast = np.zeros((k - 1, k))
    contrast[:, 0] = -1.0
    contrast[np.arange(k - 1), np.arange(1, k)] = 1.0
    with warnings.catch_warnings():  # a covariance of rank below k - 1 is said by statsmodels, and handled by pinv
        warnings.simplefilter("ignore")
        return float(fit.wald_test(contrast, use_f=True, scalar=True).pvalue)
