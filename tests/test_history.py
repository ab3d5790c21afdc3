from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from online.events import parse_event
from online.fetch import Fetch, prepare
from online.history import (
    NAN,
    Emitted,
    Interval,
    PageState,
    _to_bytes_v2,
    from_bytes,
    kept_fingerprints,
    states_equal,
    to_bytes,
    update,
)
from online.kernels import StateCodec, pack_varints

PAGE = "https://www.site.org/news/"
DAY = 86_400
T0 = 1_767_225_600


def fetch(t: float, links: list[str], status: int = 200, **extra: object):
    """A fetch ``t`` seconds after 2026-01-01 (the contract accepts no time before 1990)."""
    event = {"url": PAGE, "fetched_at": T0 + t, "outlinks": links, "status": status, **extra}
    return parse_event(event)


def internal(i: int) -> str:
    return f"https://site.org/p{i}"


def external(i: int) -> str:
    return f"https://other{i}.net/"


def run(events, history: int = 8) -> tuple[PageState | None, list]:
    state, outs = None, []
    for e in events:
        state, out = update(state, e, history=history)
        outs.append(out)
    return state, outs


def test_first_fetch_creates_no_interval() -> None:
    state, (out,) = run([fetch(0, [internal(1)])])
    assert out.kind == "applied" and out.first_fetch and out.interval is None
    assert state is not None and state.window == () and state.intervals_total == 0


def test_new_internal_and_external_counted_separately() -> None:
    state, outs = run(
        [
            fetch(0, [internal(1), external(1)]),
            fetch(7 * DAY, [internal(1), internal(2), internal(3), external(1), external(2)]),
            fetch(14 * DAY, [internal(3)]),  # links removed: nothing new
        ]
    )
    assert (outs[1].interval.new_internal, outs[1].interval.new_external) == (2, 1)
    assert outs[1].interval.days == 7.0
    assert (outs[2].interval.new_internal, outs[2].interval.new_external) == (0, 0)
    assert state.sp[3:] == (1.0, 0.0)  # internal, external outlinks now
    assert state.sp_previous[3:] == (3.0, 2.0)


def test_www_and_scheme_rules_apply_to_new_links() -> None:
    _, outs = run(
        [
            fetch(0, []),
            fetch(DAY, ["https://site.org/x", "http://www.site.org/y", "https://www.site.org/z"]),
        ]
    )
    assert (outs[1].interval.new_internal, outs[1].interval.new_external) == (2, 1)


def test_non_2xx_fetch_is_recorded_but_keeps_link_history() -> None:
    state, outs = run(
        [
            fetch(0, [internal(1)]),
            fetch(7 * DAY, [], status=404),
            fetch(14 * DAY, [internal(1), internal(2)]),
        ]
    )
    assert outs[1].kind == "applied" and outs[1].interval is None
    assert outs[2].interval.new_internal == 1  # compared with the last 2xx fetch
    assert outs[2].interval.days == 14.0  # interval spans the failed fetch
    assert state.errors == 1 and state.fetches == 3 and state.last_status == 200


def test_duplicate_and_stale_change_nothing() -> None:
    state, _ = run([fetch(0, [internal(1)]), fetch(7 * DAY, [internal(2)])])
    for event, kind in (
        (fetch(7 * DAY, [internal(9)]), "duplicate"),
        (fetch(3 * DAY, []), "stale"),
    ):
        again, out = update(state, event)
        assert out.kind == kind
        assert again is state


def test_derived_values() -> None:
    state, _ = run(
        [
            fetch(0, [internal(0)], content_digest="a"),
            fetch(7 * DAY, [internal(0), internal(1), external(1)], content_digest="b"),
            fetch(14 * DAY, [internal(0), internal(1), external(1)], content_digest="b"),
            fetch(
                21 * DAY,
                [internal(0), internal(1), internal(2), internal(3), external(1)],
                content_digest="c",
            ),
        ]
    )
    assert state.lcr() == (2 / 3, 1 / 3)
    assert state.nnl_previous() == (2.0, 0.0)
    assert state.nnl_average() == (1.0, 1 / 3)
    assert state.ccr() == 2 / 3
    rate_int, rate_ext = state.rates_per_day()
    assert math.isclose(rate_int, 3 / 21) and math.isclose(rate_ext, 1 / 21)


def test_serialised_size_per_page_with_100_outlinks_under_1kb() -> None:
    links = [internal(i) for i in range(85)] + [external(i) for i in range(15)]
    events = [
        fetch(d * 7 * DAY, [*links[d:], internal(1000 + d)], content_size=5000, text_size=900)
        for d in range(12)
    ]
    state, _ = run(events)
    blob = to_bytes(state)
    assert len(blob) <= 1024, len(blob)
    assert states_equal(from_bytes(blob), state)
    assert from_bytes(blob).window == state.window


def _version_1(state: PageState, fps: bytes) -> bytes:
    """``state`` as version 1 stored it: one header, 13-byte intervals, 4-byte fingerprints."""
    floats = "f" * (len(state.sp) + len(state.sp_previous) + len(state.sn))
    ok = state.last_ok_at
    counts = state[2:8]  # status, fetches, errors, intervals, content and embedding fps
    floats_ = (*state.sp, *state.sp_previous, *state.sn)
    header = struct.pack(
        "<BBddHIIIII" + floats + "BI", 1, ok is not None, state.last_fetched_at, ok or 0.0,
        *counts, *floats_, len(state.window), len(fps) // 4,
    )  # fmt: skip
    body = b"".join(
        struct.pack("<IIBf", iv.new_internal, iv.new_external, iv.content_changed, iv.days)
        for iv in state.window
    )
    return header + body + fps


def test_a_state_keeps_under_three_bytes_a_link_and_reads_versions_1_and_2() -> None:
    """A state keeps its outlinks' fingerprints' top 24 bits (Rice-coded gaps: under 3 bytes
    a link), two intervals of a week in 7 bytes (the first's seconds, a Rice-coded difference
    of 0, a byte each of counts) and no second copy of the last fetch's time; a state stored
    as version 1 (4 bytes a link, 13 an interval) reads back with the
    same bits cleared, so that the next fetch's new links are counted against it as against
    a state written now, and one stored as version 2 (3 bytes a link) reads back the same."""
    links = [internal(i) for i in range(60)]
    state, _ = run([fetch(0, links), fetch(7 * DAY, links), fetch(14 * DAY, links)])
    assert len(state.fingerprints) == 60 and not (state.fingerprints & 0xFF).any()
    blob = to_bytes(state)
    assert blob[0] == 3 and from_bytes(blob) == state and states_equal(from_bytes(blob), state)
    no_links = state._replace(outlink_fps=b"")
    assert len(blob) - len(to_bytes(no_links)) <= 2.75 * 60
    assert len(to_bytes(no_links)) - len(to_bytes(no_links._replace(window=()))) == 7
    assert _bits(from_bytes(_to_bytes_v2(state))) == _bits(state)

    full = prepare(fetch(0, links)).outlink_fps  # the fetch's own 32-bit fingerprints
    read = from_bytes(_version_1(state, full))
    assert read.outlink_fps == kept_fingerprints(full) == state.outlink_fps
    assert read.window == state.window and read.last_ok_at == state.last_ok_at
    assert states_equal(read, state)
    _, out = update(read, prepare(fetch(21 * DAY, [*links, internal(99)])))
    assert (out.interval.new_internal, out.interval.new_external) == (1, 0)


def test_intervals_too_large_for_8_bytes_and_an_earlier_ok_fetch_are_kept_exactly() -> None:
    links = [internal(i) for i in range(3)]
    state, _ = run([fetch(0, links), fetch(7 * DAY, links), fetch(8 * DAY, links, status=500)])
    assert state.last_ok_at == 7 * DAY + T0 and state.last_fetched_at == 8 * DAY + T0
    big = Interval(70_000, 40_000, True, 2.5)
    for window in ((big,), (Interval(0, 0x7FFF, True, 1.0), Interval(0xFFFF, 0, False, 0.5))):
        wide = state._replace(window=window)
        back = from_bytes(to_bytes(wide))
        assert back.window == window and back.last_ok_at == wide.last_ok_at
        assert _bits(from_bytes(_to_bytes_v2(wide))) == _bits(back)  # 13-byte intervals
    with pytest.raises(ValueError, match="truncated"):
        from_bytes(to_bytes(state)[:30])


def test_links_whose_kept_bits_match_count_once() -> None:
    """Two distinct new links whose fingerprints share their top 24 bits are one new link
    (6 in a million for a page of 100 links); the count never exceeds the distinct kept ones."""
    base = prepare(fetch(0, [internal(1)]))
    state, _ = update(None, base)
    twins = np.array([0x12345601, 0x12345602, 0x22222200], dtype="<u4")
    event = prepare(fetch(DAY, [internal(2), internal(3), external(4)]))
    event = dataclasses.replace(event, outlink_fps=twins.tobytes(), outlink_internal=b"\1\1\0")
    _, out = update(state, event)
    assert (out.interval.new_internal, out.interval.new_external) == (1, 1)


# --- properties ------------------------------------------------------------------------------

link_sets = st.lists(st.integers(0, 40), max_size=25).map(
    lambda xs: [internal(x) if x % 5 else external(x) for x in xs]
)
fetches = st.lists(
    st.tuples(st.integers(0, 60), link_sets, st.sampled_from([200, 200, 200, 404, 500])),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(fetches, st.integers(0, 8))
def test_properties_window_bounds_idempotence_stale(raw, history: int) -> None:
    state = None
    last_time = None
    for day, links, status in raw:
        event = fetch(day * DAY, links, status=status)
        new_state, out = update(state, event, history=history)
        # applying the same event again changes nothing
        again, out2 = update(new_state, event, history=history)
        assert (again is new_state and out2.kind == "duplicate") or out.kind != "applied"
        if last_time is not None and day * DAY < last_time:
            assert out.kind == "stale" and new_state is state
        if out.kind == "applied":
            last_time = day * DAY
        assert len(new_state.window) <= history
        assert new_state.intervals_total >= len(new_state.window)
        assert all(iv.days > 0 for iv in new_state.window)
        assert states_equal(from_bytes(to_bytes(new_state)), new_state)
        state = new_state


@settings(max_examples=100, deadline=None)
@given(st.lists(link_sets, min_size=2, max_size=6))
def test_property_new_links_match_set_difference(sets) -> None:
    state = None
    for d, links in enumerate(sets):
        state, out = update(state, fetch(d * DAY, links))
        if d:
            prev = {u for u in sets[d - 1]}
            new = set(links) - prev
            assert out.interval.new_internal == sum(1 for u in new if "site.org" in u)
            assert out.interval.new_external == sum(1 for u in new if "other" in u)


# --- the compiled update against the rules in plain Python -----------------------------------


def reference_update(state: PageState | None, fetch: Fetch, history: int):
    """`update`'s rules as plain Python: the statement the compiled kernel must equal."""
    ts = fetch.timestamp
    if state is not None:
        if ts == state.last_fetched_at:
            return state, Emitted("duplicate")
        if ts < state.last_fetched_at:
            return state, Emitted("stale")
    first = state is None
    if state is None:
        state = PageState(last_fetched_at=ts)
    # None keeps the old network value.
    sn = (
        state.sn[0] if fetch.inlinks_internal is None else fetch.inlinks_internal,
        state.sn[1] if fetch.inlinks_external is None else fetch.inlinks_external,
        state.sn[2] if fetch.pagerank is None else fetch.pagerank,
        state.sn[3] if fetch.trustrank is None else fetch.trustrank,
    )
    if not fetch.ok:
        failed = state._replace(
            last_fetched_at=ts,
            last_status=fetch.status,
            fetches=state.fetches + 1,
            errors=state.errors + 1,
            sn=sn,
        )
        return failed, Emitted("applied", None, first)
    nan = float("nan")
    sp = (
        nan if fetch.content_size is None else fetch.content_size,
        nan if fetch.text_size is None else fetch.text_size,
        nan if fetch.text_quality is None else fetch.text_quality,
        float(fetch.internal_outlinks),
        float(fetch.external_outlinks),
    )
    interval = None
    window = state.window
    had_ok = state.last_ok_at is not None
    if had_ok:
        fps = np.frombuffer(kept_fingerprints(fetch.outlink_fps), "<u4").tolist()
        new = set(fps) - set(state.fingerprints.tolist())
        new_internal = sum(fetch.outlink_internal[fps.index(fp)] for fp in new)
        content_fp = fetch.content_digest_fp
        interval = Interval(
            new_internal,
            len(new) - new_internal,
            bool(content_fp and state.content_fp and content_fp != state.content_fp),
            float(np.float32((ts - state.last_ok_at) / DAY)),
        )
        window = (*window, interval)[-history:] if history > 0 else ()
    new_state = PageState(
        last_fetched_at=ts,
        last_ok_at=ts,
        last_status=fetch.status,
        fetches=state.fetches + 1,
        errors=state.errors,
        intervals_total=state.intervals_total + (interval is not None),
        content_fp=fetch.content_digest_fp or state.content_fp,
        embedding_fp=state.embedding_fp,
        outlink_fps=kept_fingerprints(fetch.outlink_fps),
        window=window,
        sp=sp,
        sp_previous=state.sp if had_ok else state.sp_previous,
        sn=sn,
    )
    return new_state, Emitted("applied", interval, first)


optional = st.none() | st.integers(0, 10**6)
rich_fetches = st.lists(
    st.tuples(
        st.integers(-2, 6),  # days since the event before: mostly later, some repeats and stale
        link_sets,
        st.sampled_from([200, 200, 204, 301, 404, 500]),
        st.none() | st.sampled_from(["a", "b", "c"]),  # content digest
        optional,  # inlinks_internal
        st.none() | st.floats(0, 1),  # pagerank
        optional,  # content_size
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(rich_fetches, st.integers(0, 9), st.floats(0, DAY - 1))
def test_compiled_update_equals_the_plain_rules(raw, history: int, offset: float) -> None:
    compiled = reference = None
    day = 0
    for step, links, status, digest, inlinks, pagerank, size in raw:
        day += step
        extra = {
            k: v
            for k, v in {
                "content_digest": digest,
                "inlinks_internal": inlinks,
                "pagerank": pagerank,
                "content_size": size,
            }.items()
            if v is not None
        }
        event = prepare(fetch(day * DAY + offset, links, status=status, **extra))
        compiled, out = update(compiled, event, history=history)
        reference, expected = reference_update(reference, event, history)
        assert out == expected
        assert states_equal(compiled, reference)
        assert type(compiled) is PageState and all(type(iv) is Interval for iv in compiled.window)


def test_update_refuses_what_is_not_a_page_state() -> None:
    event = fetch(0, [internal(1)])
    with pytest.raises(TypeError, match="PageState"):
        update(tuple(update(None, event)[0]), fetch(DAY, []))  # a plain tuple


# --- format version 3 ------------------------------------------------------------------------


def _bits(state: PageState) -> tuple:
    """Everything a state holds, floats as their float64 bits (NaN payloads and -0.0 told
    apart) and every value's type."""

    def f(x: object) -> tuple:
        return (type(x), struct.pack("<d", x) if isinstance(x, float) else x)

    return (
        f(state.last_fetched_at),
        None if state.last_ok_at is None else f(state.last_ok_at),
        tuple(map(f, state[2:8])),
        state.outlink_fps,
        tuple(tuple(map(f, iv)) for iv in state.window),
        tuple(map(f, (*state.sp, *state.sp_previous, *state.sn))),
    )


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _from_f32_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


#: float32 values of every kind version 3 tells apart: NaNs (the canonical one, negative,
#: with payloads), zeros of both signs, infinities, whole numbers small and above 2**24,
#: four-decimal values, negative, tiny (subnormal) and arbitrary ones
EDGE_FLOATS = [
    NAN,
    -NAN,
    _from_f32_bits(0x7FC00001),
    _from_f32_bits(0xFFC12345),
    _from_f32_bits(0x7FA00000),  # a signalling NaN's bits (read back quieted, as version 2)
    0.0,
    -0.0,
    math.inf,
    -math.inf,
    1.0,
    200.0,
    2.0**21 - 1,
    2.0**21,
    2.0**24 + 2,
    3.0e9,
    _f32(1e38),
    _f32(0.5862),
    _f32(0.0001),
    _f32(209.7151),
    _f32(0.1),
    -1.0,
    -7.25,
    _f32(-0.5862),
    _from_f32_bits(1),  # the smallest subnormal
    _f32(0.00021042219),
    _f32(1 / 3),
]


def _random_state(rng: np.random.Generator) -> PageState:
    def value() -> float:
        if rng.random() < 0.5:
            return EDGE_FLOATS[rng.integers(len(EDGE_FLOATS))]
        if rng.random() < 0.5:
            return float(rng.integers(0, 5000))
        return _f32(rng.normal() * 10.0 ** float(rng.integers(-6, 9)))

    n_fps = int(rng.choice([0, 1, 2, 40, 256, 300, 1000]))
    fps = np.sort(rng.integers(0, 2**24, n_fps, dtype=np.uint32)) << np.uint32(8)
    if rng.random() < 0.1:
        fps = rng.permutation(fps)  # not sorted: 3 bytes a link, as they are
    if rng.random() < 0.1 and n_fps > 2:
        fps[1] = fps[0]  # twins: a gap of 0
    window = tuple(
        Interval(
            int(rng.choice([0, 3, 200, 2**16, 2**32 - 1])),
            int(rng.choice([0, 1, 0x7FFF, 0x8000, 2**32 - 1])),
            bool(rng.integers(2)),
            _f32(float(rng.choice([rng.integers(1, 10**7) / DAY, value(), rng.random() * 30]))),
        )
        for _ in range(int(rng.integers(0, 9)))
    )
    if rng.random() < 0.4:  # a crawler's: small counts, whole seconds about a week apart
        window = tuple(
            Interval(
                int(rng.integers(0, 20)),
                int(rng.integers(0, 9)),
                bool(rng.integers(2)),
                _f32(int(rng.integers(5 * DAY, 9 * DAY)) / DAY),
            )
            for _ in range(int(rng.integers(0, 9)))
        )
    sp, previous = tuple(value() for _ in range(5)), tuple(value() for _ in range(5))
    if rng.random() < 0.4:  # mostly what the fetch before saw
        previous = tuple(a if rng.random() < 0.7 else b for a, b in zip(sp, previous, strict=True))
    t = float(rng.choice([T0 + rng.integers(0, 10**8), T0 + rng.random(), -5.0, 2.0**33, 0.0]))
    ok = rng.choice([None, t, t - float(rng.integers(1, 10**6)), t - 0.5])
    return PageState(
        last_fetched_at=t,
        last_ok_at=None if ok is None else float(ok),
        last_status=int(rng.choice([0, 200, 404, 65535])),
        fetches=int(rng.choice([0, 1, 3, 2**32 - 1])),
        errors=int(rng.choice([0, 1, 300])),
        intervals_total=int(rng.choice([0, 2, 127, 128])),
        content_fp=int(rng.integers(0, 2**32)),
        embedding_fp=int(rng.choice([0, rng.integers(0, 2**32)])),
        outlink_fps=fps.astype("<u4").tobytes(),
        window=window,
        sp=sp,
        sp_previous=previous,
        sn=tuple(value() for _ in range(4)),
    )


def test_version_3_reads_back_bit_for_bit_what_version_2_did() -> None:
    """Random states over every float kind (NaN payloads, -0.0, infinities, whole numbers
    above 2**24, negative ones), intervals too large for version 2's 8 bytes, up to 1,000
    outlinks (sorted, with twins, or not sorted), none, an empty window, times not whole
    seconds or out of uint32's range: version 3 reads back exactly what version 2 read back,
    writes the same bytes again, and every cut of it raises ValueError."""
    rng = np.random.default_rng(20)
    for trial in range(600):
        state = _random_state(rng)
        blob = to_bytes(state)
        assert blob[0] == 3
        back = from_bytes(blob)
        assert _bits(back) == _bits(from_bytes(_to_bytes_v2(state))), trial
        assert to_bytes(back) == blob
        if trial % 10 == 0:
            for cut in range(len(blob)):
                with pytest.raises(ValueError):
                    from_bytes(blob[:cut])
        with pytest.raises(ValueError):
            from_bytes(blob + b"\0")


def test_version_3_keeps_the_float_kinds_exactly() -> None:
    """Each edge float in every static field reads back with its own bits (a canonical NaN as
    the module's NaN object, so that a state with missing values compares equal)."""
    base = PageState(last_fetched_at=float(T0))
    for x in EDGE_FLOATS:
        for field in ("sp", "sp_previous", "sn"):
            state = base._replace(**{field: (x,) * len(getattr(base, field))})
            back = from_bytes(to_bytes(state))
            assert _bits(back) == _bits(from_bytes(_to_bytes_v2(state)))
            got = struct.pack("<f", getattr(back, field)[0])
            assert got == struct.pack("<f", x) or (x is NAN and math.isnan(x))
    assert from_bytes(to_bytes(base)) == base and from_bytes(to_bytes(base)).sp[0] is NAN


def test_version_3_is_smaller_than_version_2_on_a_typical_page() -> None:
    """A page of 40 outlinks after three fetches (whole-number sizes, a four-decimal text
    quality, intervals of whole seconds): at least 60 bytes fewer than version 2, and the
    same state back, equal as a tuple."""
    links = [internal(i) for i in range(34)] + [external(i) for i in range(6)]
    events = [
        fetch(d * 7 * DAY + d * 3917, [*links[d:], internal(100 + d)], content_size=12663 + d,
              text_size=1107, text_quality=0.5862, inlinks_internal=9, inlinks_external=0,
              pagerank=0.00021042219, trustrank=0.00011987)
        for d in range(3)
    ]  # fmt: skip
    state, _ = run(events)
    v3, v2 = to_bytes(state), _to_bytes_v2(state)
    assert len(v3) <= len(v2) - 60, (len(v3), len(v2))
    assert from_bytes(v3) == state


def _round_trip(state: PageState) -> bytes:
    """``state``'s bytes, after checking they read back bit for bit, are written again the
    same, and every cut of them (and one byte more) raises ValueError."""
    blob = to_bytes(state)
    back = from_bytes(blob)
    assert _bits(back) == _bits(state)
    assert to_bytes(back) == blob
    for cut in range(len(blob)):
        with pytest.raises(ValueError):
            from_bytes(blob[:cut])
    with pytest.raises(ValueError):
        from_bytes(blob + b"\0")
    return blob


_PLAIN, _PACKED_DAYS = 32, 64  # version 3's flags: common counts, intervals' seconds packed
WEEK = 7 * DAY


def _days(seconds: float) -> float:
    return _f32(seconds / DAY)


@pytest.mark.parametrize(
    ("seconds", "packed"),
    [
        ([WEEK, WEEK], True),  # equal lengths: differences of 0
        ([WEEK + 51_917, WEEK - 20_311, WEEK + 88_406, WEEK - 140_002, WEEK + 3], True),
        ([WEEK, WEEK - 1, WEEK - DAY, WEEK + DAY, WEEK + 5, 6 * DAY, WEEK, 8 * DAY], True),
        ([WEEK], False),  # one interval: its seconds as a varint
        ([1, 2, 1], False),  # varints of 1 byte: packing them is no shorter
        ([WEEK] * 64, True),
        ([WEEK] * 65, False),  # more than packing takes
        ([1, 2**32], False),  # a difference past 2**31 seconds
        ([2**32, 1, WEEK], False),
        ([WEEK, 50_647.68, WEEK], False),  # not whole seconds: float32 days
        ([WEEK, 0.5], False),
        ([10**7 * DAY, WEEK], False),  # 10 million days: float32 days
    ],
)
def test_version_3_interval_days_packed_or_not_read_back_exactly(seconds, packed) -> None:
    """An interval's seconds are packed (the first as a varint, then Rice-coded zigzag
    differences from the one before, negative ones too) where there are 2 to 64 intervals of
    whole seconds, each within 2**31 of the one before, and that is shorter; otherwise each is
    a varint of its seconds, or float32 days where they are not whole seconds."""
    window = tuple(Interval(i % 3, 0, i % 2 == 0, _days(s)) for i, s in enumerate(seconds))
    state = PageState(last_fetched_at=float(T0), last_ok_at=float(T0), window=window)
    blob = _round_trip(state)
    assert bool(blob[1] & _PACKED_DAYS) == packed
    if packed:  # shorter than a varint each
        plain = sum(len(pack_varints((round(iv.days * DAY),))) for iv in window)
        days_bytes = len(blob) - len(to_bytes(state._replace(window=()))) - len(window)
        assert days_bytes < plain, (days_bytes, plain)


def test_version_3_weekly_intervals_take_under_4_bytes_each() -> None:
    """Eight intervals of a week, give or take two days, with a few new links each: under 4
    bytes an interval (5 before the packing and the one-byte counts)."""
    rng = np.random.default_rng(8)
    window = tuple(
        Interval(int(rng.integers(0, 10)), int(rng.integers(0, 3)), bool(rng.integers(2)),
                 _days(WEEK + int(rng.integers(-2 * DAY, 2 * DAY))))
        for _ in range(8)
    )  # fmt: skip
    state = PageState(last_fetched_at=float(T0), window=window)
    blob = _round_trip(state)
    assert blob[1] & _PACKED_DAYS
    assert len(blob) - len(to_bytes(state._replace(window=()))) < 4 * 8


@pytest.mark.parametrize(
    ("counts", "extra"),
    [
        ((0, 0), 0),
        ((15, 6), 0),  # the largest counts of the one-byte head
        ((16, 0), 2),  # a byte and two varints
        ((0, 7), 2),
        ((200, 3), 3),
        ((2**32 - 1, 0x8000), 8),
        ((2**63, 2**64 - 1), 20),
    ],
)
def test_version_3_interval_counts_in_a_byte_or_wide(counts, extra) -> None:
    """An interval's new internal (0..15) and new external (0..6) counts and its content
    change take one byte; larger counts a byte and two varints, read back exactly."""
    for changed in (False, True):
        for days in (_days(WEEK), _f32(0.5862)):  # packed days, or float32 days
            for n in (1, 3):
                window = (Interval(*counts, changed, days),) * n
                state = PageState(last_fetched_at=float(T0), window=window)
                small = state._replace(window=(Interval(0, 0, changed, days),) * n)
                assert len(_round_trip(state)) - len(to_bytes(small)) == extra * n


@pytest.mark.parametrize(
    ("status", "fetches", "errors", "intervals", "plain"),
    [
        (200, 10, 0, 9, True),
        (200, 1, 0, 0, True),
        (200, 10, 1, 8, False),  # an error
        (200, 10, 0, 3, False),  # intervals not one fewer than the fetches
        (200, 0, 0, 0, False),
        (200, 2**64 - 1, 0, 2**64 - 2, True),
        (404, 10, 1, 8, False),
        (0, 3, 3, 0, False),
        (201, 2, 0, 1, False),
        (65535, 2**32 - 1, 300, 128, False),
    ],
)
def test_version_3_common_counts_take_one_varint(status, fetches, errors, intervals, plain):
    """Status 200, no errors and an interval for every fetch after the first: the fetch
    count alone; otherwise the status XOR 200 (a byte for 200), the fetches, errors and
    intervals, read back exactly."""
    state = PageState(
        last_fetched_at=float(T0),
        last_status=status,
        fetches=fetches,
        errors=errors,
        intervals_total=intervals,
    )
    blob = _round_trip(state)
    assert bool(blob[1] & _PLAIN) == plain
    counts = pack_varints((fetches,) if plain else (status ^ 200, fetches, errors, intervals))
    assert blob[6 : 6 + len(counts)] == counts  # after the version, flags and uint32 time


def test_version_3_repeated_previous_values_take_nothing() -> None:
    """A previous static-page value with the current one's float32 bits is stored as its kind
    alone (-0.0 and 0.0, or NaNs with other payloads, are not the same), read back exactly."""
    sp = (12973.0, 1183.0, _f32(0.5933), _from_f32_bits(0x7FC00001), -0.0)
    none = PageState(last_fetched_at=float(T0), sp=sp)  # previous values: canonical NaNs
    same = none._replace(sp_previous=sp)
    assert len(_round_trip(same)) == len(_round_trip(none))
    for i, other in enumerate((12940.0, 1175.0, _f32(0.5702), _from_f32_bits(0x7FC00002), 0.0)):
        state = same._replace(sp_previous=(*sp[:i], other, *sp[i + 1 :]))
        back = from_bytes(_round_trip(state))
        assert struct.pack("<f", back.sp_previous[i]) == struct.pack("<f", other)
        assert len(to_bytes(state)) > len(to_bytes(same))
    back = from_bytes(to_bytes(same))
    assert back.sp_previous == back.sp[:3] + back.sp_previous[3:]


def test_version_3_damaged_heads_raise_value_error() -> None:
    """Unknown flags, a plain fetch count of 0, float kinds past the base-5 number's range,
    an interval head byte no encoder writes: ValueError, not a wrong state."""
    state = PageState(
        last_fetched_at=float(T0),
        last_ok_at=float(T0),
        last_status=200,
        fetches=2,
        intervals_total=1,
        window=(Interval(1, 0, True, _f32(0.5862)),),  # the head is the last byte but one
    )
    blob = _round_trip(state)
    assert blob[1] & _PLAIN and blob[6] == 2 and blob[-2] == 0x81 and blob[-1] == 0
    damaged = [
        blob[:1] + bytes([blob[1] | 128]) + blob[2:],
        blob[:1] + bytes([blob[1] | 4]) + blob[2:],
        blob[:6] + b"\0" + blob[7:],
        blob[:15] + (struct.unpack_from("<I", blob, 15)[0] | 1 << 30).to_bytes(4, "little")
        + blob[19:],
        blob[:-2] + bytes([0x80 | 112]) + blob[-1:],
        blob[:-2] + bytes([126]) + blob[-1:],
    ]  # fmt: skip
    for bad in damaged:
        with pytest.raises(ValueError, match="damaged"):
            from_bytes(bad)


def test_version_3_typical_ten_crawl_page_is_smaller_than_before() -> None:
    """A page of 40 outlinks after ten weekly fetches (times jittered by up to two days, a few
    new internal links each, sizes changing every other fetch): at least 20 bytes fewer than
    the 214 the layout before packing interval seconds, one-byte interval heads, one-varint
    common counts and repeated previous values wrote, and the same state back."""
    links = [internal(i) for i in range(34)] + [external(i) for i in range(6)]
    jitter = [0, 51_917, -20_311, 88_406, 3_125, -61_777, 140_002, 17_740, -9_999, 75_431]
    events = [
        fetch(d * WEEK + jitter[d], [*links[d % 3 :], *(internal(100 + j) for j in range(d))],
              content_size=12663 + 40 * (d // 2), text_size=1107,
              text_quality=0.5862 + 0.001 * (d // 2), inlinks_internal=9, inlinks_external=0,
              pagerank=0.00021042219, trustrank=0.00011987)
        for d in range(10)
    ]  # fmt: skip
    state, _ = run(events)
    assert len(state.window) == 8 and state.fetches == 10
    blob = to_bytes(state)
    assert blob[1] & _PLAIN and blob[1] & _PACKED_DAYS
    assert len(blob) <= 214 - 20, len(blob)
    assert from_bytes(blob) == state and _bits(from_bytes(blob)) == _bits(state)


def test_version_3_refuses_intervals_and_types_it_cannot_hold() -> None:
    """An interval that is not a 4-tuple is refused (TypeError), as are record types that
    are not tuples."""
    state = PageState(last_fetched_at=float(T0))
    for window in (([1, 0, True, 1.0],), ((1, 0, True),), ((1, 0, True, 1.0, 2),)):
        with pytest.raises(TypeError, match="4-tuples"):
            to_bytes(state._replace(window=window))
    assert to_bytes(state._replace(window=((1, 0, True, 1.0),)))  # a plain 4-tuple will do

    class NotATuple:
        _fields = PageState._fields

    with pytest.raises(TypeError, match="tuple types"):
        StateCodec(NotATuple, Interval, NAN)
