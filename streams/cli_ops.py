"""Commands an operator reaches for: queue, tail, state, reset, settings.

* ``queue``: the recrawl queue, from a run directory or the live priorities topic: the latest
  priority per URL, the pages to fetch first (by score, or by when they are due);
* ``tail``: the messages of a topic (priorities, dead letters ...) as JSON Lines;
* ``state``: what the live store holds for one page (history, related pages, stats) and its
  last published priority;
* ``reset``: delete every key under a Redis key prefix, after a confirmation;
* ``settings``: every ``LOOKAROUND_*`` variable with its value, default and meaning.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer
from rich.console import Console
from rich.table import Table

from batch.rundir import PRIORITIES_FILE
from online.errors import InputError
from online.features import STATS_FIELDS
from online.history import SN_FIELDS, SP_FIELDS
from online.links import InvalidURL, link_info, mask_userinfo
from online.stores import ID_PREFIX_SHIFT
from streams.cli_live import settings_with as _settings
from streams.cli_output import out_console
from streams.kafka_io import kafka_python_options
from streams.partitioner import partition_of
from streams.redis_store import settings_store
from streams.replay import read_priorities, read_related
from streams.settings import ENV_PREFIX, Settings
from streams.topic_replay import published_priorities

console = Console(stderr=True)

#: Short names of the pipeline's topics for `tail` (a full topic name works too).
TOPIC_ALIASES = {
    "fetched-pages": "topic_fetched",
    "priorities": "topic_priorities",
    "embeddings": "topic_embeddings",
    "dead-letter": "topic_dead_letter",
}
#: Columns of the queue as a table or CSV (JSON Lines gives the whole priority update).
QUEUE_COLUMNS = ("rank", "url", "score", "p_new", "next_fetch_at", "fetched_at", "reasons")


class QueueOrder(StrEnum):
    score = "score"
    due = "due"


class OutputFormat(StrEnum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"


def register(app: typer.Typer) -> None:
    app.command()(queue)
    app.command()(tail)
    app.command()(state)
    app.command()(reset)
    app.command("settings")(show_settings)


def _out() -> Console:
    return out_console()


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- queue --------------------------------------------------------------------------------------


def latest_per_url(priorities: Iterable[dict]) -> list[dict]:
    """The latest priority update of each URL (by its fetch time; for the same fetch, the
    later update)."""
    latest: dict[str, tuple[datetime, dict]] = {}
    for p in priorities:
        at = _when(p["fetched_at"])
        have = latest.get(p["url"])
        if have is None or at >= have[0]:
            latest[p["url"]] = (at, p)
    return [p for _, p in latest.values()]


def recrawl_queue(
    priorities: Iterable[dict],
    *,
    by: QueueOrder = QueueOrder.score,
    at: datetime | None = None,
    budget: int | None = None,
) -> list[dict]:
    """The pages in the order to fetch them: highest ``score`` first, or (``due``) those whose
    ``next_fetch_at`` is earliest first. With ``budget``: the ``budget`` pages to fetch at
    ``at``: the best by score, or the most overdue among those due by then.
    """
    pages = latest_per_url(priorities)
    if by is QueueOrder.score:
        pages.sort(key=lambda p: (-(p.get("score") or 0.0), p["url"]))
    else:
        pages.sort(key=lambda p: (_when(p["next_fetch_at"]), p["url"]))
        if budget is not None and at is not None:
            pages = [p for p in pages if _when(p["next_fetch_at"]) <= at]
    return pages if budget is None else pages[:budget]


def queue(
    run_dir: Annotated[
        Path | None,
        typer.Argument(
            exists=True,
            file_okay=False,
            metavar="RUN_DIR",
            help="Run directory of a replay (its priorities.jsonl.gz); or --live.",
        ),
    ] = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live", help="Read the live priorities topic instead (LOOKAROUND_* settings)."
        ),
    ] = False,
    top: Annotated[
        int | None,
        typer.Option(min=1, help="Show the first N pages (default: 20 as a table, all else)."),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Which N pages to fetch now: the N best by score, or with --by due the N "
            "most overdue of those due at --at.",
        ),
    ] = None,
    by: Annotated[
        QueueOrder,
        typer.Option(help="score: highest first; due: earliest next_fetch_at first."),
    ] = QueueOrder.score,
    at: Annotated[
        datetime | None,
        typer.Option(
            formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"],
            help="The moment 'now' for --by due --budget, UTC (default: now with --live; "
            "the run's last fetch for a run directory).",
        ),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="table, jsonl (whole updates) or csv.")
    ] = OutputFormat.table,
    bootstrap: Annotated[
        str | None, typer.Option(help="With --live: Kafka host:port (default: settings).")
    ] = None,
) -> None:
    """The recrawl queue: which pages to fetch first.

    The latest priority per URL, from a run directory or the live priorities topic.
    """
    if (run_dir is None) == (not live):
        raise InputError("give a run directory or --live (one of them)")
    if run_dir is not None:
        if not (run_dir / PRIORITIES_FILE).exists():
            raise InputError(f"{run_dir} has no {PRIORITIES_FILE}: give a replay's run directory")
        priorities = [*read_priorities(run_dir), *read_related(run_dir)]
    else:
        priorities = published_priorities(_settings(kafka_bootstrap=bootstrap), idle_seconds=0.5)
    moment = at.replace(tzinfo=UTC) if at is not None else None
    if moment is None and budget is not None and by is QueueOrder.due:
        moment = (
            datetime.now(UTC)
            if live
            else max((_when(p["fetched_at"]) for p in priorities), default=datetime.now(UTC))
        )
    pages = recrawl_queue(priorities, by=by, at=moment, budget=budget)
    shown = top if top is not None else (20 if output is OutputFormat.table else None)
    _print_queue(pages[:shown] if shown is not None else pages, output, len(pages))


def _print_queue(pages: list[dict], output: OutputFormat, total: int) -> None:
    rows = (
        {
            "rank": rank,
            **{c: p.get(c) for c in QUEUE_COLUMNS[1:-1]},
            "reasons": ",".join(p.get("reasons") or ()),
        }
        for rank, p in enumerate(pages, start=1)
    )
    if output is OutputFormat.jsonl:
        for p in pages:
            sys.stdout.write(orjson.dumps(p).decode() + "\n")
    elif output is OutputFormat.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=QUEUE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    else:
        table = Table(title=f"recrawl queue: {len(pages):,} of {total:,} pages")
        for col in QUEUE_COLUMNS:
            table.add_column(col, justify="right" if col in ("rank", "score", "p_new") else "left")
        for row in rows:
            table.add_row(*("" if v is None else str(v) for v in row.values()))
        _out().print(table)


# -- tail ---------------------------------------------------------------------------------------


def tail(
    topic: Annotated[
        str,
        typer.Argument(
            metavar="TOPIC",
            help=f"{', '.join(TOPIC_ALIASES)} (the topics named in the settings) or a topic name.",
        ),
    ] = "priorities",
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the oldest message, not the end.")
    ] = False,
    max_messages: Annotated[
        int | None, typer.Option("--max", min=1, help="Stop after N messages.")
    ] = None,
    idle: Annotated[
        float | None,
        typer.Option(
            min=0, help="Stop after this many seconds without a message (default: never)."
        ),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="Kafka host:port (default: LOOKAROUND_KAFKA_BOOTSTRAP).")
    ] = None,
) -> None:
    """Print a topic's messages as JSON Lines.

    Partition, offset, time, key and value of each; a dead letter's original bytes as text
    too. Follows the topic until Ctrl-C, --max or --idle.
    """
    settings = _settings(kafka_bootstrap=bootstrap)
    name = getattr(settings, TOPIC_ALIASES[topic]) if topic in TOPIC_ALIASES else topic
    count = 0
    try:
        for message in follow_topic(settings, name, from_beginning=from_beginning, idle=idle):
            sys.stdout.write(orjson.dumps(message).decode() + "\n")
            sys.stdout.flush()
            count += 1
            if max_messages is not None and count >= max_messages:
                break
    except KeyboardInterrupt:
        pass
    console.print(f"{count:,} messages from {name}", highlight=False)


def follow_topic(
    settings: Any, topic: str, *, from_beginning: bool = False, idle: float | None = None
) -> Iterator[dict]:
    """A topic's messages as dicts, oldest first per partition, until ``idle`` seconds pass
    without one (None: forever)."""
    import base64
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        group_id=None, enable_auto_commit=False, **kafka_python_options(settings)
    )
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise InputError(
                f"no topic {topic!r} on {settings.kafka_bootstrap}: `lookaround topics` creates "
                f"the pipeline's; known names: {', '.join(TOPIC_ALIASES)}"
            )
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        if from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        quiet_since = time.monotonic()
        while idle is None or time.monotonic() - quiet_since < idle:
            got = consumer.poll(timeout_ms=200)
            for records in got.values():
                quiet_since = time.monotonic()
                for m in records:
                    doc: dict[str, Any] = {
                        "topic": m.topic,
                        "partition": m.partition,
                        "offset": m.offset,
                        "timestamp": datetime.fromtimestamp(m.timestamp / 1000, UTC).isoformat(),
                        "key": None if m.key is None else m.key.decode("utf-8", "replace"),
                        "value": _value(m.value),
                    }
                    value = doc["value"]
                    if isinstance(value, dict) and isinstance(value.get("raw"), str):
                        raw = base64.b64decode(value["raw"])
                        doc["raw_text"] = raw.decode("utf-8", "replace")
                    yield doc
    finally:
        consumer.close()


def _value(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


# -- state and reset -----------------------------------------------------------------------------


def state(
    url: Annotated[str, typer.Argument(metavar="URL", help="The page's URL (normalised here).")],
    priority: Annotated[
        bool,
        typer.Option(
            help="Also look up the page's last priority on the priorities topic (reads the "
            "URL's partition)."
        ),
    ] = True,
) -> None:
    """One page as the live store holds it, as JSON.

    Its history, related pages and the stats it lends them, and its last published priority.
    """

    settings = _settings()
    try:
        info = link_info(url)
    except InvalidURL as exc:
        raise InputError(f"not a page URL: {url!r} ({exc})") from None
    store = settings_store(settings)
    page = store.get_states([info.url])[0]
    if page is None:
        raise InputError(
            f"no state for {info.url} under the key prefix {settings.redis_key_prefix!r} at "
            f"{mask_userinfo(settings.redis_url)}: not fetched yet, or another "
            "LOOKAROUND_REDIS_KEY_PREFIX?"
        )
    neighbours = store.get_neighbours([info.page_id])[0]
    stats = store.get_stats(np.array([info.page_id], dtype=np.int64))[0]
    doc: dict[str, Any] = {
        "url": info.url,
        "page_id": info.page_id,
        "history": _history(page),
        "related_pages": None
        if neighbours is None
        else [
            _related_page(int(i), float(w), neighbours.short_ids)
            for i, w in zip(neighbours.ids, neighbours.weights, strict=True)
        ],
        "stats": {
            name: None if v != v else round(float(v), 6)
            for name, v in zip(STATS_FIELDS, stats, strict=True)
        },
    }
    if priority:
        doc["last_priority"] = last_priority(settings, info.url)
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def _related_page(page_id: int, weight: float, short: bool) -> dict[str, Any]:
    """A related page as ``inspect`` shows it: its page id, or where the compact store kept
    only the id's top 40 bits, those (the workers find the page again in their index)."""
    if short:
        return {"page_id_top_bits": page_id >> ID_PREFIX_SHIFT, "weight": round(weight, 6)}
    return {"page_id": page_id, "weight": round(weight, 6)}


def _history(page: Any) -> dict[str, Any]:
    def moment(ts: float | None) -> str | None:
        return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()

    def values(names: tuple[str, ...], numbers: tuple[float, ...]) -> dict[str, float | None]:
        return {n: None if v != v else v for n, v in zip(names, numbers, strict=True)}

    return {
        "last_fetched_at": moment(page.last_fetched_at),
        "last_ok_at": moment(page.last_ok_at),
        "last_status": page.last_status,
        "fetches": page.fetches,
        "errors": page.errors,
        "outlinks": len(page.fingerprints),
        "intervals": [iv._asdict() for iv in page.window],
        "link_change_rate": dict(zip(("internal", "external"), page.lcr(), strict=True)),
        "static_page": values(SP_FIELDS, page.sp),
        "static_network": values(SN_FIELDS, page.sn),
    }


def last_priority(settings: Any, url: str) -> dict | None:
    """The last priority published for ``url`` (read from its partition of the priorities
    topic), or None; a note on stderr when the broker does not answer."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    topic = settings.topic_priorities
    key = url.encode()
    try:
        consumer = KafkaConsumer(
            group_id=None, enable_auto_commit=False, **kafka_python_options(settings)
        )
    except KafkaError as exc:
        console.print(f"[yellow]note:[/yellow] no last priority: {exc}", highlight=False)
        return None
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or ())
        if not parts:
            return None
        tp = TopicPartition(topic, parts[partition_of(key, len(parts))])
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        found = None
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=500).values():
                for m in records:
                    if m.key == key:
                        found = m.value
        return None if found is None else orjson.loads(found)
    finally:
        consumer.close()


def reset(
    prefix: Annotated[
        str | None,
        typer.Option(help="Key prefix to delete (default: LOOKAROUND_REDIS_KEY_PREFIX)."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the live state under a Redis key prefix.

    The pages' histories, related pages, stats and the online learners; the topics stay.
    """

    settings = _settings()
    prefix = prefix if prefix is not None else settings.redis_key_prefix
    if not prefix:
        raise InputError("an empty prefix would delete the whole database: give one")
    store = settings_store(settings, prefix=prefix)
    keys = len(store.keys())
    where = f"{mask_userinfo(settings.redis_url)}, prefix {prefix!r}"
    if not keys:
        console.print(f"nothing to delete at {where}", highlight=False)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise InputError(f"{keys:,} keys at {where}: confirm with --yes (no terminal to ask)")
        typer.confirm(f"delete {keys:,} keys at {where}?", abort=True)
    deleted = store.delete_all()
    console.print(f"deleted {deleted:,} keys at {where}", highlight=False)


# -- settings ------------------------------------------------------------------------------------


def show_settings(
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per setting instead of a table.")
    ] = False,
) -> None:
    """List every LOOKAROUND_* setting.

    Its value here (secrets masked), default, whether it is set, and what it does. Faust's own
    settings are read only under LOOKAROUND_FAUST_.
    """

    rows = []
    effective = _settings().public_dict()
    for name, info in Settings.model_fields.items():
        variable = f"{ENV_PREFIX}{name.upper()}"
        default = (
            f"{info.default_factory.__name__}()"  # type: ignore[union-attr]
            if info.default_factory is not None
            else info.default
        )
        rows.append(
            {
                "variable": variable,
                "value": effective[name],
                "default": default if not isinstance(default, Path) else str(default),
                "set": variable in os.environ,
                "description": info.description or "",
            }
        )
    if as_json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row, default=str).decode() + "\n")
        return
    table = Table(title="settings (LOOKAROUND_* variables; * = set in the environment)")
    for col in ("variable", "value", "default", "description"):
        table.add_column(col, overflow="fold")
    for row in rows:
        mark = " *" if row["set"] else ""
        table.add_row(
            row["variable"] + mark, _shown(row["value"]), _shown(row["default"]), row["description"]
        )
    _out().print(table)


def _shown(value: Any) -> str:
    return "" if value is None else str(value)
