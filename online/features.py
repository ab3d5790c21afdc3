"""Named features in the paper's taxonomy (SP, SN, DP, DN) and the LBLA set.

Every feature of a fetch is computed from the page's state right after that fetch and from its
related pages' stats as they stood when the fetch was processed, so a prediction for the page's
NEXT interval never sees that interval (progressive validation).

Prefixes say where a feature comes from:
``sp_`` static page, ``sn_`` static network (incl. related pages' static values),
``dp_`` dynamic page (the page's own history: look back), ``dn_`` dynamic network (related
pages' history: look around). A missing value is simply absent from the dict (River's
convention); `feature_vector` fills NaN for table columns.

>>> names = feature_names(history=2)
>>> [n for n in names if n.startswith("dp_new_internal")]
['dp_new_internal_1', 'dp_new_internal_2', 'dp_new_internal_mean']
>>> "dn_related_lcr_internal" in FEATURE_SETS["LBLA"](names)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from online.history import DEFAULT_HISTORY, SN_FIELDS, SP_FIELDS, PageState
from online.links import LinkInfo, domain_depth, url_path_depth

#: Per-page stats that related pages contribute (one float32 row per page in the stats store).
#: Dynamic columns are NaN until the page has at least one interval.
STATS_FIELDS = (
    "lcr_internal",
    "lcr_external",
    "new_internal_mean",
    "new_external_mean",
    "new_internal_last",
    "new_external_last",
    "rate_internal_per_day",
    "rate_external_per_day",
    "intervals",
    "content_size",
    "text_size",
    "text_quality",
    "internal_outlinks",
    "external_outlinks",
    "url_path_depth",
    "domain_depth",
)
_DYNAMIC_STATS = STATS_FIELDS[:8]
_STATIC_STATS = STATS_FIELDS[9:]
N_STATS = len(STATS_FIELDS)


def page_stats(state: PageState, page: LinkInfo) -> np.ndarray:
    """The float32 stats row this page contributes to its neighbours' look-around features."""
    lcr = state.lcr()
    av = state.nnl_average()
    pr = state.nnl_previous()
    rate = state.rates_per_day()
    row = (
        *lcr,
        *av,
        *pr,
        *rate,
        float(len(state.window)),
        *state.sp,
        float(url_path_depth(page.url)),
        float(domain_depth(page.url)),
    )
    return np.array(row, dtype=np.float32)


def look_around(weights: np.ndarray, stats: np.ndarray) -> dict[str, float]:
    """Weighted means of related pages' stats; NaN entries (unknown) drop out of each mean.

    ``weights`` (k,) sum to 1 over the neighbours found; ``stats`` is (k, N_STATS).
    """
    if len(weights) == 0:
        return {}
    known = ~np.isnan(stats)
    den = weights @ known
    num = weights @ np.where(known, stats, 0.0)
    out: dict[str, float] = {
        "sn_related_count": float(np.count_nonzero(weights)),
        "dn_related_coverage": float(den[0]),
    }
    for j, name in enumerate(STATS_FIELDS):
        if den[j] <= 0 or name == "intervals":
            continue
        prefix = "dn_related_" if name in _DYNAMIC_STATS else "sn_related_"
        out[prefix + name] = float(num[j] / den[j])
    return out


def page_features(
    state: PageState,
    page: LinkInfo,
    related: dict[str, float] | None = None,
    *,
    history: int = DEFAULT_HISTORY,
) -> dict[str, float]:
    """All named features of a page after its latest fetch (missing values left out)."""
    feats: dict[str, float] = {}
    for name, value in zip(SP_FIELDS, state.sp, strict=True):
        _put(feats, "sp_" + name, value)
    feats["sp_url_path_depth"] = float(url_path_depth(page.url))
    feats["sp_domain_depth"] = float(domain_depth(page.url))
    for name, value in zip(SN_FIELDS, state.sn, strict=True):
        _put(feats, "sn_" + name, value)
    for name, value in zip(SP_FIELDS, state.sp_previous, strict=True):
        _put(feats, "dp_previous_" + name, value)

    window = state.window[-history:] if history > 0 else ()
    recent = window[::-1]
    for lag, iv in enumerate(recent, start=1):
        feats[f"dp_new_internal_{lag}"] = float(iv.new_internal)
        feats[f"dp_new_external_{lag}"] = float(iv.new_external)
        feats[f"dp_content_changed_{lag}"] = float(iv.content_changed)
        feats[f"dp_interval_days_{lag}"] = iv.days
    feats["dp_intervals"] = float(len(window))
    feats["dp_fetches"] = float(state.fetches)
    feats["dp_errors"] = float(state.errors)
    if window:
        n = len(window)
        days = sum(iv.days for iv in window)
        feats["dp_new_internal_mean"] = sum(iv.new_internal for iv in window) / n
        feats["dp_new_external_mean"] = sum(iv.new_external for iv in window) / n
        feats["dp_lcr_internal"] = sum(1 for iv in window if iv.new_internal) / n
        feats["dp_lcr_external"] = sum(1 for iv in window if iv.new_external) / n
        feats["dp_ccr"] = sum(1 for iv in window if iv.content_changed) / n
        feats["dp_interval_days_mean"] = days / n
        if days > 0:
            feats["dp_rate_internal_per_day"] = sum(iv.new_internal for iv in window) / days
            feats["dp_rate_external_per_day"] = sum(iv.new_external for iv in window) / days
        feats["dp_intervals_since_new"] = float(
            next((i for i, iv in enumerate(recent) if iv.new_total), n)
        )
    if related:
        feats.update(related)
    return feats


def _put(feats: dict[str, float], name: str, value: float) -> None:
    if not math.isnan(value):
        feats[name] = value


def feature_names(history: int = DEFAULT_HISTORY) -> list[str]:
    """Every feature name `page_features` can produce, in a stable column order."""
    names = [f"sp_{n}" for n in SP_FIELDS] + ["sp_url_path_depth", "sp_domain_depth"]
    names += [f"sn_{n}" for n in SN_FIELDS]
    names += ["sn_related_count"] + [f"sn_related_{n}" for n in _STATIC_STATS]
    names += [f"dp_previous_{n}" for n in SP_FIELDS]
    for kind in ("new_internal", "new_external", "content_changed", "interval_days"):
        names += [f"dp_{kind}_{lag}" for lag in range(1, history + 1)]
        if kind.startswith("new_"):
            names.append(f"dp_{kind}_mean")
    names += [
        "dp_intervals",
        "dp_fetches",
        "dp_errors",
        "dp_lcr_internal",
        "dp_lcr_external",
        "dp_ccr",
        "dp_interval_days_mean",
        "dp_rate_internal_per_day",
        "dp_rate_external_per_day",
        "dp_intervals_since_new",
    ]
    names += ["dn_related_coverage"] + [f"dn_related_{n}" for n in _DYNAMIC_STATS]
    return names


def feature_vector(features: dict[str, float], names: Sequence[str]) -> list[float]:
    """Features as a row in ``names`` order, NaN where missing."""
    return [features.get(name, math.nan) for name in names]


_WINDOW_AGGREGATES = (
    "_mean",
    "dp_lcr_",
    "dp_ccr",
    "dp_rate_",
    "dp_intervals",
)


def _lags_at_most(h: int) -> Callable[[str], bool]:
    """Keep lags 1..h; window aggregates summarise all H lags, so they go when h < H."""

    def keep(name: str) -> bool:
        tail = name.rsplit("_", 1)[-1]
        if tail.isdigit():
            return int(tail) <= h
        if name.startswith("dp_") and h < DEFAULT_HISTORY:
            return not any(part in name for part in _WINDOW_AGGREGATES)
        return True

    return keep


_LOOK_BACK = (
    "dp_new_internal",
    "dp_new_external",
    "dp_lcr_",
    "dp_rate_",
    "dp_intervals",
)


def _select(*, prefixes: tuple[str, ...], history: int | None = None) -> Callable:
    lags = _lags_at_most(history) if history is not None else (lambda _name: True)

    def pick(names: Sequence[str]) -> list[str]:
        return [n for n in names if n.startswith(prefixes) and lags(n)]

    return pick


#: The paper's feature sets, by name: each maps the full name list to the subset it uses.
#: ``SP+SN+DP+DN/h`` keeps lags 1..h of the dynamic page features (history size h).
FEATURE_SETS: dict[str, Callable[[Sequence[str]], list[str]]] = {
    "SP": _select(prefixes=("sp_",)),
    "SP+SN": _select(prefixes=("sp_", "sn_")),
    "SP+SN+DP+DN": _select(prefixes=("sp_", "sn_", "dp_", "dn_")),
    "LBLA": _select(prefixes=(*_LOOK_BACK, "dn_related_")),
    "LB": _select(prefixes=_LOOK_BACK),
    "LA": _select(prefixes=("dn_related_",)),
    **{
        f"SP+SN+DP+DN/{h}": _select(prefixes=("sp_", "sn_", "dp_", "dn_"), history=h)
        for h in range(DEFAULT_HISTORY + 1)
    },
}
