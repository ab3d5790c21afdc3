"""A crawl's new-outlink statistics per fetch interval, from its events alone.

Deliberately independent of the project's link code, so it can validate generated (or real)
crawls against the regimes' targets (``batch.crawlgen.targets``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

__all__ = [
    "interval_statistics",
    "lookaround_correlation",
    "neighbour_correlation",
    "new_outlinks",
    "weekly_statistics",
    "yield_at",
]

_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")
# A leading language segment (/en/, /pt-br/): pages equal but for it are translations.
_LANGUAGE_PATH = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/?#]*)/([a-z]{2}(?:-[a-z]{2,4})?)(/.*)")
_DAY_HOURS = (8.0, 20.0)  # an interval whose midpoint falls in [8, 20) UTC is a "day" interval
SIGNAL_BUDGET = 0.10


def _site_key_uncached(authority: str, scheme: str) -> tuple[str, str]:
    """(scheme, host without port, userinfo, trailing dot or a leading 'www.'), lower-case."""
    host = authority.rpartition("@")[2].lower()
    ipv6 = host.startswith("[")
    host = (host[: host.find("]") + 1] if ipv6 else host.partition(":")[0]).rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    return scheme.lower(), host


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if mask.size else float("nan")


def _group(count: int) -> int:
    """Persistence groups of new internal links per interval: 0, 1-2, 3-10, >10."""
    return 0 if count == 0 else 1 if count <= 2 else 2 if count <= 10 else 3


def _seconds(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class _Interval:
    """One crawl's page-intervals (a 2xx fetch after a 2xx fetch of the same page)."""

    internal: list[int] = field(default_factory=list)
    external: list[int] = field(default_factory=list)
    returning: int = 0  # new links the page had linked before, at an earlier fetch
    digest: list[bool] = field(default_factory=list)
    link: list[bool] = field(default_factory=list)
    day: list[bool] = field(default_factory=list)  # per page-interval with fetch times
    days: list[float] = field(default_factory=list)


@dataclass
class _PageRecord:
    links: frozenset[str]
    digest: str | None
    n_external: int
    seconds: float | None


class _SiteOf:
    """(scheme, host) of a URL, cached by authority."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple[str, str]] = {}

    def __call__(self, url: str) -> tuple[str, str]:
        m = _AUTHORITY.match(url)
        if m is None:
            return ("", url)
        key = m.group(0)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = _site_key_uncached(m.group(2), m.group(1))
        return found


@dataclass
class _Scan:
    """What one pass over the events collects."""

    events: int = 0
    intervals: dict[int, _Interval] = field(default_factory=dict)
    internal_by_page: dict[str, dict[int, int]] = field(default_factory=dict)
    total_by_page: dict[str, dict[int, int]] = field(default_factory=dict)
    digest_by_page: dict[str, dict[int, bool]] = field(default_factory=dict)
    outlinks: dict[int, list[int]] = field(default_factory=dict)  # crawl -> [all, external]


def _scan(events: Iterable[dict[str, Any]]) -> _Scan:
    site = _SiteOf()
    scan = _Scan()
    prev: dict[str, _PageRecord] = {}
    ever: dict[str, set[str]] = {}
    for ev in events:
        scan.events += 1
        url, crawl, status = ev["url"], int(ev["crawl"]), int(ev["status"])
        if not 200 <= status < 300:
            prev.pop(url, None)
            continue
        links = frozenset(ev.get("outlinks") or ())
        own = site(url)
        digest = ev.get("content_digest")
        seconds = _seconds(ev.get("fetched_at"))
        seen = ever.setdefault(url, set())
        before = prev.get(url)
        if before is None:
            n_ext_all = sum(1 for u in links if site(u) != own)
            seen.update(links)
        else:
            # Only the difference needs classifying: most outlinks persist from fetch to fetch.
            new = links - before.links
            gone = before.links - links
            n_int = sum(1 for u in new if site(u) == own)
            n_ext_all = (
                before.n_external + len(new) - n_int - sum(1 for u in gone if site(u) != own)
            )
            w = scan.intervals.setdefault(crawl, _Interval())
            w.internal.append(n_int)
            w.external.append(len(new) - n_int)
            w.returning += len(new & seen)
            seen.update(new)
            if digest is not None and before.digest is not None:
                changed = digest != before.digest
                w.digest.append(changed)
                w.link.append(bool(new or gone))
                scan.digest_by_page.setdefault(url, {})[crawl] = changed
            if seconds is not None and before.seconds is not None and seconds > before.seconds:
                mid_hour = ((seconds + before.seconds) / 2.0 % 86_400) / 3_600
                w.day.append(_DAY_HOURS[0] <= mid_hour < _DAY_HOURS[1])
                w.days.append((seconds - before.seconds) / 86_400)
            scan.internal_by_page.setdefault(url, {})[crawl] = n_int
            scan.total_by_page.setdefault(url, {})[crawl] = len(new)
        prev[url] = _PageRecord(links, digest, n_ext_all, seconds)
        tot = scan.outlinks.setdefault(crawl, [0, 0])
        tot[0] += len(links)
        tot[1] += n_ext_all
    return scan


def _interval_row(crawl: int, w: _Interval, outlinks: list[int]) -> dict[str, Any]:
    ni = np.asarray(w.internal, dtype=np.float64)
    ne = np.asarray(w.external, dtype=np.float64)
    nt = ni + ne
    dig = np.asarray(w.digest, dtype=bool)
    link = np.asarray(w.link, dtype=bool)
    new_total = float(nt.sum())
    return {
        "crawl": crawl,
        "pages": int(ni.size),
        "new_internal_mean": float(ni.mean()),
        "new_internal_std": float(ni.std()),
        "new_external_mean": float(ne.mean()),
        "new_external_std": float(ne.std()),
        "new_total_mean": float(nt.mean()),
        "new_total_std": float(nt.std()),
        "new_total_max": int(nt.max()),
        "new_total_sum": int(new_total),
        "new_external_sum": int(ne.sum()),
        "returning_sum": w.returning,
        "zero_internal_share": float((ni == 0).mean()),
        "zero_external_share": float((ne == 0).mean()),
        "zero_total_share": float((nt == 0).mean()),
        "external_outlink_share": outlinks[1] / outlinks[0] if outlinks[0] else 0.0,
        "digest_change_share": _share(dig),
        "digest_change_given_link_change": _share(dig[link]),
        "digest_change_given_no_link_change": _share(dig[~link]),
        "interval_days": float(np.median(w.days)) if w.days else float("nan"),
        "day_share": _share(np.asarray(w.day, dtype=bool)),
    }


def _persistence(by_page: dict[str, dict[int, int]], crawls: list[int]) -> list[dict[str, Any]]:
    """Share of pages staying in their group (0, 1-2, 3-10, >10) from one interval to the next."""
    rows: list[dict[str, Any]] = []
    present = set(crawls)
    for crawl in crawls:
        if crawl + 1 not in present:
            continue
        a, b = [], []
        for counts in by_page.values():
            if crawl in counts and crawl + 1 in counts:
                a.append(_group(counts[crawl]))
                b.append(_group(counts[crawl + 1]))
        if not a:
            continue
        ga, gb = np.asarray(a), np.asarray(b)
        pa = np.bincount(ga, minlength=4) / ga.size
        pb = np.bincount(gb, minlength=4) / gb.size
        rows.append(
            {
                "crawl": crawl,
                "pages": int(ga.size),
                "stay_share": float((ga == gb).mean()),
                "independent_share": float((pa * pb).sum()),
            }
        )
    return rows


def yield_at(score: np.ndarray, truth: np.ndarray, budget: float = SIGNAL_BUDGET) -> float:
    """Share of the oracle's new links found by recrawling the top ``budget`` of pages by score.

    Ties at the cut are taken in expectation (as if broken at random), so the figure is
    deterministic and does not favour any page order. NaN when nothing is to be found.
    """
    k = max(1, round(budget * score.size))
    best = float(np.sort(truth)[::-1][:k].sum())
    if best <= 0:
        return float("nan")
    order = np.argsort(-score, kind="stable")
    cut = score[order[k - 1]]
    above = score > cut
    tied = score == cut
    found = float(truth[above].sum())
    found += (k - int(above.sum())) / int(tied.sum()) * float(truth[tied].sum())
    return found / best


def _translation_groups(urls: list[str]) -> np.ndarray | None:
    """Group id per page: pages equal but for a leading language segment share one; -1 alone."""
    keys: list[str | None] = []
    for url in urls:
        m = _LANGUAGE_PATH.match(url)
        keys.append(f"{m.group(1)}{m.group(3)}" if m else None)
    sizes: dict[str, int] = {}
    for key in keys:
        if key is not None:
            sizes[key] = sizes.get(key, 0) + 1
    ids: dict[str, int] = {}
    out = np.full(len(urls), -1, dtype=np.int64)
    for row, key in enumerate(keys):
        if key is not None and sizes[key] > 1:
            out[row] = ids.setdefault(key, len(ids))
    return out if ids else None


def _signals(scan: _Scan) -> dict[str, float]:
    """yield@10% of the simple baselines, each ranking pages with fetches before the interval.

    NNL-Pr: the page's new links in the previous interval; NNL-Av: their mean over all previous
    intervals; CCR: the share of previous intervals with a content (digest) change; translations:
    new links of the page's other-language copies in the previous interval. Averaged over the
    intervals from the third on, over pages counted in every interval.
    """
    crawls = sorted(scan.intervals)
    full = [u for u, c in scan.total_by_page.items() if len(c) == len(crawls)]
    if len(crawls) < 3 or len(full) < 10:
        return {}
    counts = np.array([[scan.total_by_page[u][c] for c in crawls] for u in full], np.float64)
    has_digest = all(len(scan.digest_by_page.get(u, {})) == len(crawls) for u in full)
    digests = (
        np.array([[scan.digest_by_page[u][c] for c in crawls] for u in full], np.float64)
        if has_digest
        else None
    )
    groups = _translation_groups(full)
    sibling_sum = None
    if groups is not None:
        member = groups >= 0
        sums = np.zeros((int(groups.max()) + 1, counts.shape[1]))
        np.add.at(sums, groups[member], counts[member])
        sibling_sum = np.where(member[:, None], sums[np.maximum(groups, 0)] - counts, 0.0)
    found: dict[str, list[float]] = {"nnl_pr": [], "nnl_av": [], "ccr": [], "translations": []}
    for t in range(2, len(crawls)):
        truth = counts[:, t]
        found["nnl_pr"].append(yield_at(counts[:, t - 1], truth))
        found["nnl_av"].append(yield_at(counts[:, :t].mean(axis=1), truth))
        if digests is not None:
            found["ccr"].append(yield_at(digests[:, :t].mean(axis=1), truth))
        if sibling_sum is not None:
            found["translations"].append(yield_at(sibling_sum[:, t - 1], truth))
    out: dict[str, float] = {}
    for name, values in found.items():
        kept = [v for v in values if not math.isnan(v)]
        if kept:
            out[f"yield10_{name}"] = float(np.mean(kept))
    return out


def interval_statistics(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The paper's new-outlink statistics per fetch interval (weekly in the paper), from events.

    New outlinks of a fetch are the unique URLs absent from the same page's previous fetch; only
    a 2xx fetch whose previous fetch was 2xx counts, under the crawl of the later fetch.
    Internal = same scheme and host, a leading 'www.' ignored.

    Returns ``weeks`` (one row per crawl with counted pages: one per interval, whatever its
    length), ``persistence`` (share of pages staying in their group 0 / 1-2 / 3-10 / >10 from
    one interval to the next, and that share if intervals were independent), ``ccdf_total``
    (share of page-intervals with >= x new links) and ``mean``: the figures averaged over
    intervals, keyed as the regimes' targets (``PAPER_TARGETS``), except these, pooled:
    ``external_outlink_share`` (over every 2xx fetch), ``never_gained_internal_share`` and
    ``never_gained_share`` (over pages counted in every interval), ``new_external_share``
    (external share of all new links), ``returning_share`` (share of new links that the page
    had linked at an earlier fetch, e.g. a teaser coming back), ``day_night_ratio`` (mean new
    links per page-interval whose midpoint is in 08-20 UTC over that in the rest),
    ``interval_total_cv`` (coefficient of variation of the new links per interval: bursts),
    ``group_persistence_total_lift`` (the persistence lift for all new links, not only internal
    ones) and the ``yield10_*`` of the simple baselines (``_signals``).
    """
    scan = _scan(events)
    crawls = sorted(scan.intervals)
    week_rows = [_interval_row(c, scan.intervals[c], scan.outlinks.get(c, [0, 0])) for c in crawls]
    persistence = _persistence(scan.internal_by_page, crawls)
    persistence_total = _persistence(scan.total_by_page, crawls)

    full = [c for c in scan.internal_by_page.values() if len(c) == len(crawls)]
    pages_all = full or list(scan.internal_by_page.values())
    never = (
        sum(1 for c in pages_all if not any(c.values())) / len(pages_all)
        if pages_all
        else float("nan")
    )
    full_total = [c for c in scan.total_by_page.values() if len(c) == len(crawls)]
    never_any = (
        sum(1 for c in full_total if not any(c.values())) / len(full_total)
        if full_total
        else float("nan")
    )

    totals = (
        np.concatenate(
            [np.add(scan.intervals[c].internal, scan.intervals[c].external) for c in crawls]
        )
        if crawls
        else np.zeros(0)
    )
    ccdf = {
        x: float((totals >= x).mean()) if totals.size else float("nan") for x in (1, 3, 10, 30, 100)
    }
    slope = (
        (math.log(ccdf[100]) - math.log(ccdf[3])) / (math.log(100) - math.log(3))
        if totals.size and ccdf[100] > 0 and ccdf[3] > 0
        else float("nan")
    )

    def avg(key: str, rows: list[dict[str, Any]]) -> float:
        vals = [r[key] for r in rows if not math.isnan(r[key])]
        return float(np.mean(vals)) if vals else float("nan")

    skip = ("crawl", "pages", "new_total_max", "new_total_sum", "new_external_sum", "returning_sum")
    mean: dict[str, float] = (
        {k: avg(k, week_rows) for k in week_rows[0] if k not in skip} if week_rows else {}
    )
    mean.pop("day_share", None)
    mean["external_outlink_share"] = sum(t[1] for t in scan.outlinks.values()) / max(
        1, sum(t[0] for t in scan.outlinks.values())
    )
    mean["never_gained_internal_share"] = never
    mean["never_gained_share"] = never_any
    new_sum = sum(r["new_total_sum"] for r in week_rows)
    mean["new_external_share"] = (
        sum(r["new_external_sum"] for r in week_rows) / new_sum if new_sum else float("nan")
    )
    mean["returning_share"] = (
        sum(r["returning_sum"] for r in week_rows) / new_sum if new_sum else float("nan")
    )
    mean["day_night_ratio"] = _day_night_ratio(scan)
    sums = np.array([r["new_total_sum"] / max(r["pages"], 1) for r in week_rows])
    mean["interval_total_cv"] = (
        float(sums.std() / sums.mean()) if sums.size and sums.mean() > 0 else float("nan")
    )
    if persistence:
        mean["group_persistence"] = avg("stay_share", persistence)
        mean["group_persistence_independent"] = avg("independent_share", persistence)
        mean["group_persistence_lift"] = (
            mean["group_persistence"] - mean["group_persistence_independent"]
        )
    if persistence_total:
        mean["group_persistence_total_lift"] = avg("stay_share", persistence_total) - avg(
            "independent_share", persistence_total
        )
    mean["ccdf_slope"] = slope
    mean["share_total_ge_10"] = ccdf[10]
    mean["share_total_ge_100"] = ccdf[100]
    mean.update(_signals(scan))
    return {
        "events": scan.events,
        "pages": len(scan.internal_by_page),
        "weeks": week_rows,
        "persistence": persistence,
        "ccdf_total": ccdf,
        "mean": mean,
    }


def _day_night_ratio(scan: _Scan) -> float:
    day_sum = day_n = night_sum = night_n = 0.0
    for w in scan.intervals.values():
        if len(w.day) != len(w.internal):
            continue  # some fetches carried no usable time
        totals = np.add(w.internal, w.external)
        is_day = np.asarray(w.day, dtype=bool)
        day_sum += float(totals[is_day].sum())
        day_n += int(is_day.sum())
        night_sum += float(totals[~is_day].sum())
        night_n += int((~is_day).sum())
    if not day_n or not night_n or night_sum == 0:
        return float("nan")
    return (day_sum / day_n) / (night_sum / night_n)


weekly_statistics = interval_statistics


def new_outlinks(events: Iterable[dict[str, Any]]) -> dict[str, dict[int, set[str]]]:
    """Per page and crawl, the outlinks absent from the page's previous fetch (2xx after 2xx)."""
    prev: dict[str, set[str]] = {}
    out: dict[str, dict[int, set[str]]] = {}
    for ev in events:
        url = ev["url"]
        if not 200 <= int(ev["status"]) < 300:
            prev.pop(url, None)
            continue
        links = set(ev.get("outlinks") or ())
        if url in prev:
            out.setdefault(url, {})[int(ev["crawl"])] = links - prev[url]
        prev[url] = links
    return out


def neighbour_correlation(vectors: np.ndarray, values: np.ndarray, k: int = 10) -> float:
    """Pearson r between each row's value and the mean over its k most cosine-similar rows.

    ``vectors`` are unit rows; exact search in blocks of 2,000 rows (quadratic: for crawls up
    to some tens of thousands of pages).
    """
    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    k = min(k, len(vecs) - 1)
    neighbours = np.empty((len(vecs), k), dtype=np.int64)
    for lo in range(0, len(vecs), 2_000):
        sim = vecs[lo : lo + 2_000] @ vecs.T
        rows = np.arange(sim.shape[0])
        sim[rows, lo + rows] = -np.inf
        neighbours[lo : lo + 2_000] = np.argpartition(-sim, k, axis=1)[:, :k]
    return float(np.corrcoef(values, values[neighbours].mean(axis=1))[0, 1])


def lookaround_correlation(events: list[dict[str, Any]], k: int = 10) -> float:
    """The look-around signal of a crawl with embeddings: ``neighbour_correlation`` of each
    page's log(1 + mean new outlinks) over the pages nearest to its first embedding (pages
    with at least three counted intervals)."""
    counts = new_outlinks(events)
    first: dict[str, Any] = {}
    for ev in events:
        if ev.get("embedding") is not None and 200 <= int(ev["status"]) < 300:
            first.setdefault(ev["url"], ev["embedding"])
    pages = [u for u, by_crawl in counts.items() if len(by_crawl) >= 3 and u in first]
    if len(pages) <= k:
        return float("nan")
    values = np.log1p([np.mean([len(v) for v in counts[u].values()]) for u in pages])
    return neighbour_correlation(np.array([first[u] for u in pages]), values, k)
