"""Train one model at one resolution on the GPU: the same path as `resomap train`.

.venv/bin/python example_gpu_training.py --resolution 224 --model VGG11 --epochs 10
"""

from __future__ import annotations

import argparse
import sys

from resomap.cli import main as resomap_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vgg11", help="a registry name, any case (resomap models)")
    parser.add_argument("--resolution", type=int, default=224, help="input side in pixels (default 224)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs (default 10)")
    parser.add_argument("--device", default="cuda", choices=("auto", "cpu", "cuda"), help="default: cuda")
    parser.add_argument("--preset", help="a preset of configs/presets/ (e.g. smoke)")
    parser.add_argument("--config-dir", default="configs", help="folder of the YAML files (default: configs)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    args = parser.parse_args(argv)
    cmd = ["train", "--model", args.model.lower(), "--resolution", str(args.resolution)]
    cmd += ["--epochs", str(args.epochs), "--config-dir", args.config_dir]
    cmd += ["--preset", args.preset] if args.preset else []
    return resomap_main([*cmd, f"system.device={args.device}", *args.overrides])


if __name__ == "__main__":
    sys.exit(main())
