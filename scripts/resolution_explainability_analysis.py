"""Evaluate, profile and explain every trained checkpoint, and compare explanations across resolutions:
the same as `resomap analyze`.

.venv/bin/python scripts/resolution_explainability_analysis.py \
    --checkpoint-dir checkpoints/ --output-dir analysis_results/
"""

from __future__ import annotations

import argparse
import sys

from resomap.cli import main as analysis_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", default="checkpoints", help="folder of trained checkpoints")
    parser.add_argument("--output-dir", default="analysis_results", help="where report.json and figures go")
    parser.add_argument("--methods", nargs="+", help="explainers (default: each trial's explainability.methods)")
    parser.add_argument("--num-samples", type=int, help="probe images (default: explainability.probe_size)")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: the trial config's system.device")
    args = parser.parse_args(argv)
    cmd = ["analyze", "--checkpoint-dir", args.checkpoint_dir, "--output-dir", args.output_dir]
    cmd += ["--methods", *args.methods] if args.methods else []
    cmd += ["--num-samples", str(args.num_samples)] if args.num_samples else []
    cmd += ["--device", args.device] if args.device else []
    return analysis_main(cmd)


if __name__ == "__main__":
    sys.exit(main())
