"""``lookaround import-warc`` and ``lookaround living-site``: crawls from outside as events, and
a site to crawl. Added to the app by streams/cli.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streams.cli_simulate import _end_time, _read
from streams.living_site import LivingSite
from streams.publish import EventPublisher, event_key
from streams.settings import Settings
from streams.warc import WarcImporter

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command("import-warc")(import_warc)
    app.command("living-site")(living_site)


def import_warc(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE", help="WARC or WARC.gz archives, in crawl order.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Events file to write (.jsonl or .jsonl.gz).")
    ] = None,
    produce: Annotated[
        bool, typer.Option("--produce", help="Publish the events to the fetched-page topic.")
    ] = False,
    bootstrap: Annotated[
        str | None, typer.Option(help="Kafka host:port with --produce (else settings).")
    ] = None,
    rejects: Annotated[
        Path | None,
        typer.Option(help="Where the rejected records go (default: beside --out, else none)."),
    ] = None,
    max_text_chars: Annotated[
        int, typer.Option(min=0, help="Characters of page text an event carries.")
    ] = 2000,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """WARC crawl archives → fetched-page events (JSON Lines, or straight to the topic)."""
    import orjson
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    missing = [f for f in files if not f.is_file()]
    if missing:
        console.print(f"[red]error:[/red] no such archive: {', '.join(map(str, missing))}")
        raise typer.Exit(2)
    if out is None and not produce:
        console.print("[red]error:[/red] say where the events go: --out FILE and/or --produce")
        raise typer.Exit(2)
    if rejects is None and out is not None:
        rejects = out.with_name(out.name.split(".")[0] + ".rejects.jsonl")
    publisher = _publisher(bootstrap, out) if produce else None
    importer = WarcImporter(max_text_chars=max_text_chars)
    sizes = [f.stat().st_size for f in files]
    started = time.perf_counter()
    with (
        _events_writer(out) as write,
        Progress(
            TextColumn("import-warc"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[events]:,} events"),
            TimeRemainingColumn(),
            disable=quiet,
            transient=True,
        ) as bar,
    ):
        task = bar.add_task("read", total=sum(sizes), events=0)
        done = 0
        for path, size in zip(files, sizes, strict=True):

            def progress(position: int, base: int = done) -> None:
                bar.update(task, completed=base + position, events=importer.counts.events)

            for event in importer.file_events(path, progress):
                line = orjson.dumps(event)
                if write is not None:
                    write(line + b"\n")
                if publisher is not None:
                    publisher.send(event_key(event), line)
            done += size
    seconds = time.perf_counter() - started
    counts = importer.counts
    if rejects is not None and importer.rejects:
        rejects.parent.mkdir(parents=True, exist_ok=True)
        with open(rejects, "wb") as fh:
            for reject in importer.rejects:
                fh.write(orjson.dumps(reject.as_dict()) + b"\n")
    rate = counts.records / seconds if seconds > 0 else 0.0
    console.print(
        f"{counts.records:,} records read ({rate:,.0f}/s): {counts.events:,} events "
        f"({counts.pages:,} pages, {counts.revisits:,} revisits, {counts.redirects:,} redirects, "
        f"{counts.other_status:,} other statuses); skipped {counts.not_html:,} not HTML, "
        f"{counts.not_http:,} not http(s), "
        f"{counts.records - counts.by_type['response'] - counts.by_type['revisit']:,} "
        f"other record types"
    )
    if counts.rejected:
        first = importer.rejects[0]
        where = f"; all in {rejects}" if rejects is not None else ""
        console.print(
            f"[yellow]{counts.rejected:,} rejected[/yellow] (first: {first.file} at offset "
            f"{first.offset}: {first.reason}{where})"
        )
    if out is not None:
        console.print(f"events → {out}")
    if publisher is not None:
        sent = publisher.close()
        console.print(
            f"published {sent.published:,} of {sent.sent:,} events to {publisher.topic}"
            + (f" ({sent.retried:,} retried)" if sent.retried else "")
        )
        if sent.failed:
            console.print(f"[red]{sent.failed:,} not delivered[/red], spooled to {publisher.spool}")
            raise typer.Exit(1)


def _publisher(bootstrap: str | None, out: Path | None):  # type: ignore[no-untyped-def]
    settings = Settings(**({"kafka_bootstrap": bootstrap} if bootstrap else {}))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    spool = (out.parent if out is not None else Path(".")) / f"undelivered-{stamp}.jsonl"
    return EventPublisher(settings, spool=spool, linger_ms=20)


class _events_writer:
    """``with _events_writer(path) as write``: ``write(bytes)`` appends to the file (gzip for
    ``.gz``), or is None without a path."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.fh = None

    def __enter__(self):  # type: ignore[no-untyped-def]
        if self.path is None:
            return None
        from isal import igzip

        self.path.parent.mkdir(parents=True, exist_ok=True)
        opener = igzip.open if self.path.suffix == ".gz" else open
        self.fh = opener(self.path, "wb")
        return self.fh.write  # type: ignore[union-attr]

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()


def living_site(
    timeline_file: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, metavar="TIMELINE", help="Timeline (or events) file."
        ),
    ],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free one).")] = 8000,
    day_seconds: Annotated[
        float, typer.Option(min=0.001, help="Real seconds one simulated day lasts.")
    ] = 1.0,
    start: Annotated[
        str | None, typer.Option(help="Simulated time the clock starts at (default: the window's).")
    ] = None,
    days: Annotated[
        float | None, typer.Option(min=0.01, help="Days of the timeline to serve (default: all).")
    ] = None,
    site: Annotated[
        str | None, typer.Option(help="Host to serve (default: the one with the most pages).")
    ] = None,
    log: Annotated[
        Path | None, typer.Option(help="Write every request served here (JSON Lines).")
    ] = None,
) -> None:
    """Serve a timeline as a live web site on 127.0.0.1, its clock running fast: pages change,
    are born and die while a crawler crawls them. Ctrl-C stops it."""

    read = _read(timeline_file, None, None)
    timeline = read.timeline
    begin = _end_time(start) if start is not None else timeline.start
    if not timeline.start <= begin < timeline.end:
        console.print(f"[red]error:[/red] --start must fall within {timeline}")
        raise typer.Exit(2)
    end = min(timeline.end, begin + days * 86_400) if days is not None else timeline.end
    if begin != timeline.start or end != timeline.end:
        timeline = timeline.window(begin, end)
    try:
        server = LivingSite(timeline, port=port, day_seconds=day_seconds, site=site, log=log)
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    clock = server.clock
    console.print(
        f"serving {server.site_url} as {server.base_url} "
        f"({len(timeline.alive_at(timeline.start)):,} pages at the start); "
        f"a simulated day lasts {day_seconds:g} s, the window ends in "
        f"{(timeline.end - clock.now()) / clock.speed:,.0f} s"
    )
    console.print(f"clock: {server.base_url}/_clock   seeds: {server.base_url}/sitemap.xml")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
