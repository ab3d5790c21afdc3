"""A batch's scored fetches as columns: the priority updates and feature rows the pipeline
produced for its applied events.

The pipeline fills one `ScoredColumns` per batch with a few list and array operations; a
priority update becomes a dict only when someone asks for it (`Processed.priority`, the live
worker's publisher), and the embedded replay hands the columns whole to its writer process,
which turns them into JSON Lines and Parquet rows there. Kept free of FAISS and the pipeline
so that the writer process imports little.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from online.history import Interval


@dataclass(slots=True)
class ScoredColumns:
    """Row ``a`` of every column belongs to the batch's ``a``-th applied event, in stream order.

    ``values[a]`` is ``(score, expected new internal, expected new external, p_new,
    rate per day)`` rounded for publishing (None where the scorer estimates no count);
    ``intervals[a]`` is what the fetch closed on its page (None for a first or failed fetch),
    i.e. the label of the page's previous feature row.
    """

    urls: list[str]
    page_ids: list[int]
    crawls: list[int | None]
    statuses: list[int]
    timestamps: list[float]
    intervals: list[Interval | None]
    matrix: np.ndarray  # feature rows, float64
    fetched_at: list[str]
    scored_at: str
    values: list[tuple]
    next_fetch_at: list[str | None]
    reasons: list[list[str]]
    scorer: dict

    def __len__(self) -> int:
        return len(self.urls)

    def priority(self, at: int) -> dict:
        """The priority update of row ``at`` (a new dict each time; ``scorer`` copied)."""
        score, internal, external, p_new, rate = self.values[at]
        return {
            "url": self.urls[at],
            "fetched_at": self.fetched_at[at],
            "scored_at": self.scored_at,
            "score": score,
            "expected_new_internal": internal,
            "expected_new_external": external,
            "p_new": p_new,
            "rate_per_day": rate,
            "next_fetch_at": self.next_fetch_at[at],
            "reasons": list(self.reasons[at]),
            "scorer": {**self.scorer, "models": dict(self.scorer["models"])},
            "crawl": self.crawls[at],
            "status": self.statuses[at],
        }

    def priority_lines(self) -> bytes:
        """Every row's priority update as JSON Lines."""
        return b"".join(orjson.dumps(self.priority(a)) + b"\n" for a in range(len(self)))
