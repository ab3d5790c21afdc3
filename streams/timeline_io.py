"""Timeline files: read a timeline (JSON Lines, ``.gz`` allowed) or derive one from an events
file of repeated crawls, and write one.

`read_timeline` tells the two apart by the first valid record: ``at`` means a timeline,
``fetched_at`` an events file. Bad lines never stop the read: each becomes a reject naming
its line, field and reason (`TimelineRead.rejects`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson
from isal import igzip

from batch.timeline import Timeline, TimelineParser, TimelineReject, timeline_from_fetches
from online.events import EventError, FetchedPage, parse_event

TIMELINE, EVENTS = "timeline", "events"
#: where a command writes the rejected lines of a timeline (or events) file
REJECTS_NAME = "timeline_rejects.jsonl"


@dataclass
class TimelineRead:
    """A timeline as read from a file: the timeline, what kind of file it came from, lines
    read and the rejected ones."""

    timeline: Timeline
    kind: str
    lines: int
    rejects: list[TimelineReject] = field(default_factory=list)


def _open(path: Path) -> BinaryIO:
    if path.suffix == ".gz":
        return igzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with _open(path) as fh:
        yield from enumerate(fh, 1)


def file_kind(path: Path) -> str:
    """``timeline`` or ``events``, by the first line that is a JSON object with either field
    (``timeline`` when none has: the timeline parser then names what is wrong)."""
    for _, line in _lines(path):
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(data, dict):
            if "at" in data:
                return TIMELINE
            if "fetched_at" in data:
                return EVENTS
    return TIMELINE


def read_timeline(path: Path, *, end: float | None = None) -> TimelineRead:
    """The timeline in ``path``, or the one derived from the repeated crawls in it (see
    `batch.timeline.timeline_from_fetches`). ValueError when no line is valid."""
    if file_kind(path) == EVENTS:
        return _from_events(path, end)
    parser = TimelineParser()
    for number, line in _lines(path):
        parser.add(line, number)
    return TimelineRead(parser.timeline(end=end), TIMELINE, parser.lines, parser.rejects)


def _from_events(path: Path, end: float | None) -> TimelineRead:
    pages: list[FetchedPage] = []
    rejects: list[TimelineReject] = []
    lines = 0
    for number, line in _lines(path):
        if not line.strip():
            continue
        lines += 1
        try:
            pages.append(parse_event(line))
        except EventError as err:
            raw = line.decode("utf-8", "replace").rstrip("\n")
            rejects.append(TimelineReject(number, err.field, err.reason, raw))
    return TimelineRead(timeline_from_fetches(pages, end=end), EVENTS, lines, rejects)


def write_timeline(timeline: Timeline, path: Path) -> int:
    """Write ``timeline`` as a timeline file (sorted by ``at``); the number of records."""
    records = sorted(
        (v for url in timeline.urls for v in timeline.versions(url)), key=lambda v: (v.at, v.url)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = igzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        for version in records:
            fh.write(orjson.dumps(version.record()) + b"\n")
    return len(records)


def write_rejects(rejects: list[TimelineReject], path: Path) -> None:
    with open(path, "wb") as fh:
        for reject in rejects:
            fh.write(orjson.dumps(reject.as_dict()) + b"\n")
