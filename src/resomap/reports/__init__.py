"""The views of a sweep's summary: they render what resomap.summary decided and worded, compute no statistic and
decide nothing. summary.md / summary.txt are written by resomap.summary.build (its sections as text); here the
figures (`sweep_figures(rows, out_dir, paired, recommendations)`, the explanations' figures, the trade-off's
figure), the one-page report.html (reports.html, in the sections' order) and the probe images.
"""

from resomap.reports.figures import save, sweep_figures

__all__ = ["save", "sweep_figures"]
