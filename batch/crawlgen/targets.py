"""Each regime's statistics targets, and the check of a crawl's statistics against them.

A target is ``{"source": ..., "target": t, "tolerance": e}`` (two-sided: ``low``/``high`` are
filled in as t -/+ e) or one-sided with ``min`` and/or ``max``. Keys are those of
``interval_statistics(events)["mean"]``; a key ``"a - b"`` is the difference of two of them
(which baseline predicts better on this kind of site).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "AGGREGATOR_TARGETS",
    "DOCS_TARGETS",
    "NEWS_TARGETS",
    "PAPER_TARGETS",
    "REGIME_TARGETS",
    "check_targets",
    "measured",
]


def _table(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for spec in rows.values():
        if "target" in spec:
            spec["low"] = round(spec["target"] - spec["tolerance"], 6)
            spec["high"] = round(spec["target"] + spec["tolerance"], 6)
    return rows


# Paper figures (Dang et al. 2022, weekly means over ten crawls) and the tolerance the tests
# allow around each: ``low``/``high`` = ``target`` -/+ ``tolerance`` (``min`` is one-sided).
PAPER_TARGETS: dict[str, dict[str, Any]] = _table(
    {
        "new_internal_mean": {"paper": "2.2-3.0", "target": 2.6, "tolerance": 0.4},
        "new_internal_std": {"paper": "12.4-16.0", "target": 14.2, "tolerance": 1.8},
        "new_external_mean": {"paper": "0.3-0.5", "target": 0.4, "tolerance": 0.1},
        "new_external_std": {"paper": "2.9-4.0", "target": 3.45, "tolerance": 0.55},
        "new_total_mean": {"paper": "2.6-3.5", "target": 3.05, "tolerance": 0.45},
        "new_total_std": {"paper": "13.0-16.8", "target": 14.9, "tolerance": 1.9},
        "zero_internal_share": {"paper": "68-75%", "target": 0.715, "tolerance": 0.035},
        "zero_external_share": {"paper": "91-94%", "target": 0.925, "tolerance": 0.015},
        "external_outlink_share": {"paper": "14.7%", "target": 0.147, "tolerance": 0.02},
        "never_gained_internal_share": {
            "paper": "just under half",
            "target": 0.45,
            "tolerance": 0.05,
        },
        "digest_change_share": {
            "paper": "~30-50% of weeks (brief)",
            "target": 0.40,
            "tolerance": 0.10,
        },
        # One-sided: most pages stay in their group (0, 1-2, 3-10, >10) and far more than if
        # weeks were independent; the CCDF of weekly new links is power-law-like.
        "group_persistence": {"paper": "most pages stay", "min": 0.6},
        "group_persistence_lift": {"paper": "well above independent weeks", "min": 0.1},
        # log-log CCDF slope between 3 and 100 new links: a plausibility band, not a paper figure
        "ccdf_slope": {"paper": "power-law-like CCDF", "target": -1.6, "tolerance": 0.9},
        "share_total_ge_100": {"paper": "heavy tail", "min": 1e-3},
        # Which baseline predicts (yield@10%): a page's own past links, content change hardly.
        "yield10_nnl_av - yield10_ccr": {"paper": "CCR close to random", "min": 0.3},
    }
)

_N = "N at 12 h"  # crawls 0, 6 and 11 of N: 18:00, 06:00 and 16:00 UTC
NEWS_TARGETS: dict[str, dict[str, Any]] = _table(
    {
        "new_internal_mean": {"source": f"{_N}: 6.6", "target": 6.6, "tolerance": 2.0},
        "new_total_mean": {"source": f"{_N}: 6.7", "target": 6.7, "tolerance": 2.0},
        "new_total_std": {"source": f"{_N}: 14.8", "target": 15.0, "tolerance": 6.0},
        "zero_internal_share": {"source": f"{_N}: 36%", "target": 0.35, "tolerance": 0.07},
        "zero_total_share": {"source": f"{_N}: 33%", "target": 0.34, "tolerance": 0.07},
        "zero_external_share": {"source": f"{_N}: 92%", "target": 0.90, "tolerance": 0.05},
        "new_external_share": {
            "source": "N: 2.2% at 12 h, 5.4% at 2 h; brief ~5%",
            "target": 0.04,
            "tolerance": 0.025,
        },
        "external_outlink_share": {"source": "N: 18.6%", "target": 0.186, "tolerance": 0.03},
        "digest_change_share": {"source": f"{_N}: 73%", "target": 0.73, "tolerance": 0.10},
        "digest_change_given_link_change": {"source": "N: 100%", "min": 0.95},
        "digest_change_given_no_link_change": {
            "source": f"{_N}: 17%",
            "target": 0.15,
            "tolerance": 0.08,
        },
        "never_gained_share": {
            "source": "N: 24% of pages (imprints, quiet sections) gain none in 22 h",
            "target": 0.20,
            "tolerance": 0.07,
        },
        "day_night_ratio": {"source": f"{_N}: 1.67", "target": 1.7, "tolerance": 0.35},
        "returning_share": {
            "source": "N: 1.1% at 12 h (one chance), 7.6% at 4 h: teasers come back",
            "min": 0.01,
            "max": 0.10,
        },
        "group_persistence": {"source": f"{_N}: 0.63", "min": 0.55},
        "group_persistence_lift": {"source": f"{_N}: 0.36", "min": 0.25},
        "ccdf_slope": {"source": f"{_N}: -1.47", "target": -1.45, "tolerance": 0.5},
        "share_total_ge_100": {"source": f"{_N}: 0.27%: tickers", "min": 1e-3, "max": 0.02},
        # Which baseline predicts: the page's own recent counts; content change hardly.
        "yield10_nnl_pr": {"source": "N: 0.81 at 2 h, 0.86 at 6 h", "min": 0.85},
        "yield10_nnl_pr - yield10_nnl_av": {"source": "recent as good as long-run", "min": -0.05},
        "yield10_ccr": {"source": "N: 0.28-0.34", "max": 0.5},
    }
)

_S = "S (docs.astro.build), 11 weekly intervals"
DOCS_TARGETS: dict[str, dict[str, Any]] = _table(
    {
        "new_total_mean": {"source": f"{_S}: 0.0102", "target": 0.011, "tolerance": 0.006},
        "zero_total_share": {"source": f"{_S}: 99.49%", "target": 0.994, "tolerance": 0.004},
        "new_external_share": {"source": f"{_S}: 58%", "target": 0.58, "tolerance": 0.12},
        "external_outlink_share": {"source": f"{_S}: 55%", "target": 0.55, "tolerance": 0.06},
        "digest_change_share": {"source": f"{_S}: 2.0%", "target": 0.02, "tolerance": 0.01},
        "digest_change_given_link_change": {"source": f"{_S}: 93%", "min": 0.85},
        "digest_change_given_no_link_change": {
            "source": f"{_S}: 1.45%",
            "target": 0.015,
            "tolerance": 0.01,
        },
        "never_gained_share": {"source": f"{_S}: 95%", "target": 0.94, "tolerance": 0.035},
        "interval_total_cv": {"source": f"{_S}: 1.2; S-timeline: release weeks", "min": 0.6},
        # Which baseline predicts: content change and translations; last week's links hardly.
        "yield10_nnl_pr": {"source": f"{_S}: 0.13", "max": 0.3},
        "yield10_ccr - yield10_nnl_av": {"source": f"{_S}: +0.03", "min": 0.0},
        "yield10_translations - yield10_nnl_av": {"source": f"{_S}: +0.02", "min": 0.0},
    }
)

_B = "brief (awesome lists)"
AGGREGATOR_TARGETS: dict[str, dict[str, Any]] = _table(
    {
        "new_external_share": {"source": f"{_B}: 80-95%", "target": 0.875, "tolerance": 0.075},
        "external_outlink_share": {
            "source": f"{_B}: lists link out",
            "target": 0.85,
            "tolerance": 0.1,
        },
        "new_total_mean": {"source": "a few maintained lists", "target": 0.8, "tolerance": 0.5},
        "zero_total_share": {
            "source": "a minority active each week",
            "target": 0.8,
            "tolerance": 0.08,
        },
        "never_gained_share": {"source": "many stale lists", "target": 0.6, "tolerance": 0.12},
        "digest_change_given_link_change": {"source": "list text changes with it", "min": 0.9},
        "group_persistence_total_lift": {"source": "steady rates", "min": 0.05},
        "share_total_ge_10": {"source": "batches of merged pull requests", "min": 0.005},
        # Which baseline predicts: the page's long-run rate, better than last week's count.
        "yield10_nnl_av": {"source": "persistent rates", "min": 0.45},
        "yield10_nnl_av - yield10_nnl_pr": {"source": "one week is a noisy sample", "min": 0.04},
    }
)

REGIME_TARGETS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": PAPER_TARGETS,
    "news": NEWS_TARGETS,
    "docs": DOCS_TARGETS,
    "aggregator": AGGREGATOR_TARGETS,
}


def measured(mean: dict[str, float], key: str) -> float:
    """The statistic a target names: a key of ``mean``, or ``"a - b"`` for a difference."""
    if " - " in key:
        a, b = key.split(" - ")
        return mean.get(a, math.nan) - mean.get(b, math.nan)
    return mean.get(key, math.nan)


def check_targets(
    mean: dict[str, float], targets: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per target: the statistic, its measured value, the allowed range and ``ok``."""
    rows: list[dict[str, Any]] = []
    for key, spec in targets.items():
        value = measured(mean, key)
        low = spec.get("low", spec.get("min", -math.inf))
        high = spec.get("high", spec.get("max", math.inf))
        rows.append(
            {
                "statistic": key,
                "value": value,
                "low": low,
                "high": high,
                "ok": (not math.isnan(value)) and low <= value <= high,
                "source": spec.get("source", spec.get("paper", "")),
            }
        )
    return rows
