"""The report of a closed-loop simulation (`streams.simulate`): tables and plots of what each
policy found at each budget, written as every report here is (`batch.document`: ``report.md``,
a self-contained ``report.html``, ``plots/*.png``).

Plots: link appearances found within 1 and 7 days against the budget, one line per policy;
the distribution of discovery delays; links found over time against links appeared (the last
two at the headline budget: 5% a day when it was run, else the middle budget).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np

from batch.discovery import Discovery
from batch.document import render_document, save_figure
from batch.timeline import DAY

#: headline column -> label (terminal, markdown, HTML)
COLUMNS = {
    "budget": "budget/day",
    "policy": "policy",
    "found_7d": "found ≤ 7 d",
    "found_1d": "found ≤ 1 d",
    "found": "found",
    "median": "median delay (d)",
    "p90": "p90 delay (d)",
    "born": "born pages found",
    "born_median": "born: median delay (d)",
    "per_link": "fetches per link",
}
#: the same columns, short, for a terminal
SHORT_COLUMNS = (
    "budget",
    "policy",
    "≤7d",
    "≤1d",
    "found",
    "median d",
    "p90 d",
    "born",
    "born d",
    "fetch/link",
)
HEADLINE_BUDGET = "5%"
_STYLE = {
    "lookaround": {"color": "tab:red", "lw": 2.2},
    "adaptive": {"color": "tab:blue"},
    "uniform": {"color": "tab:orange"},
    "change-rate": {"color": "tab:green"},
    "nnl-av": {"color": "tab:purple"},
    "oracle": {"color": "black", "ls": "--"},
}

DEFINITIONS = (
    "A link appearance is a link present in one version of a page and absent from the version "
    "before it. It is found at the first fetch of its page at or after it appeared, if still "
    "there (one removed before any fetch is missed); its delay is the time between. Shares are "
    "of all appearances in the window. Median and p90 delays count a missed appearance as never "
    "found ('never': more than half, or a tenth, were never found).",
    "A born page is found at the first fetch at or after its birth that links to it or fetches "
    "it alive. Fetches per link: budgeted fetches per appearance found (the seed crawl of the "
    "index at the start is outside the budget and not counted). The oracle knows the timeline "
    "and fetches only pages with links waiting: it is the ceiling, not a crawler.",
)


class CrawlFigures(Protocol):
    policy: str
    budget: str
    per_day: float
    discovery: Discovery


@dataclass(frozen=True)
class SimReport:
    markdown: Path
    html: Path
    plots: dict[str, Path]


def days_text(days: float) -> str:
    """A delay in days for a table ('never' for infinity)."""
    return "never" if not math.isfinite(days) else f"{days:.2f}"


def _share(count: int, total: int, compact: bool = False) -> str:
    if not total:
        return f"{count:,}"
    share = 100 * count / total
    return f"{share:.1f}%" if compact else f"{count:,} ({share:.1f} %)"


def headline_rows(crawls: Sequence[CrawlFigures], compact: bool = False) -> list[list[str]]:
    """One row per crawl in `COLUMNS` order (``compact``: shares without counts, for a
    terminal)."""
    rows = []
    for c in crawls:
        d = c.discovery
        rows.append(
            [
                c.budget if compact else f"{c.budget} ({c.per_day:,.0f})",
                c.policy,
                _share(d.found_7d, d.appearances, compact),
                _share(d.found_1d, d.appearances, compact),
                _share(d.found, d.appearances, compact),
                days_text(d.delay_median_days),
                days_text(d.delay_p90_days),
                f"{d.born_found} / {d.born}",
                days_text(d.born_delay_median_days),
                "n/a" if not math.isfinite(d.fetches_per_link) else f"{d.fetches_per_link:.1f}",
            ]
        )
    return rows


def _side_rows(crawls: Sequence[CrawlFigures]) -> list[list[str]]:
    rows = []
    for c in crawls:
        d = c.discovery
        rows.append(
            [
                c.budget,
                c.policy,
                _share(d.found_internal_7d, d.appearances_internal),
                _share(d.found_internal, d.appearances_internal),
                _share(d.found_external_7d, d.appearances_external),
                _share(d.found_external, d.appearances_external),
                f"{d.fetches:,}",
                f"{d.fetches_discovered_urls:,}",
            ]
        )
    return rows


def headline_budget(budgets: Sequence[str]) -> str:
    """The budget the delay and over-time plots show."""
    return HEADLINE_BUDGET if HEADLINE_BUDGET in budgets else budgets[len(budgets) // 2]


def _budget_value(crawl: CrawlFigures, pages_at_start: int) -> float:
    return 100.0 * crawl.per_day / max(pages_at_start, 1)


def _by_budget_figure(crawls: Sequence[CrawlFigures], pages_at_start: int) -> plt.Figure:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    policies = list(dict.fromkeys(c.policy for c in crawls))
    for ax, (key, title) in zip(
        axes, (("found_7d", "found within 7 days"), ("found_1d", "found within 1 day")), strict=True
    ):
        for name in policies:
            mine = sorted((c for c in crawls if c.policy == name), key=lambda c: c.per_day)
            x = [_budget_value(c, pages_at_start) for c in mine]
            y = [getattr(c.discovery, key) / max(c.discovery.appearances, 1) for c in mine]
            ax.plot(x, y, marker="o", label=name, **_STYLE.get(name, {}))
        ax.set_xscale("log")
        ax.set_xlabel("budget (% of the starting index fetched a day)")
        ax.set_title(title)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("share of link appearances")
    axes[0].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def _delay_figure(crawls: Sequence[CrawlFigures], budget: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for c in crawls:
        if c.budget != budget:
            continue
        delays = np.sort(c.discovery.delays)
        n = len(delays)
        if not n:
            continue
        finite = delays[np.isfinite(delays)]
        y = np.arange(1, len(finite) + 1) / n
        ax.step(
            np.maximum(finite, 1e-3), y, where="post", label=c.policy, **_STYLE.get(c.policy, {})
        )
    ax.set_xscale("log")
    ax.set_xlabel("discovery delay (days)")
    ax.set_ylabel("share of link appearances found")
    ax.set_title(f"Discovery delay at {budget} a day (cumulative; missed ones never reach it)")
    ax.axvline(1, color="lightgrey", lw=0.8)
    ax.axvline(7, color="lightgrey", lw=0.8)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def _over_time_figure(crawls: Sequence[CrawlFigures], budget: str, start: float) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(10, 4.2))
    shown = [c for c in crawls if c.budget == budget]
    if shown:
        appeared = np.sort(shown[0].discovery.appeared_at)
        days = (appeared - start) / DAY
        ax.step(
            days,
            np.arange(1, len(days) + 1),
            where="post",
            color="lightgrey",
            lw=3,
            label="appeared",
        )
    for c in shown:
        found = np.sort(c.discovery.found_at[np.isfinite(c.discovery.found_at)])
        days = (found - start) / DAY
        ax.step(
            days,
            np.arange(1, len(days) + 1),
            where="post",
            label=c.policy,
            **_STYLE.get(c.policy, {}),
        )
    ax.set_xlabel("days since the window's start")
    ax.set_ylabel("link appearances (cumulative)")
    ax.set_title(f"Links found over time at {budget} a day")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


_PLOT_TEXT = {
    "by_budget": "Share of link appearances found within 7 days (left) and 1 day (right) "
    "against the budget, one line per policy.",
    "delay": "Cumulative distribution of discovery delays at the headline budget.",
    "over_time": "Link appearances found over time at the headline budget; grey: appeared.",
}


def write_sim_report(
    out_dir: Path,
    crawls: Sequence[CrawlFigures],
    about: Sequence[tuple[str, Any]],
    *,
    pages_at_start: int,
    start: float,
) -> SimReport:
    """Write ``report.md``, ``report.html`` and ``plots/`` into ``out_dir``."""
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    budgets = list(dict.fromkeys(c.budget for c in crawls))
    main = headline_budget(budgets)
    figures = {
        "by_budget": _by_budget_figure(crawls, pages_at_start),
        "delay": _delay_figure(crawls, main),
        "over_time": _over_time_figure(crawls, main, start),
    }
    plots = {name: plot_dir / f"sim_{name}.png" for name in figures}
    pngs = {name: save_figure(fig, plots[name]) for name, fig in figures.items()}
    sections = [
        (
            "What each policy found",
            "Link appearances found within 7 days and 1 day of appearing, at all, the delay "
            "(days), born pages found and their delay, and budgeted fetches per link found.",
            list(COLUMNS.values()),
            headline_rows(crawls),
        ),
        (
            "Internal and external links apart",
            "Found within 7 days and at all, per side; fetches, and those of URLs the crawl "
            "discovered (new pages, or links to pages that do not exist: a 404).",
            [
                "budget",
                "policy",
                "internal ≤ 7 d",
                "internal found",
                "external ≤ 7 d",
                "external found",
                "fetches",
                "of discovered URLs",
            ],
            _side_rows(crawls),
        ),
        (
            "Run",
            "The timeline and the settings.",
            ["what", "value"],
            [[k, str(v)] for k, v in about],
        ),
    ]
    figures_out = [(n, _PLOT_TEXT[n], plots[n], pngs[n]) for n in plots]
    md, ht = render_document(
        "lookaround closed-loop simulation", sections, figures_out, DEFINITIONS
    )
    markdown, html_path = out_dir / "report.md", out_dir / "report.html"
    markdown.write_text(md, encoding="utf-8")
    html_path.write_text(ht, encoding="utf-8")
    return SimReport(markdown, html_path, plots)
