"""No poison pill (issue 15): one bad event never poisons the models, never stops the run.

* every numeric field is bounded by the contract, and values at the bounds leave every later
  priority finite (the issue's reproducer: pages fetched with ``pagerank`` 1e300 after 4,000
  ordinary events made nearly every later score null);
* fetch times outside 1990 .. now + 1 day are rejected with a reason, ``crawl`` takes any 64-bit
  integer and features.parquet holds it;
* an exception while processing one event is isolated by bisection: the replay counts it as
  rejected and the other events' priorities are what they are without it;
* URL userinfo never reaches a key, a priority, a log line or the settings dump.

The live worker's side (dead-letter topic, a partition that keeps moving) is in
tests/test_live.py; the fuzz test in tests/test_fuzz_events.py.
"""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from batch.generate import GeneratorConfig, generate_events
from batch.rundir import FEATURES_FILE, REJECTS_FILE
from online.events import NUMBER_BOUNDS, EventError, EventLimits, parse_event
from online.fetch import parse_fetch
from online.learners import LinkLearner
from streams.logs import JsonFormatter, TextFormatter
from streams.replay import read_priorities, replay
from streams.settings import Settings

BASE = {"url": "https://a.example/y", "fetched_at": "2026-01-05T10:00:00Z", "outlinks": []}


def outcome(raw: bytes) -> tuple[str, str]:
    """("ok", "") or ("rejected", field) through the whole parser (fast path first)."""
    try:
        parse_fetch(raw)
    except EventError as err:
        return "rejected", err.field
    return "ok", ""


# -- the contract's bounds ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NUMBER_BOUNDS))
def test_every_number_is_accepted_at_its_bounds_and_rejected_beyond(name: str) -> None:
    low, high = NUMBER_BOUNDS[name]
    for value in (low, high):
        for typed in {int(value), float(value)}:
            assert outcome(orjson.dumps({**BASE, name: typed})) == ("ok", ""), (name, typed)
    step = max(1.0, abs(high) * 1e-9)
    for value in (low - step, high + step, 1e300, -1e300, 1e39, -1e39):
        if low <= value <= high:
            continue
        raw = orjson.dumps({**BASE, name: value})
        assert outcome(raw) == ("rejected", name)
        with pytest.raises(EventError, match="outside the accepted range"):
            parse_event(raw)


@pytest.mark.parametrize(
    ("fetched_at", "words"),
    [
        ("0001-01-01T00:00:00+01:00", "before the earliest accepted 1990-01-01"),
        ("9999-12-31T23:59:59Z", "in the future"),
        ("1989-12-31T23:59:59Z", "before the earliest accepted 1990-01-01"),
        (5, "before the earliest"),
        ("2200-01-01T00:00:00Z", "in the future"),
    ],
)
def test_fetch_times_outside_the_window_are_rejected(fetched_at: object, words: str) -> None:
    raw = orjson.dumps({**BASE, "fetched_at": fetched_at})
    with pytest.raises(EventError, match=words) as info:
        parse_fetch(raw)
    assert info.value.field == "fetched_at"


def test_the_time_window_is_configurable() -> None:
    raw = orjson.dumps({**BASE, "fetched_at": 5})
    assert parse_fetch(raw, limits=EventLimits(earliest=0.0)).timestamp == 5.0
    future = orjson.dumps({**BASE, "fetched_at": "2200-01-01T00:00:00Z"})
    assert parse_fetch(future, limits=EventLimits(max_ahead_seconds=1e10)).timestamp > 7e9
    settings = Settings(earliest_fetch="2000-01-01T00:00:00Z", max_fetch_ahead_seconds=60)
    limits = settings.event_limits()
    assert limits.earliest == 946684800.0 and limits.max_ahead_seconds == 60


@pytest.mark.parametrize("crawl", [0, 2147483648, -(2**63), 2**63 - 1])
def test_crawl_takes_any_64_bit_integer(crawl: int) -> None:
    assert parse_fetch(orjson.dumps({**BASE, "crawl": crawl})).crawl == crawl


@pytest.mark.parametrize("crawl", [2**63, -(2**63) - 1, "3", True, 1.5])
def test_crawl_beyond_64_bits_or_not_an_integer_is_rejected(crawl: object) -> None:
    doc = {**BASE, "crawl": crawl}
    raw = _json(doc) if isinstance(crawl, int) and abs(crawl) >= 2**63 else orjson.dumps(doc)
    assert outcome(raw) == ("rejected", "crawl")


def _json(doc: dict) -> bytes:
    import json

    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("status", "200", "expected an integer, got str"),
        ("status", 200.0, "expected an integer, got float"),
        ("status", True, "expected an integer, got bool"),
        ("content_size", "12", "expected a number, got str"),
        ("pagerank", True, "expected a number, got bool"),
        ("embedding", ["0.5"] * 192, "item 0 is str"),
        ("embedding", [True] * 192, "item 0 is bool"),
        ("embedding", [[1.0]] * 192, "item 0 is a nested list"),
    ],
)
def test_strict_types_with_messages_that_say_what_is_wrong(
    field: str, value: object, words: str
) -> None:
    with pytest.raises(EventError, match=words) as info:
        parse_fetch(orjson.dumps({**BASE, field: value}))
    assert info.value.field == field
    assert "expected 192" not in info.value.reason


def test_an_oversized_event_is_rejected_whole() -> None:
    big = orjson.dumps({**BASE, "text": "x" * 1_000_000})
    with pytest.raises(EventError, match="more than the maximum of 1,000,000") as info:
        parse_fetch(big)
    assert info.value.field == "$"
    assert parse_fetch(big, limits=EventLimits(max_event_bytes=2_000_000)).text


# -- URLs: userinfo and length ------------------------------------------------------------------


def test_userinfo_is_dropped_from_urls_and_outlinks() -> None:
    raw = orjson.dumps(
        {**BASE, "url": "https://bob:hunter2@a.example/y", "outlinks": ["http://u:pw@b.example/"]}
    )
    fetch = parse_fetch(raw)
    assert fetch.url == "https://a.example/y"
    assert fetch == parse_fetch(orjson.dumps({**BASE, "outlinks": ["http://b.example/"]}))
    with pytest.raises(EventError) as info:
        parse_fetch(orjson.dumps({**BASE, "url": "ftp://bob:hunter2@a.example/"}))
    assert "hunter2" not in str(info.value)


def test_url_length_is_limited() -> None:
    long = "https://a.example/" + "x" * 9000
    with pytest.raises(EventError, match="more than the maximum of 8,192") as info:
        parse_fetch(orjson.dumps({**BASE, "url": long}))
    assert info.value.field == "url"
    fetch = parse_fetch(orjson.dumps({**BASE, "outlinks": [long, "https://a.example/z"]}))
    assert fetch.dropped_outlinks == 1 and fetch.internal_outlinks == 1
    short = EventLimits(max_url_length=20)
    with pytest.raises(EventError, match="maximum of 20"):
        parse_fetch(orjson.dumps({**BASE, "url": "https://a.example/abcdefgh"}), limits=short)


def test_passwords_in_urls_never_reach_a_log_line_or_the_settings_dump() -> None:
    settings = Settings(redis_url="redis://:S3cretPW@cache:6379/0")
    assert "S3cretPW" not in str(settings.public_dict())
    record = logging.LogRecord(
        "lookaround.worker", logging.INFO, __file__, 1, "starting worker", None, None
    )
    record.settings = settings.model_dump(mode="json")  # even a careless dump of every setting
    record.error = "Error connecting to redis://user:S3cretPW@cache:6379"
    for formatter in (JsonFormatter(), TextFormatter("%(message)s %(settings)s %(error)s")):
        line = formatter.format(record)
        assert "S3cretPW" not in line and "***@cache" in line


# -- the learner never goes non-finite ----------------------------------------------------------


def test_the_learner_skips_a_step_that_would_make_it_non_finite() -> None:
    import numpy as np

    learner = LinkLearner()
    cols = ["a", "b"]
    ok = np.ones((4, 2))
    learner.learn_array(ok, cols, np.ones(4), np.zeros(4), np.full(4, 7.0))
    before = learner.predict_array(ok, cols)
    poisoned = ok.copy()
    poisoned[0, 0] = np.inf
    learner.learn_array(poisoned, cols, np.ones(4), np.zeros(4), np.full(4, 7.0))
    learner.learn_array(ok, cols, np.array([np.nan, 1, 1, 1]), np.zeros(4), np.full(4, 7.0))
    learner.learn_one({"a": math.inf}, {"new_internal": 1, "new_external": 0})
    assert learner.n_skipped == 3 and learner.n_learned == 4
    after = learner.predict_array(ok, cols)
    assert all(np.array_equal(before[k], after[k]) for k in before)  # previous weights kept
    # A step that overflows inside the optimiser (a learning rate of 1e308) is undone.
    wild = LinkLearner(learning_rate=1e308)
    with np.errstate(all="ignore"):
        wild.learn_array(np.full((4, 2), 1e300), cols, np.ones(4), np.zeros(4), np.full(4, 7.0))
    assert wild.n_skipped == 1 and wild.n_learned == 0
    out = wild.predict_array(ok, cols)
    assert all(np.isfinite(v).all() for v in out.values())


# -- through the replay -------------------------------------------------------------------------


def _ordinary(pages: int, crawls: int, seed: int = 5) -> list[dict]:
    return list(generate_events(GeneratorConfig(pages=pages, crawls=crawls, seed=seed)))


def _write(path: Path, events: list[dict | bytes]) -> Path:
    with gzip.open(path, "wb") as fh:
        for e in events:
            fh.write((e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n")
    return path


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _no_null_scores(out: Path) -> list[dict]:
    rows = list(read_priorities(out))
    for r in rows:
        for name in ("score", "p_new"):
            assert r[name] is not None and math.isfinite(r[name]), r
    return rows


def test_the_issue_reproducer_leaves_every_later_priority_finite(tmp_path: Path) -> None:
    """3 pages fetched 3 times with pagerank 1e300 (trustrank -1e300, text_quality 1e39) after
    4,000 ordinary events: rejected, and the next 2,000 priorities all have a score; the same
    pages at the extremes the contract accepts leave every later priority finite too."""
    events = _ordinary(1000, 6)
    head, tail = events[:4000], events[4000:]
    at = head[-1]["fetched_at"]
    poison = [
        {"url": f"https://poison.example/p{p}", "fetched_at": at, "outlinks": [], key: value}
        for p, (key, value) in enumerate(
            [("pagerank", 1e300), ("trustrank", -1e300), ("text_quality", 1e39)]
        )
        for _ in range(3)
    ]
    out = tmp_path / "run"
    summary = replay(_write(tmp_path / "e.jsonl.gz", head + poison + tail), out, progress=False)
    assert summary.rejected == 9 and summary.accepted == len(events)
    assert set(summary.rejects_by_field) == {"pagerank", "trustrank", "text_quality"}
    rows = _no_null_scores(out)
    assert len(rows) == summary.applied

    extremes = []
    for low_or_high in (0, 1):
        for r in range(3):
            doc = {
                "url": f"https://extreme.example/p{low_or_high}",
                "fetched_at": _epoch(at) + r * 3600,
                "outlinks": [f"https://extreme.example/l{r}"],
                "crawl": (-(2**63), 2**63 - 1)[low_or_high],
                "embedding": [1e30 * (-1) ** low_or_high] + [1e-30] * 191,
            }
            doc.update({name: bounds[low_or_high] for name, bounds in NUMBER_BOUNDS.items()})
            extremes.append(doc)
    out2 = tmp_path / "run2"
    summary2 = replay(_write(tmp_path / "x.jsonl.gz", head + extremes + tail), out2, progress=False)
    assert summary2.rejected == 0 and summary2.nonfinite_scores == 0
    _no_null_scores(out2)
    table = pq.read_table(out2 / FEATURES_FILE)
    crawls = table.column("crawl").to_pylist()
    assert -(2**63) in crawls and 2**63 - 1 in crawls
    # No feature is infinite (NaN is a missing feature): at the bounds every one stays finite.
    import numpy as np

    for name in table.column_names:
        if table.schema.field(name).type in ("float", "double"):
            values = table.column(name).to_numpy(zero_copy_only=False)
            assert not np.isinf(values).any(), name


def test_replay_rejects_the_issue_s_fetch_times_and_goes_on(tmp_path: Path) -> None:
    events = _ordinary(50, 2)
    bad = [
        b'{"url":"https://a.com/y","fetched_at":"0001-01-01T00:00:00+01:00","outlinks":[]}',
        b'{"url":"https://a.com/y","fetched_at":"9999-12-31T23:59:59Z","outlinks":[]}',
        orjson.dumps({**BASE, "crawl": 2147483648}),  # accepted: written to features as int64
    ]
    out = tmp_path / "run"
    summary = replay(
        _write(tmp_path / "e.jsonl.gz", [*events[:30], *bad, *events[30:]]), out, progress=False
    )
    assert summary.rejected == 2 and summary.rejects_by_field == {"fetched_at": 2}
    rejects = [orjson.loads(line) for line in (out / REJECTS_FILE).read_bytes().splitlines()]
    assert [r["line"] for r in rejects] == [31, 32]
    assert "before the earliest accepted" in rejects[0]["reason"]
    assert "in the future" in rejects[1]["reason"]
    crawls = pq.read_table(out / FEATURES_FILE, columns=["crawl"]).column("crawl").to_pylist()
    assert 2147483648 in crawls


@pytest.mark.parametrize("stage", ["history", "after learning"])
def test_an_event_whose_processing_raises_is_isolated_by_bisection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """A pipeline stage raising for one URL, before the scorer learns (the history update) or
    after (the next-fetch times, so the learned state must be rolled back): the replay rejects
    those events (field ``processing``, their line numbers) and every other priority is as in
    a run without them."""
    import online.batch_walk as walk_module
    import online.emit as emit_module

    events = _ordinary(200, 4)
    victim = events[150]["url"]
    lines = [i + 1 for i, e in enumerate(events) if e["url"] == victim]
    clean = tmp_path / "clean"
    replay(
        _write(tmp_path / "clean.jsonl.gz", [e for e in events if e["url"] != victim]),
        clean,
        progress=False,
        batch_size=64,
    )
    real_update = walk_module.update

    def update(state, event, **kwargs):  # type: ignore[no-untyped-def]
        if event.url == victim:
            raise OverflowError("injected for the test")
        return real_update(state, event, **kwargs)

    real_next = emit_module.Emitter.next_fetch_days

    def next_fetch_days(self, scores, walk, allocation, writes):  # type: ignore[no-untyped-def]
        if any(r.event.url == victim for r in walk.applied):
            raise OverflowError("injected for the test")
        return real_next(self, scores, walk, allocation, writes)

    if stage == "history":
        monkeypatch.setattr(walk_module, "update", update)
    else:
        monkeypatch.setattr(emit_module.Emitter, "next_fetch_days", next_fetch_days)
    out = tmp_path / "run"
    summary = replay(_write(tmp_path / "e.jsonl.gz", events), out, progress=False, batch_size=64)
    assert summary.rejects_by_field == {"processing": len(lines)}
    assert summary.accepted + summary.rejected == len(events)
    rejects = [orjson.loads(line) for line in (out / REJECTS_FILE).read_bytes().splitlines()]
    assert [r["line"] for r in rejects] == lines
    assert all("OverflowError: injected" in r["reason"] and r["raw"] == victim for r in rejects)

    def strip(rows):  # type: ignore[no-untyped-def]
        return [{k: v for k, v in r.items() if k != "scored_at"} for r in rows]

    assert strip(read_priorities(out)) == strip(read_priorities(clean))


def test_a_bom_starting_an_events_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(BASE) + b"\n")
    summary = replay(path, tmp_path / "run", progress=False)
    assert summary.accepted == 1 and summary.rejected == 0


def test_replay_limits_from_options_or_the_environment(tmp_path: Path) -> None:
    """A historical or generated crawl outside the default window is replayed by widening it
    (`--earliest-fetch`, `--max-fetch-ahead-seconds` or their LOOKAROUND_* variables); a bad
    value is a message, not a traceback."""
    from typer.testing import CliRunner

    from streams.cli import app

    path = tmp_path / "old.jsonl"
    path.write_bytes(
        orjson.dumps({**BASE, "fetched_at": "1985-01-01T00:00:00Z"})
        + b"\n"
        + orjson.dumps({**BASE, "fetched_at": "2200-01-01T00:00:00Z"})
        + b"\n"
    )
    runner = CliRunner()
    refused = runner.invoke(app, ["replay", str(path), "--out", str(tmp_path / "a"), "--quiet"])
    assert refused.exit_code == 2 and "none of the 2 events" in refused.output
    wide = ["--earliest-fetch", "1980-01-01", "--max-fetch-ahead-seconds", "1e10"]
    ok = runner.invoke(app, ["replay", str(path), "--out", str(tmp_path / "b"), "--quiet", *wide])
    assert ok.exit_code == 0, ok.output
    env = {"LOOKAROUND_EARLIEST_FETCH": "1980-01-01", "LOOKAROUND_MAX_FETCH_AHEAD_SECONDS": "1e10"}
    by_env = runner.invoke(
        app, ["replay", str(path), "--out", str(tmp_path / "c"), "--quiet"], env=env
    )
    assert by_env.exit_code == 0, by_env.output
    bad = runner.invoke(
        app,
        ["replay", str(path), "--out", str(tmp_path / "d"), "--quiet", "--earliest-fetch", "x"],
    )
    assert bad.exit_code == 2 and "expected an ISO-8601 time" in bad.output
    assert "Traceback" not in bad.output
