"""Explainers behind one signature, the probe set, cross-resolution comparison and quality metrics."""

from resomap.explain import attribution, cam, shap_lime  # noqa: F401  (registers the built-in explainers)
from resomap.explain.registry import (
    EXPLAINERS,
    Explainer,
    explainer_meta,
    explaining,
    get_explainer,
    guarded,
    list_explainers,
    reduce_channels,
    register_explainer,
)

__all__ = [
    "EXPLAINERS",
    "Explainer",
    "explainer_meta",
    "explaining",
    "get_explainer",
    "guarded",
    "list_explainers",
    "reduce_channels",
    "register_explainer",
]
