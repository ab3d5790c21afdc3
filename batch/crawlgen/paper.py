"""The ``paper`` regime: paper-like web pages fetched weekly (Dang et al. 2022).

The paper's facts this reproduces, checked against ``PAPER_TARGETS``:

* new outlinks per page and week are zero-inflated and heavy-tailed (power-law-like CCDF);
* a page's behaviour persists week to week, and just under half of pages never gain a link;
* pages of one content cluster share link-change behaviour and have nearby embeddings / text
  (the "look around" signal), while the content digest is only weakly tied to link change
  (so a content-change-rate baseline is close to random).

The constants are weekly; another interval converts each weekly probability p to
1 - (1 - p)^weeks and keeps the expected new links linear in time (at one week nothing changes,
so the default crawl's bytes are those of the generator before regimes existed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batch.crawlgen.world import (
    ContentDynamics,
    World,
    logit,
    per_interval,
    sigmoid,
    stratified,
)

__all__ = ["PaperDynamics", "PaperWorld"]


@dataclass(frozen=True)
class PaperDynamics(ContentDynamics):
    """Model constants, calibrated (by simulation) so ``weekly_statistics`` meets the targets."""

    static_share: float = 0.36  # mean share of pages that (almost) never gain internal links
    static_live: float = 1.5  # how much a cluster's liveliness lowers its static share (logit)
    static_gain_prob: float = 0.01  # weekly chance that a static page gains a link anyway
    update_logit: float = -1.25  # mean logit of an active page's weekly update probability
    update_live: float = 2.0  # ... and raises its update odds (logit)
    update_page_sd: float = 1.6  # wide: odds near 0 or 1 make weeks persist
    rate_log_mean: float = -0.35  # log of the Poisson rate of extra links in an update week
    rate_live: float = 0.5  # ... and its rates (log)
    rate_cluster_sd: float = 0.6  # cluster rate effect independent of liveliness
    rate_page_sd: float = 0.9
    rate_cap: float = 100.0
    # Hubs (listing / home pages) update often and by a lot: they make the heavy tail.
    hub_share: float = 0.045  # of active pages
    hub_rate_min: float = 30.0
    hub_cluster_weight: float = 1.0  # hubs concentrate in clusters with high rates
    hub_alpha: float = 1.7  # Pareto tail index of hub rates
    hub_rate_cap: float = 300.0
    hub_update_min: float = 0.85
    week_noise_sd: float = 0.25  # page-week log-normal noise on the rate
    fresh_share: float = 0.7  # new internal links to brand-new URLs (rest: existing URLs)
    ext_logit: float = -1.8  # logit of "an update week also adds external links"
    ext_cluster_sd: float = 0.6
    ext_page_sd: float = 1.6
    ext_static_prob: float = 0.008
    ext_rate_log_mean: float = -0.2
    ext_rate_coupling: float = 0.55  # how much the external rate follows the internal one
    ext_rate_page_sd: float = 1.7
    ext_rate_cap: float = 80.0
    outlinks_log_median: float = math.log(36.0)
    outlinks_log_sd: float = 0.45
    ext_share_a: float = 1.6  # Beta(a, b) of a page's external share of outlinks
    ext_share_b: float = 9.8
    removal_prob: float = 0.04  # weekly chance that one link disappears without replacement
    cluster_burst_share: float = 0.03  # of clusters, each week; their active pages burst:
    cluster_burst_update: float = 0.5  # closes this share of the gap to a sure update
    cluster_burst_factor: float = 3.0
    burst_rate_limit: float = 20.0
    page_burst_prob: float = 0.003  # a page's one-off week of many new links
    page_burst_links: float = 25.0
    digest_a: float = 2.2  # Beta(a, b) of a page's weekly minor-edit probability
    digest_b: float = 3.8
    digest_link_bump: float = 0.15  # extra edit chance in weeks whose links changed
    rewrite_prob: float = 0.003  # substantial content change: new embedding / text
    death_share: float = 0.015


_SECTIONS = (
    "news", "blog", "products", "events", "docs", "forum", "jobs", "people",
    "research", "shop", "press", "wiki", "courses", "media", "topics", "about",
)  # fmt: skip
_EXT_WORDS = ("article", "post", "item", "page", "story", "entry", "paper", "video")
_MASK32 = (1 << 32) - 1


def _gated_rate(
    p_week: np.ndarray, p_now: np.ndarray, rate: np.ndarray, weeks: float
) -> np.ndarray:
    """Poisson rate of the extra links given an update, so that updates times links stay
    linear in time: p_now * (1 + rate_now) = weeks * p_week * (1 + rate)."""
    if weeks == 1.0:
        return rate
    return np.maximum(weeks * p_week * (1.0 + rate) / np.maximum(p_now, 1e-12) - 1.0, 0.0)


class PaperWorld(World):
    """The paper regime's web; ``step`` advances it one crawl."""

    dynamics = PaperDynamics
    dyn: PaperDynamics

    def _build(self, rng: np.random.Generator) -> None:
        config = self.cfg
        n, k, h = config.pages, config.clusters, config.sites

        # Clusters have equal sizes (so no big cluster swings the crawl's figures); sites have
        # uneven sizes, and each cluster favours a few sites (a news site publishes news).
        self.cluster = rng.permutation(np.arange(n) % k)
        site_w = rng.lognormal(0.0, 0.8, h)
        favourite = rng.integers(0, h, size=(k, 3))[self.cluster, rng.integers(0, 3, n)]
        anywhere = rng.choice(h, size=n, p=site_w / site_w.sum())
        self.host = np.where(rng.random(n) < 0.35, favourite, anywhere)
        c = self.cluster

        # Link-change behaviour: cluster effects plus page effects, fixed over the crawl. One
        # "liveliness" factor per cluster moves its static share, update odds and rates together
        # (lively clusters are lively in every respect), which is the look-around signal.
        d = self.dyn
        live = stratified(rng, k)
        static_k = sigmoid(logit(d.static_share) - d.static_live * live)
        upd_k = d.update_logit + d.update_live * live
        rate_k = d.rate_live * live + stratified(rng, k, d.rate_cluster_sd)
        ext_k = stratified(rng, k, d.ext_cluster_sd)
        z = rng.standard_normal((5, n))
        self.static = rng.random(n) < static_k[c]
        self.p_update = sigmoid(upd_k[c] + d.update_page_sd * z[0])
        log_rate = d.rate_log_mean + rate_k[c] + d.rate_page_sd * (0.45 * z[0] + 0.89 * z[1])
        self.rate = np.minimum(np.exp(log_rate), d.rate_cap)
        # Hubs carry the heavy tail. Their number and Pareto rates are stratified, not iid: a
        # handful of hubs sets the variance, which would otherwise swing from seed to seed.
        active = np.flatnonzero(~self.static)
        spread = float(rate_k.std())
        rate_z = (rate_k - rate_k.max()) / spread if spread > 1e-6 else np.zeros(k)
        hub_w = np.exp(d.hub_cluster_weight * rate_z[c[active]])
        n_hubs = round(d.hub_share * active.size)
        hubs = (
            rng.choice(active, n_hubs, replace=False, p=hub_w / hub_w.sum())
            if n_hubs
            else active[:0]
        )
        strata = (rng.permutation(hubs.size) + rng.random(hubs.size)) / max(hubs.size, 1)
        hub_rate = np.minimum(
            d.hub_rate_min * (1.0 - strata) ** (-1.0 / d.hub_alpha), d.hub_rate_cap
        )
        self.rate[hubs] = np.maximum(self.rate[hubs], hub_rate)
        self.p_update[hubs] = np.maximum(self.p_update[hubs], d.hub_update_min)
        self.p_ext = sigmoid(d.ext_logit + ext_k[c] + d.ext_page_sd * z[2])
        log_ext = (
            d.ext_rate_log_mean
            + d.ext_rate_coupling * (log_rate - d.rate_log_mean)
            + d.ext_rate_page_sd * z[3]
        )
        self.ext_rate = np.minimum(np.exp(log_ext), d.ext_rate_cap)
        self.p_digest = rng.beta(d.digest_a, d.digest_b, n)
        self.death = self._deaths(rng, d.death_share)

        # Outlink capacities: ~20-60 links, ~15% external; busy pages need room for their adds.
        total = np.clip(rng.lognormal(d.outlinks_log_median, d.outlinks_log_sd, n), 8, 400)
        ext_share = rng.beta(d.ext_share_a, d.ext_share_b, n)
        self.cap_ext = np.maximum(np.rint(total * ext_share), 1).astype(np.int64)
        need = np.where(self.static, 0.0, 1.5 * self.rate + 3.0)
        self.cap_int = np.maximum(np.rint(total * (1 - ext_share)), need).astype(np.int64)
        self.cap_int = np.minimum(self.cap_int, 600)

        # Graph-side page facts: popularity correlates a little with being a busy hub.
        self._page_facts(rng, 1.1 * (0.3 * z[1] + 0.95 * z[4]) + 0.6 * (~self.static))

        self._init_urls()
        self._init_links(rng)

    # -- structure -----------------------------------------------------------------------

    def _init_urls(self) -> None:
        cfg = self.cfg
        n, h = cfg.pages, cfg.sites
        order = np.lexsort((np.arange(n), self.host))
        counts = np.bincount(self.host, minlength=h)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        self.local = np.empty(n, dtype=np.int64)
        self.local[order] = np.arange(n) - np.repeat(starts, counts)
        self.host_name = [
            f"www.site{s}.example.com" if s % 4 == 1 else f"site{s}.example.com" for s in range(h)
        ]
        self.host_urls: list[list[str]] = []
        extra = np.maximum(50, 2 * counts)
        # A crawled page's URL names its cluster's section (URL features carry topic).
        page_sections: list[list[str]] = [[""] * int(cnt) for cnt in counts]
        for s, j, k in zip(
            self.host.tolist(), self.local.tolist(), self.cluster.tolist(), strict=True
        ):
            page_sections[s][j] = _SECTIONS[k % len(_SECTIONS)]
        for s in range(h):
            urls = [
                f"https://{self.host_name[s]}/{sec}/a{j}/" for j, sec in enumerate(page_sections[s])
            ]
            self.host_urls.append(urls)
            self._extend_host(s, int(extra[s]))
        self.page_url = [
            self.host_urls[s][j]
            for s, j in zip(self.host.tolist(), self.local.tolist(), strict=True)
        ]

    def _extend_host(self, site: int, count: int) -> None:
        """New URLs on a site; on www sites some links are written without the 'www.'."""
        urls = self.host_urls[site]
        name = self.host_name[site]
        bare = name[4:] if name.startswith("www.") else name
        first = len(urls)
        for j in range(first, first + count):
            sec = _SECTIONS[(j * 7919) % len(_SECTIONS)]
            urls.append(f"https://{bare if j % 5 == 4 else name}/{sec}/a{j}/")

    def _ext_url(self, code: int) -> str:
        url = self.ext_str.get(code)
        if url is None:
            site, j = code >> 32, code & _MASK32
            if site < self.cfg.sites:
                url = self.host_urls[site][j]
            else:
                d = site - self.cfg.sites
                url = f"https://ext{d}.example.org/{_EXT_WORDS[j % len(_EXT_WORDS)]}/p{j}"
            self.ext_str[code] = url
        return url

    def _new_ext_code(self, own_site: int, u: float, v: float) -> int:
        """A never-seen external URL: a new page on another domain, or another site's page."""
        h = self.cfg.sites
        if u < 0.7 or h == 1:
            d = min(int(self.n_domains * v**2.2), self.n_domains - 1)
            m = self.domain_next[d]
            self.domain_next[d] = m + 1
            code = ((h + d) << 32) | m
        else:
            other = (own_site + 1 + int(v * (h - 1))) % h
            j = int(u * 1_000_003) % len(self.host_urls[other])
            code = (other << 32) | j
        if code not in self.ext_str:
            self.ext_pool.append(code)
            self._ext_url(code)
        return code

    def _init_links(self, rng: np.random.Generator) -> None:
        cfg = self.cfg
        n = cfg.pages
        self.n_domains = max(100, n // 100)
        self.domain_next = [0] * self.n_domains
        self.ext_str: dict[int, str] = {}
        self.ext_pool: list[int] = []
        pool0 = max(1_000, n // 2)
        uu, vv = rng.random(pool0).tolist(), rng.random(pool0).tolist()
        for a, b in zip(uu, vv, strict=True):
            self._new_ext_code(int(b * cfg.sites), a, b)

        hosts = self.host.tolist()
        locals_ = self.local.tolist()
        cap_i, cap_e = self.cap_int.tolist(), self.cap_ext.tolist()
        # Outlinks are kept as URL strings shared with the per-site tables: one object per URL,
        # so a page's list costs a pointer per link and emitting it is a list concatenation.
        self.int_links: list[list[str]] = []
        self.ext_links: list[list[str]] = []
        host_urls, ext_url = self.host_urls, self._ext_url
        # Candidates for every page at once (30% spare for duplicates): a share of them from
        # the site's first 30 URLs (navigation), the rest anywhere on the site.
        m_int = (self.cap_int * 13) // 10 + 2
        m_ext = (self.cap_ext * 3) // 2 + 2
        pool_sizes = np.array([len(u) for u in self.host_urls], dtype=np.int64)
        size = np.repeat(pool_sizes[self.host], m_int)
        span = np.where(rng.random(size.size) < 0.35, np.minimum(size, 30), size)
        cand_int = (rng.random(size.size) * span).astype(np.int64).tolist()
        ext_pool = self.ext_pool
        cand_ext = (rng.random(int(m_ext.sum())) ** 2.5 * len(ext_pool)).astype(np.int64).tolist()
        pi = pe = 0
        for i, (m, me) in enumerate(zip(m_int.tolist(), m_ext.tolist(), strict=True)):
            s, own, ci, ce = hosts[i], locals_[i], cap_i[i], cap_e[i]
            ids = [j for j in dict.fromkeys(cand_int[pi : pi + m]) if j != own][:ci]
            pi += m
            urls = host_urls[s]
            self.int_links.append([urls[j] for j in ids])
            idx = cand_ext[pe : pe + me]
            pe += me
            ext: list[str] = []
            seen: set[int] = set()
            for x in idx:
                code = ext_pool[x]
                if code >> 32 != s and code not in seen:
                    seen.add(code)
                    ext.append(ext_url(code))
                    if len(ext) == ce:
                        break
            self.ext_links.append(ext)

    # -- dynamics ------------------------------------------------------------------------

    def step(self, crawl: int) -> None:
        """Evolve links, digests and content from crawl-1 to ``crawl``."""
        d, rng, cfg = self.dyn, self.rng, self.cfg
        n, weeks = cfg.pages, self.weeks
        alive = self.death > crawl
        # A fixed number of clusters burst each week (a random count would swing the figures).
        burst_k = np.zeros(cfg.clusters, dtype=bool)
        n_burst = (
            round(d.cluster_burst_share * cfg.clusters)
            if weeks == 1.0
            else int(rng.binomial(cfg.clusters, per_interval(d.cluster_burst_share, weeks)))
        )
        burst_k[rng.permutation(cfg.clusters)[:n_burst]] = True
        burst = burst_k[self.cluster] & ~self.static
        p = np.where(self.static, d.static_gain_prob, self.p_update)
        p = np.where(burst, p + (1.0 - p) * d.cluster_burst_update, p)
        p_now = per_interval(p, weeks)
        upd = (rng.random(n) < p_now) & alive
        noise = rng.lognormal(0.0, d.week_noise_sd, n)
        rate = np.where(self.static, 0.5, self.rate) * noise
        # Bursts lift ordinary pages; hubs are busy anyway (and would swing the variance).
        boost = (d.cluster_burst_factor - 1.0) * np.minimum(rate, d.burst_rate_limit)
        rate = np.where(burst, rate + boost, rate)
        n_int = np.where(upd, 1 + rng.poisson(_gated_rate(p, p_now, rate, weeks)), 0)
        page_burst = alive & (rng.random(n) < per_interval(d.page_burst_prob, weeks))
        n_int = n_int + np.where(page_burst, 10 + rng.poisson(d.page_burst_links, n), 0)
        n_int = np.minimum(n_int, 600)

        ext_static = per_interval(d.ext_static_prob, weeks)
        ext_upd = (upd & (rng.random(n) < self.p_ext)) | (rng.random(n) < ext_static)
        ext_upd &= alive
        ext_rate = _gated_rate(
            p * self.p_ext + d.ext_static_prob,
            p_now * self.p_ext + ext_static,
            self.ext_rate * noise,
            weeks,
        )
        n_ext = np.where(ext_upd, 1 + rng.poisson(ext_rate), 0)
        n_ext = np.minimum(n_ext, 200)
        removal = alive & (rng.random(n) < per_interval(d.removal_prob, weeks))

        changed = (n_int > 0) | (n_ext > 0)
        p_dig = np.minimum(self.p_digest + np.where(changed, d.digest_link_bump, 0.0), 1.0)
        p_dig = per_interval(p_dig, weeks)
        rewrite = alive & (rng.random(n) < per_interval(d.rewrite_prob, weeks))
        edit = (alive & (rng.random(n) < p_dig)) | rewrite
        hi, lo = rng.integers(0, 1 << 63, n), rng.integers(0, 1 << 63, n)
        size_jitter = rng.normal(1.0, 0.03, n)

        n_fresh = rng.binomial(n_int, d.fresh_share)
        fresh_block = np.zeros(cfg.sites, dtype=np.int64)
        np.maximum.at(fresh_block, self.host, n_int)  # room for all-fresh adds
        fresh_block = np.maximum(fresh_block, 16)
        first_fresh = np.array([len(u) for u in self.host_urls], dtype=np.int64)
        offset = (rng.random(n) * fresh_block[self.host]).astype(np.int64)
        for s in range(cfg.sites):
            self._extend_host(s, int(fresh_block[s]))

        touched = np.flatnonzero(changed | removal)
        draws = rng.random((touched.size, 2)).tolist()
        pool_draws = rng.random(int(3 * (n_int[touched].sum() + n_ext[touched].sum())) + 16)
        pool_draws = pool_draws.tolist()
        pd = 0
        page_url, host_urls, ext_url = self.page_url, self.host_urls, self._ext_url
        columns = zip(
            touched.tolist(),
            self.host[touched].tolist(),
            n_int[touched].tolist(),
            n_fresh[touched].tolist(),
            n_ext[touched].tolist(),
            removal[touched].tolist(),
            offset[touched].tolist(),
            self.cap_int[touched].tolist(),
            self.cap_ext[touched].tolist(),
            draws,
            strict=True,
        )
        first_l, block_l = first_fresh.tolist(), fresh_block.tolist()
        n_draws = len(pool_draws)
        for i, s, ni, nf, ne, removed, off, cap_i, cap_e, (u_rem, u_a) in columns:
            urls = host_urls[s]
            links = self.int_links[i]
            ext = self.ext_links[i]
            if removed and links:
                del links[int(u_rem * len(links))]
            if ni:
                base, block = first_l[s], block_l[s]
                adds = [urls[base + (off + q) % block] for q in range(nf)]
                need = ni - nf
                if need:
                    current = set(links)
                    current.update(adds)
                    current.add(page_url[i])
                    tries = 3 * need + 8
                    while need and tries:
                        url = urls[int(pool_draws[pd % n_draws] * base)]
                        pd += 1
                        tries -= 1
                        if url not in current:
                            current.add(url)
                            adds.append(url)
                            need -= 1
                    # A small site may run out of existing URLs: publish new ones instead.
                    adds.extend(urls[base + (off + nf + q) % block] for q in range(need))
                links.extend(adds)
                keep = max(cap_i, len(adds))
                if len(links) > keep:
                    del links[: len(links) - keep]
            if ne:
                cur_e = set(ext)
                adds_e: list[str] = []
                pool = self.ext_pool
                for q in range(ne):
                    u = pool_draws[pd % n_draws]
                    v = pool_draws[(pd + 1) % n_draws]
                    pd += 2
                    if u < 0.5:
                        code = self._new_ext_code(s, (u_a + q * 0.618) % 1.0, v)
                    else:
                        code = pool[min(int(len(pool) * v**2.5), len(pool) - 1)]
                    if code >> 32 != s and (url := ext_url(code)) not in cur_e:
                        cur_e.add(url)
                        adds_e.append(url)
                ext.extend(adds_e)
                keep = max(cap_e, len(adds_e))
                if len(ext) > keep:
                    del ext[: len(ext) - keep]

        for i in np.flatnonzero(edit).tolist():
            self.digest[i] = f"{int(hi[i]):016x}{int(lo[i]):016x}"
        self.text_size = np.where(
            edit, (self.text_size * size_jitter).astype(np.int64), self.text_size
        )
        self.text_size = np.maximum(self.text_size, 50)
        self._evolve_graph(rng)
        self._update_content(edit, rewrite)
