"""Explainers built once per (model, resolution) and called per batch, the probe set, cross-resolution
comparison and quality metrics.

Importing this package registers the built-in explainers without importing captum, pytorch-grad-cam, shap or
lime: each is imported when an explainer that uses it is built.
"""

from resomap.explain import attribution, cam, checks, sampling  # noqa: F401  (registers the built-ins, the check)
from resomap.explain.registry import (
    EXPLAINERS,
    BaseExplainer,
    BuiltExplainer,
    Explainer,
    ExplainFn,
    ModelGuard,
    build_explainer,
    explainer_meta,
    explainer_options,
    explaining,
    get_explainer,
    guarded,
    list_explainers,
    reduce_channels,
    register_explainer,
)

__all__ = [
    "EXPLAINERS",
    "BaseExplainer",
    "BuiltExplainer",
    "ExplainFn",
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
