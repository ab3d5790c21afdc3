"""What the pipeline gives back for a batch: one `Processed` per event and the scored columns.

Kept apart from the stages that fill them so that a caller (the replay, the live worker)
depends on the results' shape only, not on how a batch is processed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from online.features import as_dict
from online.fetch import Fetch
from online.history import Emitted
from online.scored import ScoredColumns


class Processed:
    """One event's outcome. ``row`` and ``priority`` are None for duplicates and stale.

    An applied event's row and priority live in its batch's `ScoredColumns` (``scored``, at
    row ``at``); the priority dict is built on first access.
    """

    __slots__ = ("_priority", "at", "emitted", "event", "names", "page_id", "scored")

    def __init__(
        self,
        event: Fetch,
        page_id: int,
        emitted: Emitted,
        names: list[str] | None = None,
    ) -> None:
        self.event = event
        self.page_id = page_id
        self.emitted = emitted
        self.names = names
        self.scored: ScoredColumns | None = None
        self.at = 0
        self._priority: dict | None = None

    def __repr__(self) -> str:
        kind = self.emitted.kind
        return f"Processed({self.event.url!r}, {kind!r}, scored={self.scored is not None})"

    @property
    def row(self) -> np.ndarray | None:
        """The event's feature row (float64), as known right after it."""
        return None if self.scored is None else self.scored.matrix[self.at]

    @property
    def priority(self) -> dict | None:
        """The priority update for the crawler."""
        if self.scored is None:
            return None
        if self._priority is None:
            self._priority = self.scored.priority(self.at)
        return self._priority

    @property
    def features(self) -> dict[str, float] | None:
        """The known features as a dict (River's form), or None."""
        row = self.row
        if row is None or self.names is None:
            return None
        return as_dict(row, self.names)


@dataclass(slots=True)
class BatchOutcome:
    """`PagePipeline.process_batch`'s result: one `Processed` per event, in order, and the
    scored columns of the applied ones (one block per internal batch, in order)."""

    results: list[Processed]
    scored: list[ScoredColumns]
    #: related updates for the siblings of pages that showed new links
    #: (`online.related_updates`), in order
    related: list[dict] = field(default_factory=list)


def merge_outcomes(first: BatchOutcome, second: BatchOutcome) -> BatchOutcome:
    """Two consecutive parts of a batch as one outcome."""
    return BatchOutcome(
        first.results + second.results,
        first.scored + second.scored,
        first.related + second.related,
    )
