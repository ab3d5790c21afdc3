"""`parse_fetch`'s fast path against the validating path it must never contradict.

For every input, ``parse_fetch(raw)`` must equal ``prepare(parse_event(raw))``, or both must
fail the same way (same field and reason); the fast path may only decline. The inputs are
built to sit on the edges the fast path checks: URLs one character away from canonical,
time stamps pydantic and ``datetime.fromisoformat`` read differently, numbers of the wrong
kind, vectors at the limits of float32.
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch.generate import GeneratorConfig, generate_events
from online import links
from online.events import EventError, parse_event
from online.fetch import Fetch, _fast_fetch, _new_fetch, parse_fetch, prepare
from online.links import InvalidURL, canonical_summary, link_info

#: Limits of the compiled path when it is called directly: no URL or time bound, so what is
#: tested is its parsing (the bounds are tested through `parse_fetch`).
FAST_LIMITS = (1 << 30, -math.inf, math.inf)
DIM = 4  # small embeddings keep the examples cheap; the default dimension is tested below

SCHEMES = ["http", "https", "HTTP", "Https", "ftp", "", "mailto"]
HOSTS = [
    "example.com",
    "www.example.com",
    "WWW.Example.com",
    "www.www.example.com",
    "sub.example.com",
    "example.com.",
    ".example.com",
    "example..com",
    "www.",
    "www",
    "a-b_c.org",
    "-x-.org",
    "1.2.3.4",
    "[::1]",
    "[fe80::1%25eth0]",
    "[::1",
    "bücher.de",
    "xn--bcher-kva.de",
    "exa mple.com",
    "",
]
PORTS = ["", ":443", ":80", ":8080", ":", ":99999", ":abc", ":0443"]
USERINFO = ["", "user@", "user:pw@", "@", ":@"]
PATHS = ["", "/", "/a", "//x", "/a/b/", "/%20x", "/a b", "/ä", "/a\tb", "/a\nb", "/A/B", "/x."]
QUERIES = ["", "?", "?q=1", "?a?", "?q=1&r=%2F", "??"]
FRAGMENTS = ["", "#", "#top", "#a?b"]
AROUND = ["", " ", "\t", "\n", "\x0b", "\u00a0", "\u2028", "\x00"]


@st.composite
def urls(draw: st.DrawFn) -> str:
    """Absolute URLs mostly, built part by part so that many are just off canonical."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=30))
    scheme = draw(st.sampled_from(SCHEMES))
    text = (
        (f"{scheme}://" if scheme != "mailto" else "mailto:")
        + draw(st.sampled_from(USERINFO))
        + draw(st.sampled_from(HOSTS))
        + draw(st.sampled_from(PORTS))
        + draw(st.sampled_from(PATHS))
        + draw(st.sampled_from(QUERIES))
        + draw(st.sampled_from(FRAGMENTS))
    )
    return draw(st.sampled_from(AROUND)) + text + draw(st.sampled_from(AROUND))


CANONICAL = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}{path}",
    st.sampled_from(["http", "https"]),
    st.sampled_from(["example.com", "www.example.com", "sub.example.com", "other.org"]),
    st.sampled_from(["/", "/a", "/a/b/", "/x?q=1", "//y"]),
)


@st.composite
def iso_times(draw: st.DrawFn, wild: bool) -> str:
    """ISO-8601 text: valid parts unless ``wild``, then out of range parts and other layouts."""
    if not wild:
        year, month, day = (
            draw(st.integers(1900, 2999)),
            draw(st.integers(1, 12)),
            draw(st.integers(1, 28)),
        )
        hour, minute, second = (
            draw(st.integers(0, 23)),
            draw(st.integers(0, 59)),
            draw(st.integers(0, 59)),
        )
        fraction = draw(st.sampled_from(["", ".5", ".123", ".123456"]))
        zone = draw(st.sampled_from(["", "Z", "+02:00", "-05:30", "+23:59", "-00:00"]))
        return (
            f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}{zone}"
        )
    year = draw(st.sampled_from([1, 1899, 1900, 1970, 2026, 2999, 3000, 9999]))
    month, day = draw(st.integers(0, 13)), draw(st.integers(0, 32))
    hour, minute, second = (
        draw(st.integers(0, 24)),
        draw(st.integers(0, 61)),
        draw(st.integers(0, 61)),
    )
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if draw(st.integers(0, 5)):
        text += draw(st.sampled_from(["T", "t", " "])) + f"{hour:02d}:{minute:02d}"
        if draw(st.integers(0, 4)):
            text += f":{second:02d}"
            text += draw(st.sampled_from(["", ".5", ".123456", ".1234567", ".", ",5"]))
        text += draw(
            st.sampled_from(
                ["", "Z", "z", "+02:00", "-05:30", "+23:59", "+24:00", "+02:60", "+0200", "+02"]
            )
        )
    return text


GOOD_TIMES = st.one_of(
    iso_times(wild=False),
    st.integers(0, 19_999_999_999),
    st.integers(0, 2_000_000_000).map(float),
    st.floats(0, 2e9),  # fractions of a second: valid, left to pydantic
    st.integers(-(10**9), -1),  # before 1970: valid, left to pydantic
)
WILD_TIMES = st.one_of(
    iso_times(wild=True),
    st.integers(-30_000_000_000, 30_000_000_000),
    st.floats(-3e10, 3e10) | st.sampled_from([2e10, 2e10 - 1, 2e10 + 1, -0.0, 1e300]),
    st.sampled_from([True, False, None, 10**20, "1767607200", "", "yesterday"]),
    st.text(max_size=25),
)
VALID_LINKS = st.sampled_from(
    [
        "HTTPS://Example.com/a#x",
        "https://example.com:443/x",
        "http://www.example.com",
        " https://example.com/ ",
        "https://example.com/a?",
        "https://user@example.com/",
        "https://EXAMPLE.com./b",
        "https://[::1]:8080/",
        "https://bücher.de/",
    ]
)
WRONG_KINDS = st.sampled_from([None, True, False, "7", [1], {"a": 1}])
GOOD_COUNTS = st.integers(0, 10**9)
WILD_COUNTS = st.one_of(
    st.integers(-5, 5),
    st.integers(2**52, 2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([3.0, 3.5, 1e300]),
    WRONG_KINDS,
)
GOOD_REALS = st.floats(-1e6, 1e6) | st.integers(-(10**6), 10**6)
WILD_REALS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(3.3e38, 3.5e38),
    st.integers(-(2**60), 2**60),
    st.integers(2**53, 2**70),
    WRONG_KINDS,
)
ELEMENT = st.one_of(
    st.floats(-10, 10),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(3.4e38, 3.41e38),
    st.sampled_from([0.0, -0.0, 1, True, 1e-320, 1e38, 1e39, "1.5"]),
)
GOOD_EMBEDDINGS = st.lists(st.floats(-10, 10), min_size=DIM, max_size=DIM).map(
    lambda vector: [*vector[:-1], 1.0]
)
WILD_EMBEDDINGS = st.one_of(
    st.lists(ELEMENT, min_size=DIM, max_size=DIM),
    st.lists(ELEMENT, min_size=DIM - 1, max_size=DIM + 1),
    st.just([0.0] * DIM),
    st.just([1e-46] * DIM),  # not zero, but zero once in float32
    st.just([1e-200] * DIM),  # underflows when squared
    st.just([[1.0]] * DIM),
    WRONG_KINDS,
)
MISSING = object()


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event (canonical or merely valid values), with no, one or many fields made wild:
    out of range, of the wrong kind, just off canonical, or missing."""
    pool = draw(st.lists(CANONICAL | VALID_LINKS, min_size=1, max_size=6))
    wild_pool = draw(st.lists(urls() | CANONICAL, min_size=1, max_size=6))
    odd_entry = st.sampled_from(wild_pool) | st.sampled_from([None, 17, 1.5, ["x"], {"u": 1}])
    fields: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
        "url": (st.sampled_from(pool) | CANONICAL, urls() | WRONG_KINDS),
        "fetched_at": (GOOD_TIMES, WILD_TIMES),
        "outlinks": (
            st.lists(st.sampled_from(pool), max_size=8),
            st.lists(st.sampled_from(pool) | odd_entry, max_size=8) | WRONG_KINDS,
        ),
        "status": (
            st.integers(100, 599),
            st.integers(50, 700) | st.sampled_from([200.0, True, "200", None]),
        ),
        "crawl": (
            st.integers(0, 100),
            st.integers(-(2**60), 2**60) | st.sampled_from([2**64, 1.0, True, "1", None]),
        ),
        "content_size": (GOOD_COUNTS, WILD_COUNTS),
        "text_size": (GOOD_COUNTS, WILD_COUNTS),
        "inlinks_internal": (GOOD_COUNTS, WILD_COUNTS),
        "inlinks_external": (GOOD_COUNTS, WILD_COUNTS),
        "text_quality": (GOOD_REALS, WILD_REALS),
        "pagerank": (GOOD_REALS, WILD_REALS),
        "trustrank": (GOOD_REALS, WILD_REALS),
        "content_digest": (st.text(max_size=8), WRONG_KINDS),
        "text": (st.text(max_size=8), WRONG_KINDS),
        "embedding": (GOOD_EMBEDDINGS, WILD_EMBEDDINGS),
        "mystery": (st.integers(), st.text()),
    }
    required = {"url", "fetched_at", "outlinks"}
    names = list(fields)
    mode = draw(st.sampled_from(["clean", "one", "wild"]))
    if mode == "clean":
        wild: set[str] = set()
    elif mode == "one":
        wild = {draw(st.sampled_from(names))}
    else:
        wild = {name for name in names if draw(st.booleans())}
    event: dict[str, Any] = {}
    for name, (good, odd) in fields.items():
        if name in wild:
            value = draw(odd | st.just(MISSING))
        elif name in required or draw(st.booleans()):
            value = draw(good)
        else:
            value = MISSING
        if value is not MISSING:
            event[name] = value
    return event


def outcome(parse: Any, raw: Any, **limits: int) -> tuple:
    """What a parse gives: the record, or the kind of failure (field and reason for EventError)."""
    try:
        return ("ok", parse(raw, **limits))
    except EventError as err:
        return ("rejected", err.field, err.reason)
    except Exception as exc:  # the same crash on both paths is still agreement
        return ("raised", type(exc).__name__)


def validating(raw: Any, **limits: int) -> Fetch:
    return prepare(parse_event(raw, **limits))


def encodings(event: dict[str, Any], data: st.DataObject) -> list[Any]:
    """The event as JSON (NaN and big ints allowed), as a str, and as the mapping itself."""
    text = json.dumps(event, ensure_ascii=data.draw(st.booleans()))
    return [text.encode("utf-8", "surrogatepass"), text, event]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events(), data=st.data())
def test_fast_path_agrees_with_validation(event: dict[str, Any], data: st.DataObject) -> None:
    limits = {"embedding_dim": DIM, "max_outlinks": data.draw(st.sampled_from([3, 100]))}
    for raw in encodings(event, data):
        assert outcome(parse_fetch, raw, **limits) == outcome(validating, raw, **limits)


@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(st.binary(max_size=40), st.text(max_size=40))
    | st.sampled_from([b"[1, 2]", b"17", b'"x"', b"null", b"{", b"{}", b'{"url": NaN}', b"\xff{}"])
)
def test_non_objects_and_broken_json_agree(raw: bytes | str) -> None:
    assert outcome(parse_fetch, raw) == outcome(validating, raw)


@pytest.mark.parametrize("content", ["embedding", "text", "both", "none"])
def test_generated_events_take_the_fast_path(content: str) -> None:
    """A regression to the slow path for ordinary events would pass every equality test."""
    config = GeneratorConfig(pages=60, crawls=2, seed=3, content=content)
    for event in generate_events(config):
        raw = orjson.dumps(event)
        fast = _fast_fetch(orjson.loads(raw), 192, 100_000, *FAST_LIMITS)
        assert fast is not None, event["url"]
        assert fast == validating(raw) == parse_fetch(raw)


def test_default_dimension_embedding_and_duplicate_links() -> None:
    vector = [(-1) ** i * (i + 1) / 97 for i in range(192)]
    links_ = ["https://www.a.org/x", "https://a.org/y", "https://b.org/", "https://www.a.org/x"]
    event = {"url": "https://a.org/", "fetched_at": 1767607200, "outlinks": links_}
    for embedding in (vector, [*vector[:191], 0], [0.0] * 192):
        raw = orjson.dumps({**event, "embedding": embedding})
        assert outcome(parse_fetch, raw) == outcome(validating, raw)
    fetch = parse_fetch(orjson.dumps(event))
    assert (fetch.internal_outlinks, fetch.external_outlinks) == (2, 1)


def test_fingerprint_collision_keeps_the_first_links_flag() -> None:
    """Two canonical URLs with the same 32-bit fingerprint: one entry, the first one's flag."""
    internal, external = "https://a.org/x386960", "https://b.org/y2004"
    assert links.link_fingerprint(internal) == links.link_fingerprint(external)
    for outlinks in ([internal, external], [external, internal]):
        event = {"url": "https://a.org/", "fetched_at": 1767607200, "outlinks": outlinks}
        raw = orjson.dumps(event)
        fetch = parse_fetch(raw)
        assert fetch == validating(raw)
        assert len(fetch.fingerprints) == 1
        assert fetch.internal_flags.tolist() == [outlinks[0] == internal]


@settings(max_examples=1000, deadline=None)
@given(url=urls() | CANONICAL)
def test_fast_link_parse_equals_the_urlsplit_parse(url: str) -> None:
    def parse(parser: Any) -> object:
        try:
            return parser(url)
        except InvalidURL as err:
            return str(err)

    assert parse(links._parse) == parse(links._parse_slow)


PAGES = [
    link_info(url)
    for url in (
        "https://example.com/",
        "http://www.example.com/a",
        "https://www.www.example.com/",
        "https://[::1]:8080/",  # prefixes that are no canonical URL start
        "HTTPS://EXAMPLE.com./",
    )
]


@settings(max_examples=1000, deadline=None)
@given(batch=st.lists(urls() | CANONICAL, max_size=6), page=st.sampled_from(PAGES))
def test_canonical_summary_only_for_urls_that_are_their_own_normal_form(
    batch: list[str], page: links.LinkInfo
) -> None:
    def canonical(url: str) -> bool:
        try:
            return links._parse_slow(url).url == url
        except InvalidURL:
            return False

    summary = canonical_summary(batch, page)
    if summary is not None:
        assert all(map(canonical, batch))
        parsed = [links._parse_slow(url) for url in batch]
        expected = sorted(
            (p.fingerprint, (p.scheme, p.site) == (page.scheme, page.site)) for p in parsed
        )
        fps, flags, n_internal, n = summary
        assert len({fp for fp, _ in expected}) == len(batch)  # distinct, else None
        assert np.frombuffer(fps, "<u4").tolist() == [fp for fp, _ in expected]
        assert list(flags) == [int(flag) for _, flag in expected]
        assert (n_internal, n) == (sum(flags), len(batch))
    elif all(map(canonical, batch)):
        # declined only for a repeated fingerprint, a final '?', or a URL outside the compiled
        # pass's form (`links._CANONICAL`: e.g. a port, "http://example.com:443/")
        repeated = len({links._parse_slow(url).fingerprint for url in batch}) < len(batch)
        outside = any(links._CANONICAL.fullmatch(url) is None for url in batch)
        assert repeated or outside or any(url.endswith("?") for url in batch)
    assert canonical_summary([*batch, 5], page) is None


def test_fetch_stays_a_frozen_value_when_built_fast() -> None:
    fetch = parse_fetch(
        orjson.dumps(
            {
                "url": "https://a.org/",
                "fetched_at": "2026-01-05T10:00:00Z",
                "outlinks": ["https://a.org/b"],
                "pagerank": 0.25,
            }
        )
    )
    values = {name: getattr(fetch, name) for name in Fetch.__dataclass_fields__}
    assert fetch == Fetch(**values) == _new_fetch(*values.values())
    assert hash(fetch) == hash(Fetch(**values))
    assert pickle.loads(pickle.dumps(fetch)) == fetch
    with pytest.raises(FrozenInstanceError):
        fetch.status = 500  # type: ignore[misc]


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-05T10:00:00",
        "2026-01-05T10:00:00Z",
        "2026-01-05T10:00:00.5Z",
        "2026-01-05T10:00:00.123456+02:00",
        "2024-02-29T23:59:59-05:30",
        "1900-01-01T00:00:00+23:59",
        "2200-12-31T23:59:59.999999Z",
    ],
)
def test_iso_times_take_the_fast_path_with_datetime_s_value(text: str) -> None:
    event = {"url": "https://a.org/", "fetched_at": text, "outlinks": []}
    fast = _fast_fetch(event, DIM, 100, *FAST_LIMITS)
    moment = datetime.fromisoformat(text)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    assert fast is not None and fast.timestamp == moment.timestamp()


@pytest.mark.parametrize(
    "text",
    ["2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2256-01-01T00:00:00Z", "2026-01-05"],
)
def test_iso_times_the_fast_path_leaves_to_the_validator(text: str) -> None:
    assert (
        _fast_fetch(
            {"url": "https://a.org/", "fetched_at": text, "outlinks": []}, DIM, 9, *FAST_LIMITS
        )
        is None
    )
