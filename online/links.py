"""URL and link rules from the paper: normalisation, internal vs external, depths.

Outlinks repeat massively across a site (navigation, footers), so the per-URL work is
cached: one normalisation and one fingerprint per distinct URL string per process.

>>> normalize_url("HTTPS://WWW.Example.com:443/a/b?q=1#top")
'https://www.example.com/a/b?q=1'
>>> normalize_url("https://user:secret@example.com/a")
'https://example.com/a'
>>> is_internal("https://www.gender-nrw.de/haeusliche-gewalt/", "http://gender-nrw.de/newsletter")
False
>>> url_path_depth("https://domain.com/en/news/article123456/"), domain_depth("https://www.sub.domain.com/")
(3, 3)
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import xxhash

from online.fastparse import outlink_summary

_DEFAULT_PORTS = {"http": 80, "https": 443}

# A URL `_parse` returns unchanged: lower-case http(s) scheme, a lower-case ASCII host (no port,
# userinfo, brackets or trailing dot), a path starting with '/', then only printable ASCII
# without spaces; checked apart: no '#' (a fragment) and no '?' ending the URL (maybe an empty
# query). Stricter than needed on purpose: whatever is not recognised takes the slow path,
# which decides. `online.fastparse.outlink_summary` applies the same rule to outlink lists.
_CANONICAL = re.compile(r"(https?)://([a-z0-9_.-]++)(?<!\.)/[!-~]*+")  # possessive: no backtracking


class InvalidURL(ValueError):
    """A URL that is not an absolute http(s) URL with a host."""


#: ``scheme://user:password@``: everything from the scheme to the last '@' before the path.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/\"'<>]*@")


def mask_userinfo(text: str) -> str:
    """``text`` with the userinfo (``user:password@``) of every URL in it masked: what any log
    line, error message or settings dump may show.

    >>> mask_userinfo("connecting to redis://:hunter2@cache:6379/0 and https://a.org/x@y")
    'connecting to redis://***@cache:6379/0 and https://a.org/x@y'
    """
    return _USERINFO.sub(r"\1***@", text) if "@" in text else text


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
    return canonical_path_depth(normalize_url(url))


def canonical_path_depth(normalized: str) -> int:
    """`url_path_depth` of a URL `normalize_url` returns unchanged, without normalising it
    again: the feature rows ask for it once per fetched page.

    >>> canonical_path_depth("https://example.com/a//b/?x=/c")
    2
    """
    # A normalised URL always has a path: it starts at the first '/' after '://'.
    rest = normalized.partition("://")[2]
    segments = rest[rest.find("/") :].partition("?")[0].split("/")
    return len(segments) - segments.count("")


def domain_depth(url: str) -> int:
    """Number of labels in the host, a leading 'www.' stripped: ``sub.domain.com`` -> 3."""
    return link_info(url).site.count(".") + 1


#: ISO 639-1 language codes: a first path segment that is one (optionally with a region,
#: ``pt-br``, ``zh_Hant``) marks a translation of the page the rest of the path names.
# fmt: off
_LANGUAGES = frozenset((
    "aa", "ab", "ae", "af", "ak", "am", "an", "ar", "as", "av", "ay", "az", "ba", "be", "bg", "bh",
    "bi", "bm", "bn", "bo", "br", "bs", "ca", "ce", "ch", "co", "cr", "cs", "cu", "cv", "cy", "da",
    "de", "dv", "dz", "ee", "el", "en", "eo", "es", "et", "eu", "fa", "ff", "fi", "fj", "fo", "fr",
    "fy", "ga", "gd", "gl", "gn", "gu", "gv", "ha", "he", "hi", "ho", "hr", "ht", "hu", "hy", "hz",
    "ia", "id", "ie", "ig", "ii", "ik", "io", "is", "it", "iu", "ja", "jv", "ka", "kg", "ki", "kj",
    "kk", "kl", "km", "kn", "ko", "kr", "ks", "ku", "kv", "kw", "ky", "la", "lb", "lg", "li", "ln",
    "lo", "lt", "lu", "lv", "mg", "mh", "mi", "mk", "ml", "mn", "mr", "ms", "mt", "my", "na", "nb",
    "nd", "ne", "ng", "nl", "nn", "no", "nr", "nv", "ny", "oc", "oj", "om", "or", "os", "pa", "pi",
    "pl", "ps", "pt", "qu", "rm", "rn", "ro", "ru", "rw", "sa", "sc", "sd", "se", "sg", "si", "sk",
    "sl", "sm", "sn", "so", "sq", "sr", "ss", "st", "su", "sv", "sw", "ta", "te", "tg", "th", "ti",
    "tk", "tl", "tn", "to", "tr", "ts", "tt", "tw", "ty", "ug", "uk", "ur", "uz", "ve", "vi", "vo",
    "wa", "wo", "xh", "yi", "yo", "za", "zh", "zu",
))
# fmt: on
_REGION = re.compile(r"[-_][a-z]{2}|[-_][a-z]{4}|[-_][a-z]{4}[-_][a-z]{2}")


def sibling_key(url: str) -> str:
    """The key a page shares with its translations: its host and path with a leading language
    segment left out, so ``example.com/de/guide/x`` and ``example.com/guide/x`` are siblings.
    A docs site's page gains a link in one language first and in the others as translators
    catch up: siblings are related pages by construction. The host is kept as served
    (``www.`` included): a site's translations share its host, and a store that keeps a group
    with the page ``https://`` + its key (`streams.redis_store`) then finds that page there.

    >>> sibling_key("https://docs.example.com/pt-br/guides/deploy/")
    'docs.example.com/guides/deploy/'
    >>> sibling_key("https://www.example.com/de/guides/deploy/")
    'www.example.com/guides/deploy/'
    >>> sibling_key("https://example.com/api/v2?x=1")   # not a language: kept
    'example.com/api/v2'
    """
    key = _SIBLING_KEYS.get(url)
    if key is None:
        if len(_SIBLING_KEYS) >= CACHE_SIZE:
            _SIBLING_KEYS.clear()
        key = _SIBLING_KEYS[url] = _sibling_key(url)
    return key


#: `sibling_key` by URL, emptied when full as `link_info`'s cache is: every applied event
#: asks for its page's key, and the string work costs more than the lookup.
_SIBLING_KEYS: dict[str, str] = {}


def _sibling_key(url: str) -> str:
    """`sibling_key` worked out (raises InvalidURL as `link_info` does)."""
    info = link_info(url)
    rest = info.url.partition("://")[2]
    slash = rest.find("/")
    path = rest[slash:].partition("?")[0]
    first, _sep, tail = path[1:].partition("/")
    lowered = first.lower()
    if lowered[:2] in _LANGUAGES and (len(lowered) == 2 or _REGION.fullmatch(lowered[2:])):
        path = "/" + tail
    return rest[:slash] + path


def sibling_key_id(key: str) -> int:
    """Stable 63-bit id of a `sibling_key`, for stores that keep groups by number: distinct
    keys share one with probability about n²/2⁶⁴ among n keys (1e-7 at a million).

    >>> sibling_key_id("example.com/guides/") == sibling_key_id("example.com/guides/")
    True
    """
    return xxhash.xxh3_64_intdigest(key) >> 1


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


_new_info = partial(tuple.__new__, LinkInfo)  # LinkInfo(*values) without its Python __new__
_CACHE: dict[str, LinkInfo] = {}
#: Entries a per-process URL cache holds before it is emptied (about 500 bytes each). Enough
#: for a site's repeated links (navigation, footers); a page's own URL comes round only once a
#: crawl round, so on a large crawl it is a miss whatever the size: a bigger cache would only
#: grow each process by hundreds of bytes a page.
CACHE_SIZE = 1 << 17
# (scheme, site) -> the site's prefixes as ASCII bytes, for canonical_summary.
_SITE_PREFIXES: dict[tuple[str, str], tuple[bytes, ...]] = {}
_SITES_SIZE = 1 << 16


def link_info(url: str) -> LinkInfo:
    """Everything the core needs about one URL, cached. Raises InvalidURL.

    A plain dict, emptied when full: a hit is one dict lookup, where an LRU cache would
    also reorder its list on every hit.
    """
    try:
        info = _CACHE.get(url)  # not [url]: a miss raising KeyError costs more than the lookup
    except TypeError:  # unhashable
        raise InvalidURL(f"expected a string, got {type(url).__name__}") from None
    if info is not None:
        return info
    info = _parse(url)
    if len(_CACHE) >= CACHE_SIZE:
        _CACHE.clear()
    _CACHE[url] = info
    return info


def canonical_summary(urls: list[Any], page: LinkInfo) -> tuple[bytes, bytes, int, int] | None:
    """(sorted fingerprints as little-endian uint32 bytes, their internal flags, internal count,
    link count) of a page's outlinks, if every one is a string `normalize_url` returns
    unchanged and no two share a fingerprint; else None (the caller then parses them one by
    one, which also keeps the first of repeated links).

    The fast path for a page's outlinks, which are nearly always canonical and distinct: one
    compiled pass (`online.fastparse.outlink_summary`) checks, flags and fingerprints them.

    >>> page = link_info("https://www.a.org/")
    >>> fps, flags, internal, n = canonical_summary(
    ...     ["https://a.org/x", "http://a.org/", "https://www.b.org/?q=1"], page)
    >>> internal, n, sorted(flags)
    (1, 3, [0, 0, 1])
    >>> canonical_summary(["https://a.org/x", "https://a.org/x#top"], page) is None
    True
    """
    key = (page.scheme, page.site)
    prefixes = _SITE_PREFIXES.get(key)
    if prefixes is None:
        if len(_SITE_PREFIXES) >= _SITES_SIZE:
            _SITE_PREFIXES.clear()
        # A prefix that is not ASCII can start no canonical URL: leaving it out changes nothing.
        prefixes = _SITE_PREFIXES[key] = tuple(
            p.encode("ascii") for p in site_prefixes(page) if p.isascii()
        )
    return outlink_summary(urls, prefixes)


def site_prefixes(page: LinkInfo) -> tuple[str, ...]:
    """The starts of the canonical URLs internal to ``page`` (same scheme, same site).

    A canonical URL has a '/' right after its host, so a prefix fixes the host: 'www.' + site,
    or the site itself unless that starts with 'www.' (such a host's site is what follows).

    >>> site_prefixes(link_info("https://www.example.com/a"))
    ('https://www.example.com/', 'https://example.com/')
    """
    www = f"{page.scheme}://www.{page.site}/"
    if page.site.startswith("www."):
        return (www,)
    return (www, f"{page.scheme}://{page.site}/")


def _parse(url: str) -> LinkInfo:
    """Normalise and fingerprint one URL; a canonical URL skips urlsplit and urlunsplit.

    >>> _parse("https://www.example.com/a?b=1") == _parse_slow("https://www.example.com/a?b=1")
    True
    """
    match = _CANONICAL.fullmatch(url) if type(url) is str and "#" not in url else None
    if match is None or url[-1] == "?":
        return _parse_slow(url)
    scheme, host = match.groups()
    digest = xxhash.xxh3_64_intdigest(url)  # ASCII: the same bytes as url.encode("utf-8")
    site = host[4:] if host.startswith("www.") else host
    return _new_info((url, scheme, site, digest & 0xFFFFFFFF, (digest >> 1) & 0x7FFFFFFFFFFFFFFF))


def _parse_slow(url: str) -> LinkInfo:
    if not isinstance(url, str):
        raise InvalidURL(f"expected a string, got {type(url).__name__}")
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:  # bad port, bad IPv6 literal
        raise InvalidURL(f"unparsable URL {mask_userinfo(repr(url))}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(f"not an http(s) URL: {mask_userinfo(repr(url))}")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host or any(ch.isspace() for ch in text):
        raise InvalidURL(f"URL without a valid host: {mask_userinfo(repr(url))}")
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    # A user name or password (``user:pw@``) is dropped: a secret must not become a store key,
    # a published URL or a log line, and the page is the same page without it.
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
