"""The maps of each model's most resolution-sensitive images (summary.sensitivity.most_sensitive: up to SHOWN lost
images per model), from the seed whose probe maps the report shows (html_explain.shown_maps, the lowest):

- `map_requests`: the images of them not in that seed's probe set, one request per resolution of the seed, for
  resomap.explain.on_demand to explain from the trial's best checkpoint (the sweep's summary and `resomap analyze`
  call it, explanations/sensitive_maps.npz);
- `image_maps`: each image's overlays per method at every resolution, from the probe maps or the maps on demand
  (each set on its own colour scale across resolutions, as the probe section's), and why a resolution has none;
- `sensitive_figures`: per model figures/sensitive_images_<model>.png, a row per image and a column per resolution,
  the first method's map over the image (what the sweep logs to its parent run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from resomap.explain.on_demand import SENSITIVE_MAPS_FILE, MapRequest, load_on_demand
from resomap.reports.html_explain import shown_maps
from resomap.summary.sensitivity import most_sensitive

SHOWN = 4  # lost images per model (the report's section and the figure)
FIGURE_STEM = "sensitive_images"  # figures/sensitive_images_<model>.png
FIGURE_PX = 96  # a panel's overlay: the pixels the model saw, up to this, drawn nearest-neighbour
ON_DEMAND = "computed after the sweep from the trial's saved best checkpoint (not part of the probe set)"


def on_demand_file(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / "explanations" / SENSITIVE_MAPS_FILE


def _probe_index(paths: Iterable[Path]) -> set[int]:
    """The raw dataset indices of the probe images in the model's explanations.npz files."""
    from resomap.explain.methods.probe import load_meta

    return {int(i) for p in paths for i in (load_meta(p).get("index") or [])}


def map_requests(
    sweep_dir: Path, images: Iterable[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]]
) -> list[MapRequest]:
    """Per model with probe maps, its most sensitive lost images (`images`: sensitive_images.csv's rows) outside
    the probe set of the seed the report shows, at each resolution of that seed's finished trials (`trials`:
    result.json trees with their best_checkpoint); a model whose trials saved no maps gets none."""
    maps, _ = shown_maps(Path(sweep_dir), list(trials))
    shown = shown_checkpoints(sweep_dir, trials)
    out = []
    for model, lost in sorted(most_sensitive(images, SHOWN).items()):
        if model not in maps:
            continue
        probe = _probe_index(maps[model].values())
        outside = tuple(int(im["index"]) for im in lost if int(im["index"]) not in probe)
        if outside:
            out += [dataclasses.replace(req, index=outside) for req in shown if req.model == model]
    return out


def shown_checkpoints(sweep_dir: Path, trials: Sequence[Mapping[str, Any]]) -> list[MapRequest]:
    """The checkpoints `map_requests` explains from, before the images are known (no `index`): per model with probe
    maps, the seed the report shows at each resolution of its finished trials."""
    maps, seed_of = shown_maps(Path(sweep_dir), list(trials))
    out = []
    for t in sorted(trials, key=lambda t: (str(t["model"]), int(t["resolution"]))):
        model = str(t["model"])
        if model in maps and t.get("status") == "FINISHED" and int(t.get("seed") or 0) == seed_of[model]:
            out.append(MapRequest(model, int(t["resolution"]), seed_of[model], t.get("best_checkpoint") or None, ()))
    return out


@dataclasses.dataclass
class ImageMaps:
    """One sensitive image: method -> its overlay at each resolution with a map (explain_figures.ProbeOverlay),
    whether they are maps on demand, and per resolution without maps the reason."""

    overlays: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    on_demand: bool = False
    unavailable: dict[int, str] = dataclasses.field(default_factory=dict)


def image_maps(
    model: str,
    wanted: Iterable[int],
    probe: Mapping[int, Path],
    demand: Sequence[tuple[dict, dict]],
    size: int,
) -> dict[int, ImageMaps]:
    """index -> its maps (only the wanted images that have maps, or a reason for none): from the model's probe maps
    (`probe`: resolution -> explanations.npz) and its maps on demand (`demand`: load_on_demand's entries), each
    drawn at min(resolution, size) px."""
    from resomap.reports.explain_figures import probe_overlays, shared_scales

    wanted = set(wanted)
    out: dict[int, ImageMaps] = {}
    mine = [(arrays, meta) for arrays, meta in demand if str(meta.get("model")) == model]
    for _, meta in mine:  # the resolutions whose maps could not be made, and why
        for index in wanted & {int(i) for i in meta.get("index") or []} if meta.get("unavailable") else ():
            out.setdefault(index, ImageMaps(on_demand=True)).unavailable[int(meta["resolution"])] = meta["unavailable"]
    groups = [(dict(probe), False), ({int(e[1]["resolution"]): e for e in mine if e[0]}, True)]
    for sources, on_demand in groups:
        if not sources or not (wanted & _indices(sources.values())):
            continue
        scales = shared_scales(sources.values())
        for res, source in sorted(sources.items()):
            for ov in probe_overlays(source, size=min(res, size), scales=scales):
                if ov.index in wanted:
                    found = out.setdefault(ov.index, ImageMaps())
                    found.on_demand = on_demand
                    found.overlays.setdefault(ov.method, []).append(ov)
    return out


def _indices(sources: Iterable[Any]) -> set[int]:
    from resomap.explain.methods.probe import load_meta

    meta = [s[1] if isinstance(s, tuple) else load_meta(s) for s in sources]
    return {int(i) for m in meta for i in (m.get("index") or [])}


def sensitive_figures(
    sweep_dir: Path, images: Iterable[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]], out_dir: Path
) -> list[Path]:
    """figures/sensitive_images_<model>.png for every model with a lost image that has a map (plotstyle.save_drawn:
    drawn by a figure worker inside parallel_saves); the files."""
    from resomap.plotstyle import save_drawn

    maps, seed_of = shown_maps(Path(sweep_dir), list(trials))
    demand = load_on_demand(on_demand_file(sweep_dir))
    resolutions: dict[str, set[int]] = {}
    for t in trials:
        resolutions.setdefault(str(t["model"]), set()).add(int(t["resolution"]))
    files: list[Path] = []
    for model, lost in sorted(most_sensitive(images, SHOWN).items()):
        found = image_maps(model, [int(im["index"]) for im in lost], maps.get(model, {}), demand, FIGURE_PX)
        method = next((m for f in found.values() for m in f.overlays), None)
        if method is None:
            continue
        rows = [_row(im, found.get(int(im["index"])), method) for im in lost]
        title = f"{model} (seed {seed_of.get(model, '?')}): the most resolution-sensitive test images, {method} map"
        args = (title, rows, sorted(resolutions[model]))
        files += save_drawn(sensitive_figure, args, out_dir, f"{FIGURE_STEM}_{model}", formats=("png",))
    return files


def _row(image: Mapping[str, Any], found: ImageMaps | None, method: str) -> dict[str, Any]:
    """One image of the figure: its title and per resolution (overlay RGB, what the model said, right or not)."""
    from resomap.plotstyle import class_label

    name = image.get("class_name") or image.get("label") or "?"
    name = class_label(name, image.get("label", "?"))  # by index where no installed font draws it
    at = ", ".join(str(r) for r in image["lost_at"])
    demand = found is not None and found.on_demand
    panels = {
        ov.resolution: (ov.image, f"{ov.pred} {ov.prob:.0%}", ov.correct)
        for ov in (found.overlays.get(method, []) if found else [])
    }
    return {"title": f"#{image['index']} {name}{' *' if demand else ''}\nlost at {at} px", "panels": panels}


def sensitive_figure(title: str, rows: Sequence[Mapping[str, Any]], resolutions: Sequence[int]) -> Any:
    """A row per image (its title: index, class, where it is lost; '*' when its maps are maps on demand), a column
    per resolution: the map over the image with what the model said under it (green right, red wrong), or 'no
    map'."""
    from resomap.plotstyle import STYLE, fit_text, plt

    with plt.rc_context(STYLE):
        size = (1.45 * len(resolutions) + 1.3, 1.55 * len(rows) + 0.9)
        fig, axes = plt.subplots(len(rows), len(resolutions), figsize=size, squeeze=False)
        for i, row in enumerate(rows):
            for j, res in enumerate(resolutions):
                ax = axes[i, j]
                ax.set_xticks([])
                ax.set_yticks([])
                panel = row["panels"].get(res)
                if panel is None:
                    ax.set_facecolor("0.94")
                    ax.text(0.5, 0.5, "no map", ha="center", va="center", fontsize=7, transform=ax.transAxes)
                else:
                    ax.imshow(panel[0], interpolation="nearest")
                    ax.set_xlabel(panel[1], fontsize=6.5, color="#1a7f37" if panel[2] else "#c62828")
                if i == 0:
                    ax.set_title(f"{res} px")
            axes[i, 0].set_ylabel(row["title"], fontsize=7, rotation=0, ha="right", va="center", labelpad=6)
        width = fig.get_figwidth() - 0.2
        fig.suptitle(fit_text(title, width, STYLE["axes.titlesize"]))
        foot = "* maps " + ON_DEMAND if any("*" in r["title"] for r in rows) else "maps of the probe set"
        fig.supxlabel(fit_text(foot, width, 6), fontsize=6, x=0.02, ha="left")
    return fig
