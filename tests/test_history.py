from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from online.events import parse_event
from online.history import (
    PageState,
    from_bytes,
    states_equal,
    to_bytes,
    update,
)

PAGE = "https://www.site.org/news/"
DAY = 86_400


def fetch(t: float, links: list[str], status: int = 200, **extra: object):
    return parse_event({"url": PAGE, "fetched_at": t, "outlinks": links, "status": status, **extra})


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
