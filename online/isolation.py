"""One event cannot stop the others: a batch that raises is retried in halves until the event at
fault is alone.

Bisection costs about 2 log2 n attempts for one bad event in n, and every attempt after a
failure starts from a checkpoint (the scorer's learned state, the counters, the index), so the
events that go through are processed exactly as if the failed ones had not been there. Errors
of the infrastructure (Redis, the network, memory) are no event's fault: they propagate, for
the caller to retry the whole batch.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from online.fetch import Fetch
from online.outcome import BatchOutcome, merge_outcomes

log = logging.getLogger("lookaround.pipeline")

Saved = TypeVar("Saved")


@dataclass
class Isolated:
    """`PagePipeline.process_isolated`'s result: the outcome of the events that went through
    (in order, the failed ones left out) and each failed event's position in the batch with
    its error (``"OverflowError: ..."``)."""

    outcome: BatchOutcome
    failed: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Attempts(Generic[Saved]):
    """How to attempt a batch again: ``process`` it, take a ``checkpoint`` of what an attempt
    changes, ``roll_back`` to one (undoing the attempt's index writes), ``count_failure`` of
    an event left out; ``infrastructure_errors`` are let through, not blamed on an event."""

    process: Callable[[list[Fetch]], BatchOutcome]
    checkpoint: Callable[[], Saved]
    roll_back: Callable[[Saved], None]
    count_failure: Callable[[], None]
    infrastructure_errors: tuple[type[BaseException], ...]


def isolate(
    events: list[Fetch], attempts: Attempts[Saved], saved: Saved, offset: int = 0
) -> Isolated:
    """Process ``events`` (the batch's from position ``offset``), leaving out those whose
    processing raises alone; ``saved`` is the checkpoint taken before this attempt."""
    try:
        return Isolated(attempts.process(events))
    except attempts.infrastructure_errors:
        raise
    except Exception as exc:  # an event's fault: find it
        attempts.roll_back(saved)
        if len(events) == 1:
            attempts.count_failure()
            error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "event failed in processing, left out: %s: %s",
                events[0].url,
                error,
                extra={"url": events[0].url, "error": error},
            )
            return Isolated(BatchOutcome([], []), [(offset, error)])
    mid = len(events) // 2
    left = isolate(events[:mid], attempts, saved, offset)
    right = isolate(events[mid:], attempts, attempts.checkpoint(), offset + mid)
    return Isolated(merge_outcomes(left.outcome, right.outcome), left.failed + right.failed)


def copy_learned(state: object) -> object:
    """A copy of a scorer's learned state to roll back to, cheap enough to take before every
    batch: lists of arrays or tuples (rows and labels waiting for an epoch, which only grow and
    shrink) are copied as lists of the same items, everything else deep-copied. The scorer's
    batch refresher is not part of the state: an attempt that fails after an epoch refreshed
    the batch model keeps that refresh."""
    new = copy.copy(state)
    for name, value in vars(state).items():
        if isinstance(value, list) and value and isinstance(value[0], np.ndarray | tuple):
            setattr(new, name, list(value))
        else:
            setattr(new, name, copy.deepcopy(value))
    return new
