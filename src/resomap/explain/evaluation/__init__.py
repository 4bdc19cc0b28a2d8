"""Explanation evaluation: quality metrics against random-map baselines (quality.py), the weight-randomisation
sanity check (sanity.py), the agreement measures (measures.py) and their references (references.py), the
cross-resolution comparison of a sweep's maps (compare.py, crossres.py) and the bootstrap intervals over probe
images and seeds (intervals.py).

It writes tables and text; it draws nothing (the figures are resomap.reports.explain_figures and
resomap.reports.explain_comparison, called by the layers above).
"""
