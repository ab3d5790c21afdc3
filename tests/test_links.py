from __future__ import annotations

import pytest

from online import links
from online.links import (
    InvalidURL,
    domain_depth,
    is_internal,
    link_fingerprint,
    normalize_url,
    sibling_key,
    url_id,
    url_path_depth,
)

PAGE = "https://www.gender-nrw.de/haeusliche-gewalt/"


def test_paper_internal_external_example() -> None:
    assert is_internal(PAGE, "https://www.gender-nrw.de/contact/")
    assert not is_internal(PAGE, "https://www.mkffi.nrw/")  # other domain
    assert not is_internal(PAGE, "http://gender-nrw.de/newsletter")  # other scheme
    assert is_internal(PAGE, "https://gender-nrw.de/contact/")  # www. ignored


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM", "http://example.com/"),
        ("https://example.com:443/a?b=1#frag", "https://example.com/a?b=1"),
        ("http://example.com:80/", "http://example.com/"),
        ("http://example.com:8080/x", "http://example.com:8080/x"),
        ("https://example.com/Path/Case", "https://example.com/Path/Case"),
        ("  https://example.com/trim  ", "https://example.com/trim"),
    ],
)
def test_normalisation(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://example.com/",
        "mailto:me@example.com",
        "/relative/path",
        "https://",
        "http://exa mple.com/",
        "https://example.com:99999/",
        "javascript:void(0)",
        "",
    ],
)
def test_invalid_urls(bad: str) -> None:
    with pytest.raises(InvalidURL):
        normalize_url(bad)


def test_non_string_is_invalid() -> None:
    with pytest.raises(InvalidURL):
        normalize_url(42)  # type: ignore[arg-type]


def test_depths_from_the_paper() -> None:
    assert url_path_depth("https://domain.com/en/news/article123456/") == 3
    assert url_path_depth("https://domain.com/") == 0
    assert domain_depth("https://sub.domain.com/") == 3
    assert domain_depth("https://www.domain.com/") == 2


def test_ids_are_stable_and_equal_for_equivalent_urls() -> None:
    assert url_id("HTTPS://Example.com/a#x") == url_id("https://example.com/a")
    assert url_id("https://example.com/a") != url_id("https://example.com/b")
    assert 0 <= url_id("https://example.com/a") < 2**63
    assert link_fingerprint("https://example.com/a") < 2**32


@pytest.mark.parametrize(
    "url",
    [
        "https://a.com",
        "https://a.com?x=/y/z",
        "https://www.sub.a.com/x/y/?q=1/2/3",
        "http://a.com:8080/a//b/",
        "https://u:p@a.com/x/",
        "HTTPS://A.COM/En/News/Article/#frag/x",
    ],
)
def test_url_path_depth_counts_the_path_only(url: str) -> None:
    from urllib.parse import urlsplit

    path = urlsplit(normalize_url(url)).path
    assert url_path_depth(url) == sum(1 for part in path.split("/") if part)


def test_sibling_key_cache_gives_the_keys_worked_out_and_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`sibling_key` remembers keys by URL; what it remembers is what working the key out
    gives, a bad URL is still refused (and not remembered), and the cache is emptied when
    full."""
    monkeypatch.setattr(links, "CACHE_SIZE", 3)
    links._SIBLING_KEYS.clear()
    urls = [
        "https://docs.example.com/pt-br/guides/deploy/",
        "https://docs.example.com/guides/deploy/",
        "https://www.example.com/de/guides/deploy/?x=1",
        "https://example.com/api/v2",
        "https://example.com/zh-cn/",
    ]
    for _ in range(2):  # worked out, then (for those still held) remembered
        assert [sibling_key(u) for u in urls] == [links._sibling_key(u) for u in urls]
        assert len(links._SIBLING_KEYS) <= 3
    with pytest.raises(InvalidURL):
        sibling_key("not a url")
    assert "not a url" not in links._SIBLING_KEYS
