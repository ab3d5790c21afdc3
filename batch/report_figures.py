"""The evaluation report's figures: precision and yield curves, the Spearman grid, the CCDF.

Each takes what `batch.report` measured and returns a matplotlib figure; `batch.experiment`
draws its held-out yield with `curve_figure` too, so both reports' curves look the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from batch.document import NO_NEW_LINKS, UNDEFINED, defined, format_value
from batch.evaluate import TARGETS
from batch.metrics import PERCENTS

CURVE_TARGETS = ("nnl_total", "nnl_internal", "nnl_external")
_STYLE = {"oracle": {"color": "black", "ls": "--"}, "random": {"color": "grey", "ls": ":"}}


def _line_style(name: str) -> dict[str, Any]:
    return _STYLE.get(name, {"ls": "-"})


def curve_figure(curves: dict, key: str, ylabel: str, title: str) -> plt.Figure:
    """One panel per target of ``curves`` (target -> ranking -> series), the series ``key``
    (``p_at_k`` or ``yield``) against the share of pages, one line per ranking."""
    fig, axes = plt.subplots(1, len(CURVE_TARGETS), figsize=(13, 4), sharey=True)
    for ax, target in zip(axes, CURVE_TARGETS, strict=True):
        per = curves.get(target, {})
        if not per:
            ax.text(0.5, 0.5, NO_NEW_LINKS, ha="center", va="center", transform=ax.transAxes)
        for name, c in per.items():
            ax.plot(PERCENTS, c[key], label=name, lw=1.6, **_line_style(name))
        if key == "p_at_k":
            ax.plot(PERCENTS, PERCENTS / 100.0, color="lightgrey", lw=0.8, label="k% (no ties)")
        ax.set_title(target)
        ax.set_xlabel("k (% of pages)" if key == "p_at_k" else "pages recrawled (%)")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        if not handles:
            handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def spearman_figure(table: pd.DataFrame, rankings: Sequence[str]) -> plt.Figure:
    """Spearman's rho of each ranking against each target (stream view), undefined cells
    grey and saying why."""
    stream = table[table["view"] == "stream"]
    names = [t for t in TARGETS if t in set(stream["target"])] or list(TARGETS)
    grid = np.full((len(rankings), len(names)), np.nan)
    labels = [[UNDEFINED] * len(names) for _ in rankings]
    for i, r in enumerate(rankings):
        for j, t in enumerate(names):
            hit = stream[(stream["ranking"] == r) & (stream["target"] == t)]
            no_new = hit.empty or bool(hit.iloc[0]["no_new_links"])
            v = None if hit.empty else hit.iloc[0]["spearman"]
            if defined(v):
                grid[i, j] = float(v)
            labels[i][j] = format_value(v, no_new, digits=2)
    fig, ax = plt.subplots(figsize=(1.5 * len(names) + 2, 0.55 * len(rankings) + 1.8))
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-1, vmax=1, aspect="auto")
    for i in range(len(rankings)):
        for j in range(len(names)):
            text = labels[i][j].replace(" ", "\n") if not np.isfinite(grid[i, j]) else labels[i][j]
            dark = np.isfinite(grid[i, j]) and abs(grid[i, j]) > 0.6
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color="w" if dark else "k")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(rankings)), rankings)
    fig.colorbar(im, ax=ax, label="Spearman's rho")
    ax.set_title("Spearman's rho, stream view (grey: undefined)")
    fig.tight_layout()
    return fig


def ccdf_figure(truth: dict[str, np.ndarray]) -> plt.Figure:
    """The CCDF of new outlinks per page per interval, per side, log-log."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    drawn = False
    for side in ("internal", "external", "total"):
        x = truth[f"nnl_{side}"]
        if x.size == 0 or not (x > 0).any():
            continue
        values, counts = np.unique(x[x > 0], return_counts=True)
        # P(X >= v) over all labelled intervals, zeros included in the denominator
        ccdf = counts[::-1].cumsum()[::-1] / x.size
        ax.loglog(values, ccdf, marker=".", ms=4, lw=1, label=side)
        drawn = True
    if not drawn:
        ax.text(0.5, 0.5, NO_NEW_LINKS, ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend()
    ax.set_xlabel("new outlinks per page per interval, x")
    ax.set_ylabel("P(X ≥ x)")
    ax.set_title("CCDF of new outlinks (all labelled intervals)")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
