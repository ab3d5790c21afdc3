"""What a fetched HTML page tells lookaround: its outlinks, its text and a digest of that text.

Pure (no I/O): bytes in, values out. `streams.warc` (crawl archives) and the Scrapy integration
(`streams.crawlers.scrapy`) both build their fetched-page events with it, so a page fetched
by Scrapy and the same page read back from a WARC give the same event.

* **Outlinks**: the ``href`` of every ``<a>`` and ``<area>``, in document order, HTML5
  whitespace stripped, resolved against the document's first ``<base href>`` (itself resolved
  against the page's URL) or the page's URL; made safe as a browser (and Scrapy's
  LinkExtractor, through w3lib) does: non-ASCII hosts IDNA-encoded, unsafe characters
  percent-encoded in the page's encoding; then normalised by the event contract
  (`online.links.normalize_url`: scheme and host lower-cased, default port and fragment
  dropped). Only http(s) links are kept; duplicates collapse onto the first.
* **Text**: the text of ``<body>`` outside links, scripts, styles and templates, whitespace
  collapsed. The links are left out so that the **content digest** (SHA-1 of that text) tells
  content changes from link changes, as the event contract's ``content_digest`` means.
* **Encoding**: as Scrapy decodes a response (w3lib's ``html_to_unicode``: byte-order mark,
  the HTTP ``Content-Type`` charset, ``<meta charset>``, then UTF-8 or cp1252).

The parser is Lexbor through selectolax (`bench/import_warc.py --parsers` measures it against
lxml).

>>> page = parse_html(b'<html><head><base href="/docs/"></head><body><p>Hello'
...     b' <a href="intro#top">intro</a></p><a href="HTTPS://Other.org:443/x">x</a>'
...     b'<a href="mailto:me@a.org">me</a></body></html>', "https://www.a.org/en/")
>>> page.outlinks
['https://www.a.org/docs/intro', 'https://other.org/x']
>>> page.text, page.text_size, page.content_digest[:12]
('Hello', 5, 'f7ff9e8b7bb2')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser
from w3lib.encoding import html_to_unicode
from w3lib.html import strip_html5_whitespace
from w3lib.url import safe_url_string

from online.links import CACHE_SIZE, InvalidURL, link_info

#: Elements whose text is not page text (and links, whose text goes with the links).
_NOT_TEXT = ["script", "style", "noscript", "template", "a", "area"]
#: An absolute URL `safe_url_string` keeps: a plain host, a port, then only characters of
#: RFC 3986's unreserved and reserved sets (no square brackets or quote) and '%'; without ';'
#: (which urljoin reads as parameters), one `urljoin` keeps too.
_SAFE_ABSOLUTE = re.compile(
    r"https?://[A-Za-z0-9\-._~]++(?::[0-9]++)?(?:[/?#][A-Za-z0-9\-._~:/?#@!$&()*+,;=%]*+)?"
)
_PLAIN_ABSOLUTE = re.compile(
    r"https?://[A-Za-z0-9\-._~]++(?::[0-9]++)?(?:[/?#][A-Za-z0-9\-._~:/?#@!$&()*+,=%]*+)?"
)
#: A root-relative link of those characters (not protocol-relative)
_PLAIN_ROOTED = re.compile(r"/(?!/)[A-Za-z0-9\-._~:/?#@!$&()*+,=%]*+")
_HTTP = ("http://", "https://")
#: HTML5's whitespace, which LinkExtractor strips from an href
_HTML5_WHITESPACE = " \t\n\r\x0c"
#: resolved links that depend on the base's origin only: (origin, href, encoding) -> URL
_RESOLVED: dict[tuple[str, ...], str | None] = {}
_RESOLVED_SIZE = CACHE_SIZE
_MISSING = object()


@dataclass(frozen=True, slots=True)
class HtmlPage:
    """The facts of one HTML page (see the module's docstring)."""

    #: absolute, normalised, distinct http(s) URLs in document order
    outlinks: list[str]
    #: the page's text outside links, whitespace collapsed
    text: str
    #: SHA-1 (hex) of ``text``
    content_digest: str
    #: the URL relative links resolve against
    base_url: str
    #: ``href`` values that gave no http(s) URL (``mailto:``, ``javascript:``, unparsable)
    dropped_links: int

    @property
    def text_size(self) -> int:
        return len(self.text)


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """(encoding, text) of an HTML body, decoded as Scrapy decodes a response."""
    header = f"Content-Type: {content_type}" if content_type else None
    return html_to_unicode(header, body, auto_detect_fun=_auto_detect)


def _auto_detect(body: bytes) -> str | None:
    """Scrapy's fallback when nothing declares an encoding: UTF-8 if it decodes, else cp1252."""
    for encoding in ("utf-8", "cp1252"):
        try:
            body.decode(encoding)
        except UnicodeError:
            continue
        return encoding
    return None


def parse_html(body: bytes | str, url: str, content_type: str | None = None) -> HtmlPage:
    """The `HtmlPage` of ``body``, the page fetched from ``url`` (already absolute)."""
    if isinstance(body, bytes):
        encoding, html = decode_html(body, content_type)
    else:
        encoding, html = "utf-8", body
    tree = LexborHTMLParser(html)
    hrefs = [node.attributes.get("href") or "" for node in tree.css("a[href], area[href]")]
    base = tree.css_first("base[href]")
    base_url = safe_url_string(url)
    if base is not None:
        declared = strip_html5_whitespace(base.attributes.get("href") or "")
        if declared:
            base_url = urljoin(base_url, safe_url_string(declared, encoding=encoding))
    outlinks, dropped = resolve_links(hrefs, base_url, url, encoding)
    tree.strip_tags(_NOT_TEXT)
    root = tree.body if tree.body is not None else tree.root
    text = " ".join(root.text(separator=" ").split()) if root is not None else ""
    return HtmlPage(outlinks, text, text_digest(text), base_url, dropped)


def text_digest(text: str) -> str:
    """The content digest of a page's text (SHA-1, hex)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def resolve_links(
    hrefs: Iterable[str], base_url: str, page_url: str, encoding: str = "utf-8"
) -> tuple[list[str], int]:
    """(the distinct normalised http(s) URLs ``hrefs`` point to, in order; how many gave none).

    As Scrapy's LinkExtractor resolves an ``href``: stripped, joined to the base URL, made safe
    in the page's encoding, joined to the page's URL; then the event contract's normalisation.
    Absolute and root-relative links (most of a site's: navigation, footers) do not depend on
    the base's path: their results are cached.
    """
    origin = _origin(base_url)
    seen: dict[str, None] = {}
    dropped = 0
    for href in hrefs:
        href = href.strip(_HTML5_WHITESPACE)
        if href.startswith(_HTTP) and href[href.find("//") + 2 : href.find("//") + 3] not in "/":
            key: tuple[str, ...] | None = (href, encoding)  # an absolute URL with a host
        elif href.startswith("/"):
            key = (origin, href, encoding)
        else:
            key = None
        url = _RESOLVED.get(key, _MISSING) if key is not None else _MISSING
        if url is _MISSING:
            url = _resolve(href, base_url, page_url, encoding)
            if key is not None:
                if len(_RESOLVED) >= _RESOLVED_SIZE:
                    _RESOLVED.clear()
                _RESOLVED[key] = url
        if url is None:
            dropped += 1
        else:
            seen.setdefault(url, None)
    return list(seen), dropped


def _resolve(href: str, base_url: str, page_url: str, encoding: str) -> str | None:
    """One stripped ``href`` resolved and normalised (see `resolve_links`), or None.

    A plain absolute or root-relative link (safe characters, no ';' parameters, no dot
    segments) resolves to itself or to the base's origin and itself, as `urljoin` would
    have it, without urljoin's parsing.
    """
    absolute = ""
    if "/." not in href:
        if _PLAIN_ABSOLUTE.fullmatch(href) is not None:
            absolute = href
        elif _PLAIN_ROOTED.fullmatch(href) is not None:
            absolute = _origin(base_url) + href
    if absolute:
        try:
            return link_info(absolute).url
        except InvalidURL:
            return None
    try:
        absolute = urljoin(base_url, href)
        if _SAFE_ABSOLUTE.fullmatch(absolute) is None:
            absolute = urljoin(page_url, safe_url_string(absolute, encoding=encoding))
        if not absolute.startswith(_HTTP):
            return None
        return link_info(absolute).url
    except (InvalidURL, ValueError):
        return None


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of an absolute URL (what a root-relative link keeps of it)."""
    start = url.find("//") + 2
    end = url.find("/", start)
    return url if end < 0 else url[:end]


def normalise_links(urls: Iterable[str]) -> tuple[list[str], int]:
    """(the distinct normalised http(s) URLs among absolute ``urls``, in order; the others)."""
    seen: dict[str, None] = {}
    dropped = 0
    for url in urls:
        try:
            seen.setdefault(link_info(url).url, None)
        except InvalidURL:
            dropped += 1
    return list(seen), dropped
