"""The one code path: batch independence, honesty, related pages, store parity."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from datetime import timedelta

import numpy as np
import pytest

from online.events import FetchedPage, parse_event
from online.features import N_STATS
from online.fetch import prepare
from online.history import PageState, from_bytes, states_equal, to_bytes
from online.index import FaissIndex
from online.links import url_id
from online.pipeline import PagePipeline, PipelineConfig
from online.related_updates import GroupGain, SiblingFollow, SiblingGroup
from online.scorers import get_scorer
from online.stores import (
    ID_PREFIX_SHIFT,
    CompactMemoryPageStore,
    MemoryPageStore,
    Neighbours,
    PageWrites,
    row_from_bytes,
    row_to_bytes,
    sibling_group,
    sibling_groups,
    stats_from_bytes,
    stats_to_bytes,
    to_byte_grid,
)

DAY = 86_400
#: 2026-01-01T00:00:00Z: fetch times lie after 1990 (the contract's bound).
T0 = 1_767_225_600
DIM = 8


class BytesPageStore:
    """Keeps only serialised bytes, as Redis will: proves the bytes lose nothing."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get_rows(self, page_ids: Sequence[int]) -> list[np.ndarray | None]:
        return [row_from_bytes(b) if (b := self.data.get(f"r{p}")) else None for p in page_ids]

    def get_learner(self) -> object | None:
        blob = self.data.get("learner")
        return None if blob is None else pickle.loads(blob)

    def get_states(
        self, urls: Sequence[str], page_ids: Sequence[int] | None = None
    ) -> list[PageState | None]:
        return [from_bytes(b) if (b := self.data.get("s" + u)) else None for u in urls]

    def get_neighbours(self, page_ids: Sequence[int]) -> list[Neighbours | None]:
        return [
            Neighbours.from_bytes(b) if (b := self.data.get(f"n{p}")) else None for p in page_ids
        ]

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        out = np.full((len(page_ids), N_STATS), np.nan, dtype=np.float32)
        for i, pid in enumerate(page_ids.tolist()):
            if blob := self.data.get(f"t{pid}"):
                out[i] = stats_from_bytes(blob)
        return out

    def get_siblings(self, keys: Sequence[str]) -> list[SiblingGroup]:
        return [
            sibling_group(
                [u for u in self.data.get("g" + k, b"").decode().split("\n") if u],
                GroupGain.from_bytes(g) if (g := self.data.get("gg" + k)) else None,
            )
            for k in keys
        ]

    def get_follow(self) -> SiblingFollow | None:
        blob = self.data.get("follow")
        return None if blob is None else SiblingFollow.from_bytes(blob)

    def write(self, writes: PageWrites) -> None:
        for url, state in writes.states.items():
            self.data["s" + url] = to_bytes(state)
        for pid, row in writes.stats.items():
            self.data[f"t{pid}"] = stats_to_bytes(row)
        for pid, nb in writes.neighbours.items():
            self.data[f"n{pid}"] = nb.to_bytes()
        for pid, row in writes.rows.items():
            self.data[f"r{pid}"] = row_to_bytes(row)
        for key, urls in writes.siblings.items():
            self.data["g" + key] = (
                self.data.get("g" + key, b"") + "".join(f"{u}\n" for u in urls).encode()
            )
        for key, gain in writes.gains.items():
            self.data["gg" + key] = gain.to_bytes()
        if writes.follow is not None:
            self.data["follow"] = writes.follow.to_bytes()
        if writes.learner is not None:
            self.data["learner"] = pickle.dumps(writes.learner)


def unit(v: np.ndarray) -> list[float]:
    return (v / np.linalg.norm(v)).round(6).tolist()


def crawl(pages: int = 60, rounds: int = 5, seed: int = 1) -> list[FetchedPage]:
    """Two clusters: even 'busy' pages gain links every round, odd 'calm' pages never do.

    Pages p % 7 == 3 carry no embedding; pages p % 5 == 0 change their embedding every round.
    """
    rng = np.random.default_rng(seed)
    centres = [rng.normal(size=DIM), rng.normal(size=DIM)]
    base = [centres[p % 2] + 0.3 * rng.normal(size=DIM) for p in range(pages)]
    events = []
    for r in range(rounds):
        for p in range(pages):
            busy = p % 2 == 0
            links = [f"https://s.org/p{p}/{i}" for i in range(3 + (r * 2 if busy else 0))]
            if busy and r >= 2:
                links.append(f"https://ext.net/{p}/{r}")
            raw: dict = {
                "url": f"https://s.org/p{p}",
                "fetched_at": T0 + r * 7 * DAY + int(rng.integers(0, DAY)),
                "outlinks": links,
                "crawl": r,
                "content_size": 1000 + p,
            }
            if p % 7 != 3:
                vec = base[p] + (0.1 * rng.normal(size=DIM) if p % 5 == 0 else 0)
                raw["embedding"] = unit(vec)
            events.append(parse_event(raw, embedding_dim=DIM))
    events.sort(key=lambda e: e.timestamp)
    return events


def make_scorer(name: str):
    if name in ("online", "ensemble"):  # learn in small steps, so learning shows in a test
        return get_scorer(name, learn_every=8)
    return get_scorer(name)


def drifting_crawl(pages: int = 40, rounds: int = 8, step: float = 0.08) -> list[FetchedPage]:
    """Pages whose embeddings drift a little at every fetch (a random walk of ``step`` per
    round against a unit vector), some of them past the drift threshold by the end."""
    rng = np.random.default_rng(7)
    centres = [rng.normal(size=DIM), rng.normal(size=DIM)]
    vecs = [centres[p % 2] / 3 + 0.3 * rng.normal(size=DIM) for p in range(pages)]
    vecs = [v / np.linalg.norm(v) for v in vecs]
    events = []
    for r in range(rounds):
        for p in range(pages):
            links = [f"https://d.org/p{p}/{i}" for i in range(2 + (r if p % 2 == 0 else 0))]
            if r:
                vecs[p] = vecs[p] + step / np.sqrt(DIM) * rng.normal(size=DIM)
            raw = {
                "url": f"https://d.org/p{p}",
                "fetched_at": T0 + r * 7 * DAY + int(rng.integers(0, DAY)),
                "outlinks": links,
                "crawl": r,
                "embedding": unit(vecs[p]),
            }
            events.append(parse_event(raw, embedding_dim=DIM))
    events.sort(key=lambda e: e.timestamp)
    return events


def run(
    events,
    batch: int,
    store=None,
    scorer: str = "lbla",
    exact_below: int = 10_000,
    config: PipelineConfig | None = None,
):
    pipeline = PagePipeline(
        store if store is not None else MemoryPageStore(),
        FaissIndex(dim=DIM, exact_below=exact_below),
        make_scorer(scorer),
        config or PipelineConfig(embedding_dim=DIM, neighbours=5),
    )
    out = []
    for i in range(0, len(events), batch):
        out.extend(pipeline.process(events[i : i + batch]))
    return pipeline, out


def comparable(results) -> list:
    rows = []
    for r in results:
        p = dict(r.priority) if r.priority else None
        if p:
            p.pop("scored_at")
        rows.append((r.event.url, r.emitted.kind, p, r.features))
    return rows


@pytest.fixture(scope="module")
def events() -> list[FetchedPage]:
    return crawl()


@pytest.mark.parametrize("scorer", ["lbla", "online", "ensemble"])
def test_output_does_not_depend_on_batching(events, scorer) -> None:
    _, one = run(events, 1, scorer=scorer)
    for size in (7, 64, 10_000):
        _, other = run(events, size, scorer=scorer)
        assert comparable(other) == comparable(one), f"batch size {size} differs"


@pytest.mark.parametrize("threshold", [0.999, 0.99])
def test_drifting_embeddings_do_not_make_output_depend_on_batching(threshold) -> None:
    drifting = drifting_crawl()
    config = PipelineConfig(embedding_dim=DIM, neighbours=5, drift_similarity=threshold)
    pipe_one, one = run(drifting, 1, config=config)
    every = PipelineConfig(embedding_dim=DIM, neighbours=5, drift_similarity=1.0)
    pipe_every, _ = run(drifting, 1, config=every)
    # every fetch changes the vector; only some of them search
    assert 40 < pipe_one.counters.searches < pipe_every.counters.searches
    for size in (7, 64, 10_000):
        for store in (MemoryPageStore(), BytesPageStore(), CompactMemoryPageStore()):
            pipe, other = run(drifting, size, store=store, config=config)
            assert comparable(other) == comparable(one), f"batch size {size} differs"
            assert pipe.counters.searches == pipe_one.counters.searches
            # the index holds every page's latest vector, searched with or not
            latest = {f.page_id: f.unit_vector() for f in map(prepare, drifting)}
            ids = np.array(sorted(latest), dtype=np.int64)
            np.testing.assert_allclose(
                pipe.index.reconstruct_many(ids),
                pipe.index.stored(np.stack([latest[i] for i in ids])),
            )


def crowd_moved_away_crawl() -> list[FetchedPage]:
    """A crowd of 20 pages about one topic and 20 scattered pages. In the second round 19 of
    the crowd move to the opposite topic before the 20th changes its vector enough to search:
    its nearest pages in the index as it stood before are all moved by then."""
    rng = np.random.default_rng(11)
    topic = rng.normal(size=DIM)
    crowd = [topic + 0.05 * rng.normal(size=DIM) for _ in range(20)]
    scattered = [rng.normal(size=DIM) for _ in range(20)]
    events = []

    def fetch(name: str, at: int, vector: np.ndarray) -> None:
        raw = {
            "url": f"https://m.org/{name}",
            "fetched_at": at,
            "outlinks": [f"https://m.org/{name}/a"],
            "embedding": unit(vector),
        }
        events.append(parse_event(raw, embedding_dim=DIM))

    for p, vector in enumerate(crowd + scattered):
        fetch(f"p{p}", T0 + p, vector)
    later = T0 + 7 * DAY
    for p in range(1, 20):
        fetch(f"p{p}", later + p, -topic + 0.05 * rng.normal(size=DIM))
    fetch("p0", later + 20, topic + 0.3 * rng.normal(size=DIM))
    return events


def test_a_page_whose_nearest_pages_the_batch_moved_away_finds_the_next_ones() -> None:
    """The index is searched a few candidates wider than needed; a row that loses more than
    those to pages the batch moved before it is searched again, so it still gets what it
    gets alone."""
    moved = crowd_moved_away_crawl()
    config = PipelineConfig(embedding_dim=DIM, neighbours=5)
    alone, one = run(moved, 1, config=config)
    together, other = run(moved, 40, config=config)  # a batch a round
    assert comparable(other) == comparable(one)
    assert together.counters.searches_widened == 1 and alone.counters.searches_widened == 0
    page = prepare(moved[-1]).page_id
    found = together.store.get_neighbours([page])[0]
    assert found is not None and len(found.ids) == 5
    np.testing.assert_array_equal(found.ids, alone.store.get_neighbours([page])[0].ids)
    scattered = {prepare(e).page_id for e in moved[20:40]}
    assert set(found.ids.tolist()) <= scattered  # the moved crowd now lies opposite


def test_online_scorer_learns_from_labels_as_they_arrive(events) -> None:
    pipeline, results = run(events, 50, scorer="online")
    labelled = [r for r in results if r.emitted.interval is not None]
    last_round = max(r.event.timestamp for r in results) - 2 * DAY
    learner = pipeline.scorer.state().learner
    # every label is learned at the first epoch after it came; the last round's wait
    before_last_round = sum(1 for r in labelled if r.event.timestamp < last_round)
    assert before_last_round <= learner.n_learned < len(labelled) and learner.n_learned > 100
    last = results[-1].priority
    assert last["scorer"]["models"]["online"] == "river-linear-2"
    assert "model" in last["reasons"]
    # busy pages (even) gain links every round, calm ones never: the learner has seen it
    final = {r.event.url: r.priority for r in results if r.priority}
    busy = np.mean([p["p_new"] for u, p in final.items() if int(u.rsplit("p", 1)[1]) % 2 == 0])
    calm = np.mean([p["p_new"] for u, p in final.items() if int(u.rsplit("p", 1)[1]) % 2 == 1])
    assert busy - calm > 0.2, (busy, calm)


def test_restart_from_the_store_continues_the_online_learner(events) -> None:
    _, straight = run(events, 25, scorer="online")
    store, index, cut = BytesPageStore(), FaissIndex(dim=DIM), 150
    config = PipelineConfig(embedding_dim=DIM, neighbours=5)
    first = PagePipeline(store, index, make_scorer("online"), config)
    for i in range(0, cut, 25):
        first.process(events[i : i + 25])
    # a new pipeline with a fresh scorer: the learner comes back from the store
    second = PagePipeline(store, index, make_scorer("online"), config)
    assert second.scorer.state().learner.n_learned == first.scorer.state().learner.n_learned
    resumed = []
    for i in range(cut, len(events), 25):
        resumed.extend(second.process(events[i : i + 25]))
    assert comparable(resumed) == comparable(straight[cut:])


def test_index_switch_to_approximate_does_not_depend_on_batching(events) -> None:
    _, one = run(events, 1, exact_below=25)
    _, other = run(events, 50, exact_below=25)
    assert comparable(other) == comparable(one)


@pytest.mark.parametrize("scorer", ["lbla", "online", "ensemble"])
@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("store_type", [BytesPageStore, CompactMemoryPageStore])
def test_serialising_store_gives_the_same_scores(events, scorer, compact, store_type) -> None:
    config = PipelineConfig(embedding_dim=DIM, neighbours=5, compact_store=compact)
    mem_pipe, mem = run(events, 32, scorer=scorer, config=config)
    byte_pipe, byts = run(events, 32, store=store_type(), scorer=scorer, config=config)
    assert comparable(byts) == comparable(mem)
    for url, state in mem_pipe.store.states.items():
        assert states_equal(byte_pipe.store.get_states([url])[0], state)
    pids = list(mem_pipe.store.neighbours)
    for mine, theirs in zip(
        byte_pipe.store.get_neighbours(pids), mem_pipe.store.get_neighbours(pids), strict=True
    ):
        assert mine is not None and theirs is not None
        assert mine.short_ids == theirs.short_ids == compact
        shift = ID_PREFIX_SHIFT if compact else 0  # the compact store keeps the top 40 bits
        assert np.array_equal(mine.ids >> shift, theirs.ids >> shift)
        assert np.array_equal(mine.weights, theirs.weights)
    rows = list(mem_pipe.store.rows)
    for mine, theirs in zip(
        byte_pipe.store.get_rows(rows), mem_pipe.store.get_rows(rows), strict=True
    ):
        assert np.array_equal(mine, theirs, equal_nan=True)


def _held_bytes(root: object) -> int:
    """Bytes of every object reachable from ``root`` (each counted once), types, modules and
    functions aside: what a store holds, whatever allocator free lists the process has."""
    import gc
    import sys
    from types import BuiltinFunctionType, FunctionType, ModuleType

    shared = (type, ModuleType, FunctionType, BuiltinFunctionType)
    seen: set[int] = set()
    stack, total = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, shared):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def test_the_compact_memory_store_keeps_the_records_in_less_memory(events) -> None:
    """What the embedded replay keeps a page in: its records as bytes, not as objects."""
    import copy

    writes = []

    class Recording(MemoryPageStore):
        def write(self, w: PageWrites) -> None:
            writes.append(w)
            super().write(w)

    run(events, 32, store=Recording(), scorer="online")
    for w in writes:  # what both keep alike left out: the records the two keep differently
        w.learner, w.stats, w.siblings, w.gains = None, {}, {}, {}
    held = {}
    for store_type in (MemoryPageStore, CompactMemoryPageStore):
        store = store_type()
        for w in writes:  # each batch's records made afresh, as the pipeline makes them
            store.write(copy.deepcopy(w))
        # counted by walking the store, not by tracemalloc: in a long test session the
        # interpreter's free lists hand out tuples and floats that tracemalloc never sees
        held[store_type.__name__] = _held_bytes(store)
        assert len(store) == len({url for w in writes for url in w.states})
    # small pages here (few intervals, 5 related pages); at 30,000 generated pages x 3 crawls
    # the records took 2.8 kB a page as objects, 1.1 kB as bytes
    assert held["CompactMemoryPageStore"] < 0.8 * held["MemoryPageStore"], held


def test_sibling_groups_are_each_groups_sibling_group() -> None:
    """Many groups at once (their ids derived in one pass) are what each alone gives: the
    members' page ids in order, the gain passed through, an empty group with no ids."""
    gain = GroupGain(at=5.0, internal=1, external=0, page_id=7, previous_at=1.0)
    members = [
        ("https://a.org/x",),
        (),
        ("https://c.org/z", "https://c.org/z?lang=de"),
        ["https://d.org/"],
    ]
    gains = [None, None, gain, None]
    many = sibling_groups(members, gains)
    for got, urls, g in zip(many, members, gains, strict=True):
        alone = sibling_group(urls, g)
        assert got.urls == alone.urls == tuple(urls) and got.gain is g
        assert got.ids.dtype == np.int64 and got.ids.tolist() == alone.ids.tolist()
        assert got.ids.tolist() == [url_id(u) for u in urls]
    assert sibling_groups([], []) == []
    given = np.array([url_id(u) for urls in members for u in urls], np.int64)
    kept = sibling_groups(members, gains, given)
    assert [g.ids.tolist() for g in kept] == [g.ids.tolist() for g in many]
    with pytest.raises(ValueError, match="4 page ids given for 3 group members"):
        sibling_groups([("https://a.org/",), ("https://b.org/", "https://c.org/")], [None] * 2,
                       np.arange(4))  # fmt: skip


def test_the_compact_memory_store_gives_back_sibling_groups_as_written() -> None:
    """It keeps a group of one by its key alone where the page is the group's home; every
    group reads back as the memory store gives it, members in the order first seen."""
    first = {
        "a.org/x": ["https://a.org/x"],  # its home page alone: kept as the key
        "b.org/y": ["http://b.org/y"],  # not its home (http): the URL is kept
        "c.org/z": ["https://c.org/z", "https://c.org/z?lang=de"],
    }
    later = {
        "a.org/x": ["https://a.org/x?lang=fr"],  # no longer alone
        "b.org/y": ["https://de.b.org/y"],
        "e.org/w": ["https://e.org/w"],  # alone from the second batch on
    }
    stores = (MemoryPageStore(), CompactMemoryPageStore())
    for store in stores:
        for siblings in (first, later):
            store.write(PageWrites({}, {}, {}, siblings={k: list(v) for k, v in siblings.items()}))
    keys = ["a.org/x", "b.org/y", "c.org/z", "d.org/none", "e.org/w"]
    expected, got = (store.get_siblings(keys) for store in stores)
    assert [g.urls for g in got] == [g.urls for g in expected]
    assert [g.urls for g in got][:2] == [
        ("https://a.org/x", "https://a.org/x?lang=fr"),
        ("http://b.org/y", "https://de.b.org/y"),
    ]
    assert [g.urls for g in got][3:] == [(), ("https://e.org/w",)]
    for mine, theirs in zip(got, expected, strict=True):
        assert np.array_equal(mine.ids, theirs.ids)


def test_the_compact_memory_store_keeps_a_home_alone_group_under_the_id_it_was_given() -> None:
    """A group of its home page alone keeps the page id the batch brought (none derived when
    read); without one it derives it from the URL, as a group read from members does."""
    store = CompactMemoryPageStore()
    given = {"https://a.org/x": 12345}
    store.write(PageWrites({}, {}, {}, siblings={"a.org/x": ["https://a.org/x"],
                                                  "e.org/w": ["https://e.org/w"]},
                           page_ids=given))  # fmt: skip
    kept, derived = store.get_siblings(["a.org/x", "e.org/w"])
    assert kept.urls == ("https://a.org/x",) and kept.ids.tolist() == [12345]
    assert derived.ids.tolist() == [url_id("https://e.org/w")]


def test_stores_keyed_by_page_id_read_and_write_states_by_the_ids_given() -> None:
    """The compact store files a state under the page id the batch gave for its URL and
    reads it back by the ids given; without ids both sides derive them from the URLs, and
    ids that do not pair up with the URLs are refused."""
    url, other = "https://a.org/x", "https://a.org/y"
    state = PageState(last_fetched_at=1.0, last_ok_at=1.0, last_status=200, fetches=1)
    store = CompactMemoryPageStore()
    store.write(PageWrites({url: state}, {}, {}, page_ids={url: 99}))
    store.write(PageWrites({other: state}, {}, {}))  # id derived from the URL
    assert states_equal(store.get_states([url], [99])[0], state)
    assert store.get_states([url]) == [None]  # filed under the id given, not url_id(url)
    for read in (store.get_states([other]), store.get_states([other], [url_id(other)])):
        assert states_equal(read[0], state)
    with pytest.raises(ValueError, match="1 page ids given for 2 URLs"):
        store.get_states([url, other], [99])


def test_features_use_only_earlier_fetches(events) -> None:
    _, full = run(events, 50)
    for cut in (31, 150, len(events) - 1):
        _, prefix = run(events[: cut + 1], 50)
        assert prefix[cut].features == full[cut].features


COMPACT = PipelineConfig(embedding_dim=DIM, neighbours=5, compact_store=True)


@pytest.mark.parametrize("compact", [False, True])
def test_related_pages_carry_the_cluster_signal(events, compact: bool) -> None:
    pipeline, results = run(events, 50, config=COMPACT if compact else None)
    busy_ids = {r.page_id for r in results if int(r.event.url.rsplit("p", 1)[1]) % 2 == 0}
    for pid, nb in pipeline.store.neighbours.items():
        if len(nb.ids):
            # compact: each weight a byte (a share of the largest), the sum within 0.2% of it
            assert abs(nb.weights.sum() - 1) < (len(nb.ids) / 510 if compact else 1e-6)
            assert np.array_equal(nb.weights, to_byte_grid(nb.weights)) or not compact
            assert pid not in nb.ids.tolist()
            same = np.isin(nb.ids, list(busy_ids)) == (pid in busy_ids)
            assert same.mean() >= 0.8
    last = {r.event.url: r for r in results if r.features}
    busy = [
        r
        for u, r in last.items()
        if int(u.rsplit("p", 1)[1]) % 2 == 0 and "dn_related_lcr_internal" in r.features
    ]
    calm = [
        r
        for u, r in last.items()
        if int(u.rsplit("p", 1)[1]) % 2 == 1 and "dn_related_lcr_internal" in r.features
    ]
    assert busy and calm
    assert min(r.features["dn_related_lcr_internal"] for r in busy) > max(
        r.features["dn_related_lcr_internal"] for r in calm
    )


def test_first_fetch_prior_comes_from_related_pages(events) -> None:
    pipeline, _ = run(events, 50)
    newcomer = parse_event(
        {
            "url": "https://s.org/new",
            "fetched_at": T0 + 100 * DAY,
            "outlinks": [],
            "embedding": unit(np.ones(DIM)),
        },
        embedding_dim=DIM,
    )
    busy_vec = pipeline.index.reconstruct(
        next(iter(pid for pid in pipeline.store.neighbours if pid in pipeline.index))
    )
    newcomer = newcomer.model_copy(update={"embedding": busy_vec.tolist()})
    (r,) = pipeline.process([newcomer])
    assert r.features["dp_intervals"] == 0 and "dn_related_rate_internal_per_day" in r.features
    assert r.priority["expected_new_internal"] == pytest.approx(
        r.features["dn_related_rate_internal_per_day"] * 7, rel=1e-4
    )


def test_pages_without_embedding_are_scored_from_history(events) -> None:
    _, results = run(events, 50)
    bare = [r for r in results if r.event.url.endswith(("p3", "p10", "p17")) and r.features]
    assert bare and all(r.priority is not None for r in bare)
    assert all("dn_related_lcr_internal" not in r.features for r in bare)
    assert any(r.priority["score"] > 0 for r in bare if r.event.url.endswith("p10"))


def test_duplicates_and_stale_are_counted_not_scored(events) -> None:
    pipeline, _ = run(events[:100], 20)
    last = events[99]  # the latest fetch of its page in the prefix
    older = last.model_copy(update={"fetched_at": last.fetched_at - timedelta(days=1)})
    again = pipeline.process([last, older])
    assert [r.emitted.kind for r in again] == ["duplicate", "stale"]
    assert all(r.priority is None and r.features is None for r in again)
    assert (pipeline.counters.duplicate, pipeline.counters.stale) == (1, 1)
    # the same event twice inside one batch
    _, twice = run([events[0], events[0]], 10)
    assert [r.emitted.kind for r in twice] == ["applied", "duplicate"]


@pytest.mark.parametrize("compact", [False, True])
def test_stored_stats_rows_match_the_page_state(events, compact: bool) -> None:
    from online.features import STATS_WIDE, page_stats
    from online.links import link_info
    from online.stores import to_half

    pipeline, _ = run(events, 40, config=COMPACT if compact else None)
    store = pipeline.store
    for url, state in store.states.items():
        expected = page_stats(state, link_info(url)).astype(np.float32)
        if compact:
            expected = to_half(expected, STATS_WIDE)  # as stored
        assert np.array_equal(store.stats(link_info(url).page_id), expected, equal_nan=True)


class _FlakyStore(BytesPageStore):
    """Fails the stats read (the last read of a batch) a given number of times."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def get_stats(self, page_ids: np.ndarray) -> np.ndarray:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("store unreachable")
        return super().get_stats(page_ids)


def test_a_failed_store_read_changes_nothing_so_a_retry_is_exact(events) -> None:
    _, straight = run(events, 30, scorer="online")
    store = _FlakyStore(failures=0)
    pipeline = PagePipeline(
        store,
        FaissIndex(dim=DIM),
        make_scorer("online"),
        PipelineConfig(embedding_dim=DIM, neighbours=5),
    )
    out = []
    for i in range(0, len(events), 30):
        if i == 120:
            store.failures = 2
            index_size, learned = len(pipeline.index), pipeline.scorer.state().learner.n_learned
            for _ in range(2):
                with pytest.raises(ConnectionError):
                    pipeline.process(events[i : i + 30])
                assert len(pipeline.index) == index_size
                assert pipeline.scorer.state().learner.n_learned == learned
        out.extend(pipeline.process(events[i : i + 30]))
    assert comparable(out) == comparable(straight)


def test_index_retraining_does_not_depend_on_batching() -> None:
    """A retrained index takes over at a defined size of the index: batches are split there,
    so every event is searched as it would be alone. The lists keep the stored vectors
    (``codes="stored"``): with 8-bit codes a page ranked past the candidates by its code's
    similarity (near-ties of 8-dimensional vectors) can be found in a batch, among the
    batch's own candidates, and not alone; that approximation is not the retraining's."""
    events = crawl(pages=150, rounds=3, seed=4)

    def run_retraining(batch: int) -> tuple[FaissIndex, list]:
        index = FaissIndex(
            dim=DIM, exact_below=25, retrain_growth=2.0, takeover_growth=1.2, codes="stored"
        )
        pipeline = PagePipeline(
            MemoryPageStore(),
            index,
            make_scorer("lbla"),
            PipelineConfig(embedding_dim=DIM, neighbours=5),
        )
        out = []
        for i in range(0, len(events), batch):
            out.extend(pipeline.process(events[i : i + batch]))
        return index, out

    (index_one, one), (index_many, many) = run_retraining(1), run_retraining(40)
    assert index_one.retrains >= 1 and index_one.retrains == index_many.retrains
    assert comparable(many) == comparable(one)


def test_a_checkpoint_rolled_back_to_twice_keeps_no_count_of_the_attempts_between() -> None:
    """Bisection rolls back to one checkpoint more than once: each attempt's counts (searches,
    pages embedded from text ...) go with it."""
    pipeline = PagePipeline(
        MemoryPageStore(),
        FaissIndex(dim=DIM),
        make_scorer("lbla"),
        PipelineConfig(embedding_dim=DIM),
    )
    saved = pipeline._checkpoint()
    for attempt in (5, 3):
        pipeline.counters.searches += attempt
        pipeline._roll_back(saved, index=False)
        assert pipeline.counters.searches == 0


@pytest.mark.parametrize("compact", [False, True])
def test_a_stored_row_is_its_look_around_part_and_the_state_gives_back_the_rest(
    events, compact: bool
) -> None:
    """What a learning pipeline keeps of a fetch's feature row until its label arrives: the
    look-around part (with the compact store in half precision, sizes in float32); the own
    part is the page's stored state's own features, exactly."""
    from online.features import LOOKAROUND_NAMES, LOOKAROUND_WIDE, own_feature_matrix
    from online.stores import to_half

    config = COMPACT if compact else None
    pipeline, results = run(events, 40, scorer="online", config=config)
    store = pipeline.store
    own_width = len(pipeline.feature_names) - len(LOOKAROUND_NAMES)
    last = {r.page_id: r for r in results if r.row is not None}
    assert last
    for pid, r in last.items():
        row = np.asarray(r.row, dtype=np.float32)
        stored = store.rows[pid]
        assert stored.shape == (len(LOOKAROUND_NAMES),)
        part = row[own_width:]
        expected = to_half(part, LOOKAROUND_WIDE) if compact else part
        assert np.array_equal(stored, expected, equal_nan=True)
        state = store.states[r.event.url]
        own = own_feature_matrix([state], [r.event.url], pipeline.config.history)[0]
        assert np.array_equal(own.astype(np.float32), row[:own_width], equal_nan=True)
