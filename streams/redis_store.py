"""The live workers' page store: Redis, one round trip per read kind, one transaction per write.

Keys (``prefix`` first, e.g. ``lookaround:``):

* ``{prefix}s:{url}``: the page's history state (`online.history.to_bytes`);
* ``{prefix}t:{page_id}``: its stats row (what it lends its neighbours);
* ``{prefix}n:{page_id}``: its related pages;
* ``{prefix}r:{page_id}``: the feature row of its latest fetch (labelled at the next one);
* ``{prefix}learner:{worker_id}``: this worker's pickled online learner.

A write is one Lua script, so it is atomic (all of a batch or none of it, learner included)
and idempotent: a page's records are only written when its new state is newer (by
``last_fetched_at``) than the stored one, so a redelivered or stale batch never regresses a
page. Records of pages without a state in the batch are written as they are. ``ttl`` (seconds)
makes every page record expire when its page is not fetched again for that long.

All keys of one write go to one server: a Redis Cluster would need hash tags (not supported).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import redis

from online.features import N_STATS
from online.history import PageState, from_bytes, to_bytes
from online.links import link_info
from streams.stores import (
    Neighbours,
    PageWrites,
    row_from_bytes,
    row_to_bytes,
    stats_to_bytes,
)

if TYPE_CHECKING:
    from streams.settings import Settings

#: KEYS: learner key, then 4 per page (state, stats, neighbours, row).
#: ARGV: ttl ms (0: none), learner blob ("" : none), then 4 per page (state blob, stats, nbrs,
#: row; "" where absent). A page with a state blob is written only if that state's
#: last_fetched_at (little-endian double at byte 3 of the blob) is newer than the stored one's.
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
for i = 0, (#KEYS - 1) / 4 - 1 do
  local k = 2 + 4 * i
  local a = 3 + 4 * i
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
        # Key prefixes per kind: a batch builds ~20,000 keys, so no method call per key.
        self._s, self._t, self._n, self._r, self._x = (
            f"{prefix}{kind}:" for kind in ("s", "t", "n", "r", "x")
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

    def get_learner(self) -> object | None:
        blob = self.client.get(self.learner_key)
        return pickle.loads(blob) if blob else None

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
        elif not isinstance(learner, bytes):  # bytes: pickled already (a sealed layer)
            learner = pickle.dumps(learner, protocol=5)
        if not pages and not learner:
            return
        keys = [self.learner_key]
        args: list[bytes | int] = [self.ttl_ms, learner]
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
