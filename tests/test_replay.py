"""End-to-end: events file -> `lookaround replay` -> run directory."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from batch.generate import GeneratorConfig, generate_events
from online.links import is_internal, normalize_url
from online.priority_update import PriorityUpdate
from online.scorers import DEFAULT_SCORER
from streams.cli import app
from streams.replay import read_priorities, replay

SHARED_S = Path(__file__).resolve().parents[2] / "shared" / "data" / "S" / "crawls.jsonl.gz"

BAD_LINES = [
    b"{this is not json",
    b'{"fetched_at": "2026-01-05T00:00:00Z", "outlinks": []}',
    b'{"url": "ftp://x.org/", "fetched_at": 0, "outlinks": []}',
    b'{"url": "https://x.org/", "fetched_at": 1767225600, "outlinks": [], "embedding": [0.5, 0.5]}',
]


@pytest.fixture(scope="module")
def crawl_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    events = list(generate_events(GeneratorConfig(pages=400, crawls=5, seed=3, content="both")))
    path = tmp_path_factory.mktemp("crawl") / "events.jsonl.gz"
    lines = [orjson.dumps(e) for e in events]
    # bad lines in between good ones, and one blank line
    for i, bad in enumerate(BAD_LINES):
        lines.insert(100 * (i + 1), bad)
    lines.insert(50, b"")
    with gzip.open(path, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    return path, events


@pytest.fixture(scope="module")
def run_dir(crawl_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    replay(crawl_file[0], out, progress=False, batch_size=128)
    return out


def test_summary_counts(crawl_file, run_dir: Path) -> None:
    _, events = crawl_file
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["events_read"] == len(events) + len(BAD_LINES)
    assert summary["rejected"] == len(BAD_LINES)
    assert summary["accepted"] == len(events)
    assert summary["applied"] + summary["duplicate"] + summary["stale"] == len(events)
    assert summary["pages"] == len({normalize_url(e["url"]) for e in events})
    assert summary["events_per_second"] > 0
    assert summary["rejects_by_field"] == {"$": 1, "url": 2, "embedding": 1}


def test_rejects_file_names_line_and_field(run_dir: Path) -> None:
    rejects = [json.loads(x) for x in (run_dir / "rejects.jsonl").read_text().splitlines()]
    assert [r["field"] for r in rejects] == ["$", "url", "url", "embedding"]
    assert all(r["line"] > 0 and r["reason"] and r["raw"] for r in rejects)
    assert "required" in rejects[1]["reason"].lower()


def test_priorities_follow_the_contract(crawl_file, run_dir: Path) -> None:
    updates = list(read_priorities(run_dir))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(updates) == summary["applied"]
    for u in updates[:200]:
        p = PriorityUpdate.model_validate(u)
        assert p.scorer.name == DEFAULT_SCORER and p.fetched_at.tzinfo is not None
        assert p.next_fetch_at is not None and p.next_fetch_at > p.fetched_at
        assert p.rate_per_day is not None and p.reasons
    assert len({u["url"] for u in updates}) == summary["pages"]


def test_feature_rows_carry_next_fetch_labels(crawl_file, run_dir: Path) -> None:
    """Labels equal the set difference to the page's next fetch, computed here independently."""
    _, events = crawl_file
    table = pq.read_table(run_dir / "features.parquet").to_pylist()
    assert len(table) == json.loads((run_dir / "summary.json").read_text())["applied"]
    by_page: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_page[normalize_url(e["url"])].append(e)
    expected = {}
    for url, fetches in by_page.items():
        for prev, nxt in itertools.pairwise(fetches):
            if prev.get("status", 200) // 100 != 2 or nxt.get("status", 200) // 100 != 2:
                continue
            new = {normalize_url(u) for u in nxt["outlinks"]} - {
                normalize_url(u) for u in prev["outlinks"]
            }
            internal = sum(is_internal(url, u) for u in new)
            expected[(url, prev["crawl"])] = (internal, len(new) - internal)
    got = {
        (r["url"], r["crawl"]): (r["label_new_internal"], r["label_new_external"])
        for r in table
        if r["label_new_internal"] is not None
    }
    assert got == expected
    last_round = [r for r in table if r["crawl"] == 4]
    assert last_round and all(r["label_new_internal"] is None for r in last_round)


def test_cli_generate_and_replay(tmp_path: Path) -> None:
    runner = CliRunner()
    events = tmp_path / "c.jsonl"
    res = runner.invoke(app, ["generate", "--out", str(events), "--pages", "50", "--crawls", "3"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "run"
    res = runner.invoke(
        app, ["replay", str(events), "--out", str(out), "--scorer", "nnl-av", "--quiet"]
    )
    assert res.exit_code == 0, res.output
    assert next(read_priorities(out))["scorer"]["name"] == "nnl-av"
    res = runner.invoke(app, ["replay", str(events), "--scorer", "nope"])
    assert res.exit_code != 0 and "unknown scorer" in res.output


@pytest.mark.skipif(not SHARED_S.exists(), reason=f"real crawl S not present at {SHARED_S}")
def test_replay_takes_the_real_crawl_S_as_it_is(tmp_path: Path) -> None:
    stats = json.loads((SHARED_S.parent / "stats.json").read_text())
    summary = replay(SHARED_S, tmp_path, progress=False)
    assert summary.rejected == 0 and summary.stale == 0
    assert summary.pages == stats["pages"]
    assert summary.embedded_from_text > 0 and summary.indexed_pages == stats["pages"]
    assert summary.index_lists == summary.index_probes == 0  # under 10,000 pages: exact
    rows = pq.read_table(
        tmp_path / "features.parquet", columns=["crawl", "label_new_internal", "label_new_external"]
    ).to_pylist()
    labelled = [r for r in rows if r["label_new_internal"] is not None]
    assert len(labelled) == stats["pages"] * (stats["crawls"] - 1)
    for side in ("internal", "external"):
        mean = sum(r[f"label_new_{side}"] for r in labelled) / len(labelled)
        assert mean == pytest.approx(stats["avg_over_weeks"][f"new_{side}_mean"], abs=5e-4)
