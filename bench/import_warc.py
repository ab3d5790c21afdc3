"""`lookaround import-warc` throughput on a generated 1 GB crawl archive (floor: 2,000 records/s).

    python bench/import_warc.py                 # makes runs/bench-warc/crawl.warc.gz once, times it
    python bench/import_warc.py --size-mb 200   # a smaller archive
    python bench/import_warc.py --parsers-only      # only the HTML parsers compared

The archive is what a crawler such as Heritrix or wget writes: two crawls of a site, a
``request`` and a ``response`` record per fetch, pages of about 30 KB of HTML (a head with
styles and a script, about 60 navigation links, the page's own text and links, a footer),
images among them (skipped), redirects, and in the second crawl ``revisit`` records for the
pages that did not change. Each record is its own gzip member, as WARC.gz requires.

Prints the archive's size and records, the command's wall time and records (all WARC records,
and the response and revisit records that are pages) per second, against the floor, with the
machine's load average; and the HTML parser's cost per page, selectolax (the one used) against
lxml, on a sample of the archive's pages.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLOOR = 2_000.0
WORDS = (  # noqa: SIM905 - a sentence reads better than a list of words
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris "
    "nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse "
    "cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui "
    "officia deserunt mollit anim id est laborum"
).split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _page(rng: random.Random, k: int, pages: int, version: int, nav: str, head: str) -> bytes:
    """About 30 KB of HTML: head, navigation, text with links, footer."""
    own = random.Random(k * 7919 + version)
    paragraphs = []
    for _ in range(12):
        links = "".join(
            f' <a href="/section/{own.randrange(pages)}/">{_text(own, 3)}</a>' for _ in range(3)
        )
        paragraphs.append(f"<p>{_text(own, 150)}{links}</p>")
    external = "".join(
        f'<li><a href="https://ext{own.randrange(500)}.example.net/p/{own.randrange(10**6)}">'
        f"{_text(own, 2)}</a></li>"
        for _ in range(8)
    )
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>Page {k}</title>{head}"
        f"</head><body>{nav}<main><h1>Page {k} v{version}</h1>{''.join(paragraphs)}"
        f"<ul>{external}</ul></main><footer>{nav[:1500]}</footer></body></html>"
    ).encode()


def generate(path: Path, size_mb: float, seed: int = 0) -> dict[str, int]:
    """Write the archive (two crawls, until ``size_mb`` MB on disk)."""
    from isal import isal_zlib
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    rng = random.Random(seed)
    head = (
        "<style>" + ("body{margin:0;padding:0}.nav a{color:#333;text-decoration:none}" * 60)
        + "</style><script>" + ("window.dataLayer=window.dataLayer||[];" * 80) + "</script>"
    )  # fmt: skip
    nav = "<nav class=nav><ul>" + "".join(
        f'<li><a href="/section/{i}/">Section {i}</a></li>' for i in range(60)
    ) + "</ul></nav>"  # fmt: skip
    buffer = BytesIO()
    writer = WARCWriter(buffer, gzip=False, warc_version="1.1")
    target = size_mb * 1e6
    counts = {"records": 0, "responses": 0, "revisits": 0, "pages": 0}
    path.parent.mkdir(parents=True, exist_ok=True)
    pages = max(1000, int(target / 7_800))  # 3.9 KB on disk a fetch (records and revisits)
    digests: dict[int, tuple[str, str]] = {}
    started = time.time()
    with open(path, "wb") as out:

        def emit(record) -> None:  # type: ignore[no-untyped-def]
            buffer.seek(0)
            buffer.truncate()
            writer.write_record(record)
            squeezer = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
            out.write(squeezer.compress(buffer.getvalue()) + squeezer.flush())
            counts["records"] += 1

        for crawl in range(2):
            for k in range(pages):
                if out.tell() >= target:
                    return {**counts, "bytes": out.tell(), "pages_per_crawl": pages}
                url = f"https://www.site.example/section/{k}/"
                moment = time.gmtime(1_767_225_600 + crawl * 604_800 + k)
                date = time.strftime("%Y-%m-%dT%H:%M:%SZ", moment)
                request = StatusAndHeaders(
                    f"GET /section/{k}/ HTTP/1.1",
                    [("Host", "www.site.example")],
                    is_http_request=True,
                )
                emit(
                    writer.create_warc_record(
                        url, "request", http_headers=request, warc_headers_dict={"WARC-Date": date}
                    )
                )
                kind = k % 20
                if kind == 0:  # an image
                    body, headers, status = (
                        bytes(rng.randrange(256) for _ in range(2000)),
                        [("Content-Type", "image/jpeg")],
                        "200 OK",
                    )
                elif kind == 1:  # a redirect
                    body, headers, status = (
                        b"",
                        [("Location", f"/section/{k + 1}/")],
                        "301 Moved Permanently",
                    )
                else:
                    changed = crawl == 0 or rng.random() < 0.4
                    version = crawl if changed else 0
                    body = _page(rng, k, pages, version, nav, head)
                    headers, status = [("Content-Type", "text/html; charset=utf-8")], "200 OK"
                    counts["pages"] += 1
                http = StatusAndHeaders(
                    status, [*headers, ("Content-Length", str(len(body)))], protocol="HTTP/1.1"
                )
                if crawl and kind > 1 and not changed:
                    digest, first = digests[k]
                    emit(
                        writer.create_revisit_record(
                            url,
                            digest,
                            url,
                            first,
                            http_headers=StatusAndHeaders(
                                "304 Not Modified", [], protocol="HTTP/1.1"
                            ),
                            warc_headers_dict={"WARC-Date": date},
                        )
                    )
                    counts["revisits"] += 1
                    continue
                record = writer.create_warc_record(
                    url,
                    "response",
                    payload=BytesIO(body),
                    length=len(body),
                    http_headers=http,
                    warc_headers_dict={"WARC-Date": date},
                )
                digests[k] = (record.rec_headers.get_header("WARC-Payload-Digest"), date)
                emit(record)
                counts["responses"] += 1
                if counts["records"] % 20_000 == 0:
                    print(
                        f"  generating: {out.tell() / 1e6:,.0f} MB, {time.time() - started:.0f} s",
                        flush=True,
                    )
        return {**counts, "bytes": out.tell(), "pages_per_crawl": pages}


def compare_parsers(path: Path, sample: int = 2000) -> dict[str, float]:
    """Microseconds a page for links and text: selectolax (online.html) and lxml."""
    import lxml.html
    from warcio.archiveiterator import ArchiveIterator

    from online.html import parse_html, resolve_links

    bodies = []
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh):
            if record.rec_type == "response" and record.http_headers.get_statuscode() == "200":
                body = record.content_stream().read()
                if body.startswith(b"<!doctype"):
                    bodies.append((record.rec_headers.get_header("WARC-Target-URI"), body))
            if len(bodies) >= sample:
                break

    def with_lxml(body: bytes, url: str) -> None:
        tree = lxml.html.fromstring(body)
        hrefs = [a.get("href") or "" for a in tree.iter("a", "area") if a.get("href") is not None]
        resolve_links(hrefs, url, url)
        for bad in tree.xpath("//script|//style|//a"):
            bad.drop_tree()
        " ".join(tree.text_content().split())

    from online import html

    out = {}
    for name, parse in (
        ("selectolax", lambda b, u: parse_html(b, u, "text/html")),
        ("lxml", with_lxml),
    ):
        html._RESOLVED.clear()  # the same link cache for both: filled by a first pass
        for url, body in bodies:
            parse(body, url)
        started = time.perf_counter()
        for url, body in bodies:
            parse(body, url)
        out[name] = (time.perf_counter() - started) / len(bodies) * 1e6
    out["pages"] = len(bodies)
    out["kb_per_page"] = sum(len(b) for _, b in bodies) / len(bodies) / 1024
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=ROOT / "runs/bench-warc/crawl.warc.gz")
    parser.add_argument("--size-mb", type=float, default=1000.0)
    parser.add_argument("--parsers-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.archive.exists() or args.archive.stat().st_size < 0.95 * args.size_mb * 1e6:
        print(f"generating {args.archive} ({args.size_mb:,.0f} MB) ...", flush=True)
        started = time.time()
        made = generate(args.archive, args.size_mb)
        print(f"  {made} in {time.time() - started:.0f} s")
    size = args.archive.stat().st_size
    parsers = compare_parsers(args.archive)
    print(
        f"HTML parser, {parsers['pages']:.0f} pages of {parsers['kb_per_page']:.0f} KB: "
        f"selectolax {parsers['selectolax']:,.0f} µs a page, lxml {parsers['lxml']:,.0f} µs "
        f"({parsers['lxml'] / parsers['selectolax']:.1f}x)"
    )
    if args.parsers_only:
        return 0
    out = args.archive.with_name("events.jsonl.gz")
    load_before = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "import-warc", str(args.archive), "--out", str(out),
         "--quiet"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    load_after = os.getloadavg()
    print(done.stderr.strip())
    if done.returncode != 0:
        return done.returncode
    summary = " ".join(done.stderr.split())
    records = int(re.search(r"([\d,]+) records read", summary).group(1).replace(",", ""))
    pages = sum(
        int(re.search(rf"([\d,]+) {name}", summary).group(1).replace(",", ""))
        for name in ("pages", "revisits")
    )
    rate = records / seconds
    print(
        f"import-warc: {size / 1e6:,.0f} MB, {records:,} records ({pages:,} of them pages and "
        f"revisits) in {seconds:.1f} s wall (start-up included): {rate:,.0f} records/s "
        f"(floor {FLOOR:,.0f}: ratio {rate / FLOOR:.2f}), {pages / seconds:,.0f} pages/s, "
        f"{size / 1e6 / seconds:.1f} MB/s; load average before {load_before[0]:.1f}, "
        f"after {load_after[0]:.1f} (2 cores)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
