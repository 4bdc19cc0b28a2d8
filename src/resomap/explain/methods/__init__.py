"""Attribution methods: the explainer type, its registry and factory (registry.py), the model guard, one file per
method family (cam: pytorch-grad-cam; captum: captum's gradient methods; shap; lime), the explanation targets, the
config check that a method takes the task's targets, and the probe set the methods are run on (probe.py).

Importing this package registers the built-in explainers without importing captum, pytorch-grad-cam, shap or
lime: each is imported when an explainer that uses it is built. Nothing here imports resomap.explain.evaluation.
"""

from resomap.explain.methods import cam, captum, checks, lime, shap  # noqa: F401  (registers the built-ins, the check)
