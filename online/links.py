"""URL and link rules from the paper: normalisation, internal vs external, depths.

Outlinks repeat massively across a site (navigation, footers), so the per-URL work is
cached: one normalisation and one fingerprint per distinct URL string per process.

>>> normalize_url("HTTPS://WWW.Example.com:443/a/b?q=1#top")
'https://www.example.com/a/b?q=1'
>>> is_internal("https://www.gender-nrw.de/haeusliche-gewalt/", "http://gender-nrw.de/newsletter")
False
>>> url_path_depth("https://domain.com/en/news/article123456/"), domain_depth("https://www.sub.domain.com/")
(3, 3)
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

import xxhash

_DEFAULT_PORTS = {"http": 80, "https": 443}


class InvalidURL(ValueError):
    """A URL that is not an absolute http(s) URL with a host."""


def normalize_url(url: str) -> str:
    """Lower-case scheme and host, drop the default port and the fragment; '' path -> '/'.

    Raises InvalidURL for anything that is not an absolute http(s) URL.
    """
    return link_info(url).url


def site_key(url: str) -> tuple[str, str]:
    """(scheme, host without a leading 'www.'): two URLs are internal to each other iff equal."""
    info = link_info(url)
    return info.scheme, info.site


def is_internal(page_url: str, link_url: str) -> bool:
    """Same scheme and same host, a leading 'www.' ignored (the paper's rule)."""
    return site_key(page_url) == site_key(link_url)


def url_path_depth(url: str) -> int:
    """Number of non-empty path segments: ``domain.com/en/news/article123456/`` -> 3."""
    path = urlsplit(normalize_url(url)).path
    return sum(1 for part in path.split("/") if part)


def domain_depth(url: str) -> int:
    """Number of labels in the host, a leading 'www.' stripped: ``sub.domain.com`` -> 3."""
    return link_info(url).site.count(".") + 1


def url_id(url: str) -> int:
    """Stable signed 63-bit id of a normalised URL (FAISS ids, store keys); same on every worker."""
    return link_info(url).page_id


def link_fingerprint(url: str) -> int:
    """32-bit fingerprint of a normalised URL, used in compact outlink sets."""
    return link_info(url).fingerprint


class LinkInfo(NamedTuple):
    url: str
    scheme: str
    site: str
    fingerprint: int
    page_id: int


_CACHE: dict[str, LinkInfo] = {}
CACHE_SIZE = 1 << 20


def link_info(url: str) -> LinkInfo:
    """Everything the core needs about one URL, cached. Raises InvalidURL.

    A plain dict, emptied when full: a hit is one dict lookup, where an LRU cache would
    also reorder its list on every hit.
    """
    try:
        return _CACHE[url]
    except KeyError:
        pass
    except TypeError:  # unhashable
        raise InvalidURL(f"expected a string, got {type(url).__name__}") from None
    info = _parse(url)
    if len(_CACHE) >= CACHE_SIZE:
        _CACHE.clear()
    _CACHE[url] = info
    return info


def _parse(url: str) -> LinkInfo:
    if not isinstance(url, str):
        raise InvalidURL(f"expected a string, got {type(url).__name__}")
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:  # bad port, bad IPv6 literal
        raise InvalidURL(f"unparsable URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(f"not an http(s) URL: {url!r}")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host or any(ch.isspace() for ch in text):
        raise InvalidURL(f"URL without a valid host: {url!r}")
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    if parts.username or parts.password:
        userinfo = parts.username or ""
        if parts.password:
            userinfo = f"{userinfo}:{parts.password}"
        netloc = f"{userinfo}@{netloc}"
    normalized = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
    site = host[4:] if host.startswith("www.") else host
    digest = xxhash.xxh3_64_intdigest(normalized.encode("utf-8"))
    return LinkInfo(
        url=normalized,
        scheme=scheme,
        site=site,
        fingerprint=digest & 0xFFFFFFFF,
        page_id=(digest >> 1) & 0x7FFFFFFFFFFFFFFF,
    )
