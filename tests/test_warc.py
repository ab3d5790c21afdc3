"""Crawl archives as events (streams/warc.py, `lookaround import-warc`): responses, revisits by
each kind of reference, redirects, error statuses, what is skipped and counted, broken records
and archives; the crawl's own archive writer read back to the same events."""

from __future__ import annotations

import gzip
from io import BytesIO
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from online.events import parse_event
from streams.cli import app
from streams.warc import CaptureWriter, WarcImporter

PAGE = b"""<!doctype html><html><head><base href="/docs/"></head><body><p>Hello</p>
<a href="intro">intro</a><a href="https://other.org/x#y">x</a></body></html>"""


class Archive:
    """Writes a test archive with warcio, record by record."""

    def __init__(self, path: Path, gz: bool = True) -> None:
        self.path = path
        self.fh = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.writer = WARCWriter(self.fh, gzip=gz, warc_version="1.1")

    def response(
        self,
        url: str,
        date: str,
        body: bytes = PAGE,
        status: str = "200 OK",
        headers: list[tuple[str, str]] | None = None,
        record_id: str | None = None,
    ) -> str:
        http = StatusAndHeaders(
            status, headers or [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1"
        )
        warc_headers = {"WARC-Date": date}
        if record_id:
            warc_headers["WARC-Record-ID"] = record_id
        record = self.writer.create_warc_record(
            url, "response", payload=BytesIO(body), http_headers=http,
            warc_headers_dict=warc_headers,
        )  # fmt: skip
        self.writer.write_record(record)
        return record.rec_headers.get_header("WARC-Payload-Digest")

    def revisit(
        self,
        url: str,
        date: str,
        digest: str,
        refers_url: str,
        refers_date: str,
        extra: dict[str, str] | None = None,
        status: str = "304 Not Modified",
    ) -> None:
        http = StatusAndHeaders(status, [], protocol="HTTP/1.1") if status else None
        record = self.writer.create_revisit_record(
            url, digest, refers_url, refers_date, http_headers=http,
            warc_headers_dict={"WARC-Date": date, **(extra or {})},
        )  # fmt: skip
        self.writer.write_record(record)

    def other(self, kind: str, url: str = "https://a.org/") -> None:
        if kind == "warcinfo":
            record = self.writer.create_warcinfo_record("x.warc.gz", {"software": "test"})
        else:
            payload = b"GET / HTTP/1.1\r\nHost: a.org\r\n\r\n" if kind == "request" else b"x"
            record = self.writer.create_warc_record(
                url, kind, payload=BytesIO(payload), warc_content_type="text/plain"
            )
        self.writer.write_record(record)

    def close(self) -> Path:
        self.fh.close()
        return self.path


def read(*paths: Path) -> tuple[list[dict], WarcImporter]:
    importer = WarcImporter()
    return list(importer.events(paths)), importer


def test_responses_redirects_statuses_and_what_is_skipped(tmp_path):
    a = Archive(tmp_path / "crawl.warc.gz")
    a.other("warcinfo")
    a.other("request", "https://www.a.org/en/")
    a.response("https://WWW.A.org:443/en/#top", "2026-03-02T10:00:00Z")
    a.response("https://www.a.org/old", "2026-03-02T10:00:01.5Z", b"", "301 Moved",
               [("Location", "/en/")])  # fmt: skip
    a.response("https://www.a.org/gone/", "2026-03-02T10:00:02Z", b"<html>gone</html>", "404 No")
    a.response("https://www.a.org/logo.png", "2026-03-02T10:00:03Z", b"\x89PNG", "200 OK",
               [("Content-Type", "image/png")])  # fmt: skip
    a.response("dns:www.a.org", "2026-03-02T10:00:04Z", b"1.2.3.4", "200 OK")
    untyped = b"<html><a href=z>z</a>"
    a.response("https://www.a.org/untyped", "2026-03-02T10:00:05Z", untyped, "200 OK",
               [("X-Nothing", "1")])  # fmt: skip
    a.other("metadata", "https://www.a.org/en/")
    events, importer = read(a.close())
    by_url = {e["url"]: e for e in events}
    page = by_url["https://www.a.org/en/"]
    assert page["fetched_at"] == "2026-03-02T10:00:00Z" and page["status"] == 200
    assert page["outlinks"] == ["https://www.a.org/docs/intro", "https://other.org/x"]
    assert page["text"] == "Hello" and page["content_size"] == len(PAGE)
    assert by_url["https://www.a.org/old"]["outlinks"] == ["https://www.a.org/en/"]
    assert by_url["https://www.a.org/old"]["fetched_at"] == "2026-03-02T10:00:01.500000Z"
    assert by_url["https://www.a.org/gone/"] == {
        "url": "https://www.a.org/gone/",
        "fetched_at": "2026-03-02T10:00:02Z",
        "status": 404,
        "outlinks": [],
        "content_size": len(b"<html>gone</html>"),
    }
    assert by_url["https://www.a.org/untyped"]["outlinks"] == ["https://www.a.org/z"]  # sniffed
    counts = importer.counts
    assert (counts.records, counts.events, counts.pages, counts.redirects) == (9, 4, 2, 1)
    assert (counts.other_status, counts.not_html, counts.not_http, counts.rejected) == (1, 1, 1, 0)
    assert counts.by_type == {"warcinfo": 1, "request": 1, "response": 6, "metadata": 1}
    for event in events:  # every event passes the event contract as it is
        assert parse_event(event).url == event["url"]


def test_revisits_take_the_capture_they_refer_to(tmp_path):
    first = Archive(tmp_path / "one.warc.gz")
    url = "https://a.org/p/"
    digest = first.response(url, "2026-03-02T00:00:00Z", record_id="<urn:uuid:rec-1>")
    other = first.response("https://a.org/q/", "2026-03-02T00:00:01Z", b"<p>Q</p><a href=/z>z</a>")
    first.close()
    second = Archive(tmp_path / "two.warc", gz=False)  # archives given in crawl order
    # identical payload digest, 200 in the revisit's own headers
    day0 = "2026-03-02T00:00:00Z"
    second.revisit(url, "2026-03-09T00:00:00Z", digest, url, day0, status="200 OK")
    # server-not-modified (304): the referred capture's status and links
    second.revisit(url, "2026-03-16T00:00:00Z", "sha1:NOTKNOWN", url, "2026-03-02T00:00:00Z")
    # by record id, although the digest says otherwise
    second.revisit("https://a.org/copy/", "2026-03-16T00:00:01Z", other, url,
                   "2026-03-02T00:00:00Z", {"WARC-Refers-To": "<urn:uuid:rec-1>"})  # fmt: skip
    # nothing read it could refer to
    second.revisit("https://a.org/never/", "2026-03-16T00:00:02Z", "sha1:NONE",
                   "https://a.org/never/", "2026-03-01T00:00:00Z")  # fmt: skip
    events, importer = read(tmp_path / "one.warc.gz", second.close())
    capture = events[0]
    revisits = events[2:]
    assert [e["fetched_at"][:10] for e in revisits] == ["2026-03-09", "2026-03-16", "2026-03-16"]
    for revisit in revisits:
        assert revisit["status"] == 200
        for field in ("outlinks", "content_digest", "text", "text_size", "content_size"):
            assert revisit[field] == capture[field]
    assert revisits[2]["url"] == "https://a.org/copy/"
    assert importer.counts.revisits == 3
    (reject,) = importer.rejects
    assert reject.url == "https://a.org/never/" and "refers to" in reject.reason
    assert reject.file.endswith("two.warc") and reject.offset > 0


def test_chunked_and_compressed_bodies(tmp_path):
    a = Archive(tmp_path / "c.warc.gz")
    squeezed = gzip.compress(PAGE)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(squeezed), squeezed)
    a.response(
        "https://a.org/en/",
        "2026-03-02T00:00:00Z",
        chunked,
        headers=[
            ("Content-Type", "text/html"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
        ],
    )
    (event,), _ = read(a.close())
    assert event["outlinks"] == ["https://a.org/docs/intro", "https://other.org/x"]


def test_broken_records_and_archives_are_rejects_not_crashes(tmp_path):
    a = Archive(tmp_path / "bad-date.warc.gz")
    a.response("https://a.org/1", "yesterday")
    a.response("https://a.org/2", "2026-03-02T00:00:00Z")
    a.close()
    good = Archive(tmp_path / "good.warc.gz")
    good.response("https://a.org/3", "2026-03-02T00:00:00Z")
    good.close()
    whole = (tmp_path / "good.warc.gz").read_bytes()
    (tmp_path / "truncated.warc.gz").write_bytes(whole + whole[: len(whole) // 2])
    (tmp_path / "text.warc").write_text("this is not an archive\n")
    events, importer = read(
        tmp_path / "bad-date.warc.gz",
        tmp_path / "truncated.warc.gz",
        tmp_path / "text.warc",
        tmp_path / "good.warc.gz",
    )
    assert [e["url"] for e in events] == ["https://a.org/2", "https://a.org/3", "https://a.org/3"]
    reasons = [(r.file.rsplit("/", 1)[1], r.reason.split(":")[0]) for r in importer.rejects]
    assert reasons == [
        ("bad-date.warc.gz", "WARC-Date"),
        ("truncated.warc.gz", "archive unreadable from here"),
        ("text.warc", "not a WARC or ARC record (Content-Length 'archive')"),
    ]
    assert importer.counts.rejected == 3


def test_the_crawls_own_archive_reads_back_to_its_events(tmp_path):
    """CaptureWriter (what the Scrapy integration archives with): a response per fetch, a
    revisit when the body did not change, times to the microsecond."""
    path = tmp_path / "crawl.warc.gz"
    writer = CaptureWriter(path)
    html = [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
    writer.write("https://a.org/en/", 1_772_409_600.123456, 200, html, PAGE, "OK")
    writer.write("https://a.org/en/", 1_772_496_000.5, 200, html, PAGE, "OK")
    writer.write("https://a.org/en/", 1_772_582_400.25, 200, html, PAGE + b"<p>more</p>", "OK")
    writer.write("https://a.org/old", 1_772_582_401.0, 301, [("Location", "/en/")], b"", "Moved")
    writer.close()
    assert (writer.records, writer.revisits) == (4, 1)
    events, importer = read(path)
    assert [e["fetched_at"] for e in events] == [
        "2026-03-02T00:00:00.123456Z",
        "2026-03-03T00:00:00.500000Z",
        "2026-03-04T00:00:00.250000Z",
        "2026-03-04T00:00:01Z",
    ]
    assert importer.counts.revisits == 1
    assert events[0]["content_digest"] == events[1]["content_digest"] != events[2]["content_digest"]
    assert events[3]["status"] == 301 and events[3]["outlinks"] == ["https://a.org/en/"]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_import_warc_command(tmp_path):
    a = Archive(tmp_path / "crawl.warc.gz")
    a.response("https://a.org/en/", "2026-03-02T00:00:00Z")
    a.response("https://a.org/x", "nope")
    a.close()
    out = tmp_path / "out" / "events.jsonl.gz"
    result = run("import-warc", str(a.path), "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert "2 records read" in result.output and "1 events" in result.output
    assert "1 rejected" in result.output
    lines = gzip.decompress(out.read_bytes()).splitlines()
    assert [orjson.loads(line)["url"] for line in lines] == ["https://a.org/en/"]
    rejects = (tmp_path / "out" / "events.rejects.jsonl").read_text().splitlines()
    assert orjson.loads(rejects[0])["reason"].startswith("WARC-Date")
    # A user's mistakes: a message and exit code 2, no traceback.
    missing = run("import-warc", str(tmp_path / "nope.warc.gz"), "--out", str(out))
    assert missing.exit_code == 2 and "no such archive" in missing.output
    nowhere = run("import-warc", str(a.path))
    assert nowhere.exit_code == 2 and "--out" in nowhere.output


@pytest.mark.timeout(120)
def test_import_warc_produce_to_the_topic(broker, tmp_path):
    """``--produce``: every event on the fetched-page topic, keyed by its URL."""
    from streams.harness import worker_settings
    from streams.kafka_io import ensure_topics
    from streams.topic_replay import read_topic

    a = Archive(tmp_path / "crawl.warc.gz")
    urls = [f"https://a.org/p{i}" for i in range(25)]
    for url in urls:
        a.response(url, "2026-03-02T00:00:00Z")
    a.close()
    settings = worker_settings(broker, f"warc{tmp_path.name[-8:]}")
    ensure_topics(settings)
    import os

    os.environ["LOOKAROUND_TOPIC_FETCHED"] = settings.topic_fetched
    try:
        result = run("import-warc", str(a.path), "--produce", "--bootstrap", broker, "--quiet")
    finally:
        del os.environ["LOOKAROUND_TOPIC_FETCHED"]
    assert result.exit_code == 0, result.output
    assert "published 25 of 25 events" in result.output
    messages = read_topic(settings, settings.topic_fetched)
    # Kafka orders a topic per partition only, so the keys are compared as a set.
    assert sorted(m.key.decode() for m in messages) == sorted(urls)
    assert all(orjson.loads(m.value)["url"] == m.key.decode() for m in messages)
