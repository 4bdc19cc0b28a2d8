"""Explanations, by concern: `methods` (the explainer type, its registry and the method families), `evaluation`
(quality, sanity, agreement across resolutions and its references, intervals; it draws nothing) and `run` (one
trial's probe set explained, scored and checked: explain_trial). The figures are in resomap.reports.

Importing this package registers the built-in explainers without importing captum, pytorch-grad-cam, shap or
lime: each is imported when an explainer that uses it is built.
"""

import resomap.explain.methods  # noqa: F401  (registers the built-ins, the check)
from resomap.explain.methods.guard import ModelGuard, explaining
from resomap.explain.methods.registry import (
    EXPLAINERS,
    Explainer,
    build_explainer,
    explainer_meta,
    explainer_options,
    get_explainer,
    guarded,
    list_explainers,
    reduce_channels,
    register_explainer,
)

__all__ = [
    "EXPLAINERS",
    "Explainer",
    "ModelGuard",
    "build_explainer",
    "explainer_meta",
    "explainer_options",
    "explaining",
    "get_explainer",
    "guarded",
    "list_explainers",
    "reduce_channels",
    "register_explainer",
]
