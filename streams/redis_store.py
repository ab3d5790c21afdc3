"""The live workers' page store: Redis, one round trip per read kind, one transaction per write.

Keys (``prefix`` first, e.g. ``lookaround:``):

* ``{prefix}s:{url}``: the page's history state (`online.history.to_bytes`);
* ``{prefix}t:{page_id}``: its stats row (what it lends its neighbours);
* ``{prefix}n:{page_id}``: its related pages;
* ``{prefix}r:{page_id}``: the feature row of its latest fetch (labelled at the next one);
* ``{prefix}learner:{worker_id}``: this worker's learned scorer state, as data
  (`online.state_codec`: never pickle, so a blob written by anyone else cannot run code here);
* ``{prefix}allocation:{worker_id}``: this worker's budget schedule state (with a budget);
* ``{prefix}gu:{sibling_key}``: the URLs of the pages sharing a sibling key (a page and its
  translations, `online.links.sibling_key`), each ended by a newline, appended when a page
  is first seen (their page ids are derived from them);
* ``{prefix}gg:{sibling_key}``: the group's latest gain (`online.related_updates.GroupGain`),
  written where a fetch showed new links;
* ``{prefix}follow:{worker_id}``: what this worker saw siblings show after a gain
  (`online.related_updates.SiblingFollow`).

A write is one Lua script, so it is atomic (all of a batch or none of it, learner and
allocation included)
and idempotent: a page's records are only written when its new state is newer (by
``last_fetched_at``) than the stored one, so a redelivered or stale batch never regresses a
page. Records of pages without a state in the batch are written as they are. ``ttl`` (seconds)
makes every page record expire when its page is not fetched again for that long.

All keys of one write go to one server: a Redis Cluster would need hash tags (not supported).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import redis

from online.ensemble_state import EnsembleState
from online.features import N_STATS
from online.history import PageState, from_bytes, to_bytes
from online.links import link_info
from online.related_updates import GroupGain, SiblingFollow, SiblingGroup
from online.schedule import Allocation
from online.state_codec import StateRefused
from online.stores import (
    Neighbours,
    PageWrites,
    row_from_bytes,
    row_to_bytes,
    sibling_group,
    stats_to_bytes,
)

if TYPE_CHECKING:
    from streams.settings import Settings

#: KEYS: learner key, allocation key, follow key, G sibling-group keys, H group-gain keys, then
#: 4 per page (state, stats, neighbours, row).
#: ARGV: ttl ms (0: none), learner blob ("" : none), allocation blob ("": none), follow blob
#: ("": none), G, H, the G groups' appended URLs, the H gains, then 4 per page (state blob,
#: stats, nbrs, row; "" where absent). A page with a state blob is written only if that
#: state's last_fetched_at (little-endian double at byte 3 of the blob) is newer than the
#: stored one's. A gain is written only if it is newer (its first double) than the stored one.
_WRITE_LUA = """
local ttl = tonumber(ARGV[1])
local function put(key, value)
  if value == '' then return end
  if ttl > 0 then
    redis.call('SET', key, value, 'PX', ttl)
  else
    redis.call('SET', key, value)
  end
end
local written = 0
local skipped = 0
local groups = tonumber(ARGV[5])
local gains = tonumber(ARGV[6])
for g = 1, groups do
  redis.call('APPEND', KEYS[3 + g], ARGV[6 + g])
end
for h = 1, gains do
  local key = KEYS[3 + groups + h]
  local gain = ARGV[6 + groups + h]
  local old = redis.call('GET', key)
  if (not old) or struct.unpack('<d', gain, 1) > struct.unpack('<d', old, 1) then
    redis.call('SET', key, gain)
  end
end
local fixed = 3 + groups + gains
for i = 0, (#KEYS - fixed) / 4 - 1 do
  local k = fixed + 1 + 4 * i
  local a = 7 + groups + gains + 4 * i
  local state = ARGV[a]
  local ok = true
  if state ~= '' then
    local old = redis.call('GET', KEYS[k])
    if old then
      local old_ts = struct.unpack('<d', old, 3)
      local new_ts = struct.unpack('<d', state, 3)
      if new_ts <= old_ts then ok = false end
    end
  end
  if ok then
    put(KEYS[k], state)
    put(KEYS[k + 1], ARGV[a + 1])
    put(KEYS[k + 2], ARGV[a + 2])
    put(KEYS[k + 3], ARGV[a + 3])
    written = written + 1
  else
    skipped = skipped + 1
  end
end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[2], ARGV[3])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[3], ARGV[4])
end
return {written, skipped}
"""


STATS_BYTES = 4 * N_STATS


class RedisPageStore:
    """`PageStore` on Redis (see the module docstring for keys and guarantees).

    ``client`` is a synchronous ``redis.Redis`` with ``decode_responses=False``.
    """

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "lookaround:",
        ttl: int | None = None,
        worker_id: str = "worker",
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_ms = int(ttl * 1000) if ttl else 0
        self.worker_id = worker_id
        self.learner_key = f"{prefix}learner:{worker_id}"
        self.allocation_key = f"{prefix}allocation:{worker_id}"
        self.follow_key = f"{prefix}follow:{worker_id}"
        # Key prefixes per kind: a batch builds ~20,000 keys, so no method call per key.
        self._s, self._t, self._n, self._r, self._x, self._g, self._gg = (
            f"{prefix}{kind}:" for kind in ("s", "t", "n", "r", "x", "gu", "gg")
        )
        self._script = client.register_script(_WRITE_LUA)
        self.written = 0
        self.skipped = 0

    # -- keys ---------------------------------------------------------------------------------

    def state_key(self, url: str) -> str:
        return f"{self._s}{url}"

    # -- reads --------------------------------------------------------------------------------

    def _mget(self, keys: list[str]) -> list[bytes | None]:
        if not keys:
            return []
        return self.client.mget(keys)

    def get_states(self, urls: Sequence[str]) -> list[PageState | None]:
        s = self._s
        blobs = self._mget([f"{s}{u}" for u in urls])
        return [from_bytes(b) if b else None for b in blobs]

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        n = self._n
        blobs = self._mget([f"{n}{int(p)}" for p in page_ids])
        return [Neighbours.from_bytes(b) if b else None for b in blobs]

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        out = np.full((len(page_ids), N_STATS), np.nan, dtype=np.float32)
        t = self._t
        blobs = self._mget([f"{t}{p}" for p in page_ids.tolist()])
        present = [i for i, blob in enumerate(blobs) if blob]
        if present:
            # One buffer for all rows: ~10k rows per batch, so no per-row parsing.
            joined = b"".join(blobs[i] for i in present)  # type: ignore[misc]
            if len(joined) != len(present) * STATS_BYTES:
                bad = next(i for i in present if len(blobs[i]) != STATS_BYTES)  # type: ignore[arg-type]
                raise ValueError(
                    f"stats row of page {int(page_ids[bad])} has {len(blobs[bad])} bytes, "  # type: ignore[arg-type]
                    f"expected {STATS_BYTES}"
                )
            out[present] = np.frombuffer(joined, dtype="<f4").reshape(len(present), N_STATS)
        return out

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        r = self._r
        blobs = self._mget([f"{r}{int(p)}" for p in page_ids])
        return [row_from_bytes(b) if b else None for b in blobs]

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        g, gg = self._g, self._gg
        blobs = self._mget([f"{g}{key}" for key in keys] + [f"{gg}{key}" for key in keys])
        members, gains = blobs[: len(keys)], blobs[len(keys) :]
        return [
            sibling_group(
                [u for u in (urls or b"").decode().split("\n") if u],
                GroupGain.from_bytes(gain) if gain else None,
            )
            for urls, gain in zip(members, gains, strict=True)
        ]

    def get_follow(self) -> SiblingFollow | None:
        blob = self.client.get(self.follow_key)
        return SiblingFollow.from_bytes(blob) if blob else None

    def get_learner(self) -> EnsembleState | None:
        """This worker's stored scorer state, or None. A blob that is not a state written as
        data (a pickle, another format, a damaged write) raises `StateRefused` and is copied
        to ``{learner_key}:refused`` for inspection; it is never unpickled."""
        blob = self.client.get(self.learner_key)
        if not blob:
            return None
        try:
            return EnsembleState.from_bytes(blob)
        except StateRefused:
            self.client.set(f"{self.learner_key}:refused", blob)
            raise

    def get_allocation(self) -> Allocation | None:
        blob = self.client.get(self.allocation_key)
        return Allocation.from_bytes(blob) if blob else None

    # -- the one write ------------------------------------------------------------------------

    def write(self, writes: PageWrites) -> None:
        """Everything of a batch in one atomic, idempotent script call."""
        pages: dict[int, list[bytes]] = {}
        state_urls: dict[int, str] = {}
        for url, state in writes.states.items():
            pid = link_info(url).page_id
            pages[pid] = [to_bytes(state), b"", b"", b""]
            state_urls[pid] = url
        for pid, row in writes.stats.items():
            pages.setdefault(int(pid), [b"", b"", b"", b""])[1] = stats_to_bytes(row)
        for pid, nb in writes.neighbours.items():
            pages.setdefault(int(pid), [b"", b"", b"", b""])[2] = nb.to_bytes()
        for pid, row in writes.rows.items():
            pages.setdefault(int(pid), [b"", b"", b"", b""])[3] = row_to_bytes(row)
        learner = writes.learner
        if learner is None:
            learner = b""
        elif not isinstance(learner, bytes):  # bytes: encoded already (a sealed layer)
            learner = learner_bytes(learner)
        allocation = b"" if writes.allocation is None else writes.allocation.to_bytes()
        follow = b"" if writes.follow is None else writes.follow.to_bytes()
        groups, gains = writes.siblings, writes.gains
        if not pages and not learner and not allocation and not groups and not gains:
            return
        keys = [self.learner_key, self.allocation_key, self.follow_key]
        keys += [f"{self._g}{k}" for k in groups] + [f"{self._gg}{k}" for k in gains]
        args: list[bytes | int] = [self.ttl_ms, learner, allocation, follow, len(groups)]
        args.append(len(gains))
        args += ["".join(f"{url}\n" for url in urls).encode() for urls in groups.values()]
        args += [gain.to_bytes() for gain in gains.values()]
        s, t, n, r, x = self._s, self._t, self._n, self._r, self._x
        for pid, blobs in pages.items():
            url = state_urls.get(pid)
            # A record without a state in this batch still needs a distinct placeholder key.
            keys += (
                f"{s}{url}" if url is not None else f"{x}{pid}",
                f"{t}{pid}",
                f"{n}{pid}",
                f"{r}{pid}",
            )
            args += blobs
        written, skipped = self._script(keys=keys, args=args)
        self.written += int(written)
        self.skipped += int(skipped)

    # -- housekeeping -------------------------------------------------------------------------

    def ping(self) -> bool:
        return bool(self.client.ping())

    def keys(self) -> list[bytes]:
        return list(self.client.scan_iter(match=f"{self.prefix}*", count=1000))

    def pages(self) -> int:
        """Pages with a stored state (a SCAN: for tests, tools and the benchmark)."""
        return sum(1 for _ in self.client.scan_iter(match=f"{self.prefix}s:*", count=1000))

    def delete_all(self) -> int:
        """Delete every key under the prefix; returns how many."""
        n = 0
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=f"{self.prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                n += self.client.delete(*batch)
                batch.clear()
        if batch:
            n += self.client.delete(*batch)
        return n


def learner_bytes(state: object) -> bytes:
    """A scorer state as stored: its own data encoding (`EnsembleState.to_bytes`), never a
    pickle; a state without one cannot be stored."""
    to_bytes_ = getattr(state, "to_bytes", None)
    if to_bytes_ is None:
        raise TypeError(f"a {type(state).__name__} cannot be stored as data (no to_bytes)")
    return bytes(to_bytes_())


def redis_client(settings: Settings, **kwargs: object) -> redis.Redis:
    """A synchronous client from settings: AUTH (username / password) and TLS (rediss://)."""
    options: dict[str, object] = {
        "username": settings.redis_username,
        "password": (
            settings.redis_password.get_secret_value() if settings.redis_password else None
        ),
        "socket_timeout": 5.0,
        "socket_connect_timeout": 2.0,
        "health_check_interval": 10,
    }
    if settings.redis_url.startswith("rediss://") and settings.redis_ssl_cafile:
        options["ssl_ca_certs"] = str(settings.redis_ssl_cafile)
    options.update(kwargs)
    return redis.Redis.from_url(settings.redis_url, **options)  # type: ignore[arg-type]
