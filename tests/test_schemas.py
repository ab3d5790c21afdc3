"""schemas/*.schema.json: the crawler's side of the contract, generated from the models.

The committed files must equal freshly generated ones (regenerate with
``python -m deploy.schemas``), and real events and real priority updates must validate.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from deploy import schemas

ROOT = Path(__file__).resolve().parents[1]
README_EVENT = {
    "url": "https://www.example.com/news/",
    "fetched_at": "2026-01-05T10:00:00Z",
    "outlinks": ["https://www.example.com/news/a1", "https://other.org/"],
    "status": 200,
    "content_size": 51234,
    "text_size": 8123,
    "text_quality": 0.8,
    "content_digest": "9f2c",
    "text": "Latest news",
    "crawl": 3,
}


def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((schemas.SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def fetched() -> jsonschema.protocols.Validator:
    return _validator("fetched-page.schema.json")


@pytest.fixture(scope="module")
def priority() -> jsonschema.protocols.Validator:
    return _validator("priority-update.schema.json")


def test_committed_schemas_equal_freshly_generated_ones() -> None:
    assert schemas.stale() == [], "schemas are out of date: run python -m deploy.schemas"
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.schemas", "--check"], cwd=ROOT, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr


def test_generate_writes_both_files(tmp_path: Path) -> None:
    written = schemas.generate(tmp_path)
    assert sorted(p.name for p in written) == sorted(schemas.SCHEMAS)
    for path in written:
        assert path.read_text() == (schemas.SCHEMA_DIR / path.name).read_text()


def test_priority_update_schema_has_the_crawler_fields(
    priority: jsonschema.protocols.Validator,
) -> None:
    props = priority.schema["properties"]
    for field in ("url", "score", "p_new", "rate_per_day", "next_fetch_at", "fetched_at"):
        assert field in props, field
    assert props["p_new"]["minimum"] == 0 and props["p_new"]["maximum"] == 1


def test_readme_event_and_epoch_seconds_validate(fetched: jsonschema.protocols.Validator) -> None:
    fetched.validate(README_EVENT)
    fetched.validate({**README_EVENT, "fetched_at": 1767607200})


BAD_EVENTS: dict[str, dict[str, Any]] = {
    "no url": {k: v for k, v in README_EVENT.items() if k != "url"},
    "no outlinks": {k: v for k, v in README_EVENT.items() if k != "outlinks"},
    "status out of range": {**README_EVENT, "status": 700},
    "negative size": {**README_EVENT, "content_size": -1},
    "embedding not numbers": {**README_EVENT, "embedding": ["a", "b"]},
    "fetched_at not a time": {**README_EVENT, "fetched_at": "yesterday"},
}


@pytest.mark.parametrize("bad", list(BAD_EVENTS))
def test_bad_events_fail(fetched: jsonschema.protocols.Validator, bad: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        fetched.validate(BAD_EVENTS[bad])


def test_generated_events_and_real_priority_updates_validate(
    tmp_path: Path,
    fetched: jsonschema.protocols.Validator,
    priority: jsonschema.protocols.Validator,
) -> None:
    events = tmp_path / "crawl.jsonl"
    run = [sys.executable, "-m", "streams.cli"]
    gen = [*run, "generate", "--out", str(events), "--pages", "60", "--crawls", "3"]
    subprocess.run([*gen, "--content", "both"], cwd=ROOT, check=True, capture_output=True)
    lines = events.read_text().splitlines()
    assert lines
    for line in lines:
        fetched.validate(json.loads(line))
    out = tmp_path / "run"
    subprocess.run(
        [*run, "replay", str(events), "--out", str(out), "--quiet"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    with gzip.open(out / "priorities.jsonl.gz", "rt") as fh:
        updates = [json.loads(line) for line in fh]
    assert len(updates) > 0
    for update in updates:
        priority.validate(update)
    with pytest.raises(jsonschema.ValidationError):
        priority.validate({**updates[0], "p_new": 1.5})
