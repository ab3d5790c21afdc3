"""The synthetic crawl generator's parts: config, regimes (one module each), statistics, targets.

``batch.generate`` is the public entry point (``GeneratorConfig``, ``generate_events``,
``write_events``, ``weekly_statistics``, ``PAPER_TARGETS``).
"""
