"""A spider that crawls one site from its sitemap, follows its links to new pages, and leaves
the recrawling to lookaround (the LookaroundRecrawl extension sends the recrawls to
``parse``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.sitemap import Sitemap

from streams.crawlers.scrapy import SEED

#: New pages go before recrawls (whose priorities come from scores, at most 10^6).
NEW_PAGE_PRIORITY = 10_000_000


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, site: str = "http://127.0.0.1:8000", *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)
        self.site = site.rstrip("/")
        where = urlsplit(self.site)
        self.allowed_domains = [where.hostname or ""]
        # The LinkExtractor compares host:port (a port kept), Scrapy's offsite filter the host.
        self.links = LinkExtractor(allow_domains=[where.netloc])

    async def start(self) -> AsyncIterator[scrapy.Request]:
        yield scrapy.Request(
            f"{self.site}/sitemap.xml", callback=self.parse_sitemap, meta={SEED: True}
        )

    def parse_sitemap(self, response: Response) -> Iterator[scrapy.Request]:
        """The seeds: every page in the sitemap, outside the request budget."""
        for entry in Sitemap(response.body):
            yield scrapy.Request(
                entry["loc"], callback=self.parse, priority=NEW_PAGE_PRIORITY, meta={SEED: True}
            )

    def parse(self, response: Response) -> Iterator[scrapy.Request]:
        """Follow the site's links; Scrapy's duplicate filter keeps only the new pages."""
        if not hasattr(response, "text"):
            return
        for link in self.links.extract_links(response):
            yield scrapy.Request(link.url, callback=self.parse, priority=NEW_PAGE_PRIORITY)
