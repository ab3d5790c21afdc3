"""The document every report here is written as: one markdown file and one self-contained HTML.

The evaluation report (`batch.report`), the experiments (`batch.experiment_report`) and the
simulation's report (`batch.sim_report`) give their sections and figures to `render_document`,
so they read alike; `format_value` is how a cell reads in all of them (never "nan": an
undefined metric says why it is undefined).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

NO_NEW_LINKS = "no new links"
UNDEFINED = "n/a"


def defined(v: Any) -> bool:
    """Whether a cell holds a value: not None, NaN or pandas' missing value."""
    return v is not None and not (isinstance(v, float) and np.isnan(v)) and not pd.isna(v)


def format_value(v: Any, no_new_links: bool = False, digits: int = 3) -> str:
    """One cell as text: numbers rounded, undefined as "no new links" or "n/a", never "nan"."""
    if not defined(v):
        return NO_NEW_LINKS if no_new_links else UNDEFINED
    if isinstance(v, bool | np.bool_):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    if isinstance(v, float | np.floating):
        return f"{float(v):.{digits}f}"
    return str(v)


def save_figure(fig: plt.Figure, path: Path) -> bytes:
    """Write ``fig`` to ``path`` as a PNG and close it; the PNG's bytes, for the HTML."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    data = buf.getvalue()
    path.write_bytes(data)
    return data


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid "
    "#ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:"
    "left}img{max-width:100%}code{background:#f3f3f3}"
)


def render_document(
    title: str,
    sections: Sequence[tuple[str, str, Sequence[str], Sequence[Sequence[str]]]],
    figures: Sequence[tuple[str, str, Path, bytes]],
    definitions: Sequence[str] = (),
) -> tuple[str, str]:
    """A report as (markdown, self-contained HTML): ``sections`` are (heading, text, table
    header, table rows), then the ``definitions`` paragraphs, then ``figures`` as (name,
    caption, PNG path, PNG bytes), inlined as data URIs in the HTML."""
    md = [f"# {title}", ""]
    ht = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for heading, text, header, rows in sections:
        md += [f"## {heading}", "", text, "", _md_table(header, rows), ""]
        ht += [f"<h2>{html.escape(heading)}</h2>", f"<p>{html.escape(text)}</p>"]
        ht.append(_html_table(header, rows))
    if definitions:
        md += ["## Definitions", ""]
        ht.append("<h2>Definitions</h2>")
        for paragraph in definitions:
            md += [paragraph, ""]
            ht.append(f"<p>{html.escape(paragraph)}</p>")
    md += ["## Plots", ""]
    ht.append("<h2>Plots</h2>")
    for name, caption, path, png in figures:
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        md += [caption, "", f"![{name}](plots/{path.name})", ""]
        ht += [f"<p>{html.escape(caption)}</p>", f"<img alt='{name}' src='{uri}'>"]
    ht.append("</body></html>")
    return "\n".join(md), "\n".join(ht)
