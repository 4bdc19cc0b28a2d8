"""The maps of the most resolution-sensitive images, the step of the sweep's summary phase (and of `resomap analyze`)
that explains on demand those outside the probe set: reports.sensitive_maps chooses them (up to 4 lost images per
model, the seed whose probe maps the report shows), explain.on_demand explains them from that seed's best
checkpoint at each resolution into explanations/sensitive_maps.npz (reused from the summary's earlier file while its
checkpoints, images and explainability settings are unchanged), and reports.sensitive_maps draws a figure per model,
figures/sensitive_images_<model>.png, logged to the parent run with the other figures.

`SensitiveMaps` makes them beside the rest of the summary phase, in a thread: it loads the checkpoints the report
shows while the statistics are computed (`prepare`, once the figure workers are forked), explains the images as
soon as the summary's decided parts name them (`start`, before the explanations are compared) while the
comparison, the summary's files and the parent run's probe images are made, and `figures` waits for them.
Loading the checkpoints again was half of the summary phase of the quickstart (8.2 of 17.4 s), after everything
else, on one of its two cores; the maps are the ones made in line (the same checkpoints, images and settings)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from resomap.atomic import disk_full
from resomap.config import Config
from resomap.filecheck import check_zip

log = logging.getLogger(__name__)


class SensitiveMaps:
    """The sensitive images' maps of one summary (`cfg`: the sweep's config; `out_dir`: the summary folder being
    built; `previous_dir`: where the summary's earlier files are, whose maps are reused), made in `beside`, a
    thread of the caller's (`aside`), or in line without one."""

    def __init__(self, cfg: Config, out_dir: Path, previous_dir: Path | None, beside: ThreadPoolExecutor | None):
        from resomap.reports.sensitive_maps import on_demand_file

        self.cfg, self.out_dir, self.beside = cfg, Path(out_dir), beside
        previous = on_demand_file(previous_dir) if previous_dir is not None else None
        if previous is not None and (not previous.is_file() or check_zip(previous) is not None):
            previous = None  # none, or cut short (the sweep named it): made again from the checkpoints, not read
        self.previous = previous
        self.waiting = False  # the summary's own thread waits for the maps: they may take every core
        self.summary: Any = None
        self._loaded: Future | None = None
        self._made: Future | None = None

    def prepare(self, trials: list[dict[str, Any]]) -> None:
        """Start loading the checkpoints the maps are made from (`trials`: result.json trees with their folder),
        unless the summary's earlier maps are there to be reused."""
        if self.beside is None or not self.cfg.explainability.enabled or self.previous is not None:
            return
        from resomap.explain.on_demand import load_checkpoints
        from resomap.reports.sensitive_maps import shown_checkpoints

        shown = shown_checkpoints(self.out_dir, trials)
        self._loaded = self.beside.submit(self._beside_the_summary, load_checkpoints, shown, self.cfg)

    @staticmethod
    def _beside_the_summary(fn: Any, *args: Any) -> Any:
        """fn(*args) with torch's intra-op threads on the cores the summary's own thread and other processes leave
        free (two threads spinning on two busy cores made it ten times slower: resomap.runtime.auto_threads)."""
        import torch

        from resomap.runtime import auto_threads, others_busy_cores
        from resomap.training.threads import kept_threads

        with kept_threads():
            torch.set_num_threads(auto_threads(others_busy_cores() + 1.0))
            return fn(*args)

    def start(self, summary: Any) -> None:
        """Start explaining the images `summary` names (nothing when explanations are off or no image is lost)."""
        self.summary = summary
        if not self.cfg.explainability.enabled or not summary.sensitive_images:
            return
        if self.beside is None:
            self._made = _done(self._make)
        else:
            self._made = self.beside.submit(self._make)

    def _make(self) -> Path | None:
        from resomap.explain.on_demand import maps_on_demand
        from resomap.reports.sensitive_maps import map_requests, on_demand_file
        from resomap.runtime import auto_threads, others_busy_cores

        requests = map_requests(self.out_dir, self.summary.sensitive_images, self.summary.trials)
        loaded = self._loaded.result() if self._loaded is not None else {}
        self._loaded = None

        counts: dict[bool, int] = {}

        def threads() -> int:  # one core fewer for the explanations while the summary's own thread works
            waiting = self.waiting
            if waiting not in counts:  # measured once each way (others_busy_cores watches the load 0.1 s)
                counts[waiting] = auto_threads(others_busy_cores() + (0.0 if waiting else 1.0))
            return counts[waiting]

        return maps_on_demand(requests, self.cfg, on_demand_file(self.out_dir), self.previous, loaded=loaded,
                              threads=threads if self.beside is not None else None)  # fmt: skip

    def figures(self) -> list[Path]:
        """Wait for the maps; figures/sensitive_images_<model>.png in the summary folder (drawn by a figure worker
        inside parallel_saves). A failure is logged, never fatal (a full disk is raised: nothing else fits)."""
        if self._made is None:
            return []
        from resomap.reports.sensitive_maps import sensitive_figures

        summary, self.waiting = self.summary, True
        try:
            self._made.result()
            return sensitive_figures(self.out_dir, summary.sensitive_images, summary.trials, self.out_dir / "figures")
        except Exception as exc:
            if disk_full(exc) is not None:
                raise
            log.warning("maps of the sensitive images not made: %s: %s", type(exc).__name__, exc)
            return []


def _done(fn: Any) -> Future:
    """fn() run now, as a finished Future (its value or its error)."""
    found: Future = Future()
    try:
        found.set_result(fn())
    except Exception as exc:
        found.set_exception(exc)
    return found


@contextlib.contextmanager
def aside() -> Iterator[ThreadPoolExecutor]:
    """One worker thread for what the summary phase makes beside its statistics (the sensitive images' maps, the
    parent run's probe images), in the order given; on leaving, what has not started is dropped and what runs is
    waited for."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="resomap-summary")
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def sensitive_maps(summary: Any, cfg: Config, out_dir: Path, previous_dir: Path | None = None) -> list[Path]:
    """explanations/sensitive_maps.npz in `out_dir` (the summary folder being built; `previous_dir`: where the
    summary's earlier files are, whose maps are reused) and the figure files per model, made in line; nothing when
    explanations are off or no image is lost."""
    maps = SensitiveMaps(cfg, out_dir, previous_dir, None)
    maps.start(summary)
    return maps.figures()
