"""The emit stage: a batch's scores as priority updates, each with its suggested next fetch.

The scores become columns (`online.scored.ScoredColumns`) that the replay writes and the
live worker publishes as they are, one priority dict built only when asked for. The next
fetch follows the page's published rate: with a fetch budget, the budget's square-root
allocation (`online.schedule`), whose state moves with every batch; without one, the
revisit bounds' rule (`online.priority.next_fetch_days`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import numpy as np

from online.batch_walk import Walk
from online.priority import DEFAULT_HORIZON_DAYS, next_fetch_days
from online.schedule import Allocation, BudgetSchedule, allocate
from online.scored import ScoredColumns, iso, iso_many, micros_many, next_fetch_iso, score_rows
from online.scoring import Scorer, Scores
from online.stores import PageWrites


class Emitter:
    """Priority updates for a batch's applied events, as columns, from ``scorer``'s scores
    stamped by ``clock``; ``revisit`` (`online.priority.next_fetch_days`'s options) or a
    budget ``schedule`` sets when each page is due."""

    def __init__(
        self,
        scorer: Scorer,
        clock: Callable[[], datetime],
        revisit: dict,
        schedule: BudgetSchedule | None,
    ) -> None:
        self.scorer = scorer
        self.clock = clock
        self.revisit = revisit
        self.schedule = schedule

    def emit(
        self,
        matrix: np.ndarray,
        scores: Scores,
        walk: Walk,
        allocation: Allocation | None,
        writes: PageWrites,
    ) -> ScoredColumns:
        """The applied events' priority updates as columns (with the suggested next fetch),
        each event's `Processed` pointing at its row."""
        applied = walk.applied
        stamp = iso(self.clock())
        waits = self.next_fetch_days(scores, walk, allocation, writes)
        scorer = {"name": self.scorer.name, "version": self.scorer.version}
        scorer["models"] = dict(scores.models or {})
        timestamps = [r.event.timestamp for r in applied]
        fetched_us = micros_many(timestamps)
        events = [r.event for r in applied]
        columns = ScoredColumns(
            urls=[e.url for e in events],
            page_ids=[r.page_id for r in applied],
            crawls=[e.crawl for e in events],
            statuses=[e.status for e in events],
            timestamps=timestamps,
            intervals=[r.emitted.interval for r in applied],
            matrix=matrix,
            fetched_at=iso_many(fetched_us),
            scored_at=stamp,
            values=score_rows(scores),
            next_fetch_at=next_fetch_iso(fetched_us, waits),
            reasons=scores.reasons or [["own_history"]] * len(applied),
            scorer=scorer,
            candidates=scores.candidates,
            row_models=scores.row_models,
        )
        for a, r in enumerate(applied):
            r.scored = columns
            r.at = a
        return columns

    def next_fetch_days(
        self,
        scores: Scores,
        walk: Walk,
        allocation: Allocation | None,
        writes: PageWrites,
    ) -> list[float]:
        """Suggested days to the next fetch per row: with a budget, the allocation's (from
        ``allocation``; its new state goes with the batch's writes).

        A scorer without a rate (``ccr``) gives P(>= 1 change) over the horizon, taken as a
        Poisson rate: -ln(1 - p_new) / horizon changes a day.
        """
        if scores.rate_per_day is None:
            p = np.clip(np.round(scores.p_new, 6), 0.0, 1.0 - 1e-9)
            rate = -np.log1p(-p) / DEFAULT_HORIZON_DAYS
        else:
            rate = np.round(scores.rate_per_day, 6)  # the published rate: the wait follows it
        if self.schedule is not None:
            times = np.array([r.event.timestamp for r in walk.applied], dtype=np.float64)
            writes.allocation, waits = allocate(
                allocation,
                self.schedule,
                rates=rate,
                since_days=walk.since,
                timestamps=times,
                evidence=walk.evidence,
            )
            return waits.tolist()
        return next_fetch_days(rate, **self.revisit).tolist()
