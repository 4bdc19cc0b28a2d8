"""The renderer-neutral parts of the summary's sections: a paragraph (`Text`), a list (`Bullets`, each item with
its sub-items) and a table (`Table`), grouped in a titled `Section`.

The summary decides and words once (resomap.summary.sections builds a `Section` per part of the answer); every view
renders the same list in the same order: summary.md and summary.txt here (`markdown`, `plain`), report.html and the
MLflow parent's description from summary.json's `sections` (`section_from_dict`). Long paragraphs and items are
wrapped at WRAP characters: Markdown joins the lines of a paragraph or an item again, and the text file stays
readable in a terminal.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

WRAP = 118  # characters per line of a paragraph or list item (tables are never wrapped)


@dataclasses.dataclass(frozen=True)
class Text:
    text: str


@dataclasses.dataclass(frozen=True)
class Item:
    text: str
    sub: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Bullets:
    items: tuple[Item, ...]


@dataclasses.dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""  # a table's own heading inside its section ('' : none)


Block = Text | Bullets | Table
KINDS: dict[str, type] = {"text": Text, "bullets": Bullets, "table": Table}


@dataclasses.dataclass(frozen=True)
class Section:
    name: str  # the registered name (resomap.summary.sections.SECTIONS): report.html's anchor
    title: str
    blocks: tuple[Block, ...]


def bullets(lines: Iterable[str | tuple[str, Iterable[str]]]) -> Bullets:
    """Bullets from lines, each a text or (text, its sub-items)."""
    items = [Item(x) if isinstance(x, str) else Item(x[0], tuple(x[1])) for x in lines]
    return Bullets(tuple(items))


def nested(lines: Iterable[str]) -> Bullets:
    """Bullets from lines as the summary's words write them: an indented line ('  ...' or '  - ...') is a sub-item
    of the item before it; a leading '- ' is dropped."""
    items: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("  ") and items:
            items[-1][1].append(line.strip().removeprefix("- "))
        else:
            items.append((line.removeprefix("- "), []))
    return bullets(items)


def table(header: Iterable[Any], rows: Iterable[Iterable[Any]], title: str = "") -> Table:
    return Table(tuple(str(h) for h in header), tuple(tuple(str(c) for c in row) for row in rows), title)


def section_to_dict(section: Section) -> dict[str, Any]:
    """JSON-able: {"name", "title", "blocks": [{"kind": "text" | "bullets" | "table", ...fields}]}."""
    kind = {cls: name for name, cls in KINDS.items()}
    blocks = [{"kind": kind[type(b)], **dataclasses.asdict(b)} for b in section.blocks]
    return {"name": section.name, "title": section.title, "blocks": blocks}


def section_from_dict(data: Mapping[str, Any]) -> Section:
    """The inverse of `section_to_dict` (summary.json's `sections`); a block of an unknown kind is left out."""
    blocks: list[Block] = []
    for b in data.get("blocks") or []:
        if b.get("kind") == "text":
            blocks.append(Text(str(b.get("text", ""))))
        elif b.get("kind") == "bullets":
            blocks.append(Bullets(tuple(Item(str(i["text"]), tuple(i.get("sub") or ())) for i in b.get("items", []))))
        elif b.get("kind") == "table":
            rows = tuple(tuple(str(c) for c in row) for row in b.get("rows") or [])
            blocks.append(Table(tuple(str(h) for h in b.get("header") or []), rows, str(b.get("title") or "")))
    return Section(str(data.get("name", "")), str(data.get("title", "")), tuple(blocks))


def _wrap(text: str, first: str, rest: str) -> str:
    return "\n".join(
        textwrap.wrap(text, WRAP, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
        or [first.rstrip()]
    )


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    lines = [list(header), ["---"] * len(list(header)), *[list(r) for r in rows]]
    return "\n".join("| " + " | ".join(str(x).replace("|", "\\|") for x in line) + " |" for line in lines) + "\n"


def plain_table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    lines = [list(header), *[list(r) for r in rows]]
    widths = [max(len(str(x)) for x in col) for col in zip(*lines, strict=False)]
    cells = ("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=False)).rstrip() for line in lines)
    return "\n".join(cells) + "\n"


def _block(block: Block, md: bool) -> str:
    if isinstance(block, Text):
        return "\n".join(_wrap(part, "", "") for part in block.text.split("\n")) + "\n"
    if isinstance(block, Bullets):
        out = []
        for item in block.items:
            out.append(_wrap(item.text, "- ", "  "))
            out += [_wrap(s, "  - ", "    ") for s in item.sub]
        return "\n".join(out) + "\n"
    head = (f"**{block.title}**\n\n" if md else f"{block.title}\n") if block.title else ""
    return head + (markdown_table if md else plain_table)(block.header, block.rows)


def render(sections: Iterable[Section], markdown: bool = True, heading: str = "") -> str:
    """The sections in their order: '## title' (Markdown) or the title underlined (text), blocks a blank line
    apart; `heading`, when given, goes first ('# heading' in Markdown)."""
    out = []
    if heading:
        out.append(f"# {heading}\n" if markdown else f"{heading}\n{'=' * len(heading)}\n")
    for s in sections:
        title = f"## {s.title}\n" if markdown else f"{s.title}\n{'-' * len(s.title)}\n"
        out.append(title + "\n" + "\n".join(_block(b, markdown) for b in s.blocks))
    return "\n".join(out)
