"""The live workers' page store: Redis, one server or a Redis Cluster, one record per page.

Keys (``prefix`` first, e.g. ``lookaround:``; ``{T}`` is a hash tag, see below):

* ``{prefix}{T}p:{page_id}``: the page's record, one string holding its history state
  (`online.history.to_bytes`), its stats row (what it lends its neighbours), its related pages
  (`online.stores.Neighbours`), the look-around part of the feature row of its latest fetch
  (labelled at the next one; the own part is recomputed from the state, `online.pipeline`)
  and, where the record is a sibling group's home, the group's members. Layout: a version
  byte, the five sections' lengths (stats, state, related pages, row, group: ``<BHHBB``
  after version 2, written where they fit, else ``<BIIHI`` after version 1), then the
  sections in that order; an empty section is absent (`streams.redis_scripts`). Stats and
  rows are kept by `online.stores.pack_floats` (half precision where the pipeline rounded
  them so, sizes in float32), related pages by version 4 (with the compact store: each
  page's id by its top 40 bits, weights on a byte grid, largest first as Rice-coded drops,
  the found-with direction projected to 64 dimensions, 4 bits each;
  `online.stores.Neighbours`), history states by version 3 (`online.history.to_bytes`);
* a sibling group (the pages sharing a sibling key, a page and its translations:
  `online.links.sibling_key`) lives in its home record, that of the page ``https://`` + the
  key: the page itself for most pages (``www.`` pages included: the key keeps the host as
  served), so that a group of one costs a few bytes, not a key.
  Its members are listed in the order first seen, each ended by a newline, as ``*`` for the
  home page and as their URL otherwise (their page ids are derived from them), a URL never
  twice. A home record no page has fetched yet holds only the group;
* ``{prefix}{T}gg:{sibling_key}``: the group's latest gain (`online.related_updates.GroupGain`),
  written where a fetch showed new links;
* ``{prefix}{T}learner:{worker_id}``: this worker's learned scorer state, as data
  (`online.state_codec`: never pickle, so a blob written by anyone else cannot run code here),
  without the labels waiting for its next epoch: it names their blocks;
* ``{prefix}{T}learner:{worker_id}:b:{n}``: block ``n`` of those labels (one a batch,
  `online.ensemble_state.PendingLabels`): written once, before the first state that names it,
  and deleted after the first state that no longer does (the blocks a worker that died in
  between left are deleted when it reads its state again). Most of the learner's bytes are
  these rows, so a batch writes its own block, not every waiting row;
* ``{prefix}{T}allocation:{worker_id}``: this worker's budget schedule state (with a budget);
* ``{prefix}{T}follow:{worker_id}``: what this worker saw siblings show after a gain
  (`online.related_updates.SiblingFollow`);
* ``{prefix}{T}journal:{worker_id}``: on a cluster, the batch being written (below);
* ``{prefix}{T}ack``: written before a ``WAIT`` (below), so that it waits for everything
  written to that server so far.

**Hash tags.** ``T`` is one of ``slot_tags`` tags (`slot_tags`: tag i is the smallest decimal
number whose hash slot is i x 16384 / slot_tags, so the tags' slots lie evenly over the slot
space and so over the masters, each master's share of tags within one of its share of
slots). A page's tag is its page id modulo ``slot_tags`` (a sibling group's, its home
page's); a group's gain's, the xxh3 hash of its key modulo that; a worker's keys', the hash
of its id. Any worker so finds any page's
record from the page id alone (a neighbour's stats: page ids from the index), whichever
partition the page belongs to, and a change of partition count moves nothing. Changing
``slot_tags`` moves every key: the store must then start empty (``lookaround reset``).

**One write per batch.** On one server, a batch's write is one Lua script over all its keys:
atomic (all of a batch or none of it, learner and allocation included) and idempotent: a
page's record is only written when its new state is newer (by ``last_fetched_at``) than the
stored one, so a redelivered or stale batch never regresses a page; records of pages without
a state in the batch are written as they are; sections the batch does not bring (the related
pages of a page not searched again) are kept from the stored record; a sibling group's URLs
are only appended when not listed, a gain only replaces an older one.

On a cluster a script may only touch one slot, so the same script runs once per slot, the
calls to one master sent together (one round trip a master and phase), in three phases:
the worker's own keys (learner, allocation, follow), then sibling groups and gains, then
page records. Each script is atomic and idempotent as above; the batch as a whole is made
so by a journal. The worker's own keys go in one transaction on their slot with the
journal, ``{prefix}{T}journal:{worker_id}`` (`streams.write_journal`): every call of the
two other phases, keys and arguments; the journal is dropped once they are done. A worker
that dies part way leaves its journal; started again, it runs the journal's calls before it
reads anything (`finish_interrupted_write`: what was written is skipped, what was not is
written), so the store is as the whole batch leaves it, as on one server: Kafka redelivers
the batch, its events are duplicates, and the priorities, the learner and every record are
those of a worker that never died. Groups still go before pages, so that a page seen for
the first time is in its group before its record says it was seen. The journal costs the
batch's page records and groups written once more, to one master, and one round trip.

**Expiry.** With ``ttl``, a page's record expires when its page is not fetched again for
that long, unless it holds a sibling group that others need: one of several members, or a
group whose home page was never fetched (groups never expired before records held them).
Gains and the worker's keys do not expire.

**Replicas.** Redis replicates asynchronously: a master that fails right after a write may
take it with it. With ``wait_replicas`` > 0 a write returns only once every master it
touched has had it acknowledged by that many replicas (``WAIT``, after a write of the ack
key, so that what it waits for includes writes skipped as already there), else it raises
`StoreUnavailable`; the worker commits a batch's offsets only after its write returns, so a
failover loses nothing that was acknowledged. A master without enough replicas blocks the
writes (and the worker retries) until one is back; 0 prefers availability.

**Errors.** What a cluster says while it changes (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``, a master that became a replica, a node that does not answer) raises
`StoreUnavailable` after the slot map is read again: a ``redis.ConnectionError``, which the
worker treats as Redis being down, retrying the batch with backoff. A stored record that is
not ours (another format, damaged) is refused with a ValueError, as a stored state always was.
"""

from __future__ import annotations

import binascii
import contextlib
import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import redis
import xxhash
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from online.ensemble_state import EnsembleState, StoredState
from online.features import N_STATS, STATS_WIDE
from online.history import PageState, from_bytes, to_bytes
from online.kernels import record_head_stats
from online.links import url_id
from online.related_updates import GroupGain, SiblingFollow, SiblingGroup
from online.schedule import Allocation
from online.state_codec import StateRefused
from online.stores import (
    Neighbours,
    PageWrites,
    pack_float_rows,
    page_ids_of,
    row_records,
    rows_from_records,
    sibling_groups,
    state_page_ids,
)
from streams.redis_scripts import (
    GROUP,
    NEIGHBOURS,
    READ_LUA,
    ROW,
    STATE,
    STATS,
    WRITE_LUA,
)
from streams.settings import DEFAULT_SLOT_TAGS, Settings
from streams.write_journal import JournalCall, as_bytes
from streams.write_journal import decode as decode_journal
from streams.write_journal import encode as encode_journal


class StoreUnavailable(RedisConnectionError):
    """The store cannot be written or read right now (a node down, a failover or a slot
    migration in progress, replicas that did not acknowledge a write): retry the batch."""


#: What a cluster answers while it changes: retry once the slot map is read again.
_CLUSTER_CHANGING = (
    AskError,  # MovedError too
    TryAgainError,
    ClusterDownError,  # MasterDownError too
    ClusterError,
    ReadOnlyError,
    RedisClusterException,  # SlotNotCoveredError, a cluster that cannot be reached
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    TimeoutError,
)

Client = redis.Redis | RedisCluster
#: A script call: the script's name, its keys, its arguments.
Call = tuple[str, Sequence[str | bytes], Sequence[Any]]


def journal_calls(phases: list[dict[int, Call]]) -> list[JournalCall]:
    """The calls of a cluster write's phases (one per tag each) as the journal keeps them."""
    return [
        JournalCall(at, tag, name, [as_bytes(k) for k in keys], [as_bytes(a) for a in args])
        for at, calls in enumerate(phases)
        for tag, (name, keys, args) in calls.items()
    ]


@functools.cache
def slot_tags(count: int) -> tuple[str, ...]:
    """``count`` hash tags whose slots lie evenly over the 16,384: tag i is the smallest
    decimal number whose slot (CRC16 mod 16384, as Redis Cluster hashes a ``{tag}``) is
    ``i * 16384 // count``. Every worker computes the same tags."""
    if not 1 <= count <= REDIS_CLUSTER_HASH_SLOTS:
        raise ValueError(f"slot_tags must be between 1 and {REDIS_CLUSTER_HASH_SLOTS}")
    wanted = {(i * REDIS_CLUSTER_HASH_SLOTS) // count: i for i in range(count)}
    tags: list[str | None] = [None] * count
    missing, n = count, 0
    while missing:
        tag = str(n)
        i = wanted.get(tag_slot(tag))
        if i is not None and tags[i] is None:
            tags[i] = tag
            missing -= 1
        n += 1
    return tuple(t for t in tags if t is not None)


def tag_slot(tag: str) -> int:
    """The hash slot of a key whose hash tag is ``tag``."""
    return binascii.crc_hqx(tag.encode(), 0) % REDIS_CLUSTER_HASH_SLOTS


def _hash(text: str) -> int:
    return xxhash.xxh3_64_intdigest(text.encode("utf-8"))


class RedisPageStore:
    """`PageStore` on Redis (see the module docstring for keys and guarantees).

    ``client`` is a synchronous ``redis.Redis`` or ``redis.cluster.RedisCluster`` with
    ``decode_responses=False`` (`redis_client` picks one). ``tags``: how many hash tags the
    keys are spread over (`slot_tags`). ``wait_replicas``: replicas that must acknowledge a
    write before it returns (0: none), within ``wait_timeout_ms``.
    """

    def __init__(
        self,
        client: Client,
        prefix: str = "lookaround:",
        ttl: int | None = None,
        worker_id: str = "worker",
        *,
        tags: int = DEFAULT_SLOT_TAGS,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 2000,
    ) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"a key prefix cannot hold braces (hash tags are ours): {prefix!r}")
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self.prefix = prefix
        self.ttl_ms = int(ttl * 1000) if ttl else 0
        self.worker_id = worker_id
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.tags = slot_tags(tags)
        self._slots = [tag_slot(t) for t in self.tags]
        # Key heads per tag: a batch builds ~20,000 keys, so no method call per key.
        self._page_head = [f"{prefix}{{{t}}}p:" for t in self.tags]
        worker_tag = self._tag_of(worker_id)
        head = f"{prefix}{{{self.tags[worker_tag]}}}"
        self.learner_key = f"{head}learner:{worker_id}"
        self.allocation_key = f"{head}allocation:{worker_id}"
        self.follow_key = f"{head}follow:{worker_id}"
        self.journal_key = f"{head}journal:{worker_id}"
        self._worker_tag = worker_tag
        #: the learner's waiting-label blocks stored now (`block_key`), as last read or written
        self._blocks_stored: set[int] = set()
        self._scripts = {
            name: (source, hashlib.sha1(source.encode()).hexdigest())
            for name, source in (("write", WRITE_LUA), ("read", READ_LUA))
        }
        self.written = 0
        self.skipped = 0

    # -- keys ---------------------------------------------------------------------------------

    def _tag_of(self, text: str) -> int:
        return _hash(text) % len(self.tags)

    def page_key(self, page_id: int) -> str:
        pid = int(page_id)
        return f"{self._page_head[pid % len(self.tags)]}{pid}"

    def state_key(self, url: str) -> str:
        """The key of the record that holds the page's state."""
        return self.page_key(url_id(url))

    def group_home(self, sibling_key: str) -> int:
        """The page id whose record holds the sibling group of ``sibling_key``: that of the
        URL ``https://`` + the key, the page itself for most pages (a page's sibling key is its
        URL less the scheme, a language segment and the query)."""
        return group_home(sibling_key)

    def gain_key(self, sibling_key: str) -> str:
        return f"{self.prefix}{{{self.tags[self._tag_of(sibling_key)]}}}gg:{sibling_key}"

    # -- reads --------------------------------------------------------------------------------

    def _read_pages(self, page_ids: Sequence[int], section: int) -> list[Any]:
        """Per page id, one section of its record (None: none; 0: not a page record)."""
        if not len(page_ids):
            return []
        n = len(self.tags)
        heads = self._page_head
        pids = [int(p) for p in page_ids]
        args = [section, _STATS_MOST]
        if not self.cluster:
            keys = [f"{heads[p % n]}{p}" for p in pids]
            return self._run_one(None, [("read", keys, args)])[0]
        by_tag: dict[int, list[int]] = {}
        for at, p in enumerate(pids):
            by_tag.setdefault(p % n, []).append(at)
        calls = {
            tag: ("read", [f"{heads[tag]}{pids[at]}" for at in ats], args)
            for tag, ats in by_tag.items()
        }
        results = self._run_by_tag(calls)
        out: list[Any] = [None] * len(pids)
        for tag, ats in by_tag.items():
            for at, value in zip(ats, results[tag], strict=True):
                out[at] = value
        return out

    @staticmethod
    def _refuse(value: Any, page_id: int) -> None:
        if isinstance(value, int):
            raise ValueError(f"the record of page {int(page_id)} is not a lookaround page record")

    def get_states(
        self, urls: Sequence[str], page_ids: Sequence[int] | None = None
    ) -> list[PageState | None]:
        pids = page_ids_of(urls, page_ids)
        out: list[PageState | None] = []
        for pid, blob in zip(pids, self._read_pages(pids, STATE), strict=True):
            if blob is None:
                out.append(None)
                continue
            self._refuse(blob, pid)
            out.append(from_bytes(blob))
        return out

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        out: list[Neighbours | None] = []
        for pid, blob in zip(page_ids, self._read_pages(page_ids, NEIGHBOURS), strict=True):
            if blob is None:
                out.append(None)
                continue
            self._refuse(blob, pid)
            out.append(Neighbours.from_bytes(blob))
        return out

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        out = np.full((len(page_ids), N_STATS), np.nan, dtype=np.float32)
        heads = self._read_pages(page_ids.tolist(), STATS)
        # One compiled pass over the heads (~20k per batch): no per-row slicing or parsing.
        row, reason, got, expected = record_head_stats(heads, _STATS_WIDE_FLAGS, out)
        if row < 0:
            return out
        page = int(page_ids[row])
        if reason == _NOT_A_RECORD:
            self._refuse(0, page)
        detail = (
            f"{got} bytes where its layout takes {expected}"
            if reason == _WRONG_SIZE
            else "an unknown layout"
        )
        raise ValueError(f"stats row of page {page} is damaged: {detail}")

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        blobs = self._read_pages(page_ids, ROW)
        for i, blob in enumerate(blobs):
            if blob is not None:
                self._refuse(blob, page_ids[i])
        return rows_from_records(blobs)

    def _get_many(self, keys: list[tuple[int, str]]) -> list[bytes | None]:
        """Whole values of (tag, key)s (sibling groups, gains), one read per slot."""
        if not keys:
            return []
        if not self.cluster:
            return self._run_one(None, [("read", [k for _, k in keys], [0])])[0]
        by_tag: dict[int, list[int]] = {}
        for at, (tag, _) in enumerate(keys):
            by_tag.setdefault(tag, []).append(at)
        calls = {tag: ("read", [keys[at][1] for at in ats], [0]) for tag, ats in by_tag.items()}
        results = self._run_by_tag(calls)
        out: list[bytes | None] = [None] * len(keys)
        for tag, ats in by_tag.items():
            for at, value in zip(ats, results[tag], strict=True):
                out[at] = value
        return out

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        homes = [group_home(key) for key in keys]
        members = self._read_pages(homes, GROUP)
        gains = self._get_many([(self._tag_of(key), self.gain_key(key)) for key in keys])
        lists, gains_ = [], []
        for key, home, group, gain in zip(keys, homes, members, gains, strict=True):
            self._refuse(group, home)
            urls = [decode_member(m, key) for m in (group or b"").decode().split("\n") if m]
            lists.append(list(dict.fromkeys(urls)))
            gains_.append(GroupGain.from_bytes(gain) if gain else None)
        return sibling_groups(lists, gains_)

    def _get(self, key: str) -> bytes | None:
        return self._guard(lambda: self.client.get(key))  # type: ignore[no-any-return]

    def get_follow(self) -> SiblingFollow | None:
        blob = self._get(self.follow_key)
        return SiblingFollow.from_bytes(blob) if blob else None

    def get_learner(self) -> EnsembleState | None:
        """This worker's stored scorer state, or None. A state that is not written as data
        (a pickle, another format, a damaged write, a block missing) raises `StateRefused`
        and its head is copied to ``{learner_key}:refused`` for inspection; it is never
        unpickled. Blocks a write dropped from the state but had no time to delete (the
        worker died between the two) are deleted now."""
        head = self._get(self.learner_key)
        if not head:
            self._blocks_stored = set()
            return None
        try:
            seqs = EnsembleState.block_refs(head)
            found = self._worker_keys("mget", [self.block_key(seq) for seq in seqs]) if seqs else []
            blocks = {seq: blob for seq, blob in zip(seqs, found, strict=True) if blob}
            state = EnsembleState.from_parts(head, blocks)
        except StateRefused:
            self._guard(lambda: self.client.set(f"{self.learner_key}:refused", head))
            raise
        self._blocks_stored = set(seqs)
        self._drop_blocks_before(min(seqs, default=state.pending.next_seq))
        return state

    def block_key(self, seq: int) -> str:
        """The key of the learner's waiting-label block ``seq`` (on the learner's slot)."""
        return f"{self.learner_key}:b:{seq}"

    def _worker_keys(self, command: str, *args: Any) -> Any:
        """A command on keys of the worker's slot (its master's, on a cluster)."""
        client: Any = self.client
        if self.cluster:
            client = self._node_client(self._primary_of_slot(self._slots[self._worker_tag]).name)
        return self._guard(lambda: getattr(client, command)(*args))

    def _drop_blocks_before(self, seq: int) -> None:
        """Delete the blocks just below ``seq`` that are left: a write's state no longer
        names them but the worker died before it deleted them (blocks are taken oldest
        first and deleted together, so those left are the run right below)."""
        left: list[str] = []
        while seq > 0:
            keys = [self.block_key(s) for s in range(seq - 1, max(seq - 65, -1), -1)]
            there = self._worker_keys("mget", keys)
            run = next((at for at, blob in enumerate(there) if blob is None), len(keys))
            left += keys[:run]
            if run < len(keys):
                break
            seq -= len(keys)
        if left:
            self._worker_keys("unlink", *left)

    def get_allocation(self) -> Allocation | None:
        blob = self._get(self.allocation_key)
        return Allocation.from_bytes(blob) if blob else None

    # -- the one write ------------------------------------------------------------------------

    def _page_args(self, writes: PageWrites) -> dict[int, list[bytes]]:
        """Per page id, its four sections as the batch brings them (b"": none)."""
        pages: dict[int, list[bytes]] = {}

        def entry(pid: int) -> list[bytes]:
            got = pages.get(pid)
            if got is None:
                got = pages[pid] = [b"", b"", b"", b""]
            return got

        for pid, state in zip(state_page_ids(writes), writes.states.values(), strict=True):
            entry(pid)[STATE - 1] = to_bytes(state)
        if writes.stats:
            packed = pack_float_rows(np.stack(list(writes.stats.values())), STATS_WIDE)
            for pid, blob in zip(writes.stats, packed, strict=True):
                entry(int(pid))[STATS - 1] = blob
        for pid, nb in writes.neighbours.items():
            entry(int(pid))[NEIGHBOURS - 1] = nb.to_bytes()
        for pid, blob in row_records(writes.rows).items():
            entry(int(pid))[ROW - 1] = blob
        for blobs in pages.values():
            if len(blobs[STATS - 1]) > _STATS_MOST or len(blobs[ROW - 1]) > 65_535:
                raise ValueError("a stats row or feature row too long for a page record")
        return pages

    def write(self, writes: PageWrites) -> None:
        """Everything of a batch: one atomic, idempotent script call on one server; on a
        cluster one per slot in three phases (see the module docstring). With
        ``wait_replicas``, returns once the replicas have it."""
        pages = self._page_args(writes)
        learner, stored = b"", None
        if writes.learner is not None:  # a StoredState already where a layer was sealed
            stored = learner_parts(writes.learner)
            learner = stored.head
            # A block is written once, before the first state that names it.
            new = {k: v for k, v in stored.blocks.items() if k not in self._blocks_stored}
            if new:
                self._worker_keys("mset", {self.block_key(k): v for k, v in new.items()})
        allocation = b"" if writes.allocation is None else writes.allocation.to_bytes()
        follow = b"" if writes.follow is None else writes.follow.to_bytes()
        worker = [learner, allocation, follow]
        groups, gains = writes.siblings, writes.gains
        if not pages and not any(worker) and not groups and not gains:
            return
        group_args = {
            k: "".join(f"{encode_member(url, k)}\n" for url in urls).encode()
            for k, urls in groups.items()
        }
        gain_args = {k: gain.to_bytes() for k, gain in gains.items()}
        if not self.cluster:
            call = self._write_call(worker, group_args, gain_args, pages)
            ack = 0 if self.wait_replicas > 0 else None
            written, skipped = self._run_one(None, [call], ack)[0]
            self.written += int(written)
            self.skipped += int(skipped)
        else:
            self._write_cluster(worker, group_args, gain_args, pages)
        if stored is not None:
            self._drop_blocks(set(stored.blocks))

    def _drop_blocks(self, named: set[int]) -> None:
        """After a state naming the blocks ``named`` is written: the blocks no longer named
        are deleted (in one command: all or none, see `_drop_blocks_before`)."""
        gone = self._blocks_stored - named
        if gone:
            self._worker_keys("unlink", *(self.block_key(k) for k in sorted(gone)))
        self._blocks_stored = named

    def _write_call(
        self,
        worker: list[bytes] | None,
        groups: dict[str, bytes],
        gains: dict[str, bytes],
        pages: dict[int, list[bytes]],
    ) -> Call:
        keys: list[str] = []
        if worker is not None:
            keys += [self.learner_key, self.allocation_key, self.follow_key]
        keys += [self.page_key(group_home(k)) for k in groups]
        keys += [self.gain_key(k) for k in gains]
        keys += [self.page_key(pid) for pid in pages]
        args: list[Any] = [self.ttl_ms, 0 if worker is None else 3, len(groups), len(gains)]
        args += worker or []
        args += list(groups.values()) + list(gains.values())
        for blobs in pages.values():
            args += blobs
        return ("write", keys, args)

    def _write_cluster(
        self,
        worker: list[bytes],
        groups: dict[str, bytes],
        gains: dict[str, bytes],
        pages: dict[int, list[bytes]],
    ) -> None:
        n = len(self.tags)
        # 1. sibling groups and gains: a first-seen page joins its group before its record
        # says it was seen
        phase: dict[int, tuple[dict[str, bytes], dict[str, bytes]]] = {}
        for key, urls in groups.items():
            phase.setdefault(group_home(key) % n, ({}, {}))[0][key] = urls
        for key, gain in gains.items():
            phase.setdefault(self._tag_of(key), ({}, {}))[1][key] = gain
        first = {tag: self._write_call(None, g, h, {}) for tag, (g, h) in phase.items()}
        # 2. the page records
        by_tag: dict[int, dict[int, list[bytes]]] = {}
        for pid, blobs in pages.items():
            by_tag.setdefault(pid % n, {})[pid] = blobs
        second = {tag: self._write_call(None, {}, {}, part) for tag, part in by_tag.items()}
        # 0. the journal of 1 and 2, and the worker's own keys (learner, allocation,
        # follow), in one transaction on the worker's slot: the learner written once, and
        # never without the pages' write it learned from being finishable
        own = [self._write_call(worker, {}, {}, {})] if any(worker) else []
        journal = encode_journal(journal_calls([first, second]))
        node = self._primary_of_slot(self._slots[self._worker_tag]).name
        self._run_one(node, own, journal=journal)
        touched: dict[str, int] = {node: self._worker_tag}  # node -> a tag of its slots written
        self._run_phases([first, second], touched, counted=1)
        self._guard(lambda: self._node_client(node).unlink(self.journal_key))

    def _run_phases(
        self, phases: list[dict[int, Call]], touched: dict[str, int], counted: int | None
    ) -> None:
        """Each phase's calls (one per tag) after the previous phase's; the records written
        and skipped by phase ``counted`` are counted; then ``WAIT`` where asked."""
        for at, calls in enumerate(phases):
            results = self._run_by_tag(calls, touched)
            if at == counted:
                for written, skipped in results.values():
                    self.written += int(written)
                    self.skipped += int(skipped)
        if self.wait_replicas > 0:
            for name, tag in touched.items():
                self._wait_node(name, tag)

    # -- the write journal (a cluster's) -------------------------------------------------------

    def finish_interrupted_write(self) -> int:
        """Run again the calls of a cluster write this worker left part way (its journal is
        dropped when a write finishes), in their phases (each call is idempotent), then drop
        the journal; how many calls were run (0: no journal, or one server, whose writes are
        atomic). A journal that is not ours raises ValueError and is left for the next
        write to replace. To be called before the worker reads anything (its learner first)."""
        if not self.cluster:
            return 0
        blob = self._guard(lambda: self.client.get(self.journal_key))
        if blob is None:
            return 0
        calls = decode_journal(blob)
        phases: dict[int, dict[int, Call]] = {}
        for call in calls:
            self._check_journal_call(call)
            phases.setdefault(call.phase, {})[call.tag] = (call.script, call.keys, call.args)
        self._run_phases([phases[p] for p in sorted(phases)], {}, counted=None)
        self._guard(lambda: self.client.delete(self.journal_key))
        return len(calls)

    def _check_journal_call(self, call: JournalCall) -> None:
        """A journal's call must be our write script over keys of our prefix in its tag."""
        if call.script != "write" or not 0 <= call.tag < len(self.tags):
            raise ValueError(f"a write journal with a call of script {call.script!r}")
        head = f"{self.prefix}{{{self.tags[call.tag]}}}".encode()
        if not all(key.startswith(head) for key in call.keys):
            raise ValueError("a write journal with keys outside its prefix and hash tag")

    # -- running scripts ----------------------------------------------------------------------

    def _guard(self, action: Callable[[], Any]) -> Any:
        """Run ``action``; what a changing cluster answers becomes `StoreUnavailable`."""
        try:
            return action()
        except StoreUnavailable:
            raise
        except _CLUSTER_CHANGING as exc:
            if self.cluster:
                self._refresh()
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def _refresh(self) -> None:
        """Read the cluster's slot map again (a failover or migration moved slots)."""
        # Nothing may answer yet: the caller's retry reads it again.
        with contextlib.suppress(Exception):
            self.client.nodes_manager.initialize()  # type: ignore[union-attr]

    def _node_client(self, name: str | None) -> redis.Redis:
        if name is None:
            return self.client  # type: ignore[return-value]
        node = self.client.get_node(node_name=name)  # type: ignore[union-attr]
        if node is None:
            raise StoreUnavailable(f"cluster node {name} is gone")
        return self.client.get_redis_connection(node)  # type: ignore[union-attr]

    def _primary_of_slot(self, slot: int) -> ClusterNode:
        try:
            return self.client.nodes_manager.get_node_from_slot(slot)  # type: ignore[union-attr]
        except (RedisClusterException, IndexError, KeyError) as exc:
            self._refresh()
            raise StoreUnavailable(f"no master for slot {slot}: {exc}") from exc

    def _run_one(
        self,
        node: str | None,
        calls: list[Call],
        ack_tag: int | None = None,
        *,
        journal: bytes | None = None,
    ) -> list[Any]:
        """The script ``calls`` on one server (``node``: a cluster node's name; None: the
        single server) in one round trip; with ``ack_tag`` (a tag of a slot of that server),
        the ack key written after them and ``WAIT`` for ``wait_replicas``; with ``journal``,
        the write journal set with them in one transaction (the calls' keys in its slot)."""
        return self._guard(lambda: self._pipeline(node, calls, ack_tag, journal))  # type: ignore[no-any-return]

    def _pipeline(
        self, node: str | None, calls: list[Call], ack_tag: int | None, journal: bytes | None
    ) -> list[Any]:
        client = self._node_client(node)
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=journal is not None)
            if journal is not None:
                pipe.set(self.journal_key, journal)
            for name, keys, args in calls:
                pipe.evalsha(self._scripts[name][1], len(keys), *keys, *args)
            if ack_tag is not None:
                pipe.set(f"{self.prefix}{{{self.tags[ack_tag]}}}ack", self.worker_id)
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            results = pipe.execute(raise_on_error=False)
            if journal is not None:
                results = results[1:]
            if attempt == 1 and any(isinstance(r, NoScriptError) for r in results):
                # a node that has not seen them (new, restarted or failed over): load, again
                for source, _ in {self._scripts[name] for name, _, _ in calls}:
                    client.script_load(source)
                continue
            for r in results:
                if isinstance(r, Exception):
                    raise r
            if ack_tag is not None:
                acked = int(results[-1])
                if acked < self.wait_replicas:
                    where = "the server" if node is None else f"cluster node {node}"
                    raise StoreUnavailable(
                        f"{acked} of {self.wait_replicas} replicas acknowledged the write at "
                        f"{where} within {self.wait_timeout_ms} ms"
                    )
                results = results[: len(calls)]
            return list(results)
        raise AssertionError("unreachable: a second attempt returns or raises")

    def _run_by_tag(
        self,
        calls: dict[int, Call],
        touched: dict[str, int] | None = None,
    ) -> dict[int, Any]:
        """Script calls on a cluster, one per tag (all its keys in that tag's slot), those of
        one master sent together; their results by tag. ``touched`` gathers the masters
        written, with a tag of theirs (for `_wait_node`)."""
        by_node: dict[str, list[int]] = {}
        for tag in calls:
            by_node.setdefault(self._primary_of_slot(self._slots[tag]).name, []).append(tag)
        out: dict[int, Any] = {}
        for name, tags in by_node.items():
            results = self._run_one(name, [calls[t] for t in tags])
            out.update(zip(tags, results, strict=True))
            if touched is not None:
                touched.setdefault(name, tags[0])
        return out

    def _wait_node(self, name: str, tag: int) -> None:
        """``WAIT`` on a cluster master, after writing its ack key (``tag``: one of its)."""
        self._run_one(name, [], ack_tag=tag)

    # -- housekeeping -------------------------------------------------------------------------

    def ping(self) -> bool:
        if not self.cluster:
            return bool(self.client.ping())
        return all(self._node_client(node.name).ping() for node in self._primaries())

    def _primaries(self) -> list[ClusterNode]:
        return list(self.client.get_primaries())  # type: ignore[union-attr]

    def _scan(self, match: str) -> Iterator[bytes]:
        """Keys matching ``match`` on the server, or on every master of a cluster."""
        if not self.cluster:
            yield from self.client.scan_iter(match=match, count=1000)
            return
        for node in self._primaries():
            yield from self._node_client(node.name).scan_iter(match=match, count=1000)

    def keys(self) -> list[bytes]:
        return list(self._scan(f"{self.prefix}*"))

    def pages(self) -> int:
        """Pages with a stored state (a SCAN, then a read of which records hold one: a
        record may be only a sibling group's home; for tests, tools and the benchmark)."""
        n = 0
        pids: list[int] = []
        for key in self._scan(f"{self.prefix}{{*}}p:*"):
            pids.append(int(key.rsplit(b":", 1)[1]))
            if len(pids) >= 5000:
                n += sum(1 for v in self._read_pages(pids, -STATE) if v == 1)
                pids.clear()
        return n + sum(1 for v in self._read_pages(pids, -STATE) if v == 1)

    def delete_all(self) -> int:
        """Delete every key under the prefix (every master's, on a cluster); returns how many."""
        if not self.cluster:
            return _delete_keys(self.client, self.client.scan_iter(f"{self.prefix}*", 1000))
        n = 0
        for node in self._primaries():
            client = self._node_client(node.name)
            n += _delete_keys(client, client.scan_iter(f"{self.prefix}*", 1000), by_slot=True)
        return n


def _delete_keys(client: redis.Redis, keys: Iterator[bytes], *, by_slot: bool = False) -> int:
    """UNLINK the keys a thousand at a time (per slot where the server is a cluster node)."""
    n = 0
    batch: list[bytes] = []

    def flush() -> int:
        if not batch:
            return 0
        if not by_slot:
            done = int(client.unlink(*batch))
        else:
            groups: dict[int, list[bytes]] = {}
            for key in batch:
                groups.setdefault(key_slot(key), []).append(key)
            pipe = client.pipeline(transaction=False)
            for part in groups.values():
                pipe.unlink(*part)
            done = sum(int(r) for r in pipe.execute())
        batch.clear()
        return done

    for key in keys:
        batch.append(key)
        if len(batch) >= 1000:
            n += flush()
    return n + flush()


@functools.lru_cache(maxsize=1 << 16)
def group_home(sibling_key: str) -> int:
    """`RedisPageStore.group_home`: the page id of ``https://`` + the key (a key that does not
    make a URL: an id hashed from it)."""
    try:
        return url_id(f"https://{sibling_key}")
    except ValueError:
        return _hash(f"group:{sibling_key}") >> 1


def encode_member(url: str, sibling_key: str) -> str:
    """A sibling group's member as its home record lists it: ``*`` for ``https://`` + the
    key (most groups' only member: the home page itself), else the URL."""
    return "*" if url == f"https://{sibling_key}" else url


def decode_member(member: str, sibling_key: str) -> str:
    return f"https://{sibling_key}" if member == "*" else member


#: The most bytes a stats section takes (`online.stores.pack_floats`: a layout byte and
#: float32 values).
_STATS_MOST = 1 + 4 * N_STATS
#: `record_head_stats`' column flags (the stats kept in float32 by the compact layout) and
#: its reasons for a bad head
_STATS_WIDE_FLAGS = STATS_WIDE.astype(np.uint8)
_NOT_A_RECORD, _WRONG_SIZE = 1, 2


def learner_parts(state: object) -> StoredState:
    """A scorer state as stored (`EnsembleState.to_parts`: its own data encoding, never a
    pickle; bytes: a whole state, `EnsembleState.to_bytes`); a state without one cannot be
    stored."""
    if isinstance(state, StoredState):
        return state
    if isinstance(state, bytes):
        return StoredState(state, {})
    to_parts = getattr(state, "to_parts", None)
    if to_parts is None:
        raise TypeError(f"a {type(state).__name__} cannot be stored as data (no to_parts)")
    parts = to_parts()
    if not isinstance(parts, StoredState):
        raise TypeError(f"{type(state).__name__}.to_parts gave a {type(parts).__name__}")
    return parts


def replicas_to_wait(client: Client) -> int:
    """The ``wait_replicas`` a store on ``client`` defaults to: 1 where every master (the one
    server, or each master of a cluster) has a replica connected now, else 0."""
    try:
        if isinstance(client, RedisCluster):
            masters = [client.get_redis_connection(n) for n in client.get_primaries()]
        else:
            masters = [client]
        counts = [int(m.info("replication").get("connected_slaves", 0)) for m in masters]
    except (RedisError, RedisClusterException, OSError):
        return 0
    return 1 if counts and min(counts) >= 1 else 0


def redis_client(settings: Settings, **kwargs: object) -> Client:
    """A synchronous client from settings: AUTH (username / password) and TLS (rediss://); a
    ``RedisCluster`` where ``redis_cluster`` says so, or (``auto``) where the server says
    ``cluster_enabled:1`` (the other nodes are then discovered from it)."""
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
    mode = settings.redis_cluster
    if mode == "false" or settings.redis_url.startswith("unix://"):
        return redis.Redis.from_url(settings.redis_url, **options)  # type: ignore[arg-type]
    if mode == "auto":
        single = redis.Redis.from_url(settings.redis_url, **options)  # type: ignore[arg-type]
        enabled = int(single.info("cluster").get("cluster_enabled", 0)) == 1
        if not enabled:
            return single
        single.close()
    # The worker retries a batch itself, with backoff: a command should fail fast.
    options.pop("health_check_interval", None)
    return RedisCluster.from_url(settings.redis_url, cluster_error_retry_attempts=2, **options)  # type: ignore[arg-type]


def settings_store(
    settings: Settings, *, prefix: str | None = None, worker_id: str = "worker", wait: bool = False
) -> RedisPageStore:
    """The page store the settings name: Redis (one server or a cluster) at ``redis_url``,
    under ``redis_key_prefix`` (or ``prefix``: an operator's ``reset``) spread over
    ``redis_slot_tags`` hash tags, pages forgotten after ``redis_state_ttl_seconds``, learned
    state under ``worker_id``. With ``wait`` (a worker's), a write returns once
    ``redis_wait_replicas`` replicas have it (by default 1 where every master has one)."""
    client = redis_client(settings)
    replicas = 0
    if wait:
        replicas = settings.redis_wait_replicas
        if replicas is None:
            replicas = replicas_to_wait(client)
    return RedisPageStore(
        client,
        prefix=settings.redis_key_prefix if prefix is None else prefix,
        ttl=settings.redis_state_ttl_seconds,
        worker_id=worker_id,
        tags=settings.redis_slot_tags,
        wait_replicas=replicas,
        wait_timeout_ms=settings.redis_wait_timeout_ms,
    )
