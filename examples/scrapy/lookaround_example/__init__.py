"""An example Scrapy project in lookaround's loop (see settings.py and spiders/site.py)."""
