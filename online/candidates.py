"""The candidate estimators the default scorer weighs: each a rate of new outlinks per day.

Every candidate estimates, per page and link side (internal, external), the rate of new
outlinks per day from the page's feature row; the scorer learns from the stream which to
trust (`online.hedge`). The paper's baselines are here as estimators in the same units, each
shrunk towards a prior by Bühlmann credibility (`online.credibility`: the weight of a page's
own ``n`` intervals is ``n / (n + k)``, with ``k`` estimated from the stream for each prior):

* ``nnl-av``: NNL-Av itself, the page's mean new outlinks per round of the site's typical
  interval over its window, as a rate per day (a page without any interval yet takes the rate
  pages showed in their first interval): the rule crawlers know, and the scorer's anchor on
  sites where it ranks well. The intervals are counted in rounds
  (`online.features.Window.rounds`): an interval that spans a skipped or failed fetch counts
  two, so its links are not taken for one round's, while the jitter of a crawler's rounds
  leaves NNL-Av's ties (equal counts over equal rounds) as they are;
* ``nnl-pr``: the page's own rate with the latest intervals weighing most (half-life one
  interval; NNL-Pr is its limit), shrunk to the site's rate, for pages whose pace changes;
* ``lbla``: the own rate shrunk to the related pages' rate (look back, look around): a page
  without history takes its neighbours' rate;
* ``ccr``: the own rate shrunk to what the page's content change rate predicts on this site
  (the site's rate in intervals with and without a content change, weighted by the page's
  share of changed intervals): CCR made a count;
* ``siblings``: the own rate shrunk to the rate its siblings (its translations,
  `online.links.sibling_key`) showed in their latest interval: on a site in several
  languages a page gains a link in one and then in the others (abstains without siblings);
* ``online``: the River learner's estimate (abstains until it has learned anything);
* ``batch``: the periodically refreshed batch model's estimate (abstains until one exists).

Every candidate's rate is scaled by the share of the page's fetches that succeeded: new
outlinks are counted only between two successful fetches, so a page that keeps failing shows
few, and one that never answered none.

Under NNL-Av and the flat prior (``nnl-pr``) pages with equal evidence tie; the other priors
tell them apart, which is what a sparse site needs and what the stream has to show is worth.

>>> import numpy as np
>>> names = ["dp_new_internal_1", "dp_new_external_1", "dp_content_changed_1",
...          "dp_interval_days_1", "dp_ccr", "dn_related_rate_internal_per_day",
...          "dn_related_rate_external_per_day"]
>>> columns = {n: j for j, n in enumerate(names)}
>>> X = np.array([[7.0, 0.0, 1.0, 7.0, 1.0, 0.1, 0.0],
...               [0.0, 0.0, 0.0, 7.0, 0.0, 0.5, 0.0]])
>>> prior = Priors(site_rate=np.array([0.2, 0.0]), changed_rate=np.array([0.5, 0.0]),
...                unchanged_rate=np.array([0.1, 0.0]), k=np.ones((4, 2)), interval_days=7.0)
>>> rates = candidate_rates(X, columns, prior)
>>> rates.shape, CANDIDATES[:2]
((2, 7, 2), ('nnl-av', 'nnl-pr'))
>>> rates[:, 0, 0].round(3).tolist()   # NNL-Av: 7 and 0 links per 7-day interval
[1.0, 0.0]
>>> rates[:, 1, 0].round(3).tolist()   # own rate 1/day and 0/day, half-way to 0.2
[0.6, 0.1]
>>> bool(np.isnan(rates[:, 4:]).all())  # no siblings, no learner yet: they abstain
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from online.features import Window, feature_column, window, window_columns

#: The candidates, in the order of the rate matrix's second axis.
CANDIDATES = ("nnl-av", "nnl-pr", "lbla", "ccr", "siblings", "online", "batch")
#: Which prior each formula candidate shrinks towards: row of `Priors.k`.
FLAT, RELATED, CONTENT, SIBLINGS = 0, 1, 2, 3
PRIORS = ("flat", "related", "content", "siblings")
#: Half-life, in intervals, of the recency weights of ``nnl-pr``.
RECENT_HALF_LIFE = 1.0


@dataclass(frozen=True)
class Priors:
    """What the stream has shown about the site (per side: internal, external): its rate per
    day, its rates in intervals with and without a content change, the credibility constant
    ``k`` (4 priors x 2 sides, in intervals), its typical interval in days and the rate of a
    page's first interval (``newcomer_rate``; the site's rate where not given)."""

    site_rate: np.ndarray
    changed_rate: np.ndarray
    unchanged_rate: np.ndarray
    k: np.ndarray
    interval_days: float
    newcomer_rate: np.ndarray | None = None


@dataclass(frozen=True)
class Evidence:
    """A batch's own-history summaries, shared by the candidates and the credibility fit."""

    window: Window
    intervals: np.ndarray  # (m,) observed intervals
    own_mean: np.ndarray  # (m, 2) new outlinks per interval over the window (NNL-Av)
    own_rate: np.ndarray  # (m, 2) new outlinks per day over the window
    recent_weight: np.ndarray  # (m,) sum of the recency weights of observed intervals
    recent_rate: np.ndarray  # (m, 2) recency-weighted rate per day
    related_rate: np.ndarray  # (m, 2) related pages' rate per day, NaN unknown
    sibling_last: np.ndarray  # (m, 2) siblings' new outlinks in their latest interval, NaN none
    ccr: np.ndarray  # (m,) share of intervals whose content changed, NaN without intervals
    alive: np.ndarray  # (m,) share of the page's fetches that succeeded (0: none ever did)


def evidence(X: np.ndarray, columns: Mapping[str, int]) -> Evidence:
    """The own-history and look-around summaries of feature rows ``X``."""
    w = window(X, window_columns(columns))
    n = w.present.sum(axis=1).astype(np.float64)
    links = w.counts.sum(axis=1)
    days = w.days.sum(axis=1)
    decay = np.where(w.present, 0.5 ** (np.arange(w.days.shape[1]) / RECENT_HALF_LIFE), 0.0)
    recent_days = (decay * w.days).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        own = np.where(days[:, None] > 0, links / days[:, None], 0.0)
        recent = np.where(
            recent_days[:, None] > 0,
            (decay[:, :, None] * w.counts).sum(axis=1) / recent_days[:, None],
            0.0,
        )
        ccr = np.where(n > 0, w.changed.sum(axis=1) / n, np.nan)
        mean = np.where(n[:, None] > 0, links / n[:, None], 0.0)
    related = np.column_stack(
        [
            feature_column(X, columns, f"dn_related_rate_{side}_per_day")
            for side in ("internal", "external")
        ]
    )
    sibling_last = np.column_stack(
        [
            feature_column(X, columns, f"dn_sibling_new_{side}_last")
            for side in ("internal", "external")
        ]
    )
    fetches = feature_column(X, columns, "dp_fetches")
    errors = np.nan_to_num(feature_column(X, columns, "dp_errors"))
    with np.errstate(divide="ignore", invalid="ignore"):
        alive = np.where(fetches > 0, 1.0 - errors / fetches, 1.0)
    return Evidence(w, n, mean, own, decay.sum(axis=1), recent, related, sibling_last, ccr, alive)


def prior_rates(ev: Evidence, priors: Priors) -> np.ndarray:
    """(m, 4, 2): each prior's rate per page and side (flat, related, content, siblings)."""
    newcomer = priors.site_rate if priors.newcomer_rate is None else priors.newcomer_rate
    flat = np.where((ev.intervals > 0)[:, None], priors.site_rate, newcomer)
    related = np.where(np.isnan(ev.related_rate), flat, ev.related_rate)
    ccr = np.nan_to_num(ev.ccr)[:, None]
    content = ccr * priors.changed_rate + (1.0 - ccr) * priors.unchanged_rate
    recent = ev.sibling_last / priors.interval_days
    siblings = np.where(np.isnan(recent), flat, recent)
    return np.stack([flat, related, content, siblings], axis=1)


def candidate_rates(
    X: np.ndarray,
    columns: Mapping[str, int],
    priors: Priors,
    *,
    online: np.ndarray | None = None,
    batch: np.ndarray | None = None,
    ev: Evidence | None = None,
) -> np.ndarray:
    """(m, len(CANDIDATES), 2) rates per day; NaN where a candidate abstains.

    ``online`` / ``batch``: the learners' rates per day (m, 2), None while they have none.
    """
    ev = ev if ev is not None else evidence(X, columns)
    m = len(X)
    out = np.full((m, len(CANDIDATES), 2), np.nan)
    base = prior_rates(ev, priors)
    n = ev.intervals[:, None]
    k = priors.k  # (3, 2)
    links = ev.window.counts.sum(axis=1)
    rounds = ev.window.rounds(priors.interval_days)[:, None]
    rounds = np.where(rounds > 0, rounds, n)  # intervals without a length: one round each
    with np.errstate(divide="ignore", invalid="ignore"):
        per_round = np.where(rounds > 0, links / (rounds * priors.interval_days), 0.0)
    out[:, 0] = np.where(n > 0, per_round, base[:, FLAT])
    out[:, 1] = _credible(ev.recent_rate, ev.recent_weight[:, None], base[:, FLAT], k[FLAT])
    out[:, 2] = _credible(ev.own_rate, n, base[:, RELATED], k[RELATED])
    out[:, 3] = np.where(
        np.isnan(ev.ccr)[:, None], np.nan, _credible(ev.own_rate, n, base[:, CONTENT], k[CONTENT])
    )
    out[:, 4] = np.where(
        np.isnan(ev.sibling_last[:, :1]),
        np.nan,
        _credible(ev.own_rate, n, base[:, SIBLINGS], k[SIBLINGS]),
    )
    if online is not None:
        out[:, 5] = online
    if batch is not None:
        out[:, 6] = batch
    # New outlinks come only from a successful fetch that follows another: a page whose
    # fetches fail shows them only as often as it answers, and one that never answered
    # (a link to a page that does not exist) shows none at its next fetch.
    return out * np.clip(ev.alive, 0.0, 1.0)[:, None, None]


def _credible(own: np.ndarray, n: np.ndarray, prior: np.ndarray, k: np.ndarray) -> np.ndarray:
    z = n / (n + k)
    return z * own + (1.0 - z) * prior
