"""``lookaround simulate``: closed-loop recrawls of a timeline under fetch budgets, every policy
at every budget, with the fetch logs, the figures and the report written to a run directory.

The ``lookaround`` policy's rates come from the embedded pipeline the replay runs
(`streams.composition.build_pipeline`, the default scorer unless told otherwise): each crawl feeds
its fetches to a fresh pipeline and reads ``rate_per_day`` from the priority updates it
publishes.

Outputs in the run directory:

* ``fetches.jsonl.gz``: every budgeted fetch of every crawl: ``policy``, ``budget``, ``url``,
  ``at``, ``origin`` (``known``: in the index at the start; ``discovered``: found by the crawl);
  with the timeline, enough to recompute every figure (`batch.discovery.measure`);
* ``results.json``: the settings and each crawl's figures; ``summary.csv``: the same as a table;
* ``report.html`` (self-contained) and ``report.md``, with ``plots/*.png``;
* ``timeline_rejects.jsonl``: the timeline lines that failed validation, if any.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
from isal import igzip

from batch.discovery import Discovery, measure
from batch.policies import POLICY_NAMES, RateSource, check_policy, make_policy
from batch.simulate import Budget, FetchLog, SimulationConfig, build_universe, simulate
from batch.timeline import Timeline
from online.fetch import Fetch
from online.pipeline import PipelineConfig
from online.scorers import DEFAULT_SCORER
from streams.composition import build_pipeline
from streams.maththreads import single_math_thread

FETCHES_FILE = "fetches.jsonl.gz"
RESULTS_FILE = "results.json"
SUMMARY_CSV = "summary.csv"
DEFAULT_BUDGETS = ("1%", "2%", "5%", "10%", "20%")


class PipelineRates:
    """`batch.policies.RateSource` over the replay's pipeline: each fetch's published
    ``rate_per_day``, and the related updates each batch published for pages it did not
    fetch."""

    def __init__(
        self,
        scorer: str = DEFAULT_SCORER,
        config: PipelineConfig | None = None,
        registry_dir: Path | None = None,
    ) -> None:
        self.pipeline = build_pipeline(scorer, config, registry_dir=registry_dir)
        self._related: list[tuple[str, float]] = []

    def rates(self, events: Sequence[Fetch]) -> np.ndarray:
        return self.schedule(events)[0]

    def related(self) -> list[tuple[str, float]]:
        """(url, links expected to wait there) of the last batch's related updates."""
        return self._related

    def schedule(self, events: Sequence[Fetch]) -> tuple[np.ndarray, np.ndarray]:
        """Each event's published ``rate_per_day`` and ``next_fetch_at`` (epoch seconds), NaN
        where the pipeline published none."""
        rates = np.full(len(events), np.nan)
        due = np.full(len(events), np.nan)
        outcome = self.pipeline.process_batch(events)
        for k, processed in enumerate(outcome.results):
            priority = processed.priority
            if priority is None:
                continue
            if priority["rate_per_day"] is not None:
                rates[k] = priority["rate_per_day"]
            if priority["next_fetch_at"] is not None:
                due[k] = _epoch(priority["next_fetch_at"])
        self._related = [(u["url"], u["expected_waiting"]) for u in outcome.related]
        return rates, due


@dataclass
class Crawl:
    """One policy at one budget: its fetch log, its figures and how long it took."""

    policy: str
    budget: str
    per_day: float
    log: FetchLog
    discovery: Discovery
    seconds: float


@dataclass
class SimulationRun:
    timeline: Timeline
    budgets: list[Budget]
    policies: list[str]
    config: SimulationConfig
    scorer: str
    #: the universe's URLs: a log's page ``i`` is ``urls[i]``
    urls: list[str] = field(default_factory=list)
    pages_at_start: int = 0
    crawls: list[Crawl] = field(default_factory=list)
    seconds: float = 0.0

    def crawl(self, policy: str, budget: str) -> Crawl:
        return next(c for c in self.crawls if c.policy == policy and c.budget == budget)


def run_simulation(
    timeline: Timeline,
    budgets: Sequence[Budget],
    policies: Sequence[str] = POLICY_NAMES,
    config: SimulationConfig | None = None,
    *,
    scorer: str = DEFAULT_SCORER,
    pipeline_config: PipelineConfig | None = None,
    registry_dir: Path | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> SimulationRun:
    """Crawl ``timeline`` with every policy at every budget (policy names are checked first)."""
    config = config or SimulationConfig()
    base = pipeline_config or PipelineConfig()

    def rates() -> RateSource:
        return PipelineRates(scorer, base, registry_dir)

    for name in policies:
        check_policy(name)  # unknown names fail before any work
    universe = build_universe(timeline)
    pages_at_start = universe.pages_at_start
    run = SimulationRun(
        timeline, list(budgets), list(policies), config, scorer, universe.urls, pages_at_start
    )
    started = time.perf_counter()
    with single_math_thread():
        for budget in budgets:
            per_day = budget.per_day(pages_at_start)
            for name in policies:
                t0 = time.perf_counter()
                label = f"{name} at {budget.label}"
                with_budget = replace(base, fetch_budget_per_day=per_day)
                policy = make_policy(
                    name,
                    rates=rates,
                    scheduled=lambda c=with_budget: PipelineRates(scorer, c, registry_dir),
                )
                log = simulate(
                    universe,
                    policy,
                    per_day,
                    config,
                    progress=None
                    if progress is None
                    else (lambda done, s=label: progress(s, done)),
                )
                urls = [universe.urls[p] for p in log.pages]
                discovery = measure(timeline, urls, log.times, log.discovered)
                seconds = time.perf_counter() - t0
                run.crawls.append(Crawl(name, budget.label, per_day, log, discovery, seconds))
    run.seconds = time.perf_counter() - started
    return run


def write_run(run: SimulationRun, out_dir: Path) -> None:
    """The fetch log, ``results.json`` and ``summary.csv`` (the report is `batch.sim_report`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    urls = run.urls
    with igzip.open(out_dir / FETCHES_FILE, "wb") as fh:
        for crawl in run.crawls:
            for page, t, found in zip(
                crawl.log.pages, crawl.log.times, crawl.log.discovered, strict=True
            ):
                record = {
                    "policy": crawl.policy,
                    "budget": crawl.budget,
                    "url": urls[page],
                    "at": _iso(t),
                    "origin": "discovered" if found else "known",
                }
                fh.write(orjson.dumps(record) + b"\n")
    timeline = run.timeline
    results = {
        "timeline": {
            "start": _iso(timeline.start),
            "end": _iso(timeline.end),
            "days": timeline.days,
            "pages": len(timeline.urls),
            "pages_at_start": run.pages_at_start,
            "versions": timeline.version_count,
        },
        "settings": {**asdict(run.config), "scorer": run.scorer},
        "seconds": round(run.seconds, 2),
        "crawls": [
            {
                "policy": c.policy,
                "budget": c.budget,
                "fetches_per_day": round(c.per_day, 3),
                "seconds": round(c.seconds, 2),
                **c.discovery.summary(),
            }
            for c in run.crawls
        ],
    }
    (out_dir / RESULTS_FILE).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    rows = results["crawls"]
    with open(out_dir / SUMMARY_CSV, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
