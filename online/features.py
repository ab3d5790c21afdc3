"""Named features in the paper's taxonomy (SP, SN, DP, DN) and the LBLA set.

Every feature of a fetch is computed from the page's state right after that fetch and from its
related pages' stats as they stood when the fetch was processed, so a prediction for the page's
NEXT interval never sees that interval (progressive validation).

Prefixes say where a feature comes from:
``sp_`` static page, ``sn_`` static network (incl. related pages' static values),
``dp_`` dynamic page (the page's own history: look back), ``dn_`` dynamic network (related
pages' history: look around; ``dn_sibling_`` the page's translations, ``dn_related_`` its
nearest pages by content). A missing value is simply absent from the dict (River's
convention); `feature_vector` fills NaN for table columns.

>>> names = feature_names(history=2)
>>> [n for n in names if n.startswith("dp_new_internal")]
['dp_new_internal_1', 'dp_new_internal_2', 'dp_new_internal_mean']
>>> "dn_related_lcr_internal" in FEATURE_SETS["LBLA"](names)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from online.history import DEFAULT_HISTORY, SN_FIELDS, SP_FIELDS, PageState
from online.kernels import own_feature_rows, weighted_stat_means
from online.links import CACHE_SIZE, LinkInfo, canonical_path_depth, domain_depth

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
#: Stats that can exceed half precision's range (sizes in bytes): kept in float32 where the
#: others are kept in half precision (`online.stores.to_half`), as are the look-around
#: features averaged from them.
WIDE_STATS = ("content_size", "text_size")
#: Whether the pipeline stores stats, related-page weights and look-around rows in half
#: precision (`online.pipeline.PipelineConfig.compact_store`): off by default, see there.
DEFAULT_COMPACT_STORE = False


_AGGREGATES = (
    "dp_intervals",
    "dp_fetches",
    "dp_errors",
    "dp_new_internal_mean",
    "dp_new_external_mean",
    "dp_lcr_internal",
    "dp_lcr_external",
    "dp_ccr",
    "dp_interval_days_mean",
    "dp_rate_internal_per_day",
    "dp_rate_external_per_day",
    "dp_intervals_since_new",
)
_LAGGED = ("new_internal", "new_external", "content_changed", "interval_days")


def own_feature_names(history: int = DEFAULT_HISTORY) -> list[str]:
    """Names of the features a page has from its own state, in `own_features` order."""
    names = [f"sp_{n}" for n in SP_FIELDS] + ["sp_url_path_depth", "sp_domain_depth"]
    names += [f"sn_{n}" for n in SN_FIELDS]
    names += [f"dp_previous_{n}" for n in SP_FIELDS]
    for kind in _LAGGED:
        names += [f"dp_{kind}_{lag}" for lag in range(1, history + 1)]
    return names + list(_AGGREGATES)


#: Related pages per page (the paper's k): the one default that PipelineConfig, the settings
#: and the CLI refer to. Here, with the look-around features, so that the settings can read it
#: without loading the pipeline (FAISS, the learners).
DEFAULT_NEIGHBOURS = 30

#: Features from related pages (look around), in `related_features` column order.
RELATED_NAMES = [
    "sn_related_count",
    "dn_related_coverage",
    *[
        ("dn_related_" if name in _DYNAMIC_STATS else "sn_related_") + name
        for name in STATS_FIELDS
        if name != "intervals"
    ],
]
_RELATED_STATS = [j for j, name in enumerate(STATS_FIELDS) if name != "intervals"]


#: Features from the page's siblings, its translations (`online.links.sibling_key`): how
#: many, their link change rates, the new outlinks of their latest interval, their rates.
SIBLING_NAMES = [
    "sn_sibling_count",
    "dn_sibling_lcr_internal",
    "dn_sibling_lcr_external",
    "dn_sibling_new_internal_last",
    "dn_sibling_new_external_last",
    "dn_sibling_rate_internal_per_day",
    "dn_sibling_rate_external_per_day",
]
#: Where each sibling feature sits among `related_features`' columns.
SIBLING_COLUMNS = [RELATED_NAMES.index(n.replace("sibling", "related")) for n in SIBLING_NAMES]
#: The look-around part of a feature row (what follows the page's own features): the only
#: part of a row that is stored until its label arrives, the own part being recomputed from
#: the page's state (`online.pipeline`).
LOOKAROUND_NAMES = RELATED_NAMES + SIBLING_NAMES
#: Which stats columns, and which look-around columns, are kept in float32 (`WIDE_STATS`).
STATS_WIDE = np.array([name in WIDE_STATS for name in STATS_FIELDS])
LOOKAROUND_WIDE = np.array([name.endswith(WIDE_STATS) for name in LOOKAROUND_NAMES])


def feature_names(history: int = DEFAULT_HISTORY) -> list[str]:
    """Every feature name, in the column order of the feature matrix."""
    return own_feature_names(history) + RELATED_NAMES + SIBLING_NAMES


_DEPTHS: dict[str, tuple[float, float]] = {}


def _depths(url: str) -> tuple[float, float]:
    depths = _DEPTHS.get(url)
    if depths is None:
        if len(_DEPTHS) >= CACHE_SIZE:
            _DEPTHS.clear()
        # An event's URL is normalised already (`online.events`): no second normalising
        depths = (float(canonical_path_depth(url)), float(domain_depth(url)))
        _DEPTHS[url] = depths
    return depths


def own_features(state: PageState, page: LinkInfo, history: int = DEFAULT_HISTORY) -> list[float]:
    """A page's own features right after its latest fetch, NaN where unknown.

    Lags run from the most recent interval (1) back to ``history``.
    """
    return own_feature_matrix([state], [page.url], history)[0].tolist()


def own_feature_matrix(
    states: Sequence[PageState], urls: Sequence[str], history: int = DEFAULT_HISTORY
) -> np.ndarray:
    """`own_features` of many pages as one (n, n_own) float64 matrix, in one compiled pass
    (`online.kernels.own_feature_rows`): sums run over the lags in a fixed order (most recent
    first), so a row is the same whatever the batch."""
    return own_feature_rows(list(states), list(map(_depths, urls)), history)


def stats_columns(history: int = DEFAULT_HISTORY) -> list[int]:
    """Where each STATS_FIELDS value sits in an `own_features` row (history >= 1)."""
    names = own_feature_names(history)
    source = {
        "lcr_internal": "dp_lcr_internal",
        "lcr_external": "dp_lcr_external",
        "new_internal_mean": "dp_new_internal_mean",
        "new_external_mean": "dp_new_external_mean",
        "new_internal_last": "dp_new_internal_1",
        "new_external_last": "dp_new_external_1",
        "rate_internal_per_day": "dp_rate_internal_per_day",
        "rate_external_per_day": "dp_rate_external_per_day",
        "intervals": "dp_intervals",
        **{name: f"sp_{name}" for name in _STATIC_STATS},
    }
    return [names.index(source[field]) for field in STATS_FIELDS]


def page_stats(state: PageState, page: LinkInfo, history: int = DEFAULT_HISTORY) -> np.ndarray:
    """The float32 stats row this page contributes to its neighbours' look-around features."""
    history = max(history, 1)
    row = np.array(own_features(state, page, history), dtype=np.float64)
    return row[stats_columns(history)].astype(np.float32)


class Window(NamedTuple):
    """The own-history window of many feature rows, most recent interval first: new
    (internal, external) outlinks ``counts`` (m, H, 2), interval ``days`` (m, H), whether the
    content ``changed`` (m, H), and which intervals are ``present`` (m, H)."""

    counts: np.ndarray
    days: np.ndarray
    changed: np.ndarray
    present: np.ndarray

    def rates(self) -> np.ndarray:
        """New outlinks per day in each interval (m, H, 2); 0 where absent."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self.counts / self.days[:, :, None]
        return np.where(self.present[:, :, None] & (self.days[:, :, None] > 0), out, 0.0)

    def rounds(self, round_days: float) -> np.ndarray:
        """Each row's intervals counted in rounds of ``round_days`` (m,): an interval of about
        one round (from half a round to one and a half) counts one, one that spans a skipped
        or failed fetch two or more, one shorter than half a round its share of a round. A
        crawler's rounds spread over time, and that jitter tells nothing of a page's rate; the
        rounds an interval spans do.

        >>> w = Window(np.zeros((1, 4, 2)), np.array([[6.0, 8.5, 14.2, 1.4]]), np.zeros((1, 4)),
        ...            np.array([[True, True, True, True]]))
        >>> w.rounds(7.0).round(3).tolist()
        [4.2]
        """
        span = self.days / round_days
        span = np.where(span < 0.5, span, np.floor(span + 0.5))
        return np.where(self.present & (self.days > 0), span, 0.0).sum(axis=1)


def window_columns(columns: Mapping[str, int]) -> np.ndarray:
    """Column positions of the window's lagged values: (4, H) for new internal, new
    external, content changed and days, lag 1 first, -1 for a value the rows lack (an empty H
    when they have no lag at all)."""
    lags = []
    lag = 1
    while any(f"dp_{kind}_{lag}" in columns for kind in _LAGGED):
        lags.append([columns.get(f"dp_{kind}_{lag}", -1) for kind in _LAGGED])
        lag += 1
    return np.array(lags, dtype=np.int64).reshape(-1, 4).T


def feature_column(X: np.ndarray, columns: Mapping[str, int], name: str) -> np.ndarray:
    """Feature ``name``'s column of rows ``X`` (float64), all NaN where the rows lack it."""
    j = columns.get(name)
    return np.full(len(X), np.nan) if j is None else X[:, j].astype(np.float64)


def window(X: np.ndarray, at: np.ndarray) -> Window:
    """The own-history window of feature rows ``X``, given `window_columns` positions. An
    interval is present where its days are known, or (rows without days) its counts."""

    def lagged(kind: int) -> np.ndarray:
        out = X[:, np.maximum(at[kind], 0)].astype(np.float64)
        return np.where(at[kind] >= 0, out, np.nan)

    days, internal, external = lagged(3), lagged(0), lagged(1)
    present = ~np.isnan(days) | ((at[3] < 0) & ~(np.isnan(internal) & np.isnan(external)))
    counts = np.stack([internal, external], axis=2)
    counts = np.where(present[:, :, None], np.nan_to_num(counts), 0.0)
    changed = np.where(present, np.nan_to_num(lagged(2)), 0.0) > 0
    return Window(counts, np.where(present, np.nan_to_num(days), 0.0), changed, present)


def related_features(weights: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """Look-around features of a batch: weighted means of related pages' stats.

    ``weights`` (B, k) sum to 1 per row over the neighbours found (0 for empty slots);
    ``stats`` (B, k, N_STATS). Unknown (NaN) stats drop out of each mean; a row without
    neighbours is all NaN. Sums run over neighbours in slot order, the same arithmetic
    for a row whatever the batch size.
    """
    b, k = np.shape(weights)
    versions = np.asarray(stats).reshape(b * k, -1)
    return related_features_of_versions(weights, versions, np.arange(b * k).reshape(b, k))


def related_features_of_versions(
    weights: np.ndarray, versions: np.ndarray, version: np.ndarray
) -> np.ndarray:
    """`related_features` where slot (i, j) holds stats row ``versions[version[i, j]]``
    (-1: no neighbour). The pipeline's form: no (B, k, N_STATS) copies are made; the weighted
    means are one compiled pass over the slots in order (`online.kernels.weighted_stat_means`),
    so a row is the same whatever the batch."""
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    version = np.ascontiguousarray(version, dtype=np.int64)
    versions = np.asarray(versions)
    if versions.dtype != np.float32:
        versions = versions.astype(np.float64)
    means, den = weighted_stat_means(weights, np.ascontiguousarray(versions), version)
    w = np.where(version >= 0, weights, 0.0)
    out = np.empty((len(w), len(RELATED_NAMES)), dtype=np.float64)
    count = (w > 0).sum(axis=1).astype(np.float64)
    out[:, 0] = count
    out[:, 1] = den[:, 0]
    out[:, 2:] = means[:, _RELATED_STATS]
    out[count == 0] = np.nan
    return out


def look_around(weights: np.ndarray, stats: np.ndarray) -> dict[str, float]:
    """`related_features` for one page, as a dict of the known values."""
    if len(weights) == 0:
        return {}
    row = related_features(weights[None, :].astype(np.float64), stats[None, :, :])[0]
    return as_dict(row, RELATED_NAMES)


def page_features(
    state: PageState,
    page: LinkInfo,
    related: dict[str, float] | None = None,
    *,
    history: int = DEFAULT_HISTORY,
) -> dict[str, float]:
    """All known features of a page after its latest fetch, as a dict (River's form)."""
    feats = as_dict(own_features(state, page, history), own_feature_names(history))
    if related:
        feats.update(related)
    return feats


def as_dict(row: Sequence[float] | np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """A feature row as a dict, missing (NaN) values left out."""
    return {name: float(v) for name, v in zip(names, row, strict=True) if v == v}


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
    "LBLA": _select(prefixes=(*_LOOK_BACK, "dn_related_", "dn_sibling_")),
    "LB": _select(prefixes=_LOOK_BACK),
    "LA": _select(prefixes=("dn_related_", "dn_sibling_")),
    **{
        f"SP+SN+DP+DN/{h}": _select(prefixes=("sp_", "sn_", "dp_", "dn_"), history=h)
        for h in range(DEFAULT_HISTORY + 1)
    },
}
