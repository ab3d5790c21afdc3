"""The ``aggregator`` regime: pages of an awesome-list style aggregator, fetched weekly.

Each page is a curated list on a topic: mostly links out (projects, articles), a few links to
related lists. A minority of lists are actively maintained and grow week after week at their
own steady rate (merged pull requests); most are stale and almost never change. Maintainers
merge in some weeks and not in others, and now and then merge a batch at once, so one week's
count is a noisy estimate of a list's rate while its long-run mean is a good one. New links
are mostly external. Lists on one topic (a cluster with nearby embeddings / text) are
maintained alike.

Constants are weekly; another interval converts each weekly probability p to
1 - (1 - p)^weeks and scales the weekly rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batch.crawlgen.links import ExternalUrls, append_capped
from batch.crawlgen.world import (
    ContentDynamics,
    World,
    logit,
    per_interval,
    sigmoid,
    stratified,
)

__all__ = ["AggregatorDynamics", "AggregatorWorld"]

_TOPICS = (
    "python", "javascript", "rust", "go", "devops", "security", "machine-learning", "data",
    "design", "games", "mobile", "databases", "web", "science", "education", "tools",
)  # fmt: skip
_EXT_WORDS = ("repo", "project", "docs", "blog", "tool", "library", "paper", "video")


@dataclass(frozen=True)
class AggregatorDynamics(ContentDynamics):
    """Aggregator constants, per week; calibrated so the crawl meets ``AGGREGATOR_TARGETS``."""

    words_median: float = 300.0
    maintained_share: float = 0.3  # lists someone maintains ...
    maintained_live: float = 1.0  # ... more of them on lively topics (logit)
    merge_logit: float = logit(0.5)  # a maintained list's weekly chance of merging links
    merge_page_sd: float = 0.8
    rate_log_mean: float = math.log(1.5)  # extra links in a merge week: 1 + Poisson(rate)
    rate_live: float = 0.4
    rate_cluster_sd: float = 0.3
    rate_page_sd: float = 0.9
    week_shape: float = 1.5  # Gamma(shape, 1/shape) noise on a week's rate
    batch_prob: float = 0.015  # a maintained list's week of a merged batch ...
    batch_links: float = 15.0  # ... of 5 + Poisson(this) links
    stale_gain_prob: float = 0.008  # a stale list gains a link anyway
    internal_share: float = 0.1  # of new links: to another list of the aggregator
    removal_prob: float = 0.06  # a maintained list drops dead links ...
    removal_links: float = 1.0  # ... 1 + Poisson(this) of them
    ext_log_median: float = math.log(55.0)  # outlinks of a list: external ...
    ext_log_sd: float = 0.7
    int_log_median: float = math.log(8.0)  # ... and internal (topic index, related lists)
    int_log_sd: float = 0.4
    link_cap: int = 800
    text_given_link: float = 0.97  # a list's text changes with its links (descriptions)
    minor_edit_prob: float = 0.03  # text edits without link changes
    rewrite_prob: float = 0.002
    death_share: float = 0.01


class AggregatorWorld(World):
    """An awesome-list aggregator; ``step`` advances it one crawl interval."""

    dynamics = AggregatorDynamics
    dyn: AggregatorDynamics

    # -- structure -----------------------------------------------------------------------

    def _build(self, rng: np.random.Generator) -> None:
        cfg, d = self.cfg, self.dyn
        n, k = cfg.pages, cfg.clusters
        live = self._clusters_and_sites(rng)
        c = self.cluster
        share_k = sigmoid(logit(d.maintained_share) + d.maintained_live * live)
        self.maintained = rng.random(n) < share_k[c]
        rate_k = d.rate_live * live + stratified(rng, k, d.rate_cluster_sd)
        z = rng.standard_normal((3, n))
        self.p_merge = sigmoid(d.merge_logit + d.merge_page_sd * z[0])
        self.rate = np.exp(d.rate_log_mean + rate_k[c] + d.rate_page_sd * z[1])
        self.death = self._deaths(rng, d.death_share)
        self.cap_ext = np.clip(rng.lognormal(d.ext_log_median, d.ext_log_sd, n), 5, 400)
        self.cap_ext = self.cap_ext.astype(np.int64)
        self.n_int = np.clip(rng.lognormal(d.int_log_median, d.int_log_sd, n), 2, 40)
        self.n_int = self.n_int.astype(np.int64)
        self._page_facts(rng, 0.9 * z[2] + 0.8 * self.maintained)
        self._init_urls()
        self._init_links(rng)

    def _init_urls(self) -> None:
        cfg = self.cfg
        self.host_name = [
            "awesome.example.com" if s == 0 else f"awesome{s}.example.com" for s in range(cfg.sites)
        ]
        self.topic = [f"{_TOPICS[c % len(_TOPICS)]}-{c}" for c in range(cfg.clusters)]
        self.page_url = [
            f"https://{self.host_name[s]}/{self.topic[c]}/list{i}/"
            for i, (s, c) in enumerate(zip(self.host.tolist(), self.cluster.tolist(), strict=True))
        ]
        self.fresh_lists = [0] * cfg.sites
        self.ext = ExternalUrls(max(200, cfg.pages // 10), _EXT_WORDS, prefix="project")

    def _init_links(self, rng: np.random.Generator) -> None:
        cfg = self.cfg
        self.ext.fill(rng, max(2_000, cfg.pages * 5))
        by_cluster: dict[tuple[int, int], list[int]] = {}
        for i, key in enumerate(zip(self.host.tolist(), self.cluster.tolist(), strict=True)):
            by_cluster.setdefault(key, []).append(i)
        self.int_links = []
        self.ext_links = []
        for i, (s, c, ni, ne) in enumerate(
            zip(
                self.host.tolist(),
                self.cluster.tolist(),
                self.n_int.tolist(),
                self.cap_ext.tolist(),
                strict=True,
            )
        ):
            base = f"https://{self.host_name[s]}"
            nav = [f"{base}/", f"{base}/{self.topic[c]}/"]
            related = by_cluster[(s, c)]
            picks = rng.integers(0, len(related), ni).tolist()
            nav += [self.page_url[related[j]] for j in picks if related[j] != i]
            self.int_links.append(list(dict.fromkeys(nav)))
            self.ext_links.append(self.ext.pick(rng.random(3 * ne + 8).tolist(), ne))

    # -- dynamics ------------------------------------------------------------------------

    def step(self, crawl: int) -> None:
        d, rng, cfg = self.dyn, self.rng, self.cfg
        n, weeks = cfg.pages, self.weeks
        alive = self.death > crawl
        p_merge = np.where(self.maintained, self.p_merge, d.stale_gain_prob)
        p_now = per_interval(p_merge, weeks)
        merge = alive & (rng.random(n) < p_now)
        week_rate = np.where(self.maintained, self.rate, 0.0) * rng.gamma(
            d.week_shape, 1.0 / d.week_shape, n
        )
        # Links per merge so that merges times links stay linear in time.
        extra = np.maximum(weeks * p_merge * (1 + week_rate) / np.maximum(p_now, 1e-12) - 1, 0)
        n_new = np.where(merge, 1 + rng.poisson(extra), 0)
        batch = alive & self.maintained & (rng.random(n) < per_interval(d.batch_prob, weeks))
        n_new = n_new + np.where(batch, 5 + rng.poisson(d.batch_links, n), 0)
        n_int = rng.binomial(n_new, d.internal_share)
        removal = alive & self.maintained & (rng.random(n) < per_interval(d.removal_prob, weeks))
        n_removed = np.where(removal, 1 + rng.poisson(d.removal_links, n), 0)

        touched = np.flatnonzero((n_new > 0) | removal)
        draws = rng.random(int(2 * n_new[touched].sum() + 2 * n_removed[touched].sum()) + 16)
        draws_l = draws.tolist()
        pd = 0
        for i, s, c, k_new, k_int, k_rm, cap in zip(
            touched.tolist(),
            self.host[touched].tolist(),
            self.cluster[touched].tolist(),
            n_new[touched].tolist(),
            n_int[touched].tolist(),
            n_removed[touched].tolist(),
            self.cap_ext[touched].tolist(),
            strict=True,
        ):
            ext = self.ext_links[i]
            for _ in range(min(k_rm, len(ext) - 1)):
                del ext[int(draws_l[pd] * len(ext))]
                pd += 1
            adds_e: list[str] = []
            for _ in range(k_new - k_int):
                u, v = draws_l[pd], draws_l[pd + 1]
                pd += 2
                adds_e.append(self.ext.fresh(u, v) if u < 0.85 else self.ext.known(v))
            current = set(ext)
            adds_e = [u for u in dict.fromkeys(adds_e) if u not in current]
            append_capped(ext, 0, adds_e, max(cap, d.link_cap))
            if k_int:
                links = self.int_links[i]
                current = set(links)
                base = f"https://{self.host_name[s]}/{self.topic[c]}"
                for _ in range(k_int):
                    j = self.fresh_lists[s]
                    self.fresh_lists[s] = j + 1
                    url = f"{base}/new-list{j}/"
                    if url not in current:
                        current.add(url)
                        links.append(url)

        changed = (n_new > 0) | removal
        text = changed & (rng.random(n) < d.text_given_link)
        edit = alive & (text | (rng.random(n) < per_interval(d.minor_edit_prob, weeks)))
        rewrite = edit & (rng.random(n) < per_interval(d.rewrite_prob, weeks))
        self._edit(rng, edit, rewrite)
        self._evolve_graph(rng)
