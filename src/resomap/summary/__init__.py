"""The summary of a sweep: decides and words, draws nothing, runs no model, logs nothing.

`build_summary(results, folders, stats) -> SweepSummary` reads each trial's result and per-image records (through
the trial's task) and decides: a typed `SummaryRow` per model x resolution with its intervals, the paired tests
between resolutions, the decision and recommendation per model (decision, uncertainty), per class, per group, the
images that need the pixels (sensitivity), the three-way front (front); `write_summary(summary, out_dir)` writes
summary.csv / summary.json / paired_tests.csv / recommendation.csv / sensitive_images.csv and the sections
(sections: the answer first, the methods last, one registry a plugin adds to) as summary.md and summary.txt. Every
other view (report.html, the MLflow description, `resomap analyze`) renders the same sections; the adaptive sweep
reads its decisions from here between rounds.
"""

from resomap.summary.build import SweepSummary, build_summary, json_safe, summary_rows, write_summary
from resomap.summary.rows import SummaryRow

__all__ = ["SummaryRow", "SweepSummary", "build_summary", "json_safe", "summary_rows", "write_summary"]
