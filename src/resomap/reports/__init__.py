"""Tables and figures from trial results (TrialResults or their dicts): no training or model code here."""

from resomap.reports.figures import save, sweep_figures
from resomap.reports.summary import pareto_front, summary_rows, write_tables

__all__ = ["pareto_front", "save", "summary_rows", "sweep_figures", "write_tables"]
