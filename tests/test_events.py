from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import orjson
import pytest

from online.events import EventError, parse_event
from online.fetch import parse_fetch
from online.priority_update import PriorityUpdate

BASE = {"url": "https://example.com/a", "fetched_at": "2026-01-05T10:00:00Z", "outlinks": []}


def reject(raw: object, **kw: int) -> EventError:
    with pytest.raises(EventError) as info:
        parse_event(raw if isinstance(raw, bytes) else orjson.dumps(raw), **kw)
    return info.value


def test_minimal_event_and_defaults() -> None:
    e = parse_event(orjson.dumps(BASE))
    assert e.status == 200 and e.ok and e.embedding is None and e.outlinks == []
    assert e.fetched_at == datetime(2026, 1, 5, 10, tzinfo=UTC)


def test_fetched_at_forms() -> None:
    naive = parse_event({**BASE, "fetched_at": "2026-01-05T10:00:00"})
    offset = parse_event({**BASE, "fetched_at": "2026-01-05T12:00:00+02:00"})
    epoch = parse_event({**BASE, "fetched_at": 1767607200})
    assert naive.fetched_at == offset.fetched_at == epoch.fetched_at
    assert (
        naive.fetched_at.tzinfo is not None and offset.fetched_at.utcoffset().total_seconds() == 0
    )


def test_unknown_fields_ignored_and_optional_fields_kept() -> None:
    e = parse_event({**BASE, "mystery": 1, "content_size": 10, "pagerank": 0.5, "crawl": 3})
    assert e.content_size == 10 and e.pagerank == 0.5 and e.crawl == 3
    assert not hasattr(e, "mystery")


def test_malformed_outlinks_dropped_and_counted_duplicates_collapse() -> None:
    e = parse_event(
        {
            **BASE,
            "outlinks": [
                "https://example.com/b",
                "HTTPS://EXAMPLE.com/b#x",
                "mailto:x@y.z",
                17,
                None,
                "not a url",
                "https://other.org/",
            ],
        }
    )
    assert e.outlinks == ["https://example.com/b", "https://other.org/"]
    assert e.dropped_outlinks == 4  # the duplicate is not malformed


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        (b"{not json", "$", "not JSON"),
        (b"[1, 2]", "$", "object"),
        ({"fetched_at": 0, "outlinks": []}, "url", "required"),
        ({"url": "https://a.org/", "outlinks": []}, "fetched_at", "required"),
        ({**BASE, "url": "ftp://a.org/x"}, "url", "http"),
        ({**BASE, "url": "https://"}, "url", "host"),
        ({**BASE, "url": 5}, "url", "string"),
        ({**BASE, "fetched_at": "yesterday"}, "fetched_at", ""),
        ({**BASE, "fetched_at": True}, "fetched_at", ""),
        ({**BASE, "outlinks": "https://a.org/"}, "outlinks", "list"),
        ({**BASE, "status": "ok"}, "status", ""),
        ({**BASE, "status": 700}, "status", ""),
        ({**BASE, "content_size": -1}, "content_size", ""),
        ({**BASE, "embedding": [0.1] * 5}, "embedding", "dimension 5"),
        ({**BASE, "embedding": [0.0] * 192}, "embedding", "zero"),
        ({**BASE, "pagerank": "high"}, "pagerank", ""),
    ],
)
def test_rejections_name_the_field(raw: object, field: str, fragment: str) -> None:
    err = reject(raw)
    assert err.field == field
    assert fragment.lower() in err.reason.lower()


def test_embedding_nan_and_inf_rejected() -> None:
    for bad in ("NaN", "Infinity"):
        raw = (
            orjson.dumps(BASE)[:-1]
            + b', "embedding": ['
            + b", ".join([b"0.1"] * 191 + [bad.encode()])
            + b"]}"
        )
        err = reject(raw)
        assert err.field == "embedding" and "nan" in err.reason.lower()


def test_embedding_that_underflows_float32_is_rejected_not_nan() -> None:
    # Non-zero as JSON numbers, zero once stored as float32: no NaN unit vector may come out.
    raw = orjson.dumps({**BASE, "embedding": [1e-46] * 192})
    for parse in (parse_event, parse_fetch):  # the validating path and the fast path
        with pytest.raises(EventError) as info:
            parse(raw)
        assert info.value.field == "embedding" and "zero" in info.value.reason
    tiny = parse_fetch(orjson.dumps({**BASE, "embedding": [1e-30] * 192}))
    assert np.isfinite(tiny.unit_vector()).all()


def test_embedding_dimension_is_configurable() -> None:
    e = parse_event({**BASE, "embedding": [1.0, 0.0, 0.0, 0.0]}, embedding_dim=4)
    assert e.embedding == [1.0, 0.0, 0.0, 0.0]
    assert reject({**BASE, "embedding": [1.0] * 192}, embedding_dim=4).field == "embedding"


def test_too_many_outlinks() -> None:
    links = [f"https://a.org/{i}" for i in range(11)]
    err = reject({**BASE, "outlinks": links}, max_outlinks=10)
    assert err.field == "outlinks" and "maximum of 10" in err.reason
    assert len(parse_event({**BASE, "outlinks": links}, max_outlinks=11).outlinks) == 11


def test_priority_update_schema() -> None:
    p = PriorityUpdate.model_validate(
        {
            "url": "https://a.org/",
            "fetched_at": "2026-01-05T10:00:00Z",
            "scored_at": "2026-01-05T10:00:01Z",
            "score": 1.5,
            "expected_new_internal": 1.0,
            "expected_new_external": 0.5,
            "p_new": 0.7,
            "scorer": {"name": "lbla", "version": "1"},
        }
    )
    assert p.scorer.name == "lbla" and math.isclose(p.score, 1.5)
    with pytest.raises(ValueError):
        PriorityUpdate.model_validate({**p.model_dump(), "p_new": 1.5})
