"""Fuzzing the event contract (issue 15): arbitrary values for every field, and a generated
corpus of mutated events around an ordinary crawl.

* every input is either accepted with every number finite and within its bound, or rejected
  with an `EventError` naming a field: no other exception, ever;
* the replay of a crawl with the garbage mixed in counts every line (accepted + rejected =
  lines), rejects exactly the garbage, and publishes the same priorities for the valid events
  as without it; no priority is NaN or null.

Examples: 2,000 in a default run; 10,000, and a corpus of 5,000 mutated events, when
``CI=true``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch.generate import GeneratorConfig, generate_events
from online.events import DEFAULT_LIMITS, NUMBER_BOUNDS, EventError
from online.fetch import Fetch, parse_fetch
from streams.replay import read_priorities, replay

EXAMPLES = 10_000 if os.environ.get("CI", "").lower() == "true" else 2_000
DIM = 8

#: Anything JSON can carry, for a field that should be something else.
GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=20),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def numbers(name: str) -> st.SearchStrategy[Any]:
    low, high = NUMBER_BOUNDS[name]
    return st.one_of(
        st.floats(min_value=low, max_value=high),
        st.integers(min_value=int(low), max_value=int(high)),
        st.sampled_from([low, high, low - 1, high + 1, 1e300, -1e300, 1e39, -1e39, 0, -0.0]),
        GARBAGE,
    )


URLS = st.one_of(
    st.sampled_from(
        [
            "https://a.example/x",
            "HTTP://A.example:80/y#frag",
            "https://bob:pw@a.example/z",
            "ftp://a.example/",
            "https://",
            "https://a.example/" + "x" * 9000,
            "mailto:me@a.example",
            "https://[::1]/",
        ]
    ),
    st.text(max_size=30),
    GARBAGE,
)
TIMES = st.one_of(
    st.sampled_from(
        [
            "2026-01-05T10:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59Z",
            "1989-12-31T23:59:59Z",
            "2026-02-30T00:00:00Z",
            "2026-01-05",
            1_767_225_600,
            1_767_225_600_000,
            -1,
            0,
        ]
    ),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False),
    st.datetimes().map(lambda d: d.isoformat()),
    GARBAGE,
)
EMBEDDINGS = st.one_of(
    st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=DIM, max_size=DIM),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=DIM, max_size=DIM),
    st.lists(st.floats(width=32), min_size=0, max_size=DIM + 1),
    st.lists(GARBAGE, min_size=DIM, max_size=DIM),
    st.just([[1.0]] * DIM),
    GARBAGE,
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "url": URLS,
    "fetched_at": TIMES,
    "outlinks": st.one_of(st.lists(URLS, max_size=4), GARBAGE),
    "status": st.one_of(st.integers(min_value=0, max_value=1000), GARBAGE),
    "content_digest": st.one_of(st.text(max_size=10), GARBAGE),
    "text": st.one_of(st.text(max_size=30), GARBAGE),
    "embedding": EMBEDDINGS,
    "crawl": st.one_of(st.integers(min_value=-(2**64), max_value=2**64), GARBAGE),
    **{name: numbers(name) for name in NUMBER_BOUNDS},
}
VALID_URLS = st.one_of(
    st.sampled_from(["https://a.example/x", "http://www.b.example/", "https://a.example/?q=1"]),
    st.builds(
        "https://{}.example/{}".format,
        st.text(alphabet="abc", min_size=1, max_size=4),
        st.text(alphabet="xyz/-", max_size=6),
    ),
)
VALID = {
    "url": VALID_URLS,
    "fetched_at": st.one_of(
        st.integers(min_value=631152000, max_value=1_767_225_600),
        st.sampled_from(["2026-01-05T10:00:00Z", "1990-01-01T00:00:00+00:00"]),
    ),
    "outlinks": st.lists(st.one_of(VALID_URLS, URLS), max_size=4),
}
OPTIONAL = {name: FIELDS[name] for name in FIELDS if name not in VALID}


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """An event whose required fields are valid but at most one, with any optional fields
    (each valid, at an edge, out of range or garbage)."""
    event = {name: draw(strategy) for name, strategy in VALID.items()}
    for name in draw(st.sets(st.sampled_from(sorted(VALID)), max_size=1)):
        event[name] = draw(FIELDS[name])
    event.update(draw(st.fixed_dictionaries({}, optional=OPTIONAL)))
    return event


EVENTS = events()


def encode(event: dict[str, Any]) -> bytes:
    """JSON as a producer might write it: NaN and huge integers included (orjson refuses)."""
    return json.dumps(event, allow_nan=True).encode("utf-8", "surrogatepass")


def check(fetch: Fetch) -> None:
    """What an accepted event must be: every number finite, within its bound, on time."""
    for name, (low, high) in NUMBER_BOUNDS.items():
        value = getattr(fetch, name)
        assert value is None or (math.isfinite(value) and low <= value <= high), (name, value)
    assert DEFAULT_LIMITS.earliest <= fetch.timestamp <= DEFAULT_LIMITS.latest()
    assert fetch.crawl is None or -(2**63) <= fetch.crawl < 2**63
    assert 100 <= fetch.status <= 599
    assert len(fetch.url) <= DEFAULT_LIMITS.max_url_length and "@" not in fetch.url.split("/")[2]
    vector = fetch.unit_vector()
    assert vector is None or (len(vector) == DIM and bool(abs(1 - (vector**2).sum()) < 1e-3))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(event=EVENTS)
def test_any_event_is_accepted_sane_or_rejected_naming_a_field(event: dict[str, Any]) -> None:
    try:
        raw = encode(event)
    except UnicodeEncodeError:
        return
    try:
        fetch = parse_fetch(raw, embedding_dim=DIM)
    except EventError as err:
        assert err.field and err.reason
        assert err.field.split(".")[0] in {*FIELDS, "$"}, err.field
        return
    check(fetch)


# -- a corpus of mutated events around an ordinary crawl -----------------------------------------


def mutate(event: dict[str, Any], rng: random.Random) -> bytes:
    """One way to break an event: a field set to garbage or out of range, a field dropped,
    the bytes cut, flipped or padded."""
    doc = dict(event)
    how = rng.randrange(8)
    if how == 0:
        return orjson.dumps(doc)[: rng.randrange(1, 40)]
    if how == 1:
        raw = bytearray(orjson.dumps(doc))
        raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    if how == 2:
        del doc[rng.choice(["url", "fetched_at", "outlinks"])]
    elif how == 3:
        doc[rng.choice(sorted(NUMBER_BOUNDS))] = rng.choice([1e300, -1e300, 1e39, "12", True])
    elif how == 4:
        doc["fetched_at"] = rng.choice(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59Z", 5])
    elif how == 5:
        doc[rng.choice(["status", "crawl"])] = rng.choice(["200", 2**64, 1.5, None, [1]])
    elif how == 6:
        doc["embedding"] = rng.choice([[[1.0]] * 192, ["1"] * 192, [True] * 192, [1.0] * 5])
    else:
        doc["url"] = rng.choice(["ftp://x/", "https://a.example/" + "y" * 9000, 7, ""])
    return encode(doc)


def _garbage(events: list[dict[str, Any]], n: int, seed: int) -> list[bytes]:
    """``n`` mutated events, each one the parser rejects (a mutation that happens to stay
    valid is not garbage, and would change the crawl)."""
    rng = random.Random(seed)
    out: list[bytes] = []
    while len(out) < n:
        raw = mutate(rng.choice(events), rng)
        try:
            parse_fetch(raw)
        except EventError:
            out.append(raw)
    return out


def _write(path: Path, lines: list[bytes]) -> Path:
    with gzip.open(path, "wb") as fh:
        for line in lines:
            fh.write(line.replace(b"\n", b" ") + b"\n")
    return path


def test_garbage_around_a_crawl_changes_no_valid_priority(tmp_path: Path) -> None:
    events = list(generate_events(GeneratorConfig(pages=300, crawls=4, seed=21)))
    garbage = _garbage(events, EXAMPLES // 2, seed=3)
    rng = random.Random(4)
    mixed = [orjson.dumps(e) for e in events]
    for line in garbage:
        mixed.insert(rng.randrange(len(mixed) + 1), line)
    clean_out, mixed_out = tmp_path / "clean", tmp_path / "mixed"
    clean = replay(_write(tmp_path / "clean.jsonl.gz", [orjson.dumps(e) for e in events]),
                   clean_out, progress=False, parallel=False)  # fmt: skip
    dirty = replay(_write(tmp_path / "mixed.jsonl.gz", mixed), mixed_out, progress=False,
                   parallel=False, batch_size=97)  # fmt: skip
    assert dirty.events_read == len(mixed) == dirty.accepted + dirty.rejected
    assert dirty.rejected == len(garbage) and dirty.accepted == clean.accepted == len(events)

    def strip(rows):  # type: ignore[no-untyped-def]
        return [{k: v for k, v in r.items() if k != "scored_at"} for r in rows]

    got, want = strip(read_priorities(mixed_out)), strip(read_priorities(clean_out))
    assert got == want
    for row in got:
        for name in ("score", "p_new", "expected_new_internal", "expected_new_external"):
            assert row[name] is not None and math.isfinite(row[name]), row
