"""What to generate: one frozen config; equal configs give equal bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["CONTENT_MODES", "REGIMES", "GeneratorConfig", "RegimeDefaults"]

CONTENT_MODES = ("embedding", "text", "both", "none")


@dataclass(frozen=True)
class RegimeDefaults:
    """What a regime fills in when the config leaves it open."""

    interval_hours: float
    sites: int
    summary: str


REGIMES: dict[str, RegimeDefaults] = {
    "paper": RegimeDefaults(168.0, 50, "paper-like web pages, weekly (Dang et al. 2022)"),
    "news": RegimeDefaults(12.0, 50, "news section pages every 12 hours (day rhythm, tickers)"),
    "docs": RegimeDefaults(168.0, 1, "a sparse documentation site with translations, weekly"),
    "aggregator": RegimeDefaults(168.0, 1, "awesome-list pages, mostly external links, weekly"),
}


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate; every field takes part in the output, so equal configs give equal bytes.

    ``sites`` and ``interval_days`` left as None take the regime's default (``REGIMES``): after
    construction they always hold numbers.

    >>> GeneratorConfig(regime="news").interval_days, GeneratorConfig(regime="docs").sites
    (0.5, 1)
    """

    pages: int = 20_000
    crawls: int = 10
    seed: int = 0
    sites: int | None = None  # hosts; a page's internal links point to its own host
    clusters: int = 64  # content clusters: shared link-change behaviour and nearby content
    embedding_dim: int = 192
    content: str = "embedding"  # "embedding" | "text" | "both" | "none"
    start: datetime = datetime(2026, 1, 5, tzinfo=UTC)
    interval_days: float | None = None
    regime: str = "paper"
    # Per fetch, each embedding moves by Gaussian noise of norm ~D (sd D / sqrt(dim) per
    # dimension) and is renormalised; with text, each word is replaced with probability D.
    embedding_drift: float = 0.0

    def __post_init__(self) -> None:
        if self.regime not in REGIMES:
            raise ValueError(f"regime must be one of {tuple(REGIMES)}, got {self.regime!r}")
        defaults = REGIMES[self.regime]
        if self.sites is None:
            object.__setattr__(self, "sites", defaults.sites)
        if self.interval_days is None:
            object.__setattr__(self, "interval_days", defaults.interval_hours / 24.0)
        if self.pages < 1 or self.crawls < 1 or self.sites < 1 or self.clusters < 1:
            raise ValueError("pages, crawls, sites and clusters must be positive")
        if self.embedding_dim < 2:
            raise ValueError("embedding_dim must be at least 2")
        if self.content not in CONTENT_MODES:
            raise ValueError(f"content must be one of {CONTENT_MODES}, got {self.content!r}")
        if self.start.tzinfo is None or self.start.utcoffset() is None:
            raise ValueError("start must be a timezone-aware datetime")
        if not (math.isfinite(self.interval_days) and self.interval_days > 0):
            raise ValueError("interval_days must be positive")
        if not (math.isfinite(self.embedding_drift) and 0.0 <= self.embedding_drift <= 1.0):
            raise ValueError(f"embedding_drift must be in [0, 1], got {self.embedding_drift!r}")
