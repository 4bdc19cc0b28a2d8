"""How good the sweep's ETA was: per progress line, the ETA given, the seconds the remaining trials then took, and
their ratio (max(eta/actual, actual/eta)); beside it what the old estimate (the mean time of the trials done x the
trials left) would have said on the same line. The target is every line within 1.5x.

Reads the eta.csv a sweep writes beside its summary (model_summaries/_sweep/<name>/eta.csv); with --run, first runs
`resomap sweep --preset <preset>` in a new folder (the quickstart: about 9 min on 2 cores) and reads its file.
With --imagefolder, the sweep is one on data the preset was not tuned on: a folder of generated PNG images (600 by
default, 128 px RGB, two classes: a bright disk or a bright square on noise) made in the new folder, tiny_cnn at 32,
64 and 128 px x 2 seeds with every other setting as configs/ has it (explanations with ROAD and the sanity check:
about 5 min on 2 cores). With --replay FOLDER (a finished sweep of --preset there, or of --imagefolder), the
estimator of this code is replayed on the trials as they ran (their seconds, training seconds and epochs from
eta.csv and result.json) with the cost probe measured again now (seconds: the cache is there): how an estimator
change would have done on a sweep without running it again.

    python scripts/benchmark_eta.py --run [--preset quickstart] [overrides...]
    python scripts/benchmark_eta.py --run --imagefolder [--images 600] [overrides...]
    python scripts/benchmark_eta.py model_summaries/_sweep/resomap-quickstart/eta.csv
    python scripts/benchmark_eta.py --replay DIR [--preset elpv_paper | --imagefolder]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.5
IMAGES = "images"  # the generated image folder, inside the sweep's folder


def make_images(root: Path, count: int, size: int = 128, seed: int = 0) -> Path:
    """`count` PNG images of `size` px in root/disk/ and root/square/: noise with a bright disk or a bright square
    of random size, place and brightness (a task tiny_cnn learns in a few epochs); the same images for a seed."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    for k, name in enumerate(("disk", "square")):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count // 2 + (k < count % 2)):
            image = rng.normal(110, 30, (size, size, 3))
            r = rng.uniform(0.12, 0.22) * size
            cx, cy = rng.uniform(r, size - r, 2)
            if name == "disk":
                inside = np.hypot(xx - cx, yy - cy) < r
            else:  # the same area as the disk
                inside = np.maximum(abs(xx - cx), abs(yy - cy)) < r * 0.886
            image[inside] += rng.uniform(40, 80)
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), "RGB").save(root / name / f"{i:04d}.png")
    return root


def imagefolder_overrides(folder: Path) -> list[str]:
    """The --imagefolder sweep: tiny_cnn at 32, 64 and 128 px x 2 seeds on the images in `folder`."""
    return [
        "data.dataset=imagefolder",
        f"data.imagefolder.root={folder / IMAGES}",
        "sweep.models=[tiny_cnn]",
        "sweep.resolutions=[32,64,128]",
        "sweep.seeds=[42,43]",
        "experiment.name=eta-imagefolder",
    ]


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def ratio(estimate: float, actual: float) -> float:
    return max(estimate / actual, actual / estimate) if estimate > 0 and actual > 0 else float("inf")


def table(rows: list[dict[str, str]]) -> tuple[list[float], list[float]]:
    """Prints the lines; returns the new and the old estimate's ratios over the lines with trials left."""
    new, old, seconds = [], [], []
    head = ("after", "trial s", "left", "ETA s", "actual s", "ratio", "mean-ETA s", "ratio")
    print("{:<28} {:>8} {:>5} {:>8} {:>9} {:>6} {:>11} {:>6}".format(*head))
    for row in rows:
        seconds.append(float(row["seconds"]))
        left, actual = int(row["trials_left"]), float(row["actual_s"])
        if not left:
            print(f"{row['trial']:<28} {seconds[-1]:>8.1f} {left:>5}")
            continue
        eta = float(row["eta_s"]) if row["eta_s"] else float("nan")
        mean = sum(seconds) / len(seconds) * left
        new.append(ratio(eta, actual))
        old.append(ratio(mean, actual))
        print(
            f"{row['trial']:<28} {seconds[-1]:>8.1f} {left:>5} {eta:>8.1f} {actual:>9.1f} {new[-1]:>6.2f} "
            f"{mean:>11.1f} {old[-1]:>6.2f}"
        )
    return new, old


def replay(folder: Path, preset: str, overrides: list[str]) -> list[dict[str, str]]:
    """eta.csv's rows of the sweep in `folder`, with eta_s and ratio as this code's estimator gives them: the
    sweep's own Progress, fed each trial's result.json and seconds in the order they ran."""
    import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
    from resomap.config import load
    from resomap.sweep.eta import probe
    from resomap.sweep.plan import plan
    from resomap.sweep.sweep import Progress
    from resomap.trial_result import TrialResult

    root = Path(__file__).resolve().parents[1]
    cfg = load(str(root / "configs"), preset, [f"experiment.output_dir={folder}", *overrides])
    trials = {t.name: t for t in plan(cfg, check=False)}
    rows = read(next(folder.glob(f"model_summaries/_sweep/{cfg.experiment.name}/eta.csv")))
    order = [trials[r["trial"]] for r in rows]
    progress = Progress(len(order), 0, cfg.experiment.task, order)
    progress.eta.probes = probe(order, print)
    left_s = sum(float(r["seconds"]) for r in rows)
    for row, trial in zip(rows, order, strict=True):
        result = TrialResult.from_json((trial.summary_dir / "result.json").read_text(encoding="utf-8"))
        progress.record(result, float(row["seconds"]))  # read as it is (the output folder is part of the key)
        left = progress.estimates[-1][-1]
        left_s -= float(row["seconds"])
        row["eta_s"] = "" if left is None else f"{left:.1f}"
        row["actual_s"] = f"{left_s:.1f}"  # the trials' own seconds (the live file adds the gaps between)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("items", nargs="*", metavar="ETA_CSV | key=value", help="a sweep's eta.csv; dotted config "
                        "overrides for --run / --replay")  # fmt: skip
    parser.add_argument("--run", action="store_true", help="run the preset first, in a new folder")
    parser.add_argument("--imagefolder", action="store_true", help="the sweep on generated images (implies --run)")
    parser.add_argument("--images", type=int, default=600, help="--imagefolder: how many images (default 600)")
    parser.add_argument("--replay", type=Path, metavar="FOLDER", help="replay this code's estimator on a sweep there")
    parser.add_argument("--preset", default="quickstart")
    args = parser.parse_args()
    # one list: argparse would give the first override to an optional positional eta.csv
    args.overrides = [x for x in args.items if "=" in x]
    files = [Path(x) for x in args.items if "=" not in x]
    args.csv = files[0] if files else None
    if args.imagefolder:
        args.preset = "default"
    if args.replay:
        extra = imagefolder_overrides(args.replay.resolve()) if args.imagefolder else []
        rows = replay(args.replay.resolve(), args.preset, [*extra, *args.overrides])
        new, _ = table(rows)
        print(f"ETA (this code, replayed): {sum(r <= TARGET for r in new)}/{len(new)} lines within {TARGET}x, "
              f"worst {max(new):.2f}x")  # fmt: skip
        return 0
    if args.run or args.imagefolder:
        root = Path(__file__).resolve().parents[1]
        folder = Path(tempfile.mkdtemp(prefix="resomap-eta-"))
        extra = []
        if args.imagefolder:
            make_images(folder / IMAGES, args.images)
            extra = imagefolder_overrides(folder)
        cmd = [str(Path(sys.executable).with_name("resomap")), "sweep", "--config-dir", str(root / "configs"),
               "--preset", args.preset, *extra, *args.overrides]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, cwd=folder, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        print(f"sweep in {time.perf_counter() - start:.0f} s ({folder}); load average now {os.getloadavg()[0]:.2f}")
        found = sorted(folder.glob("model_summaries/_sweep/*/eta.csv"))
        if not found:
            print("no eta.csv: the sweep ran fewer than two trials here")
            return 1
        args.csv = found[0]
    if args.csv is None:
        parser.error("give an eta.csv or --run")
    new, old = table(read(args.csv))
    if not new:
        print("no line with trials left")
        return 1
    inside = sum(r <= TARGET for r in new)
    print(f"ETA (cost probe): {inside}/{len(new)} lines within {TARGET}x, worst {max(new):.2f}x")
    within = sum(r <= TARGET for r in old)
    print(f"mean of trials done: {within}/{len(old)} lines within {TARGET}x, worst {max(old):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
