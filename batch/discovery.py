"""What a crawl found, judged from the timeline and the crawl's fetch log alone.

* A **link appearance** (`Timeline.link_appearances`) is discovered at the first fetch of its
  page at or after the time it appeared, if the link is still there then (a link removed before
  any such fetch is missed) and the fetch is within the window. Its delay is the time between.
* Delay statistics count every appearance, a missed one as never found: the median is the
  delay by which half of all appearances were found (``inf``: half were never found), the p90
  likewise; the mean is over the found ones.
* A **born page** (`Timeline.births`) is discovered at the first fetch at or after its birth
  that shows a link to it, or that fetches it alive itself (its URL may have been known before
  it existed).
* Overhead: budgeted fetches per link appearance found (Dasgupta et al., "The discoverability of
  the web", WWW 2007).

Internal and external appearances are also counted apart.

>>> from batch.timeline import TimelineParser
>>> parser = TimelineParser()
>>> t0 = 1_767_225_600  # 2026-01-01
>>> for n, line in enumerate([
...     f'{{"url": "https://a.org/", "at": {t0}, "outlinks": []}}',
...     f'{{"url": "https://a.org/", "at": {t0 + 86400}, "outlinks": ["https://a.org/new"]}}',
...     f'{{"url": "https://a.org/new", "at": {t0 + 86400}, "outlinks": []}}'], 1):
...     parser.add(line, n)
>>> timeline = parser.timeline(end=t0 + 10 * 86400)
>>> m = measure(timeline, ["https://a.org/"], [t0 + 3 * 86400])
>>> m.found, m.found_7d, m.delay_median_days, m.born_found, m.born_delay_median_days
(1, 1, 2.0, 1, 2.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from batch.timeline import DAY, Timeline

#: Discovery deadlines reported, in days.
WITHIN_DAYS = (1, 7)


@dataclass
class Discovery:
    """Discovery figures of one crawl (one policy at one budget)."""

    fetches: int
    fetches_discovered_urls: int
    appearances: int
    appearances_internal: int
    appearances_external: int
    found: int
    found_1d: int
    found_7d: int
    found_internal: int
    found_internal_7d: int
    found_external: int
    found_external_7d: int
    delay_median_days: float
    delay_p90_days: float
    delay_mean_days: float
    born: int
    born_found: int
    born_delay_median_days: float
    born_delay_mean_days: float
    #: per appearance (time order): its delay in days, ``inf`` where missed
    delays: np.ndarray = field(repr=False)
    #: per appearance: when it appeared / was found (``inf`` where missed), epoch seconds
    appeared_at: np.ndarray = field(repr=False)
    found_at: np.ndarray = field(repr=False)
    internal: np.ndarray = field(repr=False)

    @property
    def share_found(self) -> float:
        return self.found / self.appearances if self.appearances else math.nan

    @property
    def share_1d(self) -> float:
        return self.found_1d / self.appearances if self.appearances else math.nan

    @property
    def share_7d(self) -> float:
        return self.found_7d / self.appearances if self.appearances else math.nan

    @property
    def fetches_per_link(self) -> float:
        return self.fetches / self.found if self.found else math.inf

    def summary(self) -> dict[str, float | int]:
        """The figures without the per-appearance arrays, with the shares (JSON-ready:
        infinities as None)."""
        out = {k: v for k, v in asdict(self).items() if not isinstance(v, np.ndarray)}
        out.update(
            share_found=self.share_found,
            share_1d=self.share_1d,
            share_7d=self.share_7d,
            fetches_per_link=self.fetches_per_link,
        )
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in out.items()
        }


def measure(
    timeline: Timeline,
    urls: Sequence[str],
    times: Sequence[float],
    discovered: Sequence[bool] | None = None,
) -> Discovery:
    """Judge a crawl of ``timeline``: its budgeted fetches, ``urls[i]`` at ``times[i]``
    (``discovered[i]``: the URL was found during the crawl, not in the index at the start)."""
    fetch_times = _times_by_url(urls, times)
    appearances = timeline.link_appearances()
    n = len(appearances)
    appeared = np.array([a.appeared_at for a in appearances], dtype=np.float64)
    found_at = np.full(n, np.inf)
    for k, a in enumerate(appearances):
        ts = fetch_times.get(a.url)
        if ts is None:
            continue
        i = int(np.searchsorted(ts, a.appeared_at, side="left"))
        if i < len(ts) and ts[i] < a.removed_at and ts[i] <= timeline.end:
            found_at[k] = ts[i]
    delays = (found_at - appeared) / DAY
    internal = np.array([a.internal for a in appearances], dtype=bool)
    found = np.isfinite(delays)
    within = {d: found & (delays <= d) for d in WITHIN_DAYS}
    born_delays = _born_delays(timeline, urls, times)
    born_found = np.isfinite(born_delays)
    return Discovery(
        fetches=len(urls),
        fetches_discovered_urls=int(sum(discovered)) if discovered is not None else 0,
        appearances=n,
        appearances_internal=int(internal.sum()),
        appearances_external=int((~internal).sum()),
        found=int(found.sum()),
        found_1d=int(within[1].sum()),
        found_7d=int(within[7].sum()),
        found_internal=int((found & internal).sum()),
        found_internal_7d=int((within[7] & internal).sum()),
        found_external=int((found & ~internal).sum()),
        found_external_7d=int((within[7] & ~internal).sum()),
        delay_median_days=_quantile(delays, 0.5),
        delay_p90_days=_quantile(delays, 0.9),
        delay_mean_days=_mean(delays[found]),
        born=len(born_delays),
        born_found=int(born_found.sum()),
        born_delay_median_days=_quantile(born_delays[born_found], 0.5),
        born_delay_mean_days=float(born_delays[born_found].mean())
        if born_found.any()
        else math.inf,
        delays=delays,
        appeared_at=appeared,
        found_at=found_at,
        internal=internal,
    )


def _quantile(values: np.ndarray, q: float) -> float:
    """The q-quantile as an observed value (``inf`` counts as larger than any delay)."""
    if not len(values):
        return math.inf
    return float(np.quantile(values, q, method="inverted_cdf"))


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else math.inf


def _infinite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _times_by_url(urls: Sequence[str], times: Sequence[float]) -> dict[str, np.ndarray]:
    grouped: dict[str, list[float]] = {}
    for url, t in zip(urls, times, strict=True):
        grouped.setdefault(url, []).append(float(t))
    return {url: np.sort(np.array(ts)) for url, ts in grouped.items()}


def _born_delays(timeline: Timeline, urls: Sequence[str], times: Sequence[float]) -> np.ndarray:
    """Per born page (birth order): days from its birth to its discovery, ``inf`` if never."""
    births = timeline.births()
    born_at = {b.url: b.at for b in births}
    found: dict[str, float] = {}
    for url, t in sorted(zip(urls, times, strict=True), key=lambda pair: pair[1]):
        if t > timeline.end:
            break
        version = timeline.state_at(url, t)
        if version is None or not version.ok:
            continue
        for target in (url, *version.links):
            birth = born_at.get(target)
            if birth is not None and t >= birth and target not in found:
                found[target] = t
    return np.array(
        [(found[b.url] - b.at) / DAY if b.url in found else np.inf for b in births],
        dtype=np.float64,
    )
