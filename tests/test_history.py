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
    Emitted,
    Interval,
    PageState,
    from_bytes,
    kept_fingerprints,
    states_equal,
    to_bytes,
    update,
)

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


def test_a_state_keeps_three_bytes_a_link_and_reads_version_1() -> None:
    """A state keeps its outlinks' fingerprints' top 24 bits (3 bytes a link stored), an
    interval in 8 bytes and no second copy of the last fetch's time; a state stored as version
    1 (4 bytes a link, 13 an interval) reads back with the same bits cleared, so that the next
    fetch's new links are counted against it as against a state written now."""
    links = [internal(i) for i in range(60)]
    state, _ = run([fetch(0, links), fetch(7 * DAY, links), fetch(14 * DAY, links)])
    assert len(state.fingerprints) == 60 and not (state.fingerprints & 0xFF).any()
    blob = to_bytes(state)
    assert states_equal(from_bytes(blob), state)
    no_links = state._replace(outlink_fps=b"")
    assert len(blob) - len(to_bytes(no_links)) == 3 * 60
    assert len(to_bytes(no_links)) - len(to_bytes(no_links._replace(window=()))) == 8 * 2

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
    assert len(to_bytes(state._replace(window=(big,)))) - len(to_bytes(state)) == 13 - 8 * len(
        state.window
    )
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
