"""Related-page updates: a page's new links announce its siblings' (its translations).

A page gains links in one language and then in the others as translators catch up, often in
the same commit: on S-timeline (docs.astro.build, 24 weeks) 423 of the 595 times a page gained
links came in the same merge as a gain on one of its translations or within the 7 days after
one, against 19 within 7 days of the page's own previous gain. A scorer that sees a page only
when the page itself is fetched cannot act on that: a sibling's priority changes only at its
next fetch, which its own quiet history puts far off. So when a fetch shows new links, the
pipeline publishes a **related update** for each sibling at once (``kind: "related"`` on the
priorities topic): the links likely waiting there, due now.

How many wait is learned from the stream (`SiblingFollow`): whenever a page is fetched after
a sibling of its announced new links since its own previous fetch (it would have been sent
a related update), its new links are compared with the announcing sibling's. The expected
lump is the announced count × the share that followed, ``(followed + 1) / (announced + 1)``
summed over the stream (the +1s: before any evidence, a translation follows its page in full),
and P(a sibling shows anything) is ``(hits + 1) / (trials + 2)``.

State transitions are pure: ``learn(state, ...) -> state``; `GroupGain` is the latest gain
seen in a sibling group, kept in the store beside the group's members.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from online.history import Interval, PageState
from online.links import url_id
from online.scored import iso_many, micros_many

DAY = 86_400.0


class SiblingFollow(NamedTuple):
    """What the stream showed of siblings following an announced gain: links announced and
    followed (summed over the pages that were fetched after a sibling's gain), and how many
    such fetches there were (``trials``) and showed new links (``hits``).

    >>> s = SiblingFollow()
    >>> s.expected(3.0), s.p_follow
    (3.0, 0.5)
    >>> s = s.learn(announced=4, followed=1).learn(announced=2, followed=0)
    >>> round(s.expected(3.0), 3), round(s.p_follow, 3)
    (0.857, 0.5)
    >>> SiblingFollow.from_bytes(s.to_bytes()) == s
    True
    """

    announced: float = 0.0
    followed: float = 0.0
    trials: int = 0
    hits: int = 0

    _FORMAT = struct.Struct("<BddII")

    def learn(self, *, announced: float, followed: float) -> SiblingFollow:
        """The state after one fetch of a page whose sibling announced ``announced`` new links
        since the page's previous fetch, and which showed ``followed`` itself."""
        return SiblingFollow(
            self.announced + announced,
            self.followed + followed,
            self.trials + 1,
            self.hits + (followed > 0),
        )

    @property
    def share(self) -> float:
        """Links that followed per link announced."""
        return (self.followed + 1.0) / (self.announced + 1.0)

    @property
    def p_follow(self) -> float:
        """P(a sibling shows new links at its next fetch after an announced gain)."""
        return (self.hits + 1.0) / (self.trials + 2.0)

    def expected(self, announced: float) -> float:
        """Links expected to wait at a sibling after its page announced ``announced``."""
        return announced * self.share

    def to_bytes(self) -> bytes:
        return self._FORMAT.pack(1, self.announced, self.followed, self.trials, self.hits)

    @classmethod
    def from_bytes(cls, data: bytes) -> SiblingFollow:
        version, announced, followed, trials, hits = cls._FORMAT.unpack_from(data, 0)
        if version != 1:
            raise ValueError(f"unknown sibling-follow format {version}")
        return cls(announced, followed, trials, hits)


class GroupGain(NamedTuple):
    """The latest fetch in a sibling group that showed new links: when, how many (internal,
    external), on which page, and the group's gain before it (-inf: none). The pages that
    showed new links since that one are this wave's: they led or followed it already."""

    at: float
    internal: float
    external: float
    page_id: int
    previous_at: float = -math.inf

    _FORMAT = struct.Struct("<dddqd")

    @property
    def links(self) -> float:
        return self.internal + self.external

    def to_bytes(self) -> bytes:
        return self._FORMAT.pack(
            self.at, self.internal, self.external, self.page_id, self.previous_at
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> GroupGain:
        return cls(*cls._FORMAT.unpack_from(data, 0))


class SiblingGroup(NamedTuple):
    """A sibling key's members as stored: URLs in the order they were first seen, their
    page ids, and the group's latest gain (None before any)."""

    urls: tuple[str, ...]
    ids: np.ndarray
    gain: GroupGain | None = None


def told(gain: GroupGain, page_id: int, last_at: float, led_at: float) -> bool:
    """Whether ``gain`` is told to ``page_id``, last fetched at ``last_at``: a sibling's gain
    after that fetch, unless the page is part of the wave already (its last fetch, at
    ``led_at``, showed new links at or after the group's gain before; -inf: it showed none).

    >>> gain = GroupGain(at=10.0, internal=1, external=0, page_id=1, previous_at=4.0)
    >>> told(gain, 2, 3.0, -math.inf), told(gain, 2, 5.0, 5.0), told(gain, 2, 3.0, 3.0)
    (True, False, True)
    """
    in_wave = led_at > -math.inf and led_at >= gain.previous_at
    return gain.page_id != page_id and last_at < gain.at and not in_wave


class Announcement(NamedTuple):
    """A fetch that showed new links on a page with siblings: who to tell."""

    url: str
    at: float
    gain: GroupGain
    #: the sibling URLs to send a related update to
    siblings: tuple[str, ...]
    #: what siblings following a gain showed, as of this fetch
    follow: SiblingFollow = SiblingFollow()
    #: the announcing fetch's place among the batch's applied fetches
    position: int = 0


class GroupPass(NamedTuple):
    """What a batch's fetches did to the sibling groups, in stream order."""

    gains: dict[str, GroupGain]
    follow: SiblingFollow
    announcements: list[Announcement]


def group_pass(
    fetches: Sequence[tuple[str, int, float, Interval | None, float]],
    keys: Sequence[str],
    groups: Mapping[str, SiblingGroup],
    follow: SiblingFollow,
) -> GroupPass:
    """Walk a batch's applied fetches (url, page id, time, the interval each closed, when
    the page's previous fetch showed new links or -inf) in order: a fetch of a page a
    sibling's gain was told to (`told`) teaches `SiblingFollow` what followed; a fetch that
    shows new links becomes its group's latest gain and, where the group has other members,
    an announcement to them. ``groups``: the groups as known right before the batch, with
    the batch's first-seen members added."""
    gains: dict[str, GroupGain] = {}
    announcements: list[Announcement] = []
    items = enumerate(zip(fetches, keys, strict=True))
    for position, ((url, page_id, at, interval, led_at), key) in items:
        if interval is None:
            continue
        group = groups[key]
        gain = gains.get(key, group.gain)
        if gain is not None and told(gain, page_id, at - interval.days * DAY, led_at):
            follow = follow.learn(announced=gain.links, followed=interval.new_total)
        if interval.new_total > 0 and len(group.urls) > 1:  # a page alone has no one to tell
            previous = -math.inf if gain is None else gain.at
            gains[key] = GroupGain(
                at, interval.new_internal, interval.new_external, page_id, previous
            )
            others = tuple(u for u in group.urls if u != url)
            announcements.append(Announcement(url, at, gains[key], others, follow, position))
    return GroupPass(gains, follow, announcements)


def related_updates(
    announcements: Sequence[Announcement],
    state_before: Callable[[str, int], PageState | None],
    *,
    horizon_days: float,
    scored_at: str,
    scorer: dict,
) -> list[dict]:
    """The related updates of a batch's announcements, in order: one per announcement and
    sibling that, right before the announcing fetch (``state_before(url, position)``), is
    alive, was last fetched before it and is not part of the wave already (showed new links
    at a fetch since the group's gain before it). So they are what the stream says, whatever
    batches it is cut into.

    Each is a complete priority update of the sibling's last fetch (``fetched_at``), revised:
    the links waiting now are its own rate × the time since that fetch plus the learned lump,
    so ``rate_per_day`` keeps its meaning (the expected count at t is rate × (t − fetched_at));
    ``score`` is the lump plus the page's own expected count over the horizon; it is due at
    once (``next_fetch_at`` = the announcing fetch's time)."""
    out = []
    for announcement in announcements:
        for url in announcement.siblings:
            state = state_before(url, announcement.position)
            if state is None or state.last_ok_at != state.last_fetched_at:
                continue  # unknown, or gone at its last fetch: nothing to wait there
            if not told(announcement.gain, url_id(url), state.last_fetched_at, led_at(state)):
                continue
            out.append(_update(url, state, announcement, horizon_days, scored_at, scorer))
    return out


def led_at(state: PageState | None) -> float:
    """When the page's last fetch showed new links (-inf: it showed none, or failed)."""
    if state is None or not state.window or state.last_ok_at != state.last_fetched_at:
        return -math.inf
    return state.last_fetched_at if state.window[-1].new_total > 0 else -math.inf


def _update(
    url: str,
    state: PageState,
    announcement: Announcement,
    horizon_days: float,
    scored_at: str,
    scorer: dict,
) -> dict:
    follow = announcement.follow
    gain, share = announcement.gain, follow.share
    age = (announcement.at - state.last_fetched_at) / DAY
    own = [0.0 if math.isnan(r) else r for r in state.rates_per_day()]
    internal = gain.internal * share + own[0] * age
    external = gain.external * share + own[1] * age
    lump = gain.links * share
    return {
        "kind": "related",
        "url": url,
        "fetched_at": _iso(state.last_fetched_at),
        "scored_at": scored_at,
        "score": round(lump + sum(own) * horizon_days, 6),
        "expected_new_internal": round(internal, 6),
        "expected_new_external": round(external, 6),
        "p_new": round(follow.p_follow, 6),
        "rate_per_day": round((internal + external) / age, 6),
        "next_fetch_at": _iso(announcement.at),
        "reasons": ["related_pages"],
        "scorer": scorer,
        "related_to": {
            "url": announcement.url,
            "fetched_at": _iso(announcement.at),
            "new_links": int(gain.links),
        },
        "expected_waiting": round(lump, 6),
    }


def _iso(timestamp: float) -> str:
    """An epoch time as the priorities write times (`online.scored.iso_many`)."""
    return iso_many(micros_many([timestamp]))[0]
