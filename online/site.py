"""What the stream has shown about the site as a whole: rates, rhythm and content coupling.

Learned from labelled fetches only (a fetch's label is the new outlinks found at the page's
next fetch), so every figure is what a crawler could have known at that point:

* the site's rate of new internal / external outlinks per day (the flat prior of a page
  with history);
* the rate of a page's first interval, from the labels of fetches that were their page's
  first (the flat prior of a page without history): where the crawler keeps finding new pages
  (articles, items), those need not be as busy as the pages they were found on, and on a
  crawl whose pages all start together it is the site's first-round rate;
* the typical interval between two fetches of a page (the geometric mean of the labelled
  intervals: 2 hours for a news crawl, a week for a weekly one, and a few odd intervals do not
  move it much), the unit in which the scorer's epochs are set;
* the rate per day in intervals where the page's content changed and where it did not: how
  far a content change announces new links on this site (strongly on documentation sites,
  hardly on generated pages).

>>> site = SiteStats()
>>> site.learn(np.array([[2, 0], [0, 0]]), np.array([7.0, 7.0]), np.array([True, False]))
>>> site.rate_per_day().round(3).tolist(), round(site.typical_interval_days(), 6)
([0.143, 0.0], 7.0)
>>> changed, unchanged = site.content_rates()
>>> changed.round(3).tolist(), unchanged.round(3).tolist()
([0.286, 0.0], [0.0, 0.0])
>>> site.learn(np.array([[0, 0]]), np.array([7.0]), np.array([False]), first=np.array([True]))
>>> site.newcomer_rate_per_day().round(3).tolist(), site.rate_per_day().round(3).tolist()
([0.0, 0.0], [0.095, 0.0])
"""

from __future__ import annotations

import numpy as np


class SiteStats:
    """Site-wide statistics from labels (counts per side, interval days, content changed)."""

    def __init__(self) -> None:
        self.links = np.zeros(2)  # new (internal, external) outlinks over all labels
        self.days = 0.0
        self.labels = 0
        self.links_changed = np.zeros(2)  # ... in intervals whose content changed
        self.days_changed = 0.0
        self.log_days = 0.0  # sum of log(interval days)
        self.links_first = np.zeros(2)  # ... in the first interval of a page
        self.days_first = 0.0

    def learn(
        self,
        counts: np.ndarray,
        days: np.ndarray,
        changed: np.ndarray,
        first: np.ndarray | None = None,
    ) -> None:
        """Labelled intervals: ``counts`` (m, 2) new internal / external outlinks, ``days``
        (m,) their lengths, ``changed`` (m,) whether the content changed in them, ``first``
        (m,) whether each was its page's first interval (none, if not given)."""
        counts = np.asarray(counts, dtype=np.float64).reshape(-1, 2)
        days = np.asarray(days, dtype=np.float64)
        ok = np.isfinite(days) & (days > 0) & np.isfinite(counts).all(axis=1)
        if not ok.any():
            return
        counts, days, changed = counts[ok], days[ok], np.asarray(changed, bool)[ok]
        first = np.zeros(len(days), bool) if first is None else np.asarray(first, bool)[ok]
        self.links += counts.sum(axis=0)
        self.days += float(days.sum())
        self.labels += int(ok.sum())
        self.links_changed += counts[changed].sum(axis=0)
        self.days_changed += float(days[changed].sum())
        self.log_days += float(np.log(days).sum())
        self.links_first += counts[first].sum(axis=0)
        self.days_first += float(days[first].sum())

    def rate_per_day(self) -> np.ndarray:
        """New (internal, external) outlinks per day per page (0 before any label)."""
        return self.links / self.days if self.days > 0 else np.zeros(2)

    def newcomer_rate_per_day(self) -> np.ndarray:
        """New (internal, external) outlinks per day in a page's first interval (the site's
        rate before any first interval is labelled)."""
        return self.links_first / self.days_first if self.days_first > 0 else self.rate_per_day()

    def content_rates(self) -> tuple[np.ndarray, np.ndarray]:
        """Rates per day (per side) in intervals with and without a content change; the
        site's overall rate where one kind has not been seen."""
        overall = self.rate_per_day()
        unchanged_days = self.days - self.days_changed
        changed = self.links_changed / self.days_changed if self.days_changed > 0 else overall
        unchanged = (
            (self.links - self.links_changed) / unchanged_days if unchanged_days > 0 else overall
        )
        return changed, unchanged

    def typical_interval_days(self, default: float = 7.0) -> float:
        """The typical interval between a page's fetches (``default`` before any label)."""
        return float(np.exp(self.log_days / self.labels)) if self.labels else default

    def state(self) -> dict[str, object]:
        return {
            "links": self.links.tolist(),
            "days": self.days,
            "labels": self.labels,
            "links_changed": self.links_changed.tolist(),
            "days_changed": self.days_changed,
            "log_days": self.log_days,
            "links_first": self.links_first.tolist(),
            "days_first": self.days_first,
        }

    @classmethod
    def from_state(cls, state: dict) -> SiteStats:
        site = cls()
        site.links = np.asarray(state["links"], dtype=np.float64)
        site.days = float(state["days"])
        site.labels = int(state["labels"])
        site.links_changed = np.asarray(state["links_changed"], dtype=np.float64)
        site.days_changed = float(state["days_changed"])
        site.log_days = float(state["log_days"])
        # States stored before first intervals were counted apart have none of them.
        site.links_first = np.asarray(state.get("links_first", [0.0, 0.0]), dtype=np.float64)
        site.days_first = float(state.get("days_first", 0.0))
        return site
