"""The Scrapy recrawl extension (streams/crawlers/scrapy.py `LookaroundRecrawl`) on a real Scrapy
crawler object: how many recrawls it lets wait for their answer. The whole loop, with a real
broker, worker and site, is tests/test_scrapy_loop.py."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("scrapy")

from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from streams.crawlers.scrapy import RECRAWL, LookaroundRecrawl


class _Engine:
    """Scrapy's engine as the extension uses it: requests handed over are collected."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def crawl(self, request: Request) -> None:
        self.requests.append(request)


def recrawl_extension(**settings) -> tuple[LookaroundRecrawl, _Engine]:
    crawler = get_crawler(
        Spider,
        {
            "LOOKAROUND_RECRAWL_MODE": "interval",
            "LOOKAROUND_RECRAWL_INTERVAL_DAYS": 0,
            "LOOKAROUND_REQUESTS_PER_MINUTE": 60_000,
            **settings,
        },
    )
    extension = LookaroundRecrawl(crawler)
    engine = crawler.engine = _Engine()
    extension._callback = lambda response: None
    now = time.time()
    for k in range(10):  # ten pages fetched a while ago, all due
        extension.frontier.fetched(f"https://site.example/{k}", now - 100 + k)
    return extension, engine


def answer(extension: LookaroundRecrawl, request: Request, *, redirected_to: str = "") -> None:
    url = redirected_to or request.url
    meta = {**request.meta, **({"redirect_urls": [request.url]} if redirected_to else {})}
    response = HtmlResponse(url, body=b"<html></html>", request=request.replace(url=url, meta=meta))
    extension.response_received(response, response.request, spider=None)


def test_recrawls_waiting_for_their_answer_are_capped():
    extension, engine = recrawl_extension(LOOKAROUND_RECRAWL_MAX_OUTSTANDING=3)
    extension.bucket.tokens = 50.0  # plenty of budget
    extension._tick()
    assert len(engine.requests) == 3 and all(r.meta[RECRAWL] for r in engine.requests)
    extension._tick()
    assert len(engine.requests) == 3  # none answered yet: the budget waits, no queue grows
    answer(extension, engine.requests[0])
    answer(extension, engine.requests[1], redirected_to="https://site.example/moved")
    extension._tick()
    assert len(engine.requests) == 5  # two answered (one through a redirect): two more
    assert extension.stats.get_value("lookaround/recrawls_issued") == 5


def test_the_cap_defaults_to_a_second_of_budget_and_at_least_the_concurrency_and_is_checked():
    fast, _ = recrawl_extension(LOOKAROUND_REQUESTS_PER_MINUTE=60_000)
    slow, _ = recrawl_extension(LOOKAROUND_REQUESTS_PER_MINUTE=60, CONCURRENT_REQUESTS=8)
    assert fast.max_outstanding == 1000 and slow.max_outstanding == 8
    with pytest.raises(ValueError, match="LOOKAROUND_RECRAWL_MAX_OUTSTANDING"):
        recrawl_extension(LOOKAROUND_RECRAWL_MAX_OUTSTANDING=-1)


def test_an_unanswered_recrawl_counts_no_more_after_the_inflight_timeout():
    extension, engine = recrawl_extension(
        LOOKAROUND_RECRAWL_MAX_OUTSTANDING=2, LOOKAROUND_RECRAWL_INFLIGHT_SECONDS=0.05
    )
    extension.bucket.tokens = 50.0
    extension._tick()
    assert len(engine.requests) == 2
    time.sleep(0.1)
    extension._tick()
    assert len(engine.requests) == 4
