"""The report's section "Images that need the pixels" (reports.html): per model, each resolution below its reference
with the test images lost and gained against it and the seed-dependent ones beside them (summary.json
`sensitivity`, summary.sensitivity), and its most sensitive lost images (sensitive_images.csv), each with every
method's map at every resolution side by side: its probe maps where the image is in the probe set (the maps the
probe section shows: the model's lowest seed), else the maps the summary computed on demand from that seed's
checkpoints (explanations/sensitive_maps.npz, reports.sensitive_maps), said so in a caption; a resolution whose
checkpoint was missing is named with the reason."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

from resomap.explain.on_demand import load_on_demand
from resomap.reports.html_explain import shown_maps, strip
from resomap.reports.html_parts import escape as _e
from resomap.reports.sensitive_maps import ON_DEMAND, SHOWN, ImageMaps, image_maps, on_demand_file
from resomap.results import SENSITIVE_IMAGES_FILE
from resomap.summary.sensitivity import DEFINITIONS, count_words, most_sensitive

MAP_PX = 96  # as the probe section: drawn at min(resolution, this), shown at 128 px


def sensitivity_section(sweep_dir: Path, data: dict, trials: list[dict]) -> str:
    rows = data.get("sensitivity")
    if rows is None:
        return '<p class="muted">Not counted: a summary from before resolution-sensitive images were counted.</p>'
    if not rows:
        return '<p class="muted">No model has a resolution below its reference: nothing to compare.</p>'
    ranked = most_sensitive(_read_images(Path(sweep_dir) / SENSITIVE_IMAGES_FILE), SHOWN)
    maps, seed_of = shown_maps(Path(sweep_dir), trials)
    demand = load_on_demand(on_demand_file(sweep_dir))
    by_model: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_model[str(row["model"])].append(row)
    parts = [f'<p class="small muted">{_e(DEFINITIONS)}</p>']
    for model, mine in sorted(by_model.items()):
        parts.append(f"<h3>{_e(model)}</h3>{_table(mine)}")
        lost = ranked.get(model, [])
        if lost:
            seed = f" (maps of seed {seed_of[model]})" if model in seed_of else ""
            parts.append(f'<p class="small muted">The most sensitive lost images, up to {SHOWN}{_e(seed)}:</p>')
            parts.append(_images(model, lost, maps.get(model, {}), demand))
        elif any(r.get("available") for r in mine):
            parts.append('<p class="small muted">No test image is lost against the reference.</p>')
    return "".join(parts)


def _read_images(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _table(rows: list[dict]) -> str:
    head = ["px", "against", "images", "seeds", "lost", "gained", "seed-dependent (noise)", "note"]
    top = "".join(f'<th class="{"l" if h == "note" else ""}">{_e(h)}</th>' for h in head)
    lines = []
    for r in sorted(rows, key=lambda r: -int(r["resolution"])):
        if not r.get("available"):
            cells = [str(r["resolution"]), str(r["reference"]), "-", "-", "-", "-", "-"]
        else:
            counts = [count_words(r, k) for k in ("lost", "gained", "seed_dependent")]
            cells = [str(r["resolution"]), str(r["reference"]), str(r["n_images"]), str(r["n_seeds"]), *counts]
        tds = "".join(f'<td><span class="nw">{_e(c)}</span></td>' for c in cells)
        lines.append(f'<tr>{tds}<td class="l small">{_e(r.get("reason") or "")}</td></tr>')
    level = next((r.get("level") for r in rows if r.get("level")), 0.95)
    caption = f"count (share [{float(level):.0%} Wilson interval])"
    return f'<table><tr>{top}</tr>{"".join(lines)}</table><p class="small muted">{_e(caption)}</p>'


def _images(model: str, lost: list[dict], maps: dict[int, Path], demand: list[tuple[dict, dict]]) -> str:
    """Each lost image: its maps at every resolution side by side, or why there are none."""
    found = image_maps(model, [int(im["index"]) for im in lost], maps, demand, MAP_PX)
    cards = []
    for im in lost:
        index, name = int(im["index"]), im.get("class_name") or im.get("label") or "?"
        at = ", ".join(f"{r} px" for r in im["lost_at"])
        head = f"<div><b>image #{index}</b> · true class <b>{_e(name)}</b> · lost at {_e(at)}</div>"
        cards.append(f'<div class="probe">{head}{_maps_of(model, found.get(index), bool(maps))}</div>')
    return f'<div class="probes">{"".join(cards)}</div>'


def _maps_of(model: str, found: ImageMaps | None, probed: bool) -> str:
    """One image's strips (a caption first when they are maps on demand) and the resolutions without a map."""
    if found is None:
        why = "not in the probe set: no map" if probed else "no map: the model's trials saved no explanations"
        return f'<div class="said-all muted">{_e(why)}</div>'
    body = ""
    if found.on_demand and found.overlays:
        body += f'<div class="small muted">Maps {_e(ON_DEMAND)}.</div>'
    if found.overlays:
        strips = "".join(strip(model, m, found.overlays[m], slider=False) for m in sorted(found.overlays))
        body += f'<div class="strips">{strips}</div>'
    for res, why in sorted(found.unavailable.items()):
        body += f'<div class="said-all muted">{_e(f"no map at {res} px: {why}")}</div>'
    return body
