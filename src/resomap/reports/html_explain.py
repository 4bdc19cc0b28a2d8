"""The report's explanation sections (reports.html): "What the models saw" (each probe image with every method's map
at every resolution, what the model said, one strip per method that the page's script turns into a slider) and the
agreement of the explanations across resolutions (the statements and matrices the sweep's comparison wrote under
explanations/)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from resomap.records import FINDINGS_FILE
from resomap.reports.html_parts import array_uri as _array_uri
from resomap.reports.html_parts import escape as _e
from resomap.reports.html_parts import figure_img
from resomap.reports.html_parts import num as _num

PROBE_PX = 96  # probe overlays: drawn at min(resolution, this), shown at 128 px (pixelated): keeps the file small
MAX_PROBES = 12  # probe images per model shown in the report


def _maps_path(sweep_dir: Path, trial: dict) -> Path | None:
    from resomap.results import trial_folder

    folder = trial_folder(sweep_dir, trial)
    candidates = []
    if folder is not None:
        candidates.append(folder / "explanations.npz")
    maps = (trial.get("explain") or {}).get("maps")
    if maps:
        candidates.append(Path(maps))
    return next((c for c in candidates if c.is_file()), None)


def shown_maps(sweep_dir: Path, trials: list[dict]) -> tuple[dict[str, dict[int, Path]], dict[str, int]]:
    """(model -> {resolution: explanations.npz}, model -> its seed): the maps the report shows, the lowest seed of
    each model (the probe section and the sensitive images' maps)."""
    by_model: dict[str, dict[int, Path]] = defaultdict(dict)
    seed_of: dict[str, int] = {}
    for t in sorted(trials, key=lambda t: int(t.get("seed") or 0)):
        if t.get("status") != "FINISHED":
            continue
        path = _maps_path(sweep_dir, t)
        model, seed = str(t["model"]), int(t.get("seed") or 0)
        if path is None or seed_of.setdefault(model, seed) != seed:  # the lowest seed of each model
            continue
        by_model[model][int(t["resolution"])] = path
    return dict(by_model), seed_of


def probe_section(sweep_dir: Path, trials: list[dict]) -> str:
    from resomap.reports.explain_figures import probe_overlays, scale_words, shared_scales

    by_model, seed_of = shown_maps(sweep_dir, trials)
    if not by_model:
        return '<p class="muted">No explanations were saved (explainability.enabled off, or every method failed).</p>'
    parts = [
        '<p class="small muted">Each probe image (the same test images for every model and resolution) with each'
        " method's map at every resolution; the border is green when the model was right at that resolution, red"
        " when not. With JavaScript on, a slider moves across resolutions.</p>"
    ]
    for model, per_res in sorted(by_model.items()):
        scales = shared_scales(per_res.values())
        frames: dict[tuple[int, str], list[Any]] = defaultdict(list)  # (position, method) -> overlay per res
        for res in sorted(per_res):
            size = min(res, PROBE_PX)  # the pixels the model saw, up to PROBE_PX; shown at 128 px, pixelated
            for ov in probe_overlays(per_res[res], size=size, scales=scales):
                if ov.position < MAX_PROBES:
                    frames[(ov.position, ov.method)].append(ov)
        methods = sorted({m for _, m in frames})
        words = "; ".join(scale_words(m, m in scales) for m in methods)
        parts.append(f'<h3>{_e(model)} <span class="small muted">(seed {seed_of[model]})</span></h3>')
        parts.append(f'<p class="small muted">Colour: {_e(words)}.</p>')
        cards = []
        for pos in sorted({p for p, _ in frames}):
            one = next(frames[(pos, m)] for m in methods if frames.get((pos, m)))
            first = one[0]
            said = " · ".join(
                f'<span class="{"ok" if o.correct else "bad"}">{o.resolution} px: {_e(o.pred)}'
                f" {_e(_num(o.prob, '{:.0%}'))}{'' if o.correct else ' ✗'}</span>"
                for o in sorted(one, key=lambda o: o.resolution)
            )
            strips = "".join(strip(model, m, frames[(pos, m)]) for m in methods if frames.get((pos, m)))
            cards.append(
                f'<div class="probe"><div><b>image #{_e(first.index)}</b> · true class <b>{_e(first.true)}</b></div>'
                f'<div class="said-all">{said}</div><div class="strips">{strips}</div></div>'
            )
        parts.append(f'<div class="probes">{"".join(cards)}</div>')
    return "".join(parts)


def strip(model: str, method: str, overlays: list[Any], slider: bool = True) -> str:
    """One method's maps of one probe image at every resolution: a strip the page's script turns into a slider, or
    with `slider` False all of them side by side (class sbs, which the script leaves alone)."""
    label = f"{model} {method} probe #{overlays[0].index}"
    figs = []
    for ov in sorted(overlays, key=lambda o: o.resolution):
        cls = "" if ov.correct else ' class="wrong"'
        said = f"{ov.pred} {_num(ov.prob, '{:.0%}')}" + ("" if ov.correct else " ✗")
        res = f' data-res="{ov.resolution}"' if slider else ""
        figs.append(
            f'<figure{cls}{res}><img alt="{_e(ov.caption)}" title="{_e(ov.caption)}"'
            f' src="{_array_uri(ov.image)}"><figcaption><span class="res">{ov.resolution} px</span>'
            f' <span class="said">{_e(said)}</span></figcaption></figure>'
        )
    return (
        f'<div class="{"strip" if slider else "sbs"}" data-label="{_e(label)}"><div class="method">{_e(method)}</div>'
        f'<div class="frames">{"".join(figs)}</div></div>'
    )


def explanation_statements(sweep_dir: Path, short: bool = False) -> list[str]:
    """The comparison's sentence per model x method (explanations/agreement.txt), or with `short` its finding
    (findings.txt: measure and decision; agreement.txt when a sweep summarised before it has none)."""
    folder = Path(sweep_dir) / "explanations"
    path = folder / FINDINGS_FILE if short and (folder / FINDINGS_FILE).is_file() else folder / "agreement.txt"
    if not path.is_file():
        return []
    return [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def agreement_section(sweep_dir: Path) -> str:
    folder = sweep_dir / "explanations"
    parts = []
    statements = explanation_statements(sweep_dir)
    if statements:  # the findings are on the first screen; here each in full, with its references and grids
        parts.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in statements) + "</ul>")
    drawn = (folder / "agreement").is_dir()
    across = sorted((folder / "agreement").glob("*_agreement.png")) if drawn else []
    between = sorted((folder / "agreement").glob("*_methods_spearman.png")) if drawn else []
    pairs = _pairs(folder)

    def figs(paths: list[Path]) -> str:
        return "".join(_figure(p, _agreement_caption(p.stem, pairs)) for p in paths)

    if across:
        parts.append(
            '<p class="small muted">Agreement of each method\'s maps across resolutions (common grid): Spearman rank,'
            " top-k IoU and mass, each against its chance level; on the diagonal the cross-seed noise floor when the"
            " sweep has several seeds. All metrics and their"
            f' references: explanations/agreement.csv.</p><div class="figs">{figs(across)}</div>'
        )
    where = sorted((folder / "where").glob("*_where.png")) if (folder / "where").is_dir() else []
    if where:
        parts.append(
            "<h3>Where the maps sit</h3>"
            '<p class="small muted">Per model the mean map over the probe images at each resolution (each |map| of'
            " mass 1 on the common grid; + its centre of mass), a row per method and explained class, each panel with"
            " its step's verdict against the reference and its share of mass in the region (the object mask where the"
            " data has one, else the central quarter). Every number: explanations/map_decisions.csv.</p>"
            '<div class="figs">'
            + "".join(_figure(p, f"{p.stem.removesuffix('_where')}: mean maps and verdicts") for p in where)
            + "</div>"
        )
    if between:
        parts.append(f'<h3>Between methods, at each resolution</h3><div class="figs">{figs(between)}</div>')
    return "".join(parts) or '<p class="muted">No agreement results (fewer than two resolutions with maps).</p>'


def _figure(path: Path, caption: str) -> str:
    return f"<figure>{figure_img(path, caption)}<figcaption>{_e(caption)}</figcaption></figure>"


def _agreement_caption(stem: str, pairs: set[tuple[str, str]]) -> str:
    """The caption in words of an agreement matrix (explanations/agreement/<stem>.png); `pairs`: the (model,
    method) pairs of agreement.csv, which tell where a name with underscores ends."""
    if stem.endswith("_methods_spearman"):
        head = stem.removesuffix("_methods_spearman")
        model, _, res = head.rpartition("_")
        if head not in {m for m, _ in pairs} and res.isdigit():  # one figure per resolution (a method missing at
            return f"{model} at {res} px: Spearman agreement between methods"  # some); a name may end in digits
        return f"{head}: Spearman agreement between methods at each resolution"
    for model, method in sorted(pairs, key=lambda p: -len(p[0] + p[1])):
        if stem == f"{model}_{method}_agreement":
            return f"{model} / {method}: Spearman, top-k IoU and mass agreement across resolutions"
    return stem.replace("_", " ")


def _pairs(folder: Path) -> set[tuple[str, str]]:
    import csv

    path = folder / "agreement.csv"
    if not path.is_file():
        return set()
    with path.open(encoding="utf-8", newline="") as fh:
        return {(row.get("model") or "", row.get("method") or "") for row in csv.DictReader(fh)}


def quality_section(sweep_dir: Path) -> str:
    """Each model's explanation quality against resolution (explanations/quality/<model>_quality.png): every score
    as its excess over random maps, with its interval over the probe images and seeds."""
    folder = Path(sweep_dir) / "explanations" / "quality"
    paths = sorted(folder.glob("*_quality.png")) if folder.is_dir() else []
    if not paths:
        return '<p class="muted">No explanation-quality scores (no explanations, or no finished trial).</p>'
    cards = "".join(
        _figure(p, f"{p.stem.removesuffix('_quality')}: explanation quality against resolution") for p in paths
    )
    return (
        '<p class="small muted">Each score is the excess over random maps of the same images (above the dashed line at'
        " 0: better than random), pooled over seeds, with its bootstrap interval over the probe images; every"
        f' number with its interval and reading: explanations/quality.txt and quality.csv.</p><div class="figs">{cards}'
        "</div>"
    )
