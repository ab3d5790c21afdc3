"""What every regime's simulated web shares: seeded streams, page facts, content, drift, events.

A regime subclasses ``World``: ``_build`` lays out its pages, links and behaviour from the
structure stream, ``step`` evolves links and content by one crawl interval. Random draws come
from numpy Generators spawned from ``config.seed``, one stream per concern (structure, link
dynamics, fetch times, embeddings, text, drift), so ``content="text"`` and
``content="embedding"`` crawls have the same outlinks, and drift leaves the links alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from batch.crawlgen.config import GeneratorConfig

__all__ = ["ContentDynamics", "World", "logit", "per_interval", "sigmoid", "stratified"]

_DRIFT_CHUNK = 65_536  # rows of drift noise drawn at once (memory bound for a million pages)


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def stratified(rng: np.random.Generator, k: int, sd: float = 1.0) -> np.ndarray:
    """k normal cluster effects at the exact quantiles (i + 0.5) / k, in random order.

    With 64 clusters, iid (or sampled) effects would move whole-crawl shares by several points
    between seeds; exact quantiles leave only the order to chance.
    """
    dist = NormalDist(0.0, sd) if sd > 0 else None
    values = [dist.inv_cdf((i + 0.5) / k) if dist else 0.0 for i in range(k)]
    return np.asarray(values, dtype=np.float64)[rng.permutation(k)]


def per_interval(p: Any, weeks: float) -> Any:
    """A weekly probability over an interval of ``weeks`` weeks (the same object at one week)."""
    return p if weeks == 1.0 else 1.0 - (1.0 - p) ** weeks


@dataclass(frozen=True)
class ContentDynamics:
    """What the shared content and output code needs from a regime's constants."""

    embedding_noise: float = 2.0  # norm of the page noise around its cluster centroid
    fetch_window_s: int = 2 * 86_400  # a crawl's fetches spread over this window
    fetch_offset_s: int = 0  # first fetch of crawl 0 after ``config.start``
    words_median: float = 120.0  # words of page text


class World:
    """Mutable state of a simulated web; ``advance`` moves it one crawl, ``events`` emits one."""

    dynamics: type[ContentDynamics] = ContentDynamics  # the regime's constants, by default
    dyn: ContentDynamics

    def __init__(self, config: GeneratorConfig, dyn: ContentDynamics | None = None) -> None:
        self.cfg = config
        self.dyn = dyn if dyn is not None else self.dynamics()
        self.weeks = config.interval_days / 7.0  # one crawl interval, in weeks
        ss = np.random.SeedSequence([config.seed, 0x10CA80])
        s_struct, s_dyn, s_time, s_emb, s_text, s_drift = ss.spawn(6)
        self.rng = np.random.default_rng(s_dyn)
        self.rng_time = np.random.default_rng(s_time)
        self.rng_emb = np.random.default_rng(s_emb)
        self.rng_text = np.random.default_rng(s_text)
        self.rng_drift = np.random.default_rng(s_drift)
        # Filled by ``_build``: page layout, links and facts the events carry.
        self.cluster = np.zeros(0, dtype=np.int64)
        self.host = np.zeros(0, dtype=np.int64)
        self.death = np.zeros(0, dtype=np.int64)
        self.page_url: list[str] = []
        self.int_links: list[list[str]] = []
        self.ext_links: list[list[str]] = []
        self._build(np.random.default_rng(s_struct))
        mode = config.content
        self.emb: np.ndarray | None = None
        self.base_text: list[str] = []
        self.tail_text: list[str] = []
        if mode in ("embedding", "both"):
            self._init_embeddings()
        if mode in ("text", "both"):
            self._init_text()

    def _build(self, rng: np.random.Generator) -> None:
        raise NotImplementedError

    def step(self, crawl: int) -> None:
        """Evolve links, digests and content from crawl-1 to ``crawl``."""
        raise NotImplementedError

    def advance(self, crawl: int) -> None:
        self.step(crawl)
        self._drift(crawl)

    # -- layout and page facts ------------------------------------------------------------

    def _clusters_and_sites(self, rng: np.random.Generator) -> np.ndarray:
        """Equal-size content clusters, pages spread over sites of uneven size; returns each
        cluster's liveliness (stratified normal), which the regimes let move pages together."""
        n, k, h = self.cfg.pages, self.cfg.clusters, self.cfg.sites
        self.cluster = rng.permutation(np.arange(n) % k)
        site_w = rng.lognormal(0.0, 0.6, h)
        self.host = rng.choice(h, size=n, p=site_w / site_w.sum())
        return stratified(rng, k)

    def _deaths(self, rng: np.random.Generator, share: float) -> np.ndarray:
        """The crawl at which each page dies (404 from then on); ``crawls + 1``: never."""
        crawls = self.cfg.crawls
        death = rng.integers(1, max(crawls, 2), self.cfg.pages)
        return np.where(rng.random(self.cfg.pages) < share, death, crawls + 1)

    def _page_facts(self, rng: np.random.Generator, pop_log: np.ndarray) -> None:
        """Graph facts, text sizes and first digests; popularity ``exp(pop_log)`` per page."""
        n, h = self.cfg.pages, self.cfg.sites
        pop = np.exp(pop_log)
        self.inl_int = rng.poisson(4.0 * pop).astype(np.int64) + 1
        self.inl_ext = rng.poisson(0.6 * pop * rng.lognormal(0, 0.8, n)).astype(np.int64)
        self.site_trust = rng.beta(2.0, 3.0, h)
        self.quality = np.clip(rng.beta(5.0, 2.0, n), 0.0, 1.0)
        self.quality_now = self.quality
        words = rng.lognormal(math.log(self.dyn.words_median), 0.5, n)
        self.words = np.clip(words, 30, 800).astype(np.int64)
        self.text_size = (self.words * rng.uniform(5.8, 7.2, n)).astype(np.int64)
        self.markup = rng.uniform(2.0, 4.5, n)
        self.overhead = rng.integers(3_000, 25_000, n)
        hi, lo = rng.integers(0, 1 << 63, n), rng.integers(0, 1 << 63, n)
        self.digest = [f"{a:016x}{b:016x}" for a, b in zip(hi.tolist(), lo.tolist(), strict=True)]

    def _evolve_graph(self, rng: np.random.Generator) -> None:
        """Inlinks grow a little, text quality wobbles around the page's own level."""
        n = self.cfg.pages
        gain_int = per_interval(0.05, self.weeks)
        gain_ext = per_interval(0.02, self.weeks)
        self.inl_int = self.inl_int + rng.binomial(1, gain_int, n) * rng.poisson(
            np.sqrt(self.inl_int)
        )
        self.inl_ext = self.inl_ext + rng.binomial(1, gain_ext, n)
        self.quality_now = np.clip(self.quality + rng.normal(0, 0.01, n), 0.0, 1.0)

    def _edit(self, rng: np.random.Generator, edit: np.ndarray, rewrite: np.ndarray) -> None:
        """New digests and sizes for edited pages, new text for them; ``rewrite`` ⊆ edits."""
        rows = np.flatnonzero(edit)
        hi, lo = rng.integers(0, 1 << 63, rows.size), rng.integers(0, 1 << 63, rows.size)
        jitter = rng.normal(1.0, 0.03, rows.size)
        for i, a, b in zip(rows.tolist(), hi.tolist(), lo.tolist(), strict=True):
            self.digest[i] = f"{a:016x}{b:016x}"
        self.text_size[rows] = np.maximum((self.text_size[rows] * jitter).astype(np.int64), 50)
        self._update_content(edit, rewrite)

    # -- content -------------------------------------------------------------------------

    def _init_embeddings(self) -> None:
        cfg, rng = self.cfg, self.rng_emb
        dim, k = cfg.embedding_dim, cfg.clusters
        topics = rng.standard_normal((max(1, k // 8), dim))
        topics /= np.linalg.norm(topics, axis=1, keepdims=True)
        own = rng.standard_normal((k, dim))
        own /= np.linalg.norm(own, axis=1, keepdims=True)
        cent = 0.6 * topics[np.arange(k) // 8 % topics.shape[0]] + own
        self.centroids = cent / np.linalg.norm(cent, axis=1, keepdims=True)
        self.emb = np.empty((cfg.pages, dim), dtype=np.float64)
        for lo in range(0, cfg.pages, 16_384):
            rows = np.arange(lo, min(lo + 16_384, cfg.pages))
            self.emb[rows] = self._embed(rows)

    def _embed(self, rows: np.ndarray) -> np.ndarray:
        """Fresh unit vectors: the cluster centroid plus page noise, rounded to 5 decimals."""
        dim = self.cfg.embedding_dim
        noise = self.rng_emb.standard_normal((rows.size, dim)) * (
            self.dyn.embedding_noise / math.sqrt(dim)
        )
        vec = self._anchor(rows) + noise
        vec /= np.linalg.norm(vec, axis=1, keepdims=True)
        return np.round(vec, 5)

    def _anchor(self, rows: np.ndarray) -> np.ndarray:
        """Where a page's vector sits before its own noise: its cluster's centroid."""
        return self.centroids[self.cluster[rows]]

    def _init_text(self) -> None:
        cfg, rng = self.cfg, self.rng_text
        onsets = [*"bcdfghjklmnprstvwz", "ch", "sh", "th", "br", "st", "tr", "gl", "kr"]
        vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
        codas = ["", "", "", "n", "r", "s", "l", "x", "m"]
        want = cfg.clusters * 200 + 300
        words: dict[str, None] = {}
        while len(words) < want:
            m = 2 * (want - len(words)) + 64
            syl = rng.integers(2, 5, m).tolist()
            on = rng.integers(0, len(onsets), (m, 4)).tolist()
            vo = rng.integers(0, len(vowels), (m, 4)).tolist()
            co = rng.integers(0, len(codas), m).tolist()
            for t in range(m):
                w = (
                    "".join(onsets[on[t][q]] + vowels[vo[t][q]] for q in range(syl[t]))
                    + codas[co[t]]
                )
                words.setdefault(w, None)
                if len(words) == want:
                    break
        self.vocab = list(words)
        self.common_base = cfg.clusters * 200
        self.base_text = self._texts(np.arange(cfg.pages), self.words)
        self.tail_text = self._texts(np.arange(cfg.pages), np.full(cfg.pages, 8))

    def _word_ids(self, rng: np.random.Generator, owner: np.ndarray) -> list[int]:
        """One word per entry of ``owner`` (a cluster id): ~60% from its vocabulary (Zipf-ish)."""
        total = owner.size
        cl = owner * 200 + (200 * rng.random(total) ** 1.6).astype(np.int64)
        common = self.common_base + (300 * rng.random(total) ** 1.3).astype(np.int64)
        return np.where(rng.random(total) < 0.6, cl, common).tolist()

    def _texts(self, rows: np.ndarray, lengths: np.ndarray) -> list[str]:
        """Bag of words: ~60% from the page's cluster vocabulary (Zipf-ish), rest common words."""
        lengths = np.asarray(lengths, dtype=np.int64)
        ids = self._word_ids(self.rng_text, np.repeat(self.cluster[rows], lengths))
        vocab = self.vocab
        out: list[str] = []
        pos = 0
        for length in lengths.tolist():
            out.append(" ".join([vocab[w] for w in ids[pos : pos + length]]))
            pos += length
        return out

    def _update_content(self, edit: np.ndarray, rewrite: np.ndarray) -> None:
        """Minor edits rewrite the text's tail; rewrites give a new embedding and body text."""
        rows = np.flatnonzero(rewrite)
        if rows.size and self.emb is not None:
            self.emb[rows] = self._embed(rows)
        if self.base_text:
            edits = np.flatnonzero(edit)
            # Text draws come from their own stream: they never touch the link stream.
            tail_len = self.rng_text.integers(4, 13, edits.size)
            new_tails = self._texts(edits, tail_len)
            for i, txt in zip(edits.tolist(), new_tails, strict=True):
                self.tail_text[i] = txt
            if rows.size:
                for i, txt in zip(rows.tolist(), self._texts(rows, self.words[rows]), strict=True):
                    self.base_text[i] = txt

    def _drift(self, crawl: int) -> None:
        """Every live page's content moves a little at every fetch (``embedding_drift``).

        Embeddings: previous + Gaussian noise with sd D / sqrt(dim) per dimension (so the step
        has norm ~D against the unit vector), renormalised and rounded as at creation; the
        cosine to the previous fetch is ~1 / sqrt(1 + D^2). Text: each word of the body is
        replaced with probability D by a word drawn as the page's words are (a date, a teaser,
        a comment count changing). Neither changes the digest, which models meaningful edits.
        """
        d = self.cfg.embedding_drift
        if d <= 0.0:
            return
        alive = np.flatnonzero(self.death > crawl)
        rng = self.rng_drift
        if self.emb is not None:
            dim = self.emb.shape[1]
            for lo in range(0, alive.size, _DRIFT_CHUNK):
                rows = alive[lo : lo + _DRIFT_CHUNK]
                vec = self.emb[rows] + rng.standard_normal((rows.size, dim)) * (d / math.sqrt(dim))
                vec /= np.linalg.norm(vec, axis=1, keepdims=True)
                self.emb[rows] = np.round(vec, 5)
        if self.base_text:
            self._drift_text(rng, alive, d)

    def _drift_text(self, rng: np.random.Generator, alive: np.ndarray, d: float) -> None:
        texts = self.base_text
        split = {i: texts[i].split(" ") for i in alive.tolist()}
        lengths = np.array([len(split[i]) for i in alive.tolist()], dtype=np.int64)
        swaps = rng.binomial(lengths, d)
        rows = alive[swaps > 0]
        counts = swaps[swaps > 0]
        where = (rng.random(int(counts.sum())) * np.repeat(lengths[swaps > 0], counts)).astype(
            np.int64
        )
        ids = self._word_ids(rng, np.repeat(self.cluster[rows], counts))
        vocab = self.vocab
        pos = 0
        for i, k in zip(rows.tolist(), counts.tolist(), strict=True):
            words = split[i]
            for q in range(pos, pos + k):
                words[int(where[q])] = vocab[ids[q]]
            pos += k
            texts[i] = " ".join(words)

    # -- output --------------------------------------------------------------------------

    def events(self, crawl: int, raw_embedding: bool = False) -> Iterator[dict[str, Any]]:
        """One crawl's events in fetched_at order; ``raw_embedding`` keeps numpy rows (faster)."""
        cfg, n = self.cfg, self.cfg.pages
        dyn = self.dyn
        offsets = self.rng_time.integers(0, dyn.fetch_window_s, n)
        order = np.argsort(offsets, kind="stable")
        base = (
            int(cfg.start.timestamp())
            + dyn.fetch_offset_s
            + round(crawl * cfg.interval_days * 86_400)
        )
        stamps = np.datetime_as_string((base + offsets[order]).astype("datetime64[s]"), unit="s")
        quality = self.quality_now
        pr_raw = (0.15 + self.inl_int + 4.0 * self.inl_ext).astype(np.float64)
        pagerank = np.round(pr_raw / pr_raw.sum(), 10)
        trust = np.round(pagerank * self.site_trust[self.host] * (0.5 + self.quality), 10)
        q_l = np.round(quality, 4).tolist()
        pr_l, tr_l = pagerank.tolist(), trust.tolist()
        ii_l, ie_l = self.inl_int.tolist(), self.inl_ext.tolist()
        alive_l = (self.death > crawl).tolist()
        emb, base_text, tail_text = self.emb, self.base_text, self.tail_text
        if base_text:
            texts = [f"{a} {b}" for a, b in zip(base_text, tail_text, strict=True)]
            ts_l = [len(t) for t in texts]
            size_l = [
                int(a * b) + c
                for a, b, c in zip(ts_l, self.markup.tolist(), self.overhead.tolist(), strict=True)
            ]
        else:
            texts = None
            ts_l = self.text_size.tolist()
            size_l = ((self.text_size * self.markup).astype(np.int64) + self.overhead).tolist()
        int_links, ext_links = self.int_links, self.ext_links
        digest, page_url = self.digest, self.page_url
        for pos, i in enumerate(order.tolist()):
            if not alive_l[i]:
                yield {
                    "url": page_url[i],
                    "fetched_at": f"{stamps[pos]}Z",
                    "crawl": crawl,
                    "status": 404,
                    "outlinks": [],
                    "inlinks_internal": ii_l[i],
                    "inlinks_external": ie_l[i],
                    "pagerank": pr_l[i],
                    "trustrank": tr_l[i],
                }
                continue
            outlinks = int_links[i] + ext_links[i]
            ev: dict[str, Any] = {
                "url": page_url[i],
                "fetched_at": f"{stamps[pos]}Z",
                "crawl": crawl,
                "status": 200,
                "outlinks": outlinks,
                "content_size": size_l[i] + 90 * len(outlinks),
                "text_size": ts_l[i],
                "text_quality": q_l[i],
                "content_digest": digest[i],
            }
            if emb is not None:
                ev["embedding"] = emb[i] if raw_embedding else emb[i].tolist()
            if texts is not None:
                ev["text"] = texts[i]
            ev["inlinks_internal"] = ii_l[i]
            ev["inlinks_external"] = ie_l[i]
            ev["pagerank"] = pr_l[i]
            ev["trustrank"] = tr_l[i]
            yield ev
