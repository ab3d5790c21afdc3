"""The experiments' report: their tables as CSV, their figures, ``experiment.md`` and ``.html``.

`batch.experiment` measures; this module writes what it measured, in the document every
report here is written as (`batch.document`), with the held-out yield drawn as the
evaluation report draws it (`batch.report_figures.curve_figure`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from batch.document import format_value, render_document, save_figure
from batch.report_figures import curve_figure

SIDES = ("internal", "external")


def write_experiment_report(
    out: Path,
    tables: dict[str, pd.DataFrame],
    curves: dict[str, dict[str, dict[str, np.ndarray]]],
    split_info: dict[str, Any],
    config: dict[str, Any],
    best: str | None,
) -> tuple[Path, Path]:
    """Write the tables (CSV), the figures (``plots/*.png``), ``experiment.json`` and the
    report into ``out``; returns the markdown and HTML paths. ``curves``: the held-out
    yield per target and ranking; ``config``: the `batch.experiment.ExperimentConfig` as a
    dict; ``best``: the model whose importance was measured."""
    nl, calib, imp = tables["nl_classification"], tables["calibration"], tables["importance"]
    figures: dict[str, plt.Figure] = {}
    hist = nl[nl["group"] == "history"]
    if len(hist):
        figures["nl_by_history"] = _metric_vs_history(hist, nl[nl["group"] == "baseline"])
    figures["yield"] = curve_figure(
        curves, "yield", "share of new outlinks found", "Held-out yield vs recrawl budget"
    )
    if len(calib):
        figures["calibration"] = _calibration_figure(calib)
    if best is not None and len(imp):
        figures["importance"] = _importance_figure(imp, best)
    plots = {name: out / "plots" / f"{name}.png" for name in figures}
    pngs = {name: save_figure(fig, plots[name]) for name, fig in figures.items()}
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    (out / "experiment.json").write_text(
        json.dumps({"config": config, "split": split_info}, indent=2, default=str)
    )
    sections = _sections(tables, split_info, config, best)
    shown = [(n, _PLOT_TEXT[n], plots[n], pngs[n]) for n in plots]
    md, ht = render_document(
        "lookaround experiments (paper reproduction, held-out crawls)", sections, shown
    )
    markdown, html_path = out / "experiment.md", out / "experiment.html"
    markdown.write_text(md, encoding="utf-8")
    html_path.write_text(ht, encoding="utf-8")
    return markdown, html_path


def _metric_vs_history(nl: pd.DataFrame, baseline: pd.DataFrame) -> plt.Figure:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, side in zip(axes, SIDES, strict=True):
        sub = nl[nl["side"] == side]
        h = sub["history"].to_numpy()
        for metric, color in (("f1", "C0"), ("balanced_accuracy", "C1")):
            vals = [np.nan if v is None else v for v in sub[metric]]
            ax.plot(h, vals, marker="o", color=color, label=f"ExtraTrees {metric}")
            base = baseline[(baseline["side"] == side)][metric].iloc[0]
            if base is not None:
                ax.axhline(base, color=color, ls="--", lw=1, label=f"NNL-Pr {metric}")
        ax.set_title(f"NL {side}")
        ax.set_xlabel("history size h (intervals)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out score")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _calibration_figure(calib: pd.DataFrame) -> plt.Figure:
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for j, side in enumerate(SIDES):
        sub = calib[calib["side"] == side]
        ax = axes[0, j]
        for model, g in sub.groupby("model", sort=False):
            ax.loglog(
                np.maximum(g["predicted_mean"], 1e-3),
                np.maximum(g["observed_mean"], 1e-3),
                marker="o",
                label=model,
            )
        lo, hi = 1e-3, max(1.0, float(sub[["predicted_mean", "observed_mean"]].max().max()))
        ax.plot([lo, hi], [lo, hi], color="grey", ls=":", lw=1)
        ax.set_title(f"{side}: mean by decile of predicted mean")
        ax.set_xlabel("predicted mean")
        ax.set_ylabel("observed mean")
        ax.grid(alpha=0.3, which="both")
        ax = axes[1, j]
        for model, g in sub.groupby("model", sort=False):
            ax.plot(g["predicted_p0"], g["observed_p0"], marker="o", label=model)
        ax.plot([0, 1], [0, 1], color="grey", ls=":", lw=1)
        ax.set_title(f"{side}: P(no new link) by decile")
        ax.set_xlabel("predicted P(y = 0)")
        ax.set_ylabel("observed share with y = 0")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _importance_figure(imp: pd.DataFrame, model: str) -> plt.Figure:
    top = imp.head(15).iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.barh(top["feature"], top["importance"], xerr=top["std"], color="C2")
    ax.set_xlabel("drop in held-out log-likelihood when shuffled")
    ax.set_title(f"Permutation importance, {model} (top 15)")
    fig.tight_layout()
    return fig


def _cells(df: pd.DataFrame, columns: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """Table cells; a metric no row could be scored on (e.g. LCR when no held-out page has
    two intervals) is left out rather than failing the report."""
    columns = [c for c in columns if c in df.columns]
    rows = []
    for _, r in df.iterrows():
        rows.append([r[c] if isinstance(r[c], str) else format_value(r[c]) for c in columns])
    return list(columns), rows


def _sections(
    tables: dict[str, pd.DataFrame],
    split_info: dict[str, Any],
    config: dict[str, Any],
    best: str | None,
) -> list[tuple[str, str, list[str], list[list[str]]]]:
    nl = tables["nl_classification"]
    out: list[tuple[str, str, list[str], list[list[str]]]] = [
        (
            "Data and split",
            "Time split: the last crawls are held out; every training label was observed before "
            "the first held-out fetch. Targets are computed on each side of the split alone.",
            ["what", "value"],
            [[k, str(v)] for k, v in split_info.items()],
        )
    ]
    cols = ["model", "side", "f1", "balanced_accuracy", "recall", "precision"]
    base = nl[nl["group"] == "baseline"]
    hist = pd.concat([base.assign(history="-"), nl[nl["group"] == "history"]])
    header, rows = _cells(hist, ["history", *cols])
    out.append(
        (
            "NL classification by history size (paper Table: history 0, 1, 8)",
            f"Balanced ExtraTreesClassifier ({config['grid_trees']} trees, min leaf 3 internal "
            f"/ 10 external, {config['grid_rows']:,} sampled training rows), features "
            "SP+SN+DP+DN with lags 1..h; threshold 0.5. NNL-Pr: a new link in the last "
            "interval predicts one.",
            header,
            rows,
        )
    )
    fs = pd.concat([base.assign(feature_set="-"), nl[nl["group"] == "feature set"]])
    header, rows = _cells(fs, ["feature_set", *cols])
    out.append(
        (
            "NL classification by feature set",
            "As above, by named feature set. SP+semantic: SP plus the page's embedding reduced "
            "by PCA (sem_*, fitted on all fetched vectors, no labels).",
            header,
            rows,
        )
    )
    header, rows = _cells(
        tables["lcr_regression"], ["model", "feature_set", "side", "n", "r2", "mae", "spearman"]
    )
    out.append(
        (
            "LCR regression by feature set",
            "Target: the page's link change rate over its held-out intervals (>= 2 of them). "
            "Baseline: its own past LCR.",
            header,
            rows,
        )
    )
    rk = tables["ranking"]
    header, rows = _cells(
        rk[rk["target"] == "nnl_total"].sort_values("yield_share_10", ascending=False),
        [
            "ranking",
            "yield_share_1",
            "yield_share_5",
            "yield_share_10",
            "yield_share_20",
            "yield_relative_10",
            "p_auc",
            "spearman",
            "fit_seconds",
        ],
    )
    out.append(
        (
            "Ranking comparison (target nnl_total, mean over held-out rounds)",
            "yield_share_b: share of all new outlinks of a round found by recrawling the top b of "
            "pages; yield_relative: divided by the oracle's. Learned models rank by expected "
            "total new outlinks.",
            header,
            rows,
        )
    )
    for side in SIDES:
        header, rows = _cells(
            rk[rk["target"] == f"nnl_{side}"].sort_values("yield_share_10", ascending=False),
            ["ranking", "yield_share_10", "yield_relative_10", "p_auc", "spearman"],
        )
        out.append((f"Ranking comparison (nnl_{side})", "", header, rows))
    header, rows = _cells(
        tables["count_models"],
        [
            "model",
            "distribution",
            "side",
            "loglik",
            "alpha",
            "predicted_mean",
            "observed_mean",
            "predicted_p0",
            "observed_p0",
        ],
    )
    out.append(
        (
            "Count models: held-out log-likelihood (higher is better)",
            "Poisson (extratrees, ngboost, hgb means), negative binomial NB2 (hgb mean, alpha by "
            "maximum likelihood on rows the mean model did not see), hurdle (classifier P(y>0) × "
            "1 + NB for y-1). Mean log-likelihood per held-out row.",
            header,
            rows,
        )
    )
    imp = tables["importance"]
    if best is not None and len(imp):
        header, rows = _cells(imp.head(20), ["feature", "importance", "std"])
        out.append(
            (
                f"Permutation importance ({best}, best yield@10%)",
                f"sklearn.inspection.permutation_importance on {config['importance_rows']:,} "
                f"held-out rows, {config['importance_repeats']} repeats; score = held-out "
                "log-likelihood (both sides).",
                header,
                rows,
            )
        )
    return out


_PLOT_TEXT = {
    "nl_by_history": "NL F1 and balanced accuracy against history size; dashed: NNL-Pr.",
    "yield": "Held-out yield against recrawl budget, one line per ranking.",
    "calibration": "Calibration by decile of the predicted mean: mean (top, log-log) and "
    "P(no new link) (bottom), predicted vs observed; dotted: perfect.",
    "importance": "Permutation importance of the best model.",
}
