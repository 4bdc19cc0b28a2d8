"""report.html's body in the summary's order: each section of summary.json's `sections` (summary.sections: the
answer first, the methods last), shown by a rich view where the page has one for that name (tables with shaded
rows, figures, learning curves, maps), else by its blocks as written; the page's own parts with no text
counterpart (the figures and the train x test matrix, the adaptive record, the task's test outputs, the probe maps,
the agreement and quality of the explanations) follow the section they belong to, in the same place whether or not
that section has data in this sweep.

A summary.json from before `sections` existed gets them built again from its rows and decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from resomap.blocks import Bullets, Section, Table, Text
from resomap.reports.html_parts import escape as _e

Part = tuple[str, str, str]  # (anchor, title, HTML)


def sections_of(data: dict, findings: Iterable[str] = ()) -> list[Section]:
    """The summary's sections as summary.json holds them, or built again (summary.build.SweepSummary.from_dict) for a
    summary.json written before them, with `findings` as its explanation findings where it has none."""
    from resomap.summary.build import SweepSummary, assemble

    summary = SweepSummary.from_dict(data)
    if summary.sections is not None:
        return summary.sections
    parts = summary.parts()
    return assemble(**{**parts, "explanation_findings": parts["explanation_findings"] or list(findings)}).sections or []


def blocks_html(blocks: Iterable[Any]) -> str:
    """A section's blocks as written: paragraphs, lists (with their sub-items), tables."""
    out = []
    for b in blocks:
        if isinstance(b, Text):
            out.append(f"<p>{_e(b.text)}</p>")
        elif isinstance(b, Bullets):
            items = "".join(
                f"<li>{_e(i.text)}" + (f"<ul>{''.join(f'<li>{_e(s)}</li>' for s in i.sub)}</ul>" if i.sub else "")
                + "</li>"
                for i in b.items
            )  # fmt: skip
            out.append(f"<ul>{items}</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{_e(h)}</th>" for h in b.header)
            body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            title = f"<h3>{_e(b.title)}</h3>" if b.title else ""
            out.append(f"{title}<table><tr>{head}</tr>{body}</table>")
    return "".join(out)


def ordered_parts(
    sections: list[Section],
    rich: dict[str, Callable[[Section], str]],
    extras: dict[str, list[Callable[[], Part | None]]],
) -> list[Part]:
    """(anchor, title, HTML) in the summary's order: each section by its rich view (`rich[name](section)`) or its
    blocks, then the page's own parts that follow it (`extras[name]`: each gives a part or None). Extras of a
    section with no data come where it would stand (by the registered order)."""
    from resomap.summary.sections import SECTIONS, section_names

    order = {name: i for i, name in enumerate(section_names())}
    placed: list[tuple[tuple[float, int], Part]] = []
    last = -1.0
    for section in sections:
        at = float(order.get(section.name, last + 0.5))  # a section no longer registered keeps its place
        last = at
        view = rich.get(section.name)
        html = view(section) if view is not None else blocks_html(section.blocks)
        placed.append(((at, 0), (section.name.replace("_", "-"), section.title, html)))
    for name, makers in extras.items():
        at = float(order.get(name, len(order))) if name in SECTIONS else float(len(order))
        for k, make in enumerate(makers, start=1):
            part = make()
            if part is not None:
                placed.append(((at, k), part))
    return [part for _, part in sorted(placed, key=lambda x: x[0])]
