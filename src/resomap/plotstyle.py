"""One look for every ResoMap figure: paper-size fonts, one colour map for matrices, PNG + PDF output."""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from resomap.atomic import save_atomic

log = logging.getLogger(__name__)

STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.dpi": 100,
    "savefig.dpi": 200,
    # every label, legend and colour bar inside the canvas (bbox_inches="tight" then only trims the margin)
    "figure.constrained_layout.use": True,
}
# Okabe & Ito's colour-blind-safe palette: one colour per explanation method across every figure
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
METHODS = ("gradcam", "gradcam++", "layercam", "eigencam", "integrated_gradients", "saliency", "shap", "lime")
MATRIX_CMAP = "viridis"  # every matrix figure: agreement matrices, train x test heatmaps
MAP_CMAP = "inferno"  # attribution maps over the grayscale image


def fit_text(text: str, width_in: float, fontsize: float) -> str:
    """`text` wrapped (line by line) to about `width_in` inches of `fontsize`-pt type, so a title never runs off a
    narrow figure (a character is about 0.55 of the font size wide)."""
    import textwrap

    chars = max(12, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in str(text).splitlines())


def method_colour(method: str) -> str:
    """The colour of an explanation method in every figure (a method not listed gets a fixed one by its name)."""
    name = str(method).lower()
    i = METHODS.index(name) if name in METHODS else sum(name.encode()) % len(PALETTE)
    return PALETTE[i % len(PALETTE)]


def resolution_axis(ax: plt.Axes, resolutions: Iterable[int], label: str = "input resolution (px)") -> None:
    """A log2 x axis ticked at exactly the sweep's resolutions, written as plain numbers of px."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ticks = sorted({int(r) for r in resolutions})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([str(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(ticks) == 1:
        ax.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)
    else:
        ax.set_xlim(ticks[0] / 2**0.25, ticks[-1] * 2**0.25)
    ax.set_xlabel(label)


LABEL_SIZE = 7  # pt, the point labels of `label_points`
_NEAR = ((4, 3, "left"), (4, -10, "left"), (-4, 3, "right"), (-4, -10, "right"), (0, 7, "center"), (0, -14, "center"))
_FAR = tuple((2.6 * dx + (3 if dx == 0 else 0), 2.2 * dy, ha) for dx, dy, ha in _NEAR)  # with a leader line
_PLACES = _NEAR + _FAR


def label_points(ax: plt.Axes, labels: Iterable[tuple[str, float, float, str]]) -> list[Any]:
    """Label each point (text, x, y, colour) beside it where the label overlaps no other label: the first of a few
    places around the point (right above, right below, left above, ...; then the same further out, with a leader
    line to the point) that is free and inside the axes, else free, else the least crowded.
    Placed where the layout puts the axes (it is run first, and the labels are left out of it so that they do not
    move the axes), in 7 pt type (a character about 0.62 of it wide). Hand-made (a greedy search over twelve
    places): matplotlib places no annotation by itself. Call it once the axes' limits and scale are final."""
    taken: list[tuple[float, float, float, float]] = []
    drawn = []
    ax.figure.draw_without_rendering()  # the layout engine's axes positions
    pt = ax.figure.dpi / 72  # display units per point
    inside = ax.bbox.extents
    for text, x, y, colour in labels:
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        px, py = ax.transData.transform((x, y))
        size = ((0.62 * len(text) * LABEL_SIZE + 2) * pt, (LABEL_SIZE + 2) * pt)
        boxes = [_label_box(px, py, place, size, pt) for place in _PLACES]
        crowd = [sum(_overlap(b, other) for other in taken) for b in boxes]
        out = [_area(b) - _overlap(b, inside) for b in boxes]  # how much of the label leaves the axes
        best = min(range(len(_PLACES)), key=lambda i: (crowd[i] > 0, out[i] > 0, crowd[i], out[i], i))
        taken.append(boxes[best])
        dx, dy, ha = _PLACES[best]
        leader = {"arrowstyle": "-", "lw": 0.5, "color": colour, "shrinkA": 0, "shrinkB": 2}
        drawn.append(ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va="bottom",
                                 fontsize=LABEL_SIZE, color=colour, in_layout=False,
                                 arrowprops=leader if best >= len(_NEAR) else None))  # fmt: skip
    return drawn


# ---------------------------------------------------------------- class names in any script

_LAST_RESORT = "LastResort"  # matplotlib's own fallback font: a box for every character, so never "the" font
_CHARMAPS: dict[str, frozenset[int]] = {}
_FONT_FOR: dict[str, str | None] = {}
_NOTED = False  # the note of class names no installed font draws: said once per process


def _charmap(path: str) -> frozenset[int]:
    """The characters the font file at `path` has glyphs for (read once per process)."""
    if path not in _CHARMAPS:
        from matplotlib import ft2font

        try:
            _CHARMAPS[path] = frozenset(ft2font.FT2Font(path).get_charmap())
        except (OSError, RuntimeError, ValueError):  # a font file matplotlib lists but cannot open
            _CHARMAPS[path] = frozenset()
    return _CHARMAPS[path]


def _missing(text: str) -> str:
    """The characters of `text` the style's font has no glyph for (spaces and controls aside)."""
    from matplotlib import font_manager

    if text.isascii():
        return ""
    default = _charmap(font_manager.findfont(font_manager.FontProperties(family=plt.rcParams["font.family"])))
    return "".join(sorted({c for c in text if c.isprintable() and not c.isspace() and ord(c) not in default}))


def glyph_font(text: str) -> str | None:
    """The family of an installed font (matplotlib's font list) that has a glyph for every character of `text` the
    style's font lacks (a CJK class name): "" when the style's font draws them all, None when no installed font
    does. Regular faces first; matplotlib's Last Resort font (boxes) never counts."""
    from matplotlib import font_manager

    missing = _missing(text)
    if not missing:
        return ""
    if missing not in _FONT_FOR:
        fonts = sorted(font_manager.fontManager.ttflist, key=lambda f: (f.style != "normal", f.weight != 400, f.name))
        codes = {ord(c) for c in missing}
        _FONT_FOR[missing] = next(
            (f.name for f in fonts if _LAST_RESORT not in f.fname and codes <= _charmap(f.fname)), None
        )
    return _FONT_FOR[missing]


def class_label(name: Any, index: Any) -> str:
    """A class name as the figures write it: as it is when an installed font draws it (figures pick that font for
    the text: `glyph_fonts`), else `class <index>`, said once per process in a note naming what to install
    (the figure would show boxes: matplotlib warns "Glyph ... missing" per character)."""
    global _NOTED
    name = str(name)
    if glyph_font(name) is not None:
        return name
    if not _NOTED:
        _NOTED = True
        log.warning(
            "no installed font has the characters of class name %r (and maybe others): figures name such classes "
            "by index (class %s); install a font that has them (e.g. Noto Sans CJK) to see the names",
            name,
            index,
        )
    return f"class {index}"


def class_labels(names: Iterable[Any]) -> list[str]:
    """`class_label` of each class name, by its index."""
    return [class_label(name, i) for i, name in enumerate(names)]


def glyph_fonts(fig: plt.Figure, ticks: bool = False) -> None:
    """Each text of `fig` with characters the style's font lacks drawn with an installed font that has them, as a
    fallback after the style's font (matplotlib takes each glyph from the first family that has it). Every figure
    written through `save_figure`/`save_drawn` gets it for its titles, labels, annotations and legends; tick labels
    only with `ticks` (a figure whose ticks name classes calls it so: walking every tick of a 24-panel figure took
    12 ms)."""
    families = list(plt.rcParams["font.family"])
    for text in _texts(fig, ticks):
        found = glyph_font(text.get_text()) if text.get_text() else ""
        if found:
            text.set_fontfamily([*families, found] if found not in families else families)


def _texts(fig: plt.Figure, ticks: bool) -> Iterator[Any]:
    """The figure's texts: its own (suptitle included), and per axes its titles, axis labels, texts and annotations
    and legend; every tick label too with `ticks`."""
    legends = list(fig.legends)
    yield from fig.texts
    for ax in fig.axes:
        yield from (ax.title, getattr(ax, "_left_title", ax.title), getattr(ax, "_right_title", ax.title))
        yield from (ax.xaxis.label, ax.yaxis.label, *ax.texts)
        if ticks:
            yield from (*ax.get_xticklabels(which="both"), *ax.get_yticklabels(which="both"))
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for legend in legends:
        yield from (legend.get_title(), *legend.get_texts())


def _label_box(px: float, py: float, place: tuple, size: tuple[float, float], pt: float) -> tuple:
    """(left, bottom, right, top) of a label at `place` (dx, dy in points, ha) from the point (px, py)."""
    dx, dy, ha = place
    left = px + dx * pt - {"left": 0.0, "right": size[0], "center": size[0] / 2}[ha]
    return left, py + dy * pt, left + size[0], py + dy * pt + size[1]


def _area(a: tuple) -> float:
    return (a[2] - a[0]) * (a[3] - a[1])


def _overlap(a: tuple, b: tuple) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def save_figure(fig: plt.Figure, out_dir: str | Path, stem: str, formats: Iterable[str] = ("png", "pdf")) -> list[Path]:
    """Write `stem`.png and `stem`.pdf (or the ``formats`` given: a picture of images gains nothing as a vector
    file) under out_dir (atomically: resomap.atomic) at the style's dpi and close the figure. The layout and the
    tight bounding box are worked out once and every format is written from them (savefig would redo both per
    file). Inside `parallel_saves` the files are written by its worker processes (done when it ends)."""
    paths = _targets(out_dir, stem, formats)
    plt.close(fig)  # before pickling: a worker's copy is not registered with pyplot
    data = _pickled(fig) if _SAVER else None
    if data is not None:
        pool, pending = _SAVER[-1]
        pending.append(pool.submit(_write, data, paths))
    else:
        _write(fig, paths)
        log.debug("figure written: %s", paths[0])
    return paths


def _targets(out_dir: str | Path, stem: str, formats: Iterable[str]) -> list[Path]:
    """out_dir/stem.<format> for each format, out_dir made."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [out / f"{stem}.{suffix}" for suffix in formats]


def save_drawn(
    draw: Callable[..., plt.Figure],
    args: tuple,
    out_dir: str | Path,
    stem: str,
    formats: Iterable[str] = ("png", "pdf"),
    **kwargs: Any,
) -> list[Path]:
    """`save_figure(draw(*args, **kwargs), out_dir, stem, formats)`; inside `parallel_saves` the figure is drawn by
    a worker process too (`draw`, a module-level function, and its arguments are pickled), so this process only
    computes what the figures show."""
    if not _SAVER:
        return save_figure(draw(*args, **kwargs), out_dir, stem, formats)
    paths = _targets(out_dir, stem, formats)
    pool, pending = _SAVER[-1]
    pending.append(pool.submit(_draw_and_write, draw, args, kwargs, paths))
    return paths


def _draw_and_write(draw: Callable[..., plt.Figure], args: tuple, kwargs: dict, paths: list[Path]) -> None:
    fig = draw(*args, **kwargs)
    plt.close(fig)
    _write(fig, paths)


def _pickled(fig: plt.Figure) -> bytes | None:
    """The figure for a worker process; None when some artist of it cannot be pickled (a lambda formatter): then
    it is written here."""
    try:
        return pickle.dumps(fig)
    except Exception as exc:
        log.debug("figure written in this process (%s: %s)", type(exc).__name__, exc)
        return None


def _write(fig: plt.Figure | bytes, paths: list[Path]) -> None:
    """Lay out `fig` (or its pickle) once and write it to each path at the style's dpi."""
    fig = pickle.loads(fig) if isinstance(fig, bytes) else fig
    glyph_fonts(fig)
    # the style's dpi given here: rc_context's savefig.dpi ends with the block that drew the figure
    dpi = STYLE["savefig.dpi"]
    bbox = _laid_out(fig, dpi)
    for path in paths:
        save_atomic(path, lambda tmp: fig.savefig(tmp, bbox_inches=bbox, dpi=dpi))


def _laid_out(fig: plt.Figure, dpi: float) -> Any:
    """Run the figure's layout engine once at `dpi` (as savefig does) and fix its result: the engine is taken off,
    the axes stay where it put them. Returns the tight bounding box in inches, padded by savefig.pad_inches (what
    bbox_inches="tight" gives)."""
    fig.set_dpi(dpi)
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
    bbox = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)  # with both off: no engine, so savefig neither lays out nor draws twice
    return bbox


SAVE_WORKERS = 2  # processes that write figures inside `parallel_saves` (1: in this process)
_SAVER: list[tuple[Any, list[Any]]] = []  # the open `parallel_saves`: (its process pool, its pending writes)


@contextlib.contextmanager
def parallel_saves(workers: int | None = None) -> Iterator[Callable[[], None]]:
    """Inside the block, `save_figure` hands each figure (pickled) to `workers` (default SAVE_WORKERS) forked
    processes and returns at once, so figures are drawn while the next is built; yields `wait`, which returns when
    every file is written (and raises the first error); leaving the block waits too. Serial (as without it) with
    one worker, on one core or where processes cannot be forked."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(SAVE_WORKERS if workers is None else workers, cores)
    if _SAVER or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        yield lambda: None
        return
    from concurrent.futures import ProcessPoolExecutor

    # what this process holds now is left out of the workers' garbage collections (Python's advice before a fork:
    # a collection would touch, and so copy, every page of a heap that holds a trained sweep's objects)
    gc.freeze()
    context = multiprocessing.get_context("fork")
    pool, pending, ended = None, [], False

    def wait() -> None:
        while pending:
            pending.pop(0).result()

    try:
        with _interrupts_held():  # an interrupt between a fork and the pool's record of it would leave a worker
            pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start, initargs=(os.getpid(),))
            pool.submit(int)  # with fork every worker starts at the first submit: all of them, here
        _SAVER.append((pool, pending))
        try:
            yield wait
            wait()
            ended = True
        finally:
            _SAVER.pop()
    finally:  # an error or an interrupt (Ctrl-C, SIGTERM, also one held above): the drawings are not waited for
        if pool is not None:
            if not ended:
                _stop_workers(pool)
            pool.shutdown(wait=ended, cancel_futures=True)
        gc.unfreeze()


PARENT_POLL_S = 0.2  # how often a figure worker looks whether the process that started it is still there


def _worker_start(parent: int) -> None:
    """A figure worker's set-up: Ctrl-C is the parent's to handle (the terminal sends it to the whole group; the
    parent stops the workers), SIGTERM ends it at once (it inherited the parent's handlers), and a thread ends it
    when the parent is gone (SIGKILL leaves the parent no clean-up: without this the workers would wait on their
    queue forever, orphans)."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # held by the parent while it forked (`_interrupts_held`)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (blocked, then delivered) while the block runs, on the main thread where the
    platform can; elsewhere as they are."""
    import signal
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _stop_workers(pool: Any) -> None:
    """Terminate the pool's worker processes (ProcessPoolExecutor.terminate_workers from Python 3.14; before it the
    pool's own table of them)."""
    stop = getattr(pool, "terminate_workers", None)
    if stop is not None:
        stop()
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            proc.terminate()
