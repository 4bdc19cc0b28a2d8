"""Tables and figures from trial results (TrialResults or their dicts): no training or model code here.

`build_summary(results, folders, stats) -> SweepSummary` (one typed `SummaryRow` per model x resolution with its
intervals, paired tests between resolutions, the recommended resolution per model), `write_summary(summary,
out_dir)` (summary.csv/json, paired_tests.csv, recommendation.csv, summary.md/txt), `sweep_figures(rows, out_dir,
paired, recommendations)`.
"""

from resomap.reports.figures import save, sweep_figures
from resomap.reports.rows import SummaryRow
from resomap.reports.summary import (
    SweepSummary,
    build_summary,
    json_safe,
    summary_rows,
    write_summary,
)

__all__ = [
    "SummaryRow",
    "SweepSummary",
    "build_summary",
    "json_safe",
    "save",
    "summary_rows",
    "sweep_figures",
    "write_summary",
]
