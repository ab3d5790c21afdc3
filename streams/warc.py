"""Crawl archives (WARC, WARC.gz) as fetched-page events: what `lookaround import-warc` reads.

Records are read with warcio, in file order, the files in the order given (give a crawl's
archives in crawl order: a revisit is resolved against captures read before it).

* ``response`` records of http(s) URLs: the HTTP status and ``WARC-Date`` (the fetch time)
  make the event; a 2xx HTML page gives its outlinks, text and digest, a redirect its target,
  any other status the status alone (`online.page_events.page_event`).
* ``revisit`` records (the server said "not modified", or the payload was identical to an
  earlier capture's, so the archive kept no copy): the event of the capture they refer to
  (by ``WARC-Refers-To``, ``WARC-Payload-Digest``, or ``WARC-Refers-To-Target-URI`` and
  ``-Date``, else the same URL's latest capture), at the revisit's own time: same outlinks,
  same digest. One whose capture was not read is rejected.
* Skipped and counted: 2xx answers that are not HTML (images, scripts, PDFs...), URLs that
  are not http(s) (Heritrix's ``dns:`` records), and every other record type (``request``,
  ``warcinfo``, ``metadata``, ``resource``...).

A record that cannot be read (a bad date, a broken body) is a reject naming the file, the
record's offset and the reason; the records around it are read. An archive that breaks off
(truncated, not a WARC) is a reject too, and the next file is read.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from online.links import InvalidURL, link_info
from online.page_events import DEFAULT_MAX_TEXT_CHARS, is_html, iso_utc, page_event

#: fields a revisit takes from the capture it refers to
_CAPTURED = ("status", "outlinks", "content_size", "text_size", "content_digest", "text")


@dataclass(frozen=True, slots=True)
class WarcReject:
    """A record (or an archive) that gave no event: where, and why."""

    file: str
    offset: int
    reason: str
    url: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "offset": self.offset, "reason": self.reason, "url": self.url}


@dataclass(frozen=True, slots=True)
class _Rejected:
    reason: str
    url: str | None


@dataclass
class WarcCounts:
    """What an import read and made."""

    records: int = 0
    by_type: Counter = field(default_factory=Counter)
    events: int = 0
    pages: int = 0
    redirects: int = 0
    other_status: int = 0
    revisits: int = 0
    not_html: int = 0
    not_http: int = 0
    rejected: int = 0
    bytes_read: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "by_type"}
        out["by_type"] = dict(sorted(self.by_type.items()))
        return out


class _Captures:
    """What a revisit may refer to: every capture's event fields (as compact JSON), found by
    record id, payload digest or URL and time."""

    def __init__(self) -> None:
        self._fields: list[bytes] = []
        self._by_record: dict[str, int] = {}
        self._by_digest: dict[str, int] = {}
        self._by_url: dict[str, tuple[list[float], list[int]]] = {}

    def add(
        self, event: dict[str, Any], at: float, record_id: str | None, digest: str | None
    ) -> None:
        k = len(self._fields)
        captured = {name: event[name] for name in _CAPTURED if name in event}
        self._fields.append(orjson.dumps(captured))
        if record_id:
            self._by_record[record_id] = k
        if digest:
            self._by_digest[digest] = k
        times, ks = self._by_url.setdefault(event["url"], ([], []))
        at_or_after = bisect.bisect_right(times, at)
        times.insert(at_or_after, at)
        ks.insert(at_or_after, k)

    def find(
        self, refers_to: str | None, digest: str | None, url: str | None, before: float
    ) -> dict[str, Any] | None:
        k = self._by_record.get(refers_to) if refers_to else None
        if k is None and digest:
            k = self._by_digest.get(digest)
        if k is None and url in self._by_url:
            times, ks = self._by_url[url]
            at = bisect.bisect_right(times, before) - 1
            k = ks[at] if at >= 0 else None
        return orjson.loads(self._fields[k]) if k is not None else None


class WarcImporter:
    """Turns archives into events; keeps the captures a later revisit may refer to, the
    counts and the rejects across files.

    >>> importer = WarcImporter()
    >>> importer.counts.events, importer.rejects
    (0, [])
    """

    def __init__(self, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> None:
        self.max_text_chars = max_text_chars
        self.counts = WarcCounts()
        self.rejects: list[WarcReject] = []
        self._captures = _Captures()

    def events(
        self, paths: Iterable[Path], progress: Callable[[int], None] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every event of every archive, in order. ``progress(bytes)`` is told how far the
        reading is into the current file, after each record."""
        for path in paths:
            yield from self.file_events(path, progress)

    def file_events(
        self, path: Path, progress: Callable[[int], None] | None = None
    ) -> Iterator[dict[str, Any]]:
        with open(path, "rb") as fh:
            yield from self._read(fh, str(path), progress)

    def _read(
        self, fh: BinaryIO, name: str, progress: Callable[[int], None] | None
    ) -> Iterator[dict[str, Any]]:
        records = ArchiveIterator(fh, arc2warc=True)  # ARC archives read as WARC records
        offset = end = 0
        try:
            for record in records:
                self.counts.records += 1
                event = self._record_event(record)
                offset = records.get_record_offset()  # reads the record to its end
                end = offset + records.get_record_length()
                if isinstance(event, _Rejected):
                    self._reject(name, offset, event.reason, event.url)
                elif event is not None:
                    self.counts.events += 1
                    yield event
                if progress is not None:
                    progress(fh.tell())
        except (ArchiveLoadFailed, ValueError, OSError, EOFError) as exc:
            reason = f"archive unreadable from here: {_first_line(exc)}"
            self._reject(name, offset, reason)
        else:
            fh.seek(end)
            left = len(fh.read().strip())
            if left:  # warcio ends quietly at a truncated gzip member
                reason = f"archive unreadable from here: it ends within a record ({left:,} bytes)"
                self._reject(name, end, reason)
        self.counts.bytes_read += fh.tell()

    def _record_event(self, record: Any) -> dict[str, Any] | _Rejected | None:
        kind = record.rec_type
        length = record.rec_headers.get_header("Content-Length") or ""
        if not length.strip().isdigit():  # what warcio makes of a file that is no archive
            return _Rejected(f"not a WARC or ARC record (Content-Length {length!r})", None)
        self.counts.by_type[kind] += 1
        if kind not in ("response", "revisit"):
            return None
        headers = record.rec_headers
        uri = headers.get_header("WARC-Target-URI") or ""
        try:
            at = _warc_time(headers.get_header("WARC-Date"))
        except ValueError as exc:
            return _Rejected(f"WARC-Date: {exc}", uri or None)
        try:
            url = link_info(uri).url
        except InvalidURL:
            self.counts.not_http += 1
            return None
        if kind == "revisit":
            return self._revisit(record, url, at)
        http = record.http_headers
        if http is None:
            return _Rejected("response without HTTP headers", url)
        try:
            status = int(http.get_statuscode())
            body = record.content_stream().read()
        except (ValueError, OSError, EOFError) as exc:
            return _Rejected(f"unreadable HTTP response: {exc}", url)
        content_type = http.get_header("Content-Type")
        if 200 <= status < 300 and not is_html(content_type, body):
            self.counts.not_html += 1
            return None
        event = page_event(
            url,
            at,
            status,
            body,
            content_type,
            location=http.get_header("Location"),
            max_text_chars=self.max_text_chars,
        )
        if 200 <= status < 300:
            self.counts.pages += 1
        elif 300 <= status < 400 and event["outlinks"]:
            self.counts.redirects += 1
        else:
            self.counts.other_status += 1
        self._captures.add(
            event,
            at,
            headers.get_header("WARC-Record-ID"),
            headers.get_header("WARC-Payload-Digest"),
        )
        return event

    def _revisit(self, record: Any, url: str, at: float) -> dict[str, Any] | _Rejected:
        headers = record.rec_headers
        refers_url = headers.get_header("WARC-Refers-To-Target-URI")
        refers_date = headers.get_header("WARC-Refers-To-Date")
        try:
            refers_url = link_info(refers_url).url if refers_url else url
            before = _warc_time(refers_date) if refers_date else at
        except (InvalidURL, ValueError) as exc:
            return _Rejected(f"revisit: bad reference: {exc}", url)
        captured = self._captures.find(
            headers.get_header("WARC-Refers-To"),
            headers.get_header("WARC-Payload-Digest"),
            refers_url,
            before,
        )
        if captured is None:
            reason = "revisit: the capture it refers to is not in the archives read before it"
            return _Rejected(reason, url)
        http = record.http_headers
        status = captured["status"]
        if http is not None:
            try:
                own = int(http.get_statuscode())
            except ValueError:
                own = 304
            if own != 304:
                status = own
        self.counts.revisits += 1
        return {"url": url, "fetched_at": iso_utc(at), **captured, "status": status}

    def _reject(self, name: str, offset: int, reason: str, url: str | None = None) -> None:
        self.counts.rejected += 1
        self.rejects.append(WarcReject(name, offset, reason, url))


def _warc_time(value: str | None) -> float:
    if not value:
        raise ValueError("missing")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if "\n" in text else text


class CaptureWriter:
    """Writes a crawl's fetches as a WARC 1.1 archive (gzip per record for ``.gz``): a
    ``response`` record per fetch, at the time given (microseconds kept, so a fast clock's
    times survive), or a ``revisit`` record (identical payload digest) when the body is the
    same as the URL's previous capture's, as web archives deduplicate. ``lookaround
    import-warc`` reads it back to the same events.

    ``headers`` are the HTTP response headers as received; the body is written as the crawler
    holds it (decoded), so encoding headers are dropped and the length set to the body's.
    """

    _DROPPED = frozenset({"content-encoding", "transfer-encoding", "content-length"})

    def __init__(self, path: Path) -> None:
        from warcio.warcwriter import WARCWriter

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh = open(path, "ab")  # noqa: SIM115 - closed in close()
        self._writer = WARCWriter(self._fh, gzip=path.suffix == ".gz", warc_version="1.1")
        self._last: dict[str, tuple[str, str]] = {}  # url -> (payload digest, WARC-Date)
        self.records = 0
        self.revisits = 0

    def write(
        self,
        url: str,
        at: float,
        status: int,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        reason: str = "",
    ) -> None:
        import hashlib
        from base64 import b32encode
        from io import BytesIO

        from warcio.statusandheaders import StatusAndHeaders

        kept = [(k, v) for k, v in headers if k.lower() not in self._DROPPED]
        kept.append(("Content-Length", str(len(body))))
        http = StatusAndHeaders(f"{status} {reason}".strip(), kept, protocol="HTTP/1.1")
        date = iso_utc(at)
        if not date.count("."):  # WARC 1.1 dates with a fraction throughout
            date = date[:-1] + ".000000Z"
        digest = "sha1:" + b32encode(hashlib.sha1(body).digest()).decode("ascii")
        previous = self._last.get(url)
        warc_headers = {"WARC-Date": date}
        if previous is not None and previous[0] == digest:
            record = self._writer.create_revisit_record(
                url, digest, url, previous[1], http_headers=http, warc_headers_dict=warc_headers
            )
            self.revisits += 1
        else:
            warc_headers["WARC-Payload-Digest"] = digest
            record = self._writer.create_warc_record(
                url,
                "response",
                payload=BytesIO(body),
                length=len(body),
                http_headers=http,
                warc_headers_dict=warc_headers,
            )
            self._last[url] = (digest, date)
        self._writer.write_record(record)
        self.records += 1

    def close(self) -> None:
        self._fh.close()
