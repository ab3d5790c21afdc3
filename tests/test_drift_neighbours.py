"""Related pages that tolerate drift: the threshold, the found-with direction and its format."""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest

from online.events import parse_event
from online.index import FaissIndex
from online.kernels import pack_descending, pack_varints
from online.links import url_id
from online.neighbour_search import moved_materially, resolve_short_ids
from online.pipeline import PagePipeline, PipelineConfig
from online.scorers import get_scorer
from online.stores import (
    ID_PREFIX_SHIFT,
    MemoryPageStore,
    Neighbours,
    byte_grid_codes,
    byte_grid_values,
    codes_cosine,
    direction_codes,
    to_byte_grid,
    to_half,
)

DIM = 16
T0 = 1_767_225_600
DAY = 86_400


def rotated(v: np.ndarray, towards: np.ndarray, cos: float) -> np.ndarray:
    """A unit vector at cosine ``cos`` from unit ``v``, in the plane of ``v`` and ``towards``."""
    w = towards - (towards @ v) * v
    w /= np.linalg.norm(w)
    return cos * v + np.sqrt(1 - cos * cos) * w


def test_direction_codes_keep_the_direction_in_4_bits_a_dimension() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=192)
    codes = direction_codes(v)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 7
    cos = v @ codes / (np.linalg.norm(v) * np.linalg.norm(codes.astype(np.float64)))
    assert 0.99 < cos < 0.999
    assert codes_cosine(v, codes) == np.float32(cos)
    # coarse: for most vectors the codes alone sit past the default threshold 0.995 ...
    vectors = rng.normal(size=(200, 192))
    assert np.mean([moved_materially(x, direction_codes(x), 0.995) for x in vectors]) > 0.9
    # ... which their cosine allows for: a vector that has not moved has not moved
    for x in vectors:
        codes = direction_codes(x)
        assert not moved_materially(x, codes, 0.995, codes_cosine(x, codes))
    assert not direction_codes(np.zeros(4)).any()
    assert codes_cosine(np.zeros(4), direction_codes(np.zeros(4))) == 1.0


def test_moved_materially_compares_with_the_found_with_direction() -> None:
    rng = np.random.default_rng(1)
    v = rng.normal(size=DIM)
    v /= np.linalg.norm(v)
    found = direction_codes(v)
    c = codes_cosine(v, found)
    near, far = rotated(v, rng.normal(size=DIM), 0.995), rotated(v, rng.normal(size=DIM), 0.9)
    assert not moved_materially(v, found, 0.98, c)
    assert not moved_materially(near, found, 0.98, c)
    assert moved_materially(far, found, 0.98, c)
    assert not moved_materially(far, found, 0.8, c)
    # unknown direction (neighbours stored as version 1), threshold 1, zero vectors: search
    assert moved_materially(v, None, 0.98)
    assert moved_materially(v, found, 1.0, c)
    assert moved_materially(np.zeros(DIM), found, 0.98, c)
    assert moved_materially(v, np.zeros(DIM, np.int8), 0.98)


def test_the_corrected_cosine_tracks_the_true_one_at_192_dimensions() -> None:
    """Over random vectors and drifts within 0.005 of the default threshold either way, the
    cosine to 4-bit codes divided by their own cosine errs by a fifth of the threshold's
    0.005 at most (one standard deviation), without bias: what it decides otherwise than the
    exact vector would are moves close to the threshold."""
    rng = np.random.default_rng(3)
    errors, wrong = [], 0
    for _ in range(500):
        v0 = rng.normal(size=192)
        v0 /= np.linalg.norm(v0)
        codes = direction_codes(v0)
        v = rotated(v0, rng.normal(size=192), float(rng.uniform(0.99, 1.0)))
        estimate = v @ codes / np.linalg.norm(codes) / codes_cosine(v0, codes)
        errors.append((v @ v0 - estimate) / 0.005)
        wrong += (v @ v0 < 0.995) != moved_materially(v, codes, 0.995, codes_cosine(v0, codes))
    assert abs(float(np.mean(errors))) < 0.05 and float(np.std(errors)) < 0.2
    assert wrong <= 0.1 * 500


def test_neighbours_version_4_round_trips_compactly() -> None:
    codes = direction_codes(np.linspace(-1, 1, DIM))
    weights = to_half(np.array([0.5, 0.3, 0.2], np.float32))
    nb = Neighbours(np.array([5, -7, 2**62]), weights, 99, codes, 0.987)
    data = nb.to_bytes()
    assert data[0] == 4
    # version and flags, three one-byte varints, half weights, found_cos in 3 bytes (it lies in
    # [0.5, 2)), two codes a byte
    assert len(data) == 2 + 3 + 3 * (8 + 2) + 3 + DIM // 2
    back = Neighbours.from_bytes(data)
    np.testing.assert_array_equal(back.ids, nb.ids)
    np.testing.assert_array_equal(back.weights, nb.weights)
    assert back.index_size == 99 and back.found_cos == np.float32(0.987)
    assert back.found_with is not None and back.found_with.dtype == np.int8
    np.testing.assert_array_equal(back.found_with, codes)
    empty = Neighbours(np.empty(0, np.int64), np.empty(0, np.float32), 3, codes)
    assert not len(Neighbours.from_bytes(empty.to_bytes()).ids)
    # weights that are not half-precision values and int8 codes are kept exactly too
    wide = Neighbours(nb.ids, np.array([0.5, 0.3, 0.2], np.float32), 9, np.array([-100, 3, 127]))
    back = Neighbours.from_bytes(wide.to_bytes())
    np.testing.assert_array_equal(back.weights, wide.weights)
    np.testing.assert_array_equal(back.found_with, [-100, 3, 127])
    odd = Neighbours(nb.ids, weights, 9, np.array([-7, 0, 7, -1, 5], np.int8))
    np.testing.assert_array_equal(Neighbours.from_bytes(odd.to_bytes()).found_with, odd.found_with)
    with pytest.raises(ValueError, match="truncated"):
        Neighbours.from_bytes(data[:20])


def test_weights_on_the_byte_grid_are_kept_a_byte_each_and_read_back_exactly() -> None:
    """The compact store's weights (`to_byte_grid`) take a byte a related page and a float32
    for the largest; coding them again changes nothing, and they stay within 0.2% of the
    largest weight of the weights they round."""
    rng = np.random.default_rng(4)
    codes = direction_codes(np.linspace(-1, 1, DIM))
    for n in (1, 3, 30):
        for _ in range(50):
            raw = rng.dirichlet(np.ones(n)).astype(np.float32)
            weights = to_byte_grid(raw)
            assert np.abs(weights - raw).max() <= raw.max() / 2 / 255 + 1e-7
            np.testing.assert_array_equal(to_byte_grid(weights), weights)
            nb = Neighbours(np.arange(n, dtype=np.int64), weights, 7, codes, 0.99)
            data = nb.to_bytes()
            assert len(data) <= 5 + n * 8 + 4 + n + 3 + DIM // 2
            back = Neighbours.from_bytes(data)
            assert back.weights.tobytes() == weights.tobytes()
            np.testing.assert_array_equal(back.ids, nb.ids)
            assert back.found_cos == np.float32(0.99)


def test_short_ids_keep_40_bits_and_are_found_again_in_the_index() -> None:
    """The compact store keeps each related page's id as its top 40 bits (5 bytes); the
    pipeline finds the pages again in the index, and a list naming a page the index cannot
    name (not indexed, or sharing its 40 bits with another indexed page) is searched again."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 2**63 - 1, size=12, dtype=np.int64)
    weights = to_byte_grid(rng.dirichlet(np.ones(12)).astype(np.float32))
    codes = direction_codes(np.linspace(-1, 1, DIM))
    nb = Neighbours(ids, weights, 40, codes, 0.99, short_ids=True)
    data = nb.to_bytes()
    assert len(data) <= 5 + 12 * 5 + 4 + 12 + 3 + DIM // 2
    back = Neighbours.from_bytes(data)
    assert back.short_ids and back.weights.tobytes() == weights.tobytes()
    np.testing.assert_array_equal(back.ids, (ids >> ID_PREFIX_SHIFT) << ID_PREFIX_SHIFT)

    index = FaissIndex(dim=DIM)
    index.upsert(ids, rng.normal(size=(12, DIM)).astype(np.float32))
    twin = (int(ids[0]) >> ID_PREFIX_SHIFT << ID_PREFIX_SHIFT) | (~int(ids[0]) & 0x7FFFFF)
    stored = {
        1: back,  # read back: its pages found again
        2: nb,  # held whole in memory: looked up the same way
        3: Neighbours(ids[:3], weights[:3], 40, codes, 0.99, short_ids=False),
        4: replace(back, ids=np.append(back.ids[:2], 12345 << ID_PREFIX_SHIFT)),  # not indexed
        5: None,
    }
    resolved = resolve_short_ids(stored, index)
    np.testing.assert_array_equal(resolved[1].ids, ids)
    np.testing.assert_array_equal(resolved[2].ids, ids)
    assert resolved[3] is stored[3] and resolved[4] is None and resolved[5] is None
    index.upsert(np.array([twin], np.int64), rng.normal(size=(1, DIM)).astype(np.float32))
    assert resolve_short_ids({1: back}, index)[1] is None  # two pages with its first's bits


def test_neighbours_version_2_is_still_read_with_its_int8_direction() -> None:
    ids, weights = np.array([4, 9], np.int64), np.array([0.75, 0.25], np.float32)
    codes = np.array([-127, 5, 64, 0], np.int8)
    old = (
        struct.pack("<BIHH", 2, 12, 2, 4)
        + ids.astype("<i8").tobytes()
        + weights.tobytes()
        + codes.tobytes()
    )
    back = Neighbours.from_bytes(old)
    np.testing.assert_array_equal(back.ids, ids)
    np.testing.assert_array_equal(back.weights, weights)
    np.testing.assert_array_equal(back.found_with, codes)
    assert back.index_size == 12 and back.found_cos == 1.0


def test_neighbours_version_1_is_still_read_with_an_unknown_direction() -> None:
    ids, weights = np.array([4, 9], np.int64), np.array([0.75, 0.25], np.float32)
    # as written before the direction was kept
    old = struct.pack("<BIH", 1, 12, 2) + ids.astype("<i8").tobytes() + weights.tobytes()
    back = Neighbours.from_bytes(old)
    np.testing.assert_array_equal(back.ids, ids)
    np.testing.assert_array_equal(back.weights, weights)
    assert back.index_size == 12 and back.found_with is None
    # a list without a direction is still written as version 1
    assert Neighbours(ids, weights, 12).to_bytes() == old
    with pytest.raises(ValueError, match="unknown neighbours format"):
        Neighbours.from_bytes(b"\x05" + old[1:])


def pack_nibbles(codes: np.ndarray) -> bytes:
    """int8 codes in [-8, 7], two a byte (the first in the low half)."""
    nibbles = (np.asarray(codes, dtype=np.int16) & 0x0F).astype(np.uint8)
    if len(nibbles) % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).tobytes()


def _version_4(nb: Neighbours) -> bytes:
    """``nb`` as version 4 is defined, in numpy: the plain statement of the format that
    `online.kernels.encode_neighbours` compiles."""
    flags, ids = 4, nb.ids.astype("<i8").tobytes()
    if nb.short_ids:
        flags |= 16
        prefixes = (nb.ids.astype("<i8") >> ID_PREFIX_SHIFT).view(np.uint8)
        ids = prefixes.reshape(-1, 8)[:, :5].tobytes()
    w = np.asarray(nb.weights, dtype="<f4")
    with np.errstate(invalid="ignore", over="ignore"):
        codes, top = byte_grid_codes(w)
        on_grid = len(w) and (byte_grid_values(codes, top) == w).all()
        half = w.astype("<f2")
    if on_grid:
        flags |= 8
        descending = pack_descending(codes)
        flags |= 32 if descending is not None else 0
        weights = struct.pack("<f", float(top[0])) + (descending or codes.tobytes())
    elif (half.astype("<f4") == w).all():
        flags, weights = flags | 1, half.tobytes()
    else:
        weights = w.tobytes()
    direction = np.asarray(nb.found_with, dtype=np.int8)
    dim = len(direction)
    if direction.size and direction.min() >= -8 and direction.max() <= 7:
        flags, direction = flags | 2, pack_nibbles(direction)
    else:
        direction = direction.tobytes()
    cos = struct.pack("<f", nb.found_cos)
    if cos[3] == 0x3F:
        flags, cos = flags | 64, cos[:3]
    head = bytes((4, flags)) + pack_varints((nb.index_size, len(nb.ids), dim))
    return head + ids + weights + cos + direction


def test_compiled_version_4_is_the_format_bit_for_bit() -> None:
    """`Neighbours.to_bytes` (compiled) writes what the numpy statement of version 4 writes,
    for weights on and off the byte grid, half-precision values and not (subnormal, beyond
    65,504, infinite, NaN, negative, zero), long lists, short ids and any direction."""
    rng = np.random.default_rng(23)
    specials = np.array(
        [0.0, -0.0, 2.0**-24, 3 * 2.0**-24, 2.0**-14, 65504.0, 65505.0, 7e4, np.inf, -np.inf,
         np.nan, -0.5, 1e-30, 0.1, 1 / 3],
        np.float32,
    )  # fmt: skip
    for trial in range(600):
        n = int(rng.choice([0, 1, 2, 5, 30, 257, 258, 400]))
        raw = rng.dirichlet(np.ones(max(n, 1)))[:n].astype(np.float32)
        kind = trial % 5
        if kind == 0:
            weights = to_byte_grid(np.sort(raw)[::-1])
        elif kind == 1:
            weights = to_byte_grid(raw)
        elif kind == 2:
            weights = to_half(raw)
        elif kind == 3:
            weights = raw.copy()
            if n:
                weights[rng.integers(0, n, size=3)] = rng.choice(specials, size=3)
        else:
            weights = to_half(rng.choice(specials, size=n))
        ids = rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64)
        short = bool(trial % 2)
        dim = int(rng.choice([0, 1, 5, DIM, 192]))
        found = rng.integers(-8, 8, size=dim) if trial % 3 else rng.integers(-128, 128, size=dim)
        cos = float(rng.choice([0.9957, 1.0, 0.5, 1.99, 2.0, 0.3, -0.7, np.nan, np.inf]))
        size = int(rng.choice([0, 127, 128, 2**32, 2**63]))
        nb = Neighbours(ids, weights, size, found.astype(np.int8), cos, short)
        assert nb.to_bytes() == _version_4(nb), trial
    with pytest.raises(OverflowError):
        Neighbours(ids[:1], weights[:1], 1, found.astype(np.int8), 1e300).to_bytes()


def _version_3(nb: Neighbours) -> bytes:
    """``nb`` as version 3 wrote it: a fixed head, a byte a weight code (or half/float32
    weights), found_cos in 4 bytes, the direction in nibbles where it fits."""
    w = np.asarray(nb.weights, np.float32)
    codes, top = byte_grid_codes(w)
    flags, ids = 4, nb.ids.astype("<i8").tobytes()
    if nb.short_ids:
        flags |= 16
        ids = (nb.ids >> ID_PREFIX_SHIFT).astype("<i8").view(np.uint8).reshape(-1, 8)[:, :5]
        ids = ids.tobytes()
    if len(w) and (byte_grid_values(codes, top) == w).all():
        flags, weights = flags | 8, struct.pack("<f", float(top[0])) + codes.tobytes()
    else:
        weights = w.tobytes()
    direction = np.asarray(nb.found_with, np.int8)
    if direction.size and direction.min() >= -8 and direction.max() <= 7:
        flags, direction = flags | 2, pack_nibbles(direction)
    else:
        direction = direction.tobytes()
    head = struct.pack("<BBIHH", 3, flags, nb.index_size, len(nb.ids), len(nb.found_with))
    return head + ids + weights + struct.pack("<f", nb.found_cos) + direction


def _same(a: Neighbours, b: Neighbours) -> bool:
    return (
        a.ids.tobytes() == b.ids.tobytes()
        and a.weights.tobytes() == b.weights.tobytes()
        and a.index_size == b.index_size
        and np.float32(a.found_cos).tobytes() == np.float32(b.found_cos).tobytes()
        and a.found_with.tobytes() == b.found_with.tobytes()
        and a.short_ids == b.short_ids
    )


def test_version_4_reads_back_what_version_3_read_and_is_smaller_largest_first() -> None:
    """Related pages as the compact store keeps them (largest weight first, on the byte
    grid, short ids): version 4 reads back bit for bit what version 3 did (still read), in
    fewer bytes, for any weights, cosines and directions; a cut record raises ValueError."""
    rng = np.random.default_rng(11)
    saved = []
    for trial in range(300):
        n = int(rng.integers(0, 40))
        raw = np.sort(rng.dirichlet(np.ones(max(n, 1)) * rng.uniform(0.3, 30)))[::-1][:n]
        weights = to_byte_grid(raw.astype(np.float32)) if trial % 5 else raw.astype(np.float32)
        if trial % 7 == 0:
            weights = weights[rng.permutation(n)]  # not largest first: a byte a code
        ids = rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64)
        dim = int(rng.choice([DIM, 64, 5]))
        found = rng.integers(-7, 8, size=dim) if trial % 3 else rng.integers(-128, 128, size=dim)
        cos = float(rng.choice([0.9957, 1.0, 0.3, -0.5, 1.5, 2.0, float("nan")]))
        short = bool(trial % 2)
        if short:  # page ids have 63 bits; 40 are kept
            ids = (np.abs(ids) >> ID_PREFIX_SHIFT) << ID_PREFIX_SHIFT
        size = int(rng.integers(0, 2**32))
        nb = Neighbours(ids, weights, size, found.astype(np.int8), cos, short)
        data, old = nb.to_bytes(), _version_3(nb)
        assert data[0] == 4
        back, back3 = Neighbours.from_bytes(data), Neighbours.from_bytes(old)
        assert _same(back, back3), trial
        assert _same(back, nb) or np.isnan(cos), trial
        assert len(data) <= len(old)
        saved.append(len(old) - len(data))
        for cut in range(len(data)):
            with pytest.raises(ValueError):
                Neighbours.from_bytes(data[:cut])
    # a compact store's list of 30 (weights falling slowly): about 20 bytes fewer
    raw = np.linspace(0.047, 0.028, 30).astype(np.float32)
    codes = direction_codes(np.linspace(-1, 1, 64))
    nb = Neighbours(np.arange(30) << ID_PREFIX_SHIFT, to_byte_grid(raw / raw.sum()), 20_000,
                    codes, 0.9957, short_ids=True)  # fmt: skip
    assert len(_version_3(nb)) == 230 and len(nb.to_bytes()) <= 212
    assert np.mean(saved) > 3


URL = "https://s.org/moving"


class Pages:
    """A few static pages and one page (``URL``) whose vector the test sets per fetch."""

    def __init__(self, threshold: float, drift_growth: float = 100.0) -> None:
        self.rng = np.random.default_rng(2)
        self.pipeline = PagePipeline(
            MemoryPageStore(),
            FaissIndex(dim=DIM),
            get_scorer("lbla"),
            PipelineConfig(
                embedding_dim=DIM,
                neighbours=5,
                drift_similarity=threshold,
                drift_growth=drift_growth,
            ),
        )
        self.t = T0
        for p in range(20):
            self.fetch(f"https://s.org/static{p}", self.rng.normal(size=DIM))

    def start(self) -> np.ndarray:
        """The moving page's first fetch, at a random unit vector (returned): it searches."""
        v = self.rng.normal(size=DIM)
        v /= np.linalg.norm(v)
        assert self.fetch(URL, v) == 1  # no related pages yet
        return v

    def fetch(self, url: str, vector: np.ndarray) -> int:
        """Process one fetch; returns the searches it made."""
        self.t += DAY
        raw = {
            "url": url,
            "fetched_at": self.t,
            "outlinks": [],
            "embedding": (vector / np.linalg.norm(vector)).tolist(),
        }
        before = self.pipeline.counters.searches
        self.pipeline.process([parse_event(raw, embedding_dim=DIM)])
        return self.pipeline.counters.searches - before


def test_slow_drift_accumulates_against_the_found_with_vector() -> None:
    pages = Pages(threshold=0.98)
    v = pages.start()
    towards = pages.rng.normal(size=DIM)
    searched = []
    for _ in range(12):  # each step 0.995 from the previous: never material on its own
        v = rotated(v, towards, 0.995)
        searched.append(pages.fetch(URL, v))
    # but steps add up against the vector the related pages were found with
    assert 2 <= sum(searched) <= 6, searched
    assert searched[0] == 0
    # the index holds the latest vector whether it searched or not
    index = pages.pipeline.index
    stored = index.reconstruct_many(np.array([url_id(URL)]))
    np.testing.assert_array_equal(stored, index.stored(v[None, :]))


def test_every_change_searches_at_threshold_one() -> None:
    pages = Pages(threshold=1.0)
    v = pages.start()
    towards = pages.rng.normal(size=DIM)
    searched = []
    for _ in range(4):
        v = rotated(v, towards, 0.9999)
        searched.append(pages.fetch(URL, v))
    assert searched == [1] * 4
    assert pages.fetch(URL, v) == 0  # an unchanged vector never searches


def test_related_pages_stored_as_version_1_are_searched_on_the_next_change() -> None:
    pages = Pages(threshold=0.98)
    v = pages.start()
    store = pages.pipeline.store
    pid = next(iter(store.neighbours))
    assert store.neighbours[pid].found_with is not None
    # every list as read back from a version-1 record: the direction unknown
    for key, nb in list(store.neighbours.items()):
        store.neighbours[key] = Neighbours.from_bytes(
            Neighbours(nb.ids, nb.weights, nb.index_size).to_bytes()
        )
    assert pages.fetch(URL, v) == 0  # unchanged: nothing to search
    assert pages.fetch(URL, rotated(v, pages.rng.normal(size=DIM), 0.9999)) == 1
    # found again now, with the direction kept: a small change no longer searches
    assert pages.fetch(URL, v) == 0


def test_a_changed_page_searches_again_once_the_index_grew_drift_growth_fold() -> None:
    pages = Pages(threshold=0.5, drift_growth=1.5)
    v = pages.start()  # found among 21 pages
    towards = pages.rng.normal(size=DIM)
    v = rotated(v, towards, 0.999)
    assert pages.fetch(URL, v) == 0
    for p in range(11):  # 32 pages: 1.5-fold
        pages.fetch(f"https://s.org/new{p}", pages.rng.normal(size=DIM))
    assert pages.fetch(URL, v) == 0  # unchanged: only recompute_growth applies
    assert pages.fetch(URL, rotated(v, towards, 0.999)) == 1
