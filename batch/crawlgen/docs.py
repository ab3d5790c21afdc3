"""The ``docs`` regime: a sparse documentation site with translations, fetched weekly.

Shaped after ../shared/data/S and S-timeline (docs.astro.build): pages are documents in up to
14 languages (``/en/guides/...``, ``/fr/guides/...``), grouped by section and topic; links
change only when someone edits a page, so a page gains a link in well under 1% of weeks, and
the pages that are edited often (a content change rate) are the ones that gain links. Most
edits change only text. Changes come in bursts: release weeks touch many documents at once,
other weeks few or none. An edit of the English page reaches its translations too, often a
week or two later, so a page's other-language copies predict it. A few index pages grow
steadily. Links made by templates (navigation) are absent, as in S, so about 55% of outlinks
are external.

Constants are weekly; another interval converts each weekly probability p to
1 - (1 - p)^weeks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batch.crawlgen.links import ExternalUrls
from batch.crawlgen.world import (
    ContentDynamics,
    World,
    logit,
    per_interval,
    sigmoid,
    stratified,
)

__all__ = ["DocsDynamics", "DocsWorld"]

# Languages and the share of documents translated into each (S: en 409, fr 408, ... hi 9).
_LANGUAGES = (
    ("en", 1.0), ("fr", 0.95), ("ko", 0.95), ("zh-cn", 0.9), ("es", 0.63), ("pt-br", 0.46),
    ("ru", 0.37), ("ja", 0.33), ("de", 0.15), ("it", 0.1), ("zh-tw", 0.05), ("pl", 0.05),
    ("ar", 0.02), ("hi", 0.02),
)  # fmt: skip
_SECTIONS = (
    "reference", "guides", "tutorial", "recipes", "basics", "concepts", "integrations",
    "editor-setup",
)  # fmt: skip
_EXT_WORDS = ("docs", "blob", "package", "wiki", "issues", "spec", "guide", "api")


@dataclass(frozen=True)
class DocsDynamics(ContentDynamics):
    """Docs constants, per week; calibrated so the crawl meets ``DOCS_TARGETS``."""

    fetch_window_s: int = 6 * 3_600
    words_median: float = 250.0
    doc_noise: float = 1.6  # a document's noise around its topic's centroid ...
    embedding_noise: float = 0.35  # ... and a language copy's around its document
    edit_logit: float = logit(0.006)  # a document's weekly edit probability (logit) ...
    edit_doc_sd: float = 1.8  # ... spread over documents (persistent: the CCR signal)
    edit_live: float = 0.7  # ... and over topics (look-around)
    link_given_edit: float = 0.08  # an edit adds links
    links_per_edit: float = 0.8  # 1 + Poisson(this) links added
    new_external_share: float = 0.55  # of added links
    removal_given_edit: float = 0.15  # an edit removes a link
    link_fix_share: float = 0.06  # link edits that leave the text (digest) alone
    follow_link_edit: float = 0.7  # a translation takes over the English edit ...
    follow_text_edit: float = 0.5
    lag_p: float = 0.45  # ... after Geometric(lag_p) - 1 weeks
    translator_edit: float = 0.002  # a translation's own (text) edit
    release_prob: float = 0.15  # a release week ...
    release_doc_share: float = 0.08  # ... edits this share of documents (busy ones likelier)
    release_link_given_edit: float = 0.5
    release_death_share: float = 0.01  # documents that move away (404) in a release
    hub_share: float = 0.005  # index documents that grow steadily
    hub_gain_prob: float = 0.35
    hub_links: float = 1.0  # 1 + Poisson(this) links a gain
    int_log_median: float = math.log(2.0)  # outlinks of a page, internal ...
    ext_log_median: float = math.log(2.4)  # ... and external
    outlinks_log_sd: float = 0.8
    hub_int_links: float = 40.0
    rewrite_prob: float = 0.001


class DocsWorld(World):
    """A documentation site; ``step`` advances it one crawl interval."""

    dynamics = DocsDynamics
    dyn: DocsDynamics

    # -- structure -----------------------------------------------------------------------

    def _build(self, rng: np.random.Generator) -> None:
        cfg, d = self.cfg, self.dyn
        n, k = cfg.pages, cfg.clusters
        coverage = np.array([share for _, share in _LANGUAGES])
        n_docs = max(1, math.ceil(n / coverage.sum() * 1.1) + 8)
        has = rng.random((n_docs, len(_LANGUAGES))) < coverage
        has[:, 0] = True
        doc_of, lang_of = np.nonzero(has)  # document-major: a document's copies together
        self.doc = doc_of[:n].astype(np.int64)
        self.lang = lang_of[:n].astype(np.int64)
        n_docs = int(self.doc.max()) + 1
        if self.doc.size < n:  # tiny sites: more English-only documents
            extra = np.arange(n_docs, n_docs + n - self.doc.size)
            self.doc = np.concatenate([self.doc, extra])
            self.lang = np.concatenate([self.lang, np.zeros(extra.size, dtype=np.int64)])
            n_docs += extra.size
        self.n_docs = n_docs
        self.doc_cluster = rng.permutation(np.arange(n_docs) % k)
        self.doc_site = rng.integers(0, cfg.sites, n_docs)
        self.cluster = self.doc_cluster[self.doc]
        self.host = self.doc_site[self.doc]
        # Each document's first page (English) is where edits start.
        order = np.argsort(self.doc, kind="stable")
        starts = np.searchsorted(self.doc[order], np.arange(n_docs))
        ends = np.searchsorted(self.doc[order], np.arange(n_docs), side="right")
        self.copies = [order[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        self.source = np.array([c[0] if c.size else -1 for c in self.copies])

        live = stratified(rng, k)
        z = rng.standard_normal((2, n_docs))
        self.p_edit = sigmoid(
            d.edit_logit + d.edit_live * live[self.doc_cluster] + d.edit_doc_sd * z[0]
        )
        n_hubs = max(1, round(d.hub_share * n_docs))
        self.hub_doc = np.zeros(n_docs, dtype=bool)
        self.hub_doc[rng.choice(n_docs, min(n_hubs, n_docs), replace=False)] = True
        self.is_hub = self.hub_doc[self.doc]

        # A fixed number of release intervals, at random places (a random count would swing
        # the crawl's figures from seed to seed).
        n_release = round(per_interval(d.release_prob, self.weeks) * (cfg.crawls - 1))
        releases = np.zeros(cfg.crawls, dtype=bool)
        releases[1 + rng.permutation(max(cfg.crawls - 1, 0))[:n_release]] = True
        self.release = releases
        self.death = np.full(n, cfg.crawls + 1, dtype=np.int64)
        release_crawls = np.flatnonzero(releases)
        if release_crawls.size:
            moved = rng.random(n_docs) < d.release_death_share
            when = release_crawls[rng.integers(0, release_crawls.size, n_docs)]
            doc_death = np.where(moved & ~self.hub_doc, when, cfg.crawls + 1)
            self.death = doc_death[self.doc]
        self._page_facts(rng, 0.8 * z[1][self.doc] + 1.5 * self.is_hub)
        self._init_urls()
        self._init_links(rng)

    def _init_urls(self) -> None:
        cfg = self.cfg
        self.host_name = [
            "docs.example.com" if s == 0 else f"docs{s}.example.com" for s in range(cfg.sites)
        ]
        # A document's path without its language: /{section}/{topic}/{slug}/.
        self.doc_path = [
            f"/{_SECTIONS[c % len(_SECTIONS)]}/t{c}/d{j}/"
            for j, c in enumerate(self.doc_cluster.tolist())
        ]
        self.lang_code = [code for code, _ in _LANGUAGES]
        self.page_url = [
            self._url(s, lang, self.doc_path[doc])
            for s, lang, doc in zip(
                self.host.tolist(), self.lang.tolist(), self.doc.tolist(), strict=True
            )
        ]
        self.fresh_pages = [0] * cfg.sites
        self.ext = ExternalUrls(max(60, cfg.pages // 40), _EXT_WORDS, prefix="project")

    def _url(self, site: int, lang: int, path: str) -> str:
        return f"https://{self.host_name[site]}/{self.lang_code[lang]}{path}"

    def _init_links(self, rng: np.random.Generator) -> None:
        """Links are chosen per document (paths, external URLs) and copied to its languages."""
        d = self.dyn
        self.ext.fill(rng, max(500, self.cfg.pages // 3))
        n_docs = self.n_docs
        n_int = np.rint(rng.lognormal(d.int_log_median, d.outlinks_log_sd, n_docs)).astype(np.int64)
        n_int = np.where(self.hub_doc, np.maximum(n_int, int(d.hub_int_links)), n_int)
        n_ext = np.maximum(
            np.rint(rng.lognormal(d.ext_log_median, d.outlinks_log_sd, n_docs)).astype(np.int64), 1
        )
        doc_int: list[list[str]] = []
        doc_ext: list[list[str]] = []
        by_cluster: dict[int, list[int]] = {}
        for j, c in enumerate(self.doc_cluster.tolist()):
            by_cluster.setdefault(c, []).append(j)
        self.docs_by_cluster = by_cluster
        u_same = rng.random(int(n_int.sum())).tolist()
        u_pick = rng.random(int(n_int.sum())).tolist()
        pos = 0
        for j, (c, ni, ne) in enumerate(
            zip(self.doc_cluster.tolist(), n_int.tolist(), n_ext.tolist(), strict=True)
        ):
            same = by_cluster[c]
            paths: dict[str, None] = {}
            for q in range(pos, pos + ni):
                target = (
                    same[int(u_pick[q] * len(same))] if u_same[q] < 0.7 else int(u_pick[q] * n_docs)
                )
                if target != j:
                    paths.setdefault(self.doc_path[target], None)
            pos += ni
            doc_int.append(list(paths))
            doc_ext.append(self.ext.pick(rng.random(3 * ne + 8).tolist(), ne))
        self.int_links = [
            [self._url(s, lang, p) for p in doc_int[doc]]
            for s, lang, doc in zip(
                self.host.tolist(), self.lang.tolist(), self.doc.tolist(), strict=True
            )
        ]
        self.ext_links = [list(doc_ext[doc]) for doc in self.doc.tolist()]
        # Edits waiting to land on a page: crawl -> (page, paths, external URLs, removal, text).
        self.pending: dict[int, list[tuple[int, list[str], list[str], float | None, bool]]] = {}

    def _anchor(self, rows: np.ndarray) -> np.ndarray:
        """A page's document vector: its language copies are each other's nearest pages."""
        if not hasattr(self, "doc_vec"):  # drawn at the first embedding, after the centroids
            dim = self.cfg.embedding_dim
            noise = self.rng_emb.standard_normal((self.n_docs, dim))
            self.doc_vec = self.centroids[self.doc_cluster] + noise * (
                self.dyn.doc_noise / math.sqrt(dim)
            )
        return self.doc_vec[self.doc[rows]]

    # -- dynamics ------------------------------------------------------------------------

    def _new_paths(self, site: int, cluster: int, count: int, draws: list[float]) -> list[str]:
        """Paths of internal link targets: a new page or another document of the topic."""
        out: list[str] = []
        for q in range(count):
            if draws[q] < 0.5:
                j = self.fresh_pages[site]
                self.fresh_pages[site] = j + 1
                out.append(f"/{_SECTIONS[cluster % len(_SECTIONS)]}/t{cluster}/new{j}/")
            else:
                same = self.docs_by_cluster[cluster]
                out.append(self.doc_path[same[int((draws[q] - 0.5) * 2 * len(same))]])
        return out

    def step(self, crawl: int) -> None:
        d, rng, cfg = self.dyn, self.rng, self.cfg
        n, weeks = cfg.pages, self.weeks
        alive = self.death > crawl
        doc_alive = np.zeros(self.n_docs, dtype=bool)
        np.logical_or.at(doc_alive, self.doc, alive)
        release = bool(self.release[crawl])

        # Edits of documents (at their English page) this interval.
        p_edit = per_interval(self.p_edit, weeks)
        edited = (rng.random(self.n_docs) < p_edit) & doc_alive
        p_link = np.full(self.n_docs, d.link_given_edit)
        if release:
            weight = self.p_edit  # a release touches the documents that are maintained
            p_rel = np.minimum(d.release_doc_share * weight / weight.mean(), 1.0)
            in_release = (rng.random(self.n_docs) < p_rel) & doc_alive
            p_link = np.where(in_release, d.release_link_given_edit, p_link)
            edited |= in_release
        hub_gain = (
            self.hub_doc
            & doc_alive
            & (rng.random(self.n_docs) < per_interval(d.hub_gain_prob, weeks))
        )
        adds_link = edited & (rng.random(self.n_docs) < p_link)
        n_add = np.where(adds_link, 1 + rng.poisson(d.links_per_edit, self.n_docs), 0)
        n_add += np.where(hub_gain, 1 + rng.poisson(d.hub_links, self.n_docs), 0)
        edited |= hub_gain
        removes = edited & (rng.random(self.n_docs) < d.removal_given_edit)
        link_fix = (n_add > 0) & (rng.random(self.n_docs) < d.link_fix_share)

        docs = np.flatnonzero(edited)
        draws = rng.random(int(3 * n_add[docs].sum() + 4 * docs.size) + 16).tolist()
        lag_draw = rng.geometric(d.lag_p, size=(docs.size, len(_LANGUAGES))) - 1
        follow_u = rng.random((docs.size, len(_LANGUAGES)))
        pd = 0
        text_edit = np.zeros(n, dtype=bool)
        for row, doc in enumerate(docs.tolist()):
            copies = self.copies[doc]
            if copies.size == 0:
                continue
            k_add = int(n_add[doc])
            site, cluster = int(self.doc_site[doc]), int(self.doc_cluster[doc])
            is_ext = [draws[pd + q] < d.new_external_share for q in range(k_add)]
            pd += k_add
            n_int_add = k_add - sum(is_ext)
            paths = self._new_paths(site, cluster, n_int_add, draws[pd : pd + n_int_add])
            pd += n_int_add
            ext_urls = []
            for _ in range(k_add - n_int_add):
                u, v = draws[pd], draws[pd + 1]
                pd += 2
                ext_urls.append(self.ext.fresh(u, v) if u < 0.75 else self.ext.known(v))
            remove_u = draws[pd] if removes[doc] else None
            pd += 1
            text = not link_fix[doc]
            follow = d.follow_link_edit if k_add else d.follow_text_edit
            for page in copies.tolist():
                if not alive[page]:
                    continue
                lang = int(self.lang[page])
                if page == self.source[doc]:
                    lag = 0
                elif follow_u[row, lang] < follow:
                    lag = int(lag_draw[row, lang])
                else:
                    continue
                change = (page, paths, ext_urls, remove_u, text)
                self.pending.setdefault(crawl + lag, []).append(change)

        for page, paths, ext_urls, remove, text in self.pending.pop(crawl, []):
            if not alive[page]:
                continue
            site, lang = int(self.host[page]), int(self.lang[page])
            links = self.int_links[page]
            ext = self.ext_links[page]
            if remove is not None and (links or ext):
                at = int(remove * (len(links) + len(ext)))
                if at < len(links):
                    del links[at]
                else:
                    del ext[at - len(links)]
            current = set(links)
            for p in paths:
                url = self._url(site, lang, p)
                if url not in current and url != self.page_url[page]:
                    current.add(url)
                    links.append(url)
            current_e = set(ext)
            ext.extend(u for u in dict.fromkeys(ext_urls) if u not in current_e)
            text_edit[page] |= text

        own = alive & (self.lang > 0) & (rng.random(n) < per_interval(d.translator_edit, weeks))
        edit = alive & (text_edit | own)
        rewrite = edit & (rng.random(n) < per_interval(d.rewrite_prob, weeks))
        self._edit(rng, edit, rewrite)
        self._evolve_graph(rng)
