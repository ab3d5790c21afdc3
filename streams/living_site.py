"""A living test site: a timeline (`batch.timeline`) served as real HTML pages over HTTP on
127.0.0.1, its clock running fast, so pages change, are born and die while a real crawler
crawls them.

* A page of the timeline's site (``https://docs.astro.build/en/x/``) is served at the same
  path (``http://127.0.0.1:PORT/en/x/``) as its state at the clock's time
  (`Timeline.state_at`): 200 with its text and links, or the status of a deleted page, or 404
  where the page does not exist (yet). A path without its trailing slash whose page has one is
  redirected there (301), as static-site servers do.
* Links to the site are written relative to ``<base href="/">`` (so a crawler must honour it),
  links to other hosts as they are. The text is the version's ``text``.
* ``/sitemap.xml`` lists the pages alive when the window starts: a crawler's seeds. Pages born
  later are found only through links, as in `lookaround simulate`.
* ``/_clock`` is the clock (`streams.clock.FastClock` as JSON, plus ``now`` and the window),
  which the crawler reads its fetch times from; ``/robots.txt`` allows everything.
* Every page request is recorded (`LivingSite.served`, and the ``log`` file): the timeline URL,
  the simulated time it was answered at and the status. That log is the crawl's fetch log for
  `batch.discovery.measure`, the same for every crawler.

The site serves one host of the timeline (``site``; default the one with the most pages):
links to its other hosts are external links.
"""

from __future__ import annotations

import html
import threading
from collections import Counter
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import orjson
from w3lib.url import safe_url_string

from batch.timeline import Timeline, Version
from online.links import InvalidURL, link_info
from streams.clock import FastClock

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Served:
    """One page request the site answered: the timeline URL, simulated time, status."""

    url: str
    at: float
    status: int

    def as_dict(self) -> dict[str, object]:
        return {"url": self.url, "at": self.at, "status": self.status}


class LivingSite(ThreadingHTTPServer):
    """The server; `LivingSite.start` runs it on a thread, `serve_forever` in the caller's."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        timeline: Timeline,
        *,
        port: int = 0,
        day_seconds: float = 1.0,
        site: str | None = None,
        log: Path | None = None,
        clock: FastClock | None = None,
    ) -> None:
        self.timeline = timeline
        self.site_url = _site_url(timeline, site)
        self.site = link_info(self.site_url).site
        super().__init__(("127.0.0.1", port), _Handler)
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}"
        self.clock = clock or FastClock.starting_now(timeline.start, DAY / day_seconds)
        self.served: list[Served] = []
        self._log = open(log, "ab") if log else None  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._seeds = self._sitemap(timeline.alive_at(timeline.start))
        # A crawler asks for a page by its safe (percent-encoded) URL: map those back.
        self._by_safe = {
            safe: url for url in timeline.urls if (safe := safe_url_string(url)) != url
        }

    # -- URLs -----------------------------------------------------------------------------------

    def timeline_url(self, local: str) -> str:
        """The timeline URL of a URL (or a path) of this server."""
        parts = urlsplit(local)
        path = parts.path or "/"
        url = f"{self.site_url}{path}" + (f"?{parts.query}" if parts.query else "")
        return self._by_safe.get(url, url)

    def local_url(self, url: str) -> str | None:
        """This server's URL of a timeline URL of the site (None for another site's)."""
        try:
            info = link_info(url)
        except InvalidURL:
            return None
        if info.site != self.site:
            return None
        rest = info.url.split("://", 1)[1]
        return self.base_url + rest[rest.find("/") :]

    # -- answers --------------------------------------------------------------------------------

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a GET of ``path`` now; page requests are recorded."""
        route = urlsplit(path).path
        if route == "/_clock":
            window = {"window_start": self.timeline.start, "window_end": self.timeline.end}
            body = orjson.dumps({**self.clock.as_dict(), "now": self.clock.now(), **window})
            return 200, {"Content-Type": "application/json"}, body
        if route == "/robots.txt":
            body = f"User-agent: *\nAllow: /\nSitemap: {self.base_url}/sitemap.xml\n".encode()
            return 200, {"Content-Type": "text/plain"}, body
        if route == "/sitemap.xml":
            return 200, {"Content-Type": "application/xml"}, self._seeds
        at = self.clock.now()
        url = self.timeline_url(path)
        version = self.timeline.state_at(url, at)
        if version is None and not route.endswith("/"):
            moved = self.timeline.state_at(url.split("?", 1)[0] + "/", at)
            if moved is not None and moved.ok:
                self._record(url, at, 301)
                location = route + "/" + (f"?{urlsplit(path).query}" if "?" in path else "")
                return 301, {"Location": location, "Content-Type": "text/html"}, b""
        status = version.status if version is not None else 404
        self._record(url, at, status)
        headers = {"Content-Type": "text/html; charset=utf-8"}
        if version is not None:
            headers["Last-Modified"] = formatdate(version.at, usegmt=True)
        if version is None or not version.ok:
            reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
            return status, headers, _error_page(status, reason)
        return 200, headers, self.render(version)

    def render(self, version: Version) -> bytes:
        """The HTML of a live version: its text, then its links (the site's relative to the
        base, other hosts' as they are)."""
        items = []
        for link in version.outlinks:
            local = self.local_url(link)
            href = local[len(self.base_url) + 1 :] if local is not None else link
            label = link.rstrip("/").rsplit("/", 1)[-1] or link
            items.append(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a></li>')
        path = urlsplit(version.url).path
        return (
            '<!doctype html><html><head><meta charset="utf-8"><base href="/">'
            f"<title>{html.escape(path)}</title></head><body><main>"
            f"<p>{html.escape(version.page.text or '')}</p>"
            f"<ul>{''.join(items)}</ul></main></body></html>"
        ).encode()

    def _sitemap(self, urls: list[str]) -> bytes:
        locs = "".join(
            f"<url><loc>{html.escape(local)}</loc></url>"
            for url in urls
            if (local := self.local_url(url)) is not None
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
        ).encode()

    def _record(self, url: str, at: float, status: int) -> None:
        served = Served(url, at, status)
        with self._lock:
            self.served.append(served)
            if self._log is not None:
                self._log.write(orjson.dumps(served.as_dict()) + b"\n")

    # -- running --------------------------------------------------------------------------------

    def restart_clock(self) -> FastClock:
        """Set the clock back to the window's start, from now on (and forget what was served):
        a crawl started next sees the whole window."""
        with self._lock:
            self.clock = FastClock.starting_now(self.timeline.start, self.clock.speed)
            self.served = []
        return self.clock

    def start(self) -> LivingSite:
        """Serve on a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="living-site", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(5)
        self.server_close()
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: crawlers reuse connections
    server: LivingSite

    def do_GET(self) -> None:
        status, headers, body = self.server.answer(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # requests are recorded by the server, not printed


def _site_url(timeline: Timeline, site: str | None) -> str:
    """scheme://host of the served site: the most common of its pages'."""
    origins = Counter()
    for url in timeline.urls:
        info = link_info(url)
        if site is None or info.site == site or info.site == site.removeprefix("www."):
            rest = info.url.split("://", 1)[1]
            origins[f"{info.scheme}://{rest[: rest.find('/')]}"] += 1
    if not origins:
        raise ValueError(f"the timeline has no page of {site!r}")
    return origins.most_common(1)[0][0]


def _error_page(status: int, reason: str) -> bytes:
    return f"<!doctype html><html><body><h1>{status} {reason}</h1></body></html>".encode()
