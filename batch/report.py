"""A readable report of a replay run: what a reviewer needs without opening a notebook.

`write_report` evaluates a run directory (`batch.evaluate`) and writes into it:

* ``evaluation.csv``: the full tidy table (view × round × target × ranking × metric);
* ``summary_metrics.csv``: `batch.evaluate.summarise` of it;
* ``plots/*.png``: Precision@k% and yield-vs-budget curves, a Spearman heatmap, the CCDF of
  new outlinks per page per interval;
* ``report.md`` and a self-contained ``report.html`` (the PNGs inlined as data URIs, so the
  file can be mailed or attached to a ticket on its own).

Undefined metrics are never shown as NaN: a target where no page gained a link reads
"no new links", anything else undefined (a constant ranking's Spearman, ...) reads "n/a".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batch.document import defined, format_value, render_document, save_figure
from batch.evaluate import (
    DEFAULT_SCORERS,
    TARGETS,
    evaluate_rounds,
    load_rows,
    ranking_predictions,
    summarise,
    targets,
)
from batch.metrics import PERCENTS, Ranked, precision_at_k, yield_at_budget
from batch.report_figures import CURVE_TARGETS, ccdf_figure, curve_figure, spearman_figure
from batch.rundir import SUMMARY_FILE
from online.errors import InputError

__all__ = [
    "HEADLINE_COLUMNS",
    "ReportResult",
    "headline_rows",
    "write_report",
]

#: headline column -> (target, metric) in the stream view
HEADLINE_METRICS: dict[str, tuple[str, str]] = {
    "p_auc": ("nnl_total", "p_auc"),
    "spearman": ("nnl_total", "spearman"),
    "yield_relative_10": ("nnl_total", "yield_relative_10"),
    "yield_share_10": ("nnl_total", "yield_share_10"),
    "nl_internal_f1": ("nl_internal", "f1"),
    "nl_internal_balanced_accuracy": ("nl_internal", "balanced_accuracy"),
}
#: headline column -> human label
HEADLINE_COLUMNS: dict[str, str] = {
    "ranking": "ranking",
    "p_auc": "P@k% AUC",
    "spearman": "Spearman",
    "yield_relative_10": "yield@10% / best",
    "yield_share_10": "yield@10% share",
    "nl_internal_f1": "NL int. F1",
    "nl_internal_balanced_accuracy": "NL int. bal. acc.",
}

PRECISION_TEXT = (
    "**Precision@k%.** Top size K = ceil(k% · n). A page's probability of being in a top-K is 1 "
    "above the tie group at the cut, 0 below it, and (slots left) / (group size) inside it: ties "
    "are broken at random, taken in exact expectation rather than by sampling. Precision@k% is "
    "the expected overlap of the predicted and the true top-K, Σ p_i q_i, divided by the best "
    "achievable, Σ q_i², so the oracle scores exactly 1. Without ties in the truth this is the "
    "paper's share of the true top-k% that is predicted. Here most pages gain no link, so the "
    "truth is heavily tied and a random ranking scores ABOVE k% (a constant score gets "
    "K² / (n Σ q_i²)). P@k% AUC is the mean over k = 1, ..., 100 %: perfect = 1 (the authors' "
    "code integrated from 3.33 % and so topped out at 0.967)."
)
YIELD_TEXT = (
    "**Yield at budget b.** The share of all new outlinks found by recrawling the top b of pages "
    "by a ranking (ties at the cut in expectation); '/ best' divides it by what the oracle "
    "finds with the same budget."
)


@dataclass(frozen=True)
class ReportResult:
    """Where the report went, and its headline (stream view, one row per ranking)."""

    run_dir: Path
    markdown: Path
    html: Path
    evaluation_csv: Path
    summary_csv: Path
    plots: dict[str, Path]
    headline: pd.DataFrame
    no_new_links: bool = False
    tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)


def headline_rows(headline: pd.DataFrame) -> list[list[str]]:
    """The headline as text cells in `HEADLINE_COLUMNS` order (for markdown, HTML, rich)."""
    rows = []
    for _, r in headline.iterrows():
        cells = [str(r["ranking"])]
        for col in list(HEADLINE_COLUMNS)[1:]:
            target = HEADLINE_METRICS[col][0]
            cells.append(format_value(r[col], bool(r[f"no_new_links_{target}"])))
        rows.append(cells)
    return rows


def _headline(table: pd.DataFrame, rankings: Sequence[str]) -> pd.DataFrame:
    stream = table[table["view"] == "stream"]
    records = []
    for name in rankings:
        rec: dict[str, Any] = {"ranking": name}
        for col, (target, metric) in HEADLINE_METRICS.items():
            hit = stream[(stream["target"] == target) & (stream["ranking"] == name)]
            rec[col] = None if hit.empty else _none(hit.iloc[0][metric])
            # a target absent from the table had no labelled rows at all: nothing to gain
            rec[f"no_new_links_{target}"] = hit.empty or bool(hit.iloc[0]["no_new_links"])
        records.append(rec)
    out = pd.DataFrame.from_records(records)
    for col in HEADLINE_METRICS:
        out[col] = pd.Series([r[col] for r in records], dtype=object)
    return out


def _none(v: Any) -> float | None:
    return float(v) if defined(v) else None


# ---------------------------------------------------------------------------- tables


def _weekly(rows: pd.DataFrame, truth: dict[str, np.ndarray]) -> pd.DataFrame:
    """Paper's Table 1: per round, mean / std (population) of new outlinks and share with none."""
    crawls = rows["crawl"].to_numpy()
    records = []
    for crawl in np.unique(crawls):
        idx = crawls == crawl
        rec: dict[str, Any] = {"round": int(crawl) + 1, "pages": int(idx.sum())}
        for side in ("internal", "external", "total"):
            x = truth[f"nnl_{side}"][idx]
            rec[f"{side}_mean"] = float(x.mean())
            rec[f"{side}_std"] = float(x.std())
            rec[f"{side}_none"] = float((x == 0).mean())
        records.append(rec)
    return pd.DataFrame.from_records(records)


def _data_summary(df: pd.DataFrame, labelled: int, run_dir: Path) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = [
        ("feature rows", len(df)),
        ("pages", int(df["page_id"].nunique()) if len(df) else 0),
        ("crawl rounds", int(df["crawl"].nunique()) if len(df) else 0),
        ("labelled rows (a next fetch was seen)", labelled),
    ]
    path = run_dir / SUMMARY_FILE
    if path.exists():
        s = json.loads(path.read_text())
        for key in ("scorer", "events_read", "accepted", "rejected", "applied", "duplicate"):
            if key in s:
                items.append((f"replay: {key.replace('_', ' ')}", s[key]))
        for key in ("stale", "dropped_outlinks", "events_per_second"):
            if key in s:
                items.append((f"replay: {key.replace('_', ' ')}", s[key]))
    return items


def _round_p_auc(table: pd.DataFrame, rankings: Sequence[str]) -> pd.DataFrame:
    """Per round × ranking P@k% AUC on nnl_total; "no new links" rounds kept as such."""
    sub = table[(table["view"] == "round") & (table["target"] == "nnl_total")]
    records = []
    for rnd, group in sub.groupby("round", sort=True):
        rec: dict[str, Any] = {"round": int(rnd), "positives": int(group["positives"].iloc[0])}
        no_new = bool(group["no_new_links"].iloc[0])
        for name in rankings:
            hit = group[group["ranking"] == name]
            v = None if hit.empty else hit.iloc[0]["p_auc"]
            rec[name] = format_value(v, no_new)
        records.append(rec)
    return pd.DataFrame.from_records(records)


# ---------------------------------------------------------------------------- curves


def _rank_values(pred: Any, side: str) -> np.ndarray:
    count = pred.count(side)
    return pred.score if count is None else count


def _curves(
    rows: pd.DataFrame, truth: dict[str, np.ndarray], scorers: Sequence[str]
) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """target -> ranking -> {"p_at_k", "yield"} in the stream view (as `evaluate_rounds`)."""
    preds = ranking_predictions(rows, scorers)  # same seed as evaluate_rounds: same random
    budgets = PERCENTS / 100.0
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for target in CURVE_TARGETS:
        y = truth[target]
        if y.size == 0 or not (y > 0).any():
            out[target] = {}
            continue
        t = Ranked(y)
        side = TARGETS[target][1]
        values = {name: _rank_values(p, side) for name, p in preds.items()} | {"oracle": y}
        per: dict[str, dict[str, np.ndarray]] = {}
        for name, v in values.items():
            p = Ranked(v)
            yields = yield_at_budget(p, y, budgets)
            per[name] = {
                "p_at_k": precision_at_k(p, t, PERCENTS),
                "yield": np.array([yields[b]["share"] for b in budgets], dtype=float),
            }
        out[target] = per
    return out


# ---------------------------------------------------------------------------- sections


def _weekly_cells(weekly: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["round", "pages"]
    for side in ("internal", "external", "total"):
        header += [f"{side} mean", f"{side} std", f"{side}: share with none"]
    rows = []
    for _, r in weekly.iterrows():
        cells = [str(int(r["round"])), f"{int(r['pages']):,}"]
        for side in ("internal", "external", "total"):
            cells += [
                f"{r[f'{side}_mean']:.2f}",
                f"{r[f'{side}_std']:.2f}",
                f"{100 * r[f'{side}_none']:.1f} %",
            ]
        rows.append(cells)
    return header, rows


def _sections(
    run_dir: Path,
    headline: pd.DataFrame,
    summary_items: list[tuple[str, Any]],
    weekly: pd.DataFrame,
    rounds: pd.DataFrame,
    no_new: bool,
) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, text, header, rows) per section, rendered by both markdown and HTML."""
    head_header = list(HEADLINE_COLUMNS.values())
    note = (
        "No page gained a link in any interval of this run: ranking metrics are undefined and "
        "read 'no new links'. "
        if no_new
        else ""
    )
    w_header, w_rows = _weekly_cells(weekly)
    r_header = [str(c) for c in rounds.columns]
    r_rows = [[str(v) for v in r] for r in rounds.itertuples(index=False)]
    return [
        (
            "Headline (stream view)",
            note + "Every labelled fetch judged on the page's next fetch, target nnl_total "
            "(new internal + external outlinks); the NL columns judge p_new >= 0.5 against "
            "'at least one new internal link'. 'n/a' marks a value that is undefined for that "
            "ranking (a constant score has no Spearman; a ranking without a probability has no "
            "F1).",
            head_header,
            headline_rows(headline),
        ),
        (
            "Data",
            f"Run directory `{run_dir}`.",
            ["what", "value"],
            [[k, format_value(v)] for k, v in summary_items],
        ),
        (
            "New outlinks per round (like the paper's Table 1)",
            "Round r: the new outlinks pages showed at crawl r against their previous fetch; "
            "std is the population standard deviation.",
            w_header,
            w_rows,
        ),
        (
            "P@k% AUC per round (nnl_total)",
            "The paper's view: pages ranked by their scores after crawl r-1, judged on crawl r.",
            r_header,
            r_rows,
        ),
    ]


_PLOT_TEXT = {
    "precision_at_k": "Precision@k% per target, stream view, one line per ranking.",
    "yield": "Share of all new outlinks found against the share of pages recrawled.",
    "spearman": "Spearman's rho between each ranking and each target, stream view.",
    "ccdf": "CCDF of new outlinks per page per interval, log-log: heavy-tailed as in the paper.",
}


def write_report(run_dir: Path, scorers: Sequence[str] = DEFAULT_SCORERS) -> ReportResult:
    """Evaluate the run directory and write report.md/.html, CSVs and plots into it."""
    run_dir = Path(run_dir)
    plot_dir = run_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    scorers = tuple(scorers)
    rankings = [*scorers, "random", "oracle"]

    df = load_rows(run_dir).reset_index(drop=True)
    if not df["label_new_internal"].notna().any():
        pages = df["page_id"].nunique() if len(df) else 0
        raise InputError(
            f"{run_dir} has no labelled rows to judge a ranking on ({len(df):,} fetches of "
            f"{pages:,} pages): a fetch is labelled by its page's next fetch, so replay a "
            "crawl that fetches pages at least twice"
        )
    table = evaluate_rounds(df, scorers)
    evaluation_csv = run_dir / "evaluation.csv"
    summary_csv = run_dir / "summary_metrics.csv"
    table.to_csv(evaluation_csv, index=False)
    (summarise(table) if len(table) else pd.DataFrame()).to_csv(summary_csv, index=False)

    truth_all = targets(df)
    labelled = np.flatnonzero(~np.isnan(truth_all["nnl_total"]))
    rows = df.iloc[labelled].reset_index(drop=True)
    truth = {k: v[labelled] for k, v in truth_all.items()}
    no_new = not bool((truth["nnl_total"] > 0).any())

    headline = _headline(table, rankings)
    weekly = _weekly(rows, truth)
    rounds = _round_p_auc(table, rankings)

    curves = _curves(rows, truth, scorers) if len(rows) else {}
    figures = {
        "precision_at_k": curve_figure(
            curves, "p_at_k", "Precision@k%", "Precision@k% (ties in expectation; oracle = 1)"
        ),
        "yield": curve_figure(
            curves, "yield", "share of new outlinks found", "Yield vs recrawl budget"
        ),
        "spearman": spearman_figure(table, rankings),
        "ccdf": ccdf_figure(truth),
    }
    plots = {name: plot_dir / f"{name}.png" for name in figures}
    pngs = {name: save_figure(fig, plots[name]) for name, fig in figures.items()}

    summary_items = _data_summary(df, len(rows), run_dir)
    sections = _sections(run_dir, headline, summary_items, weekly, rounds, no_new)
    figures_out = [(n, _PLOT_TEXT[n], plots[n], pngs[n]) for n in plots]
    md, ht = render_document(
        "lookaround evaluation report", sections, figures_out, (PRECISION_TEXT, YIELD_TEXT)
    )
    markdown, html_path = run_dir / "report.md", run_dir / "report.html"
    markdown.write_text(md, encoding="utf-8")
    html_path.write_text(ht, encoding="utf-8")
    return ReportResult(
        run_dir=run_dir,
        markdown=markdown,
        html=html_path,
        evaluation_csv=evaluation_csv,
        summary_csv=summary_csv,
        plots=plots,
        headline=headline,
        no_new_links=no_new,
        tables={"weekly": weekly, "rounds": rounds},
    )
