"""The ``news`` regime: front and section pages of news sites, fetched every 12 hours.

Shaped after ../shared/data/N (183 German news section pages every 2 hours) with its figures
carried to 12 hours: articles are published around the clock but more by day (a day rhythm,
so with fetches at 06:00 and 18:00 UTC day and night intervals alternate), and each page's
teaser box takes them at its own rate per day. Rates are heavy-tailed (tickers and home pages
take tens to hundreds per interval; imprint, privacy and contact pages none), persist (a page's
own recent counts predict its next ones) and drift with the news: a page's and its topic's
"hotness" wander (log AR(1) with a correlation time of days). Teaser boxes rotate, so a teaser
that dropped out can come back (new again); few new links are external (~3-5%).

Everything is in time units (rates per day, correlation times in days), so another
``interval_days`` gives what a crawler fetching at that interval would see: the zero share
falls as the interval grows, links per day stay.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from batch.crawlgen.links import ExternalUrls, FreshUrls, append_capped
from batch.crawlgen.world import (
    ContentDynamics,
    World,
    logit,
    per_interval,
    sigmoid,
    stratified,
)

__all__ = ["NewsDynamics", "NewsWorld"]

_SECTIONS = (
    "politics", "economy", "sport", "culture", "science", "tech", "travel", "health",
    "local", "world", "opinion", "video", "panorama", "cars", "money", "weather",
)  # fmt: skip
_SERVICE = ("imprint", "privacy", "contact", "terms", "archive", "newsletter", "about", "jobs")
_EXT_WORDS = ("share", "story", "video", "partner", "shop", "app", "profile", "live")
_DROPPED_KEPT = 40  # teasers a page remembers after they drop out (for rotation)


@dataclass(frozen=True)
class NewsDynamics(ContentDynamics):
    """News constants, in rates per day; calibrated so the crawl meets ``NEWS_TARGETS``."""

    fetch_window_s: int = 3_600  # a crawl takes an hour
    fetch_offset_s: int = 6 * 3_600  # first crawl at 06:00 UTC: 06:00 / 18:00 with 12 h
    words_median: float = 150.0
    static_share: float = 0.15  # service pages (imprint, privacy...): no teasers
    static_live: float = 1.2  # quiet topics hold more of them (look-around)
    hub_share: float = 0.025  # home pages and tickers
    hub_rate_min: float = 40.0  # teasers a day
    hub_alpha: float = 1.6  # Pareto tail index of hub rates
    hub_rate_cap: float = 400.0
    rate_log_mean: float = math.log(6.0)  # median teasers a day of an ordinary section page
    rate_live: float = 0.5  # a lively topic's pages take more (log)
    rate_cluster_sd: float = 0.3
    rate_page_sd: float = 1.1
    hot_sd: float = 0.45  # a page's hotness (log), stationary sd ...
    hot_days: float = 2.0  # ... and correlation time
    topic_hot_sd: float = 0.35  # a topic's hotness: a story everyone covers
    topic_hot_days: float = 1.5
    rhythm_amplitude: float = 0.45  # publication rate 1 +/- this over the day ...
    rhythm_peak_hour: float = 13.0  # ... peaking at this UTC hour
    return_share: float = 0.07  # of teasers, one that was on the page before comes back
    external_share: float = 0.03  # of teasers, a link to another site
    static_change_per_day: float = 0.004  # a service page's link edit
    teaser_log_median: float = math.log(24.0)  # teaser slots of an ordinary page
    teaser_log_sd: float = 0.5
    nav_log_median: float = math.log(80.0)  # navigation, footer: fixed internal links
    nav_log_sd: float = 0.3
    ext_log_median: float = math.log(20.0)  # fixed external links (social, partners)
    ext_log_sd: float = 0.5
    ext_dynamic_cap: int = 8  # external teasers kept
    minor_edit_per_day: float = 0.6  # text changes without link changes (times, counters)
    static_edit_per_week: float = 0.05
    rewrite_per_week: float = 0.002
    death_share: float = 0.005


class NewsWorld(World):
    """News sites' section pages; ``step`` advances them one crawl interval."""

    dynamics = NewsDynamics
    dyn: NewsDynamics

    # -- structure -----------------------------------------------------------------------

    def _build(self, rng: np.random.Generator) -> None:
        cfg, d = self.cfg, self.dyn
        n, k = cfg.pages, cfg.clusters
        live = self._clusters_and_sites(rng)
        c = self.cluster
        static_k = sigmoid(logit(d.static_share) - d.static_live * live)
        self.static = rng.random(n) < static_k[c]
        rate_k = d.rate_live * live + stratified(rng, k, d.rate_cluster_sd)
        z = rng.standard_normal((3, n))
        self.rate = np.exp(d.rate_log_mean + rate_k[c] + d.rate_page_sd * z[0])
        active = np.flatnonzero(~self.static)
        n_hubs = round(d.hub_share * active.size)
        hubs = rng.choice(active, n_hubs, replace=False) if n_hubs else active[:0]
        strata = (rng.permutation(hubs.size) + rng.random(hubs.size)) / max(hubs.size, 1)
        hub_rate = np.minimum(d.hub_rate_min * (1 - strata) ** (-1 / d.hub_alpha), d.hub_rate_cap)
        self.rate[hubs] = np.maximum(self.rate[hubs], hub_rate)
        self.rate[self.static] = 0.0
        self.is_hub = np.zeros(n, dtype=bool)
        self.is_hub[hubs] = True
        # Hotness starts stationary: no warm-up weeks in which the rates settle.
        self.log_hot = d.hot_sd * z[1]
        self.topic_hot = d.topic_hot_sd * rng.standard_normal(k)

        per_interval_peak = self.rate * cfg.interval_days * (1 + d.rhythm_amplitude)
        slots = rng.lognormal(d.teaser_log_median, d.teaser_log_sd, n)
        self.teaser_cap = np.where(
            self.static, 0, np.clip(np.maximum(slots, 1.5 * per_interval_peak), 5, 500)
        ).astype(np.int64)
        self.nav_len = np.clip(rng.lognormal(d.nav_log_median, d.nav_log_sd, n), 15, 200)
        self.nav_len = self.nav_len.astype(np.int64)
        self.ext_len = np.clip(rng.lognormal(d.ext_log_median, d.ext_log_sd, n), 3, 120)
        self.ext_len = self.ext_len.astype(np.int64)
        self.death = self._deaths(rng, d.death_share)
        self._page_facts(rng, 0.8 * z[2] + 1.2 * self.is_hub + 0.4 * (~self.static))
        self._init_urls(rng)
        self._init_links(rng)

    def _init_urls(self, rng: np.random.Generator) -> None:
        cfg = self.cfg
        self.host_name = [f"www.news{s}.example.com" for s in range(cfg.sites)]
        self.fresh = [
            FreshUrls(f"https://{name}", (*_SECTIONS, "article")) for name in self.host_name
        ]
        urls: list[str] = []
        first_hub: set[int] = set()
        for i, (s, c, static, hub) in enumerate(
            zip(
                self.host.tolist(),
                self.cluster.tolist(),
                self.static.tolist(),
                self.is_hub.tolist(),
                strict=True,
            )
        ):
            base = f"https://{self.host_name[s]}"
            if hub and s not in first_hub:
                first_hub.add(s)
                urls.append(f"{base}/")
            elif hub:
                urls.append(f"{base}/ticker/t{i}/")
            elif static:
                urls.append(f"{base}/service/{_SERVICE[i % len(_SERVICE)]}-{i}/")
            else:
                urls.append(f"{base}/{_SECTIONS[c % len(_SECTIONS)]}/s{i}/")
        self.page_url = urls
        # A site's navigation: its section fronts and service pages, shared by its pages.
        self.nav_pool: list[list[str]] = []
        for s, name in enumerate(self.host_name):
            own = [u for u, site in zip(urls, self.host.tolist(), strict=True) if site == s]
            menu = [f"https://{name}/{sec}/" for sec in _SECTIONS]
            menu += [f"https://{name}/service/{svc}/" for svc in _SERVICE]
            extra = [f"https://{name}/topic/t{j}/" for j in range(120)]
            self.nav_pool.append(menu + own[:80] + extra)
        self.ext = ExternalUrls(max(100, cfg.pages // 50), _EXT_WORDS)
        self.ext.fill(rng, max(1_000, cfg.pages // 4))

    def _init_links(self, rng: np.random.Generator) -> None:
        self.int_links = []
        self.ext_links = []
        self.dropped: list[deque[str]] = []
        n_menu = len(_SECTIONS) + len(_SERVICE)
        for i, (s, nav_len, ext_len) in enumerate(
            zip(self.host.tolist(), self.nav_len.tolist(), self.ext_len.tolist(), strict=True)
        ):
            pool = self.nav_pool[s]
            picks = (n_menu + rng.random(nav_len) ** 1.5 * (len(pool) - n_menu)).astype(np.int64)
            nav = list(dict.fromkeys(pool[:n_menu] + [pool[j] for j in picks.tolist()]))
            nav = [u for u in nav if u != self.page_url[i]][:nav_len]
            self.nav_len[i] = len(nav)
            teasers = self.fresh[s].block(int(self.teaser_cap[i]) // 2)
            self.int_links.append(nav + teasers)
            self.ext_links.append(self.ext.pick(rng.random(3 * ext_len + 8).tolist(), ext_len))
            self.ext_len[i] = len(self.ext_links[i])
            self.dropped.append(deque(maxlen=_DROPPED_KEPT))

    # -- dynamics ------------------------------------------------------------------------

    def _clock_hours(self, crawl: int) -> float:
        """Hours since ``start``'s midnight UTC of crawl ``crawl``'s nominal fetch time."""
        cfg, d = self.cfg, self.dyn
        start = cfg.start
        midnight = start.hour * 3_600 + start.minute * 60 + start.second
        seconds = midnight + d.fetch_offset_s + d.fetch_window_s / 2
        return (seconds + crawl * cfg.interval_days * 86_400) / 3_600

    def _rhythm_days(self, t0: float, t1: float) -> float:
        """Integral of the publication rhythm 1 + A cos(2 pi (hour - peak) / 24), in days."""
        d = self.dyn
        w = 2 * math.pi / 24
        wave = math.sin(w * (t1 - d.rhythm_peak_hour)) - math.sin(w * (t0 - d.rhythm_peak_hour))
        return ((t1 - t0) + d.rhythm_amplitude * wave / w) / 24

    def _wander(self, log_hot: np.ndarray, sd: float, tau_days: float) -> np.ndarray:
        phi = math.exp(-self.cfg.interval_days / tau_days)
        return phi * log_hot + math.sqrt(1 - phi * phi) * sd * self.rng.standard_normal(
            log_hot.size
        )

    def step(self, crawl: int) -> None:
        d, rng, cfg = self.dyn, self.rng, self.cfg
        n, days = cfg.pages, cfg.interval_days
        alive = self.death > crawl
        self.log_hot = self._wander(self.log_hot, d.hot_sd, d.hot_days)
        self.topic_hot = self._wander(self.topic_hot, d.topic_hot_sd, d.topic_hot_days)
        hot = np.exp(self.log_hot - d.hot_sd**2 / 2) * np.exp(
            self.topic_hot[self.cluster] - d.topic_hot_sd**2 / 2
        )
        exposure = self._rhythm_days(self._clock_hours(crawl - 1), self._clock_hours(crawl))
        pushes = np.where(alive, rng.poisson(self.rate * exposure * hot), 0)
        pushes = np.minimum(pushes, self.teaser_cap)
        n_ext = rng.binomial(pushes, d.external_share)
        n_ret = rng.binomial(pushes - n_ext, d.return_share)
        static_edit = (
            alive & self.static & (rng.random(n) < 1 - math.exp(-days * d.static_change_per_day))
        )

        n_fresh = pushes - n_ext - n_ret
        block = np.zeros(cfg.sites, dtype=np.int64)
        np.maximum.at(block, self.host, n_fresh + n_ret)  # room if no teaser can come back
        block = np.maximum(block, 16)
        fresh = [self.fresh[s].block(int(block[s])) for s in range(cfg.sites)]
        offset = (rng.random(n) * block[self.host]).astype(np.int64)
        touched = np.flatnonzero((pushes > 0) | static_edit)
        draws = rng.random(int(3 * (pushes[touched].sum() + touched.size)) + 16).tolist()
        pd = 0
        for i, s, nf, nr, ne, off, cap, nav in zip(
            touched.tolist(),
            self.host[touched].tolist(),
            n_fresh[touched].tolist(),
            n_ret[touched].tolist(),
            n_ext[touched].tolist(),
            offset[touched].tolist(),
            self.teaser_cap[touched].tolist(),
            self.nav_len[touched].tolist(),
            strict=True,
        ):
            links = self.int_links[i]
            if cap == 0:  # a service page: one navigation link replaced
                pool = self.nav_pool[s]
                url = pool[int(draws[pd + 1] * len(pool))]
                if url not in links and url != self.page_url[i]:
                    links[int(draws[pd] * len(links))] = url
                pd += 2
                continue
            current = set(links)
            adds: list[str] = []
            dropped = self.dropped[i]
            for _ in range(nr):
                if not dropped:
                    nf += 1
                    continue
                url = dropped[int(draws[pd] * len(dropped))]
                pd += 1
                dropped.remove(url)
                if url not in current:
                    current.add(url)
                    adds.append(url)
            site_block = fresh[s]
            for q in range(nf):
                url = site_block[(off + q) % len(site_block)]
                if url not in current:
                    current.add(url)
                    adds.append(url)
            dropped.extend(append_capped(links, nav, adds, cap))
            if ne:
                ext = self.ext_links[i]
                adds_e = []
                for _ in range(ne):
                    u, v = draws[pd], draws[pd + 1]
                    pd += 2
                    adds_e.append(self.ext.fresh(u, v) if u < 0.8 else self.ext.known(v))
                adds_e = [u for u in dict.fromkeys(adds_e) if u not in ext]
                append_capped(ext, int(self.ext_len[i]), adds_e, d.ext_dynamic_cap)

        changed = pushes > 0
        p_minor = np.where(
            self.static,
            per_interval(d.static_edit_per_week, days / 7),
            1 - math.exp(-days * d.minor_edit_per_day),
        )
        edit = alive & (changed | static_edit | (rng.random(n) < p_minor))
        rewrite = edit & (rng.random(n) < per_interval(d.rewrite_per_week, days / 7))
        self._edit(rng, edit, rewrite)
        self._evolve_graph(rng)
