"""URL factories and link-list edits shared by the news, docs and aggregator regimes."""

from __future__ import annotations

import numpy as np

__all__ = ["ExternalUrls", "FreshUrls", "append_capped"]


class ExternalUrls:
    """URLs on other domains: a popularity-skewed pool of known ones, and brand-new ones.

    Domains are ``{prefix}{d}.example.org`` with popularity falling with d; a domain's pages
    are ``/{word}/p{j}`` numbered in order of appearance, so every URL is made once and reused
    as the same string object wherever it is linked.
    """

    def __init__(self, domains: int, words: tuple[str, ...], prefix: str = "ext") -> None:
        self.domains = max(1, domains)
        self.words = words
        self.prefix = prefix
        self.next_page = [0] * self.domains
        self.pool: list[str] = []

    def fresh(self, u: float, v: float) -> str:
        """A never-seen URL: domain ~ v^2.2 (a few domains get most), path word from u."""
        d = min(int(self.domains * v**2.2), self.domains - 1)
        j = self.next_page[d]
        self.next_page[d] = j + 1
        word = self.words[int(u * len(self.words)) % len(self.words)]
        url = f"https://{self.prefix}{d}.example.org/{word}/p{j}"
        self.pool.append(url)
        return url

    def known(self, u: float) -> str:
        """A URL already in the pool, early (popular) ones far likelier."""
        return self.pool[min(int(len(self.pool) * u**2.5), len(self.pool) - 1)]

    def fill(self, rng: np.random.Generator, count: int) -> None:
        for u, v in zip(rng.random(count).tolist(), rng.random(count).tolist(), strict=True):
            self.fresh(u, v)

    def pick(self, draws: list[float], count: int) -> list[str]:
        """``count`` distinct known URLs (fewer if the draws run out on repeats)."""
        seen: dict[str, None] = {}
        for u in draws:
            seen.setdefault(self.known(u), None)
            if len(seen) == count:
                break
        return list(seen)


class FreshUrls:
    """Brand-new internal URLs of one site, numbered in order of publication."""

    def __init__(self, base: str, sections: tuple[str, ...]) -> None:
        self.base = base
        self.sections = sections
        self.count = 0

    def block(self, size: int) -> list[str]:
        """The next ``size`` URLs (a section each, in turn)."""
        first = self.count
        self.count += size
        secs = self.sections
        return [f"{self.base}/{secs[j % len(secs)]}/a{j}/" for j in range(first, first + size)]


def append_capped(links: list[str], start: int, adds: list[str], cap: int) -> list[str]:
    """Append ``adds`` to ``links[start:]`` and drop its oldest entries beyond ``cap``.

    Returns the dropped links (oldest first). ``links[:start]`` (navigation, say) is kept.
    """
    links.extend(adds)
    excess = len(links) - start - max(cap, len(adds))
    if excess <= 0:
        return []
    dropped = links[start : start + excess]
    del links[start : start + excess]
    return dropped
