"""The live quick start and the operator's commands against the real broker (Tansu), the real
Redis and real `lookaround worker` processes, on topics with several partitions.

* one worker on 8 partitions: `lookaround replay-topic --priorities` replays the records in the
  worker's recorded order and every published priority equals the replay's;
* two workers at once: the replay merges their batches by scoring time; the check holds every
  update's own fields to equality and reports how the scores compare;
* `queue --live`, `tail`, `state`, `reset`, `settings` on what the workers wrote;
* `state` and `reset` on a Redis Cluster (every master scanned).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from batch.generate import GeneratorConfig, write_events
from streams.cli import app
from streams.harness import settings_env, two_busy_workers, worker_settings
from streams.kafka_io import ensure_topics
from streams.redis_store import RedisPageStore
from tests.test_related_updates import multilingual_site

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ops-crawl") / "crawl.jsonl.gz"
    write_events(path, GeneratorConfig(pages=300, crawls=4, seed=5), progress=False)
    return path


def cli(settings, *args: object):  # type: ignore[no-untyped-def]
    """``lookaround ARGS`` with the test's settings as LOOKAROUND_* variables."""
    result = CliRunner().invoke(app, [str(a) for a in args], env=settings_env(settings))
    assert "Traceback" not in result.output
    return result


def lines_of(path: Path) -> list[bytes]:
    with gzip.open(path, "rb") as fh:
        return [line.rstrip(b"\n") for line in fh if line.strip()]


def test_one_worker_on_eight_partitions_checks_out_exactly(
    broker, redis_client, prefix, crawl, workers, tmp_path
):
    """The README's live quick start: topics of 8 partitions, a worker, the crawl produced (one
    malformed line among it), then `replay-topic --priorities` at once (it waits for the
    worker). Then the operator's commands on what the worker wrote."""
    settings = worker_settings(broker, prefix, topic_partitions=8)
    assert cli(settings, "topics").exit_code == 0
    events = tmp_path / "crawl.jsonl.gz"
    lines = lines_of(crawl)
    bad = b'{"url": "ftp://nope.example/", "fetched_at": 0, "outlinks": []}'
    with gzip.open(events, "wb") as fh:
        fh.write(b"\n".join([*lines[:500], bad, *lines[500:]]) + b"\n")
    w = workers(settings)
    w.wait_healthy()
    produced = cli(settings, "produce", events, "--quiet")
    assert produced.exit_code == 0 and f"published {len(lines) + 1:,} events" in produced.output

    out = tmp_path / "from-topic"
    result = cli(settings, "replay-topic", "--out", out, "--priorities")
    assert result.exit_code == 0, result.output
    assert "in recorded order" in result.output
    check = json.loads(result.stdout[result.stdout.index("{") :])
    assert check["ok"] and check["compared"] == "every field"
    assert check["expected"] == check["matching"] == len(lines) and check["different"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rejected"] == 1 and summary["applied"] == len(lines)

    # queue: the live topic's latest priority per URL is the replay's
    live = cli(settings, "queue", "--live", "--format", "jsonl", "--top", "50")
    replayed = cli(settings, "queue", out, "--format", "jsonl", "--top", "50")
    assert live.exit_code == replayed.exit_code == 0

    def strip(text: str) -> list[dict]:
        return [{**json.loads(x), "scored_at": None} for x in text.splitlines()]

    assert strip(live.stdout) == strip(replayed.stdout) and len(strip(live.stdout)) == 50
    scores = [u["score"] for u in strip(live.stdout)]
    assert scores == sorted(scores, reverse=True)

    # tail: priorities from the beginning; the dead letter with its original text
    tailed = cli(settings, "tail", "priorities", "--from-beginning", "--max", "3")
    assert tailed.exit_code == 0
    first = [json.loads(x) for x in tailed.stdout.splitlines()]
    assert len(first) == 3 and all(m["key"] == m["value"]["url"] for m in first)
    letters = cli(settings, "tail", "dead-letter", "--from-beginning", "--idle", "2")
    docs = [json.loads(x) for x in letters.stdout.splitlines()]
    assert len(docs) == 1 and docs[0]["raw_text"] == bad.decode()
    assert docs[0]["value"]["field"] == "url"

    # state: the page's history and related pages in Redis, its last priority on the topic
    url = strip(live.stdout)[0]["url"]
    fetches = sum(orjson.loads(x)["url"] == url for x in lines)
    shown = cli(settings, "state", url)
    assert shown.exit_code == 0, shown.output
    page = json.loads(shown.stdout)
    assert (
        page["history"]["fetches"] == fetches and len(page["history"]["intervals"]) == fetches - 1
    )
    assert page["related_pages"] and abs(sum(n["weight"] for n in page["related_pages"]) - 1) < 1e-3
    assert {**page["last_priority"], "scored_at": None} == strip(live.stdout)[0]

    # reset: asks first (no terminal here: refuses), then deletes the prefix's keys
    store = RedisPageStore(redis_client, prefix=settings.redis_key_prefix)
    assert store.pages() == 300
    refused = cli(settings, "reset")
    assert refused.exit_code == 2 and "confirm with --yes" in refused.output
    w.stop()
    done = cli(settings, "reset", "--yes")
    assert done.exit_code == 0 and "deleted" in done.output
    assert store.keys() == []
    gone = cli(settings, "state", url)
    assert gone.exit_code == 2 and "no state for" in gone.output


def test_a_worker_publishes_the_replays_related_updates(
    broker, redis_client, prefix, workers, tmp_path
):
    """A multilingual site through a worker: the related updates it publishes on the
    priorities topic (a translation's priority revised when its page shows new links) are
    the replay's, field for field, and the live queue applies them as the replay's does."""
    settings = worker_settings(broker, prefix, topic_partitions=2)
    assert cli(settings, "topics").exit_code == 0
    events = tmp_path / "site.jsonl.gz"
    raws = multilingual_site()
    with gzip.open(events, "wb") as fh:
        fh.write(b"".join(orjson.dumps(raw) + b"\n" for raw in raws))
    w = workers(settings)
    w.wait_healthy()
    assert cli(settings, "produce", events, "--quiet").exit_code == 0
    out = tmp_path / "from-topic"
    result = cli(settings, "replay-topic", "--out", out, "--priorities")
    assert result.exit_code == 0, result.output
    check = json.loads(result.stdout[result.stdout.index("{") :])
    assert check["ok"] and check["compared"] == "every field"
    related = check["related"]
    assert related["published"] == related["expected"] == related["matching"] > 0
    assert w.metric("lookaround_related_updates_out_total") == related["published"]

    live = cli(settings, "queue", "--live", "--format", "jsonl")
    replayed = cli(settings, "queue", out, "--format", "jsonl")

    def strip(text: str) -> list[dict]:
        return [{**json.loads(x), "scored_at": None} for x in text.splitlines()]

    assert strip(live.stdout) == strip(replayed.stdout)
    assert any(u.get("kind") == "related" for u in strip(live.stdout))


def test_two_workers_at_once_are_checked_on_their_own_fields(
    broker, redis_client, prefix, crawl, workers, tmp_path
):
    """Two workers sharing 8 partitions: no replay reproduces their scores (each has its own
    learner and sees the other's pages late), so the check holds each update's own fields to
    equality and every fetch to one update, and reports how the scores compare."""
    settings = worker_settings(broker, prefix, topic_partitions=8)
    ensure_topics(settings)
    busy = two_busy_workers(settings, workers, timeout=120)
    assert cli(settings, "produce", crawl, "--quiet").exit_code == 0
    busy()
    result = cli(settings, "replay-topic", "--out", tmp_path / "run", "--priorities")
    assert "in merged order" in result.output
    check = json.loads(result.stdout[result.stdout.index("{") :])
    assert result.exit_code == 0, json.dumps(check)
    assert check["compared"] == "own fields" and check["own_different"] == 0
    assert check["missing"] == check["extra"] == 0 and check["unique"] == 1200
    assert 0 < check["rank_correlation"] <= 1


def test_settings_lists_every_variable(tmp_path) -> None:
    from streams.settings import Settings

    result = CliRunner().invoke(
        app, ["settings", "--json"], env={"LOOKAROUND_KAFKA_SASL_PASSWORD": "hunter2"}
    )
    assert result.exit_code == 0
    rows = {r["variable"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert set(rows) == {f"LOOKAROUND_{n.upper()}" for n in Settings.model_fields}
    assert all(r["description"] for r in rows.values())
    secret = rows["LOOKAROUND_KAFKA_SASL_PASSWORD"]
    assert secret["set"] and secret["value"] == "**********" and "hunter2" not in result.stdout
    assert rows["LOOKAROUND_WEB_PORT"] == {
        "variable": "LOOKAROUND_WEB_PORT",
        "value": 6066,
        "default": 6066,
        "set": False,
        "description": Settings.model_fields["web_port"].description,
    }
    table = CliRunner().invoke(app, ["settings"])
    assert table.exit_code == 0 and "LOOKAROUND_REDIS_URL" in table.stdout


def test_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"lookaround {version('lookaround')}\n"


def test_state_and_reset_on_a_redis_cluster(redis_cluster, tmp_path):
    """`lookaround state` finds a page on whichever master holds it, and `reset` deletes
    the prefix's keys on every master (the cluster found from one node's URL)."""
    from redis.cluster import RedisCluster

    from online.stores import MemoryPageStore
    from tests.test_pipeline import crawl as small_crawl
    from tests.test_pipeline import run

    settings = worker_settings(
        "127.0.0.1:1", f"ops{tmp_path.name[-8:]}", redis_url=redis_cluster.url
    )
    client = RedisCluster.from_url(redis_cluster.url)
    store = RedisPageStore(client, prefix=settings.redis_key_prefix)
    try:
        memory = MemoryPageStore()
        run(small_crawl(pages=40, rounds=2), batch=25, store=memory)
        run(small_crawl(pages=40, rounds=2), batch=25, store=store)
        keys = store.keys()
        masters = {client.nodes_manager.get_node_from_slot(client.keyslot(k)).name for k in keys}
        assert len(masters) == 3  # the pages lie on every master
        url = sorted(memory.states)[7]
        shown = cli(settings, "state", url, "--no-priority")
        assert shown.exit_code == 0, shown.output
        page = json.loads(shown.stdout)
        assert page["history"]["fetches"] == memory.states[url].fetches == 2
        done = cli(settings, "reset", "--yes")
        assert done.exit_code == 0 and f"deleted {len(keys):,} keys" in done.output
        assert store.keys() == []
    finally:
        store.delete_all()
        client.close()
