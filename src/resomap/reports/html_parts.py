"""The pieces of a self-contained HTML page (reports.html): the style, the few lines of slider script, escaping,
PNG data: URIs (images embedded, nothing fetched, so the page opens from disk and in MLflow's artifact viewer) and
number formatting. PNGs are encoded with Pillow (already a matplotlib dependency)."""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:24px 28px;background:#fff}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#59636e}.small{font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid #e5e7eb;
text-align:right}th{background:#f6f8fa;position:sticky;top:0}td.l,th.l{text-align:left}tr.rec td{background:#eefbf1}
tr.warn td{background:#fff4e0}
.nw{white-space:nowrap}.sub{color:#57606a;font-size:11px;white-space:nowrap}
.figs{display:flex;flex-wrap:wrap;gap:12px}.figs figure{margin:0;max-width:100%}.figs img{max-width:560px;width:100%}
.figs figure.wide img{max-width:1100px}
figcaption{font-size:12px;color:#59636e}nav a{margin-right:12px}
.probes{display:flex;flex-wrap:wrap;gap:10px}
.probe{border:1px solid #d0d7de;border-radius:6px;padding:8px 10px;background:#fcfcfd}
.probe .said-all{font-size:12px;margin:2px 0 6px}.ok{color:#1a7f37}.bad{color:#c62828}
.strips{display:flex;flex-wrap:wrap;gap:14px}.strip{min-width:134px}
.strip .frames{display:flex;gap:6px}.strip figure{margin:0;width:132px}
.strip figcaption{font-size:11px;overflow-wrap:anywhere}
.strip img{width:128px;height:128px;image-rendering:pixelated;border:2px solid #1a7f37;border-radius:3px}
.strip figure.wrong img{border-color:#c62828}.strip figure.wrong .said{color:#c62828}.said{color:#1a7f37}
.sbs .frames{display:flex;gap:6px}.sbs figure{margin:0;width:132px}.sbs figcaption{font-size:11px}
.sbs img{width:128px;height:128px;image-rendering:pixelated;border:2px solid #1a7f37;border-radius:3px}
.sbs figure.wrong img{border-color:#c62828}.sbs figure.wrong .said{color:#c62828}
.strip input{width:128px;display:block}.strip .res{font-size:12px;font-weight:600}
.method{font-weight:600;font-size:13px}.mat td{text-align:center;min-width:52px}
"""

# The sliders: each strip of frames (one per resolution) becomes one frame + a range input; the caption of the
# frame shown (resolution, prediction, confidence) is the one visible. Without JS all frames stay in a row.
JS = """
document.querySelectorAll('.strip').forEach(function(s){
 var f=s.querySelectorAll('figure');if(f.length<2)return;
 var r=document.createElement('input');r.type='range';r.min=0;r.max=f.length-1;r.step=1;r.value=f.length-1;
 r.setAttribute('aria-label',s.dataset.label+': resolution');
 function show(i){f.forEach(function(x,j){x.hidden=(j!=i);});}
 r.addEventListener('input',function(){show(+r.value);});
 s.querySelector('.frames').before(r);show(f.length-1);
});
"""


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


def png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def array_uri(rgb: Any) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")  # zlib's default level: optimize=True takes 2.5x as long for 2%
    return png_uri(buf.getvalue())


def figure_img(path: Path, alt: str, max_width: int = 2200) -> str:
    """<img> of a figure's PNG at its natural size: 100 CSS px per inch of the figure (the PNG's dpi, 200 by
    default), so its text reads at the size it was set in (9 pt type about 12 px) whatever the figure's width,
    never wider than the page; embedded as `file_uri` (downscaled to max_width px when wider)."""
    from PIL import Image

    with Image.open(path) as img:
        dpi = float((img.info.get("dpi") or (200, 200))[0]) or 200.0
        width = round(img.width * 100 / dpi)
    return f'<img alt="{escape(alt)}" src="{file_uri(path, max_width)}" style="width:{width}px;max-width:100%">'


def file_uri(path: Path, max_width: int = 1100) -> str:
    """A PNG on disk as a data: URI, downscaled to max_width px when wider (the sweep draws at 200 dpi)."""
    from PIL import Image

    with Image.open(path) as img:
        if img.width <= max_width:
            return png_uri(path.read_bytes())
        small = img.convert("RGB").resize((max_width, round(img.height * max_width / img.width)), Image.LANCZOS)
        buf = io.BytesIO()
        small.save(buf, format="PNG")
        return png_uri(buf.getvalue())


def num(value: Any, fmt: str = "{:.3f}") -> str:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "–"
    return fmt.format(x) if math.isfinite(x) else "–"
