"""The sibling stage: a batch's pages among their translations, and the related updates it sends.

Siblings are a page's translations (the same path in another language,
`online.links.sibling_key`). For a batch this stage reads the sibling groups, adds the pages
seen for the first time, gives each applied event its siblings as look-around pages, walks
the groups' gains in stream order (`online.related_updates.group_pass`) and turns each gain
into related updates for the siblings, each from the sibling's state right before the
announcing fetch. The rules themselves live in `online.related_updates`; this module is how
the pipeline feeds them from the store and the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import numpy as np

from online.batch_walk import Walk
from online.links import sibling_key
from online.neighbour_search import PlannedEvent
from online.priority import DEFAULT_HORIZON_DAYS
from online.related_updates import (
    Announcement,
    SiblingFollow,
    SiblingGroup,
    group_pass,
    led_at,
    related_updates,
)
from online.scored import iso
from online.scoring import Scorer
from online.stores import Neighbours, PageStore, PageWrites, new_neighbours


@dataclass(frozen=True, slots=True)
class Siblings:
    """A batch's sibling groups: each applied event's siblings as look-around pages
    (``of``), the groups as stored with the batch's first-seen members added, and each
    applied event's sibling key."""

    of: list[Neighbours | None]
    groups: dict[str, SiblingGroup]
    keys: list[str]


def read_siblings(
    store: PageStore, applied: list[PlannedEvent], first_seen: list[bool], writes: PageWrites
) -> Siblings:
    """Each applied event's siblings as known right before it, weighted alike: the pages
    stored under its sibling key and those first seen earlier in the batch. A page seen for
    the first time joins its key's list (in ``writes``)."""
    keys = [sibling_key(p.event.url) for p in applied]
    distinct = list(dict.fromkeys(keys))
    groups = dict(zip(distinct, store.get_siblings(distinct), strict=True))
    members = {key: group.ids.tolist() for key, group in groups.items()}
    joined: dict[str, list[str]] = {}  # each key's first-seen URLs, in stream order
    out: list[Neighbours | None] = []
    for p, first, key in zip(applied, first_seen, keys, strict=True):
        known = members[key]
        others = [pid for pid in known if pid != p.page_id]
        out.append(_weighted_alike(others) if others else None)
        if first and p.page_id not in known:
            known.append(p.page_id)
            joined.setdefault(key, []).append(p.event.url)
    for key, urls in joined.items():  # only the groups the batch grew are made again
        writes.siblings.setdefault(key, []).extend(urls)
        group = groups[key]
        ids = np.array(members[key], np.int64)
        groups[key] = SiblingGroup((*group.urls, *urls), ids, group.gain)
    return Siblings(out, groups, keys)


def _weighted_alike(page_ids: list[int]) -> Neighbours:
    """Pages as look-around pages of equal weight."""
    n = len(page_ids)
    return new_neighbours(
        np.array(page_ids, np.int64), np.full(n, 1.0 / n, np.float32), 0, None, 1.0, False
    )


def pass_groups(
    walk: Walk, siblings: Siblings, follow: SiblingFollow, writes: PageWrites
) -> list[Announcement]:
    """The sibling groups' gains and what followed them, in stream order
    (`online.related_updates.group_pass`); the changes go to ``writes``."""
    fetches = [
        (r.event.url, r.page_id, r.event.timestamp, r.emitted.interval, led_at(before))
        for r, before in zip(walk.applied, walk.states_before(), strict=True)
    ]
    done = group_pass(fetches, siblings.keys, siblings.groups, follow)
    writes.gains.update(done.gains)
    if done.follow != follow:
        writes.follow = done.follow
    return done.announcements


def batch_related_updates(
    store: PageStore,
    announced: list[Announcement],
    walk: Walk,
    scorer: Scorer,
    clock: Callable[[], datetime],
) -> list[dict]:
    """Related updates for the siblings the batch's gains announce to, each from the
    sibling's state right before the announcing fetch
    (`online.related_updates.related_updates`); the siblings the batch does not fetch are
    read from the store."""
    if not announced:
        return []
    wanted = {u for a in announced for u in a.siblings}
    outside = [u for u in wanted if u not in walk.before]
    stored = dict(zip(outside, store.get_states(outside), strict=True))
    return related_updates(
        announced,
        partial(walk.state_before, outside=stored),
        horizon_days=DEFAULT_HORIZON_DAYS,
        scored_at=iso(clock()),
        scorer={"name": scorer.name, "version": scorer.version, "models": {}},
    )
