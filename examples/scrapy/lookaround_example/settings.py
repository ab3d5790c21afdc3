"""Settings of the example project: Scrapy's own, and lookaround's (``LOOKAROUND_*``, see
streams/crawlers/scrapy.py for all of them). Any of them can be given on the command line
with ``-s NAME=VALUE``."""

BOT_NAME = "lookaround_example"
SPIDER_MODULES = ["lookaround_example.spiders"]
NEWSPIDER_MODULE = "lookaround_example.spiders"

# lookaround: events out, priorities in.
EXTENSIONS = {
    "streams.crawlers.scrapy.LookaroundEvents": 500,
    "streams.crawlers.scrapy.LookaroundRecrawl": 510,
}
LOOKAROUND_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
LOOKAROUND_TOPIC_FETCHED = "lookaround.fetched-pages"
LOOKAROUND_TOPIC_PRIORITIES = "lookaround.priorities"
LOOKAROUND_RECRAWL_MODE = "due"  # recrawl a page at its next_fetch_at; "budget": spend it all
LOOKAROUND_REQUESTS_PER_MINUTE = 600  # every request but the seeds: recrawls and new pages
LOOKAROUND_PUBLISH_SPOOL = "lookaround-undelivered.jsonl"  # events Kafka never took
# LOOKAROUND_CLOCK_URL = "http://127.0.0.1:8000/_clock"  # a living site's clock
# LOOKAROUND_RECRAWL_UNTIL = "2026-04-01T00:00:00Z"  # stop then (the crawl's clock)
# LOOKAROUND_WARC_FILE = "crawl.warc.gz"  # archive the crawl too

# Politeness is Scrapy's. The living test site runs on this machine; for a real site, keep
# ROBOTSTXT_OBEY, set a DOWNLOAD_DELAY or AUTOTHROTTLE_ENABLED = True, and fewer requests
# per domain.
ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 16
AUTOTHROTTLE_ENABLED = False
DOWNLOAD_DELAY = 0

TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
