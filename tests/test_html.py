"""HTML pages as event fields (online/html.py, online/page_events.py): links resolved as a
browser and Scrapy's LinkExtractor resolve them, the text outside links and its digest, the
encodings Scrapy reads; the same links as Scrapy's own LinkExtractor on tricky pages."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from w3lib.url import safe_url_string

from online.html import parse_html, resolve_links
from online.links import InvalidURL, link_info
from online.page_events import is_html, page_event

PAGE = "https://www.example.org/docs/guide/"

TRICKY = [
    # base href, relative and root-relative links, whitespace, fragments, duplicates
    b'<html><head><base href="/root/"></head><body><a href=" a.html ">a</a>'
    b'<a href="/abs">b</a><a href="../up#frag">c</a><a href="a.html#x">dup</a></body></html>',
    # a base that is itself relative to the page, areas, a valueless href, mailto, javascript
    b'<html><head><base href="sub/"></head><body><map><area href="m1"></map><a href>self</a>'
    b'<a href="mailto:x@example.org">m</a><a href="javascript:void(0)">j</a></body></html>',
    # non-ASCII paths and hosts, spaces and characters a URL may not hold
    "<html><body><a href='/caf\u00e9?q=\u00fc'>x</a><a href='https://b\u00fccher.example/a b'>y"
    "</a><a href='/a|b^c'>z</a><a href='HTTPS://Other.ORG:443/x'>o</a></body></html>".encode(),
    # no base, other schemes, protocol-relative, query-only and empty links
    b'<html><body><a href="//cdn.example.net/p">p</a><a href="?page=2">q</a>'
    b'<a href="ftp://f.example/">f</a><a href="">e</a><a href="tel:123">t</a></body></html>',
]


def test_links_resolve_against_the_base_and_normalise():
    page = parse_html(TRICKY[0], PAGE)
    assert page.base_url == "https://www.example.org/root/"
    assert page.outlinks == [
        "https://www.example.org/root/a.html",
        "https://www.example.org/abs",
        "https://www.example.org/up",
    ]
    second = parse_html(TRICKY[1], PAGE)
    assert second.base_url == "https://www.example.org/docs/guide/sub/"
    assert second.outlinks == [
        "https://www.example.org/docs/guide/sub/m1",
        "https://www.example.org/docs/guide/sub/",
    ]
    assert second.dropped_links == 2  # mailto: and javascript:


def test_unsafe_characters_are_encoded_as_a_browser_does():
    page = parse_html(TRICKY[2], PAGE)
    assert page.outlinks == [
        "https://www.example.org/caf%C3%A9?q=%C3%BC",
        "https://xn--bcher-kva.example/a%20b",
        "https://www.example.org/a%7Cb%5Ec",
        "https://other.org/x",
    ]
    fourth = parse_html(TRICKY[3], PAGE)
    assert fourth.outlinks == [
        "https://cdn.example.net/p",
        "https://www.example.org/docs/guide/?page=2",
        "https://www.example.org/docs/guide/",
    ]
    assert fourth.dropped_links == 2  # ftp: and tel:


def test_cached_resolutions_depend_on_what_they_should():
    """Absolute and root-relative links are cached; their results never leak between sites,
    schemes or encodings, and relative links follow each page's own base."""
    hrefs = ["/a/../b?q=\u00e9", "//cdn.org/x", "https://c.org/y", "https:///z", "rel"]
    one = resolve_links(hrefs, "https://a.org/p/", "https://a.org/p/")[0]
    two = resolve_links(hrefs, "http://b.org:8080/q/", "http://b.org:8080/q/", "latin-1")[0]
    assert one == [
        "https://a.org/b?q=%C3%A9",
        "https://cdn.org/x",
        "https://c.org/y",
        "https://a.org/z",
        "https://a.org/p/rel",
    ]
    assert two == ["http://b.org:8080/b?q=%E9", "http://cdn.org/x", "https://c.org/y",
                   "http://b.org:8080/q/rel"]  # fmt: skip
    for base, encoding in [("https://a.org/p/", "utf-8"), ("http://b.org:8080/q/", "latin-1")]:
        assert resolve_links(hrefs, base, base, encoding)[0] == _scrapys(hrefs, base, encoding)


def _scrapys(hrefs: list[str], page: str, encoding: str) -> list[str]:
    """LinkExtractor's resolution, step by step, then the event contract's normalisation."""
    out = []
    for href in hrefs:
        try:
            url = urljoin(page, safe_url_string(urljoin(page, href.strip()), encoding=encoding))
            out.append(link_info(url).url)
        except (InvalidURL, ValueError):  # LinkExtractor skips what safe_url_string refuses
            continue
    return list(dict.fromkeys(out))


def test_text_leaves_out_links_scripts_and_styles():
    body = (
        b"<html><head><title>T</title><style>p{}</style></head><body><p>Hello <b>world</b>"
        b"</p><script>var x = 1</script><a href='/x'>anchor words</a>\n\n <p>bye</p></body></html>"
    )
    page = parse_html(body, PAGE)
    assert page.text == "Hello world bye"
    assert page.text_size == len("Hello world bye")
    # The digest follows the text, not the links.
    relinked = parse_html(body.replace(b"/x'>anchor words", b"/y'>other words"), PAGE)
    assert relinked.content_digest == page.content_digest
    assert relinked.outlinks != page.outlinks
    edited = parse_html(body.replace(b"bye", b"goodbye"), PAGE)
    assert edited.content_digest != page.content_digest


def test_encodings_as_scrapy_reads_them():
    text = "caf\u00e9 na\u00efve"
    cp1252 = f'<html><head><meta charset="windows-1252"></head><body>{text}</body></html>'
    assert parse_html(cp1252.encode("cp1252"), PAGE).text == text
    latin = f"<html><body>{text}</body></html>".encode("latin-1")
    assert parse_html(latin, PAGE, "text/html; charset=iso-8859-1").text == text
    # Nothing declared and not UTF-8: cp1252, as Scrapy guesses.
    assert parse_html(latin, PAGE).text == text
    assert parse_html(f"<p>{text}</p>".encode(), PAGE).text == text


def test_page_events_by_status():
    page = page_event(PAGE, 0.0, 200, TRICKY[0], "text/html")
    assert page["outlinks"][0] == "https://www.example.org/root/a.html"
    assert page["content_digest"] and page["content_size"] == len(TRICKY[0])
    moved = page_event(PAGE, 0.0, 302, b"", location="../new/")
    assert moved["outlinks"] == ["https://www.example.org/docs/new/"]
    gone = page_event(PAGE, 0.0, 404, b"<html><a href='/x'>x</a></html>", "text/html")
    assert gone["outlinks"] == [] and "content_digest" not in gone
    assert page_event(PAGE, 1.5, 200, b"<p>x</p>", max_text_chars=0)["text"] == ""
    given_links = page_event(PAGE, 0.0, 200, b"<p>x</p>", outlinks=["HTTP://A.org/#f", "bad"])
    assert given_links["outlinks"] == ["http://a.org/"]


def test_is_html():
    assert is_html("text/html; charset=utf-8", b"")
    assert is_html("application/xhtml+xml", b"")
    assert not is_html("image/png", b"<html>")
    assert is_html(None, b"  <!DOCTYPE html><html>")
    assert not is_html(None, b"%PDF-1.4")


_URL_CHARS = st.sampled_from(list("abcXYZ09-._~:/?#@!$&'()*+,;=% |[]^\"<>{}\u00e9"))


@settings(max_examples=300, deadline=None)
@given(path=st.text(_URL_CHARS, max_size=30), host=st.sampled_from(["a.org", "WWW.B.org"]))
def test_the_fast_path_agrees_with_safe_url_string(path, host):
    """Links resolve to what Scrapy's full resolution (join, make safe, join) gives, whether
    they take a fast path (plain characters: no `safe_url_string`, no `urljoin`) or not:
    absolute, root-relative and relative links alike."""
    base = f"https://{host}/dir/page"
    for href in (f"https://{host}/{path}", f"/{path}", path, f"//{host}/{path}"):
        assert resolve_links([href], base, base)[0] == _scrapys([href], base, "utf-8"), href


@pytest.mark.parametrize("body", TRICKY)
def test_same_links_as_scrapys_link_extractor(body):
    """The event's outlinks from a WARC (this parser) and from a Scrapy crawl (Scrapy's own
    LinkExtractor, as the integration configures it) agree."""
    pytest.importorskip("scrapy")
    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    from online.html import normalise_links

    response = HtmlResponse(url=PAGE, body=body, encoding="utf-8")
    extracted = [link.url for link in LinkExtractor(deny_extensions=[]).extract_links(response)]
    ours = parse_html(body, PAGE, "text/html; charset=utf-8").outlinks
    assert sorted(normalise_links(extracted)[0]) == sorted(ours)
