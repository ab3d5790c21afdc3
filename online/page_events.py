"""Fetched-page events from what a crawler holds after a fetch: a URL, a time, an HTTP status,
headers and a body. One builder for every source (crawl archives, Scrapy), so the same fetch
gives the same event whichever way it reaches lookaround. Pure: values in, dicts out.

* a 2xx HTML page: its outlinks, text (cut to ``max_text_chars``), text size and content
  digest (`online.html.parse_html`), and its size in bytes;
* a redirect (3xx with a ``Location``): the status and the target as the one outlink (a
  non-2xx fetch never changes a page's link history; the target is where the crawler goes);
* any other non-2xx answer: the status alone, no outlinks, as a deleted page reads in a
  timeline;
* a 2xx answer that is not HTML is no page event (`is_html` decides; the caller counts it).

>>> event = page_event("https://a.org/x", 0.0, 301, location="/y")
>>> event["status"], event["outlinks"], event["fetched_at"]
(301, ['https://a.org/y'], '1970-01-01T00:00:00Z')
>>> page_event("https://a.org/x", 1.5, 200, b"<p>Hi <a href=z>z</a></p>")["outlinks"]
['https://a.org/z']
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from online.html import HtmlPage, normalise_links, parse_html, resolve_links

#: Characters of page text an event carries (the text the deployment's embedder reads).
DEFAULT_MAX_TEXT_CHARS = 2000
_HTML_TYPES = ("text/html", "application/xhtml+xml")


def is_html(content_type: str | None, body: bytes) -> bool:
    """Whether a body is an HTML page: by its declared type, else by its first bytes."""
    if content_type:
        return content_type.split(";", 1)[0].strip().lower() in _HTML_TYPES
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def iso_utc(timestamp: float) -> str:
    """Epoch seconds as ISO-8601 UTC with a ``Z`` (microseconds kept when there are any)."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def page_event(
    url: str,
    fetched_at: float,
    status: int,
    body: bytes = b"",
    content_type: str | None = None,
    *,
    location: str | None = None,
    outlinks: list[str] | None = None,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
) -> dict[str, Any]:
    """The fetched-page event of one fetch (see the module's docstring); ``url`` absolute.

    ``outlinks``, when given, are the page's links as the crawler extracted them (absolute;
    normalised here), in place of the ones `online.html.parse_html` finds.
    """
    event: dict[str, Any] = {
        "url": url,
        "fetched_at": iso_utc(fetched_at),
        "status": status,
        "outlinks": [],
        "content_size": len(body),
    }
    if 300 <= status < 400 and location:
        event["outlinks"] = resolve_links([location], url, url)[0]
    elif 200 <= status < 300:
        event.update(page_fields(parse_html(body, url, content_type), max_text_chars))
        if outlinks is not None:
            event["outlinks"] = normalise_links(outlinks)[0]
    return event


def page_fields(page: HtmlPage, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> dict[str, Any]:
    """The event fields a parsed HTML page gives."""
    return {
        "outlinks": page.outlinks,
        "text_size": page.text_size,
        "content_digest": page.content_digest,
        "text": page.text[:max_text_chars],
    }
