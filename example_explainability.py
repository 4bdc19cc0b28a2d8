"""Explain a trained checkpoint's probe images: the same as `resomap explain`.

.venv/bin/python example_explainability.py --checkpoint checkpoints/resomap/cnn/simple_cnn/64/seed42/last.pt \
    --model simple_cnn --resolution 64 --method gradcam --method saliency --num-samples 8
"""

from __future__ import annotations

import argparse
import sys

from resomap.cli import main as analysis_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint", required=True, help="a .pt under checkpoints/{experiment}/{family}/{model}/{res}/seed{S}/"
    )
    parser.add_argument("--model", help="when given, must match the checkpoint's model")
    parser.add_argument("--resolution", type=int, help="when given, must match the checkpoint's resolution")
    parser.add_argument("--method", action="append", default=None, help="explainer name; repeat for several")
    parser.add_argument("--num-samples", type=int, help="probe images (default: explainability.probe_size)")
    parser.add_argument("--output-dir", help="default: analysis_results/explain/<model>_<resolution>/")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: the trial config's system.device")
    args = parser.parse_args(argv)
    cmd = ["explain", "--checkpoint", args.checkpoint]
    for method in args.method or ["gradcam"]:
        cmd += ["--method", method]
    for flag, value in (
        ("--model", args.model),
        ("--resolution", args.resolution),
        ("--num-samples", args.num_samples),
        ("--output-dir", args.output_dir),
        ("--device", args.device),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    return analysis_main(cmd)


if __name__ == "__main__":
    sys.exit(main())
