"""The history pass over a batch: each event applied to its page's history in stream order.

A page's second event in a batch must see the state its first one left, so the pass walks the
events one by one and records, per applied event, what the later stages need (its new state,
whether its page is new, the label it brings, its place). `Walk.state_before` then answers,
for any page and any place in the batch, the state the page had right before it: the sibling
stage asks it for the fetched pages and for their siblings alike.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from online.history import Emitted, PageState, update, with_embedding
from online.learners import Label
from online.neighbour_search import PlannedEvent
from online.outcome import Processed
from online.schedule import Evidence
from online.stores import PageWrites

DAY = 86_400.0


@dataclass(slots=True)
class Walk:
    """A batch after its history pass: every event's outcome in order (``results``) and, per
    applied event in the same order, what the later stages need."""

    results: list[Processed] = field(default_factory=list)
    applied: list[Processed] = field(default_factory=list)
    #: the applied events' plans
    pending: list[PlannedEvent] = field(default_factory=list)
    own_states: list[PageState] = field(default_factory=list)
    #: whether it is its page's first applied fetch
    first_seen: list[bool] = field(default_factory=list)
    #: days since its page's previous fetch (kept only with a fetch budget)
    since: list[float | None] = field(default_factory=list)
    #: its page's (new links, days) over the history window before and after it (kept only
    #: with a fetch budget: the allocation's prior, `online.schedule.Evidence`)
    evidence: list[Evidence] = field(default_factory=list)
    #: the batch's pages' states as stored before it, by URL
    before: dict[str, PageState | None] = field(default_factory=dict)
    #: each URL's places among the applied events, in order
    positions: dict[str, list[int]] = field(default_factory=dict)
    #: the row its label is for: a position in this batch, a stored row, or None (learning only)
    previous_at: list[int | np.ndarray | None] = field(default_factory=list)
    #: the label it brings for that row (learning only)
    labels: list[Label | None] = field(default_factory=list)

    def state_before(
        self, url: str, position: int, outside: Mapping[str, PageState | None] | None = None
    ) -> PageState | None:
        """The page's state right before the applied event at ``position``: the one its
        latest earlier event in the batch left, else as stored before the batch (``before``;
        ``outside`` for a page the batch does not fetch)."""
        places = self.positions.get(url, ())
        earlier = bisect_left(places, position)
        if earlier:
            return self.own_states[places[earlier - 1]]
        if url in self.before:
            return self.before[url]
        assert outside is not None, f"{url} is not in the batch"
        return outside[url]

    def states_before(self) -> list[PageState | None]:
        """Each applied event's page state right before it."""
        return [self.state_before(r.event.url, at) for at, r in enumerate(self.applied)]


def walk_history(
    pending: list[PlannedEvent],
    states: dict[str, PageState | None],
    stored_rows: dict[int, np.ndarray | None],
    writes: PageWrites,
    *,
    history: int,
    names: list[str],
    learns: bool,
    budgeted: bool,
) -> Walk:
    """Each applied event's history update, in stream order: a page's second event in the
    batch sees the state its first one left (``states`` is updated as the walk goes).
    Duplicates and stale events are only recorded. The new states go to ``writes``; with
    ``learns``, each applied event's label and the row it labels (`_label`); with
    ``budgeted``, what the budget's allocation needs."""
    walk = Walk(before=dict(states))
    last_position: dict[int, int] = {}
    for p in pending:
        event = p.event
        if p.kind != "applied":
            walk.results.append(Processed(event, p.page_id, Emitted(p.kind)))
            continue
        before = states[event.url]
        walk.first_seen.append(before is None)
        new_state, emitted = update(before, event, history=history)
        if budgeted:  # days since the page's previous fetch
            last = None if before is None else before.last_fetched_at
            walk.since.append(None if last is None else (event.timestamp - last) / DAY)
            walk.evidence.append(Evidence.of(before, new_state))
        assert new_state is not None
        if p.vector is not None:  # the index holds this vector from now on
            new_state = with_embedding(new_state, p.vector_fp)
        walk.positions.setdefault(event.url, []).append(len(walk.applied))
        walk.own_states.append(new_state)
        states[event.url] = new_state
        writes.states[event.url] = new_state
        writes.page_ids[event.url] = p.page_id
        r = Processed(event, p.page_id, emitted, names=names)
        if learns:
            _label(walk, r, stored_rows, last_position)
        walk.results.append(r)
        walk.applied.append(r)
        walk.pending.append(p)
    return walk


def _label(
    walk: Walk,
    r: Processed,
    stored_rows: dict[int, np.ndarray | None],
    last_position: dict[int, int],
) -> None:
    """The label an applied event brings (the interval it closes) and where the row it
    labels is: the page's row from earlier in this batch, else the stored one. A label is
    only known one fetch later, so that is when the row is learned from."""
    at = last_position.get(r.page_id)
    walk.previous_at.append(at if at is not None else stored_rows.get(r.page_id))
    interval = r.emitted.interval
    walk.labels.append(
        None
        if interval is None
        else Label(
            interval.new_internal,
            interval.new_external,
            interval.days,
            interval.content_changed,
        )
    )
    last_position[r.page_id] = len(walk.applied)
