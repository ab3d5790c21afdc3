"""The ``lookaround`` command line.

Results (tables, where the outputs went) go to stdout, never wrapped or cut when piped;
progress and notes go to stderr. A user's mistake (`online.errors.InputError`, a refused model,
a bad ``LOOKAROUND_*`` value, a broker or Redis that does not answer) ends the command with a
message that says what to do and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import math
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from batch.crawlgen.config import REGIMES
from batch.generate import GeneratorConfig, write_events
from batch.reader import DEFAULT_BATCH_SIZE
from batch.rundir import FEATURES_FILE, SUMMARY_FILE
from online.errors import InputError
from online.events import (
    DEFAULT_EMBEDDING_DIM,
    DEFAULT_MAX_AHEAD_SECONDS,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_OUTLINKS,
    DEFAULT_MAX_URL_LENGTH,
    EventLimits,
)
from online.features import DEFAULT_COMPACT_STORE, DEFAULT_NEIGHBOURS
from online.history import DEFAULT_HISTORY
from online.neighbour_search import DEFAULT_DRIFT_GROWTH, DEFAULT_DRIFT_SIMILARITY
from online.pipeline import PipelineConfig
from online.scorers import DEFAULT_SCORER, LEARNED, SCORER_NAMES
from streams import cli_crawl, cli_live, cli_models, cli_ops, cli_simulate
from streams.cli_output import console, out_console
from streams.replay import nothing_accepted
from streams.replay import replay as run_replay
from streams.scorers import missing_model

DEFAULT_EVAL_SCORERS = ("lbla", "nnl-pr", "nnl-av", "ccr")
#: Exit status of a command stopped by the user's input or set-up (click's for usage errors).
INPUT_ERROR_EXIT = 2


def explain(exc: BaseException) -> str | None:
    """The message for an exception that is the user's input or set-up, or None (a bug).

    Library exceptions are recognised only when their module is loaded already: a command that
    never imported kafka cannot have raised one of its errors.
    """
    if isinstance(exc, InputError):
        return str(exc)
    modules = sys.modules
    registry = modules.get("batch.registry")
    if registry is not None and isinstance(exc, registry.ArtifactRefused):
        return f"model refused: {exc}"
    pydantic = modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        problems = "; ".join(
            f"LOOKAROUND_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        )
        return f"invalid settings: {problems} (`lookaround settings` lists them all)"
    kafka_errors = modules.get("kafka.errors")
    unreachable = tuple(  # kafka-python 2 raises NoBrokersAvailable, 3 a KafkaTimeoutError
        getattr(kafka_errors, name)
        for name in ("NoBrokersAvailable", "KafkaConnectionError", "KafkaTimeoutError")
        if hasattr(kafka_errors, name)
    )
    if unreachable and isinstance(exc, unreachable):
        return (
            f"no Kafka broker answers ({exc}): start one (`lookaround broker &`) or point "
            "LOOKAROUND_KAFKA_BOOTSTRAP (or --bootstrap) at yours"
        )
    redis_errors = modules.get("redis.exceptions")
    if redis_errors is not None and isinstance(
        exc, (redis_errors.ConnectionError, redis_errors.TimeoutError)
    ):
        return f"Redis does not answer ({exc}): start it, or point LOOKAROUND_REDIS_URL at yours"
    return None


class _Commands(TyperGroup):
    """The command group: turns a user's mistake into a message and exit status 2."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            message = explain(exc)
            if message is None:
                raise
            console.print(f"[red]error:[/red] {message}", soft_wrap=True, highlight=False)
            raise typer.Exit(INPUT_ERROR_EXIT) from None


class _Command(TyperCommand):
    """A command whose usage line names a required argument plainly (``EVENTS``; typer marks
    it ``{EVENTS}``)."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return [re.sub(r"^\{(.*)\}", r"\1", p) for p in super().collect_usage_pieces(ctx)]


def _version(value: bool) -> None:
    if value:
        try:
            number = version("lookaround")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown (not installed)"
        print(f"lookaround {number}")
        raise typer.Exit()


app = typer.Typer(
    cls=_Commands,
    help="lookaround: tells a focused crawler which pages to recrawl first.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"max_content_width": 100, "help_option_names": ["-h", "--help"]},
)


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """lookaround: tells a focused crawler which of its pages to recrawl first."""


def _check_scorer(name: str) -> str:
    if name not in SCORER_NAMES:
        raise typer.BadParameter(f"unknown scorer {name!r}; choose one of {list(SCORER_NAMES)}")
    return name


def _check_regime(name: str) -> str:
    if name not in REGIMES:
        raise typer.BadParameter(f"unknown regime {name!r}; choose one of {list(REGIMES)}")
    return name


def _check_interval_hours(hours: float | None) -> float | None:
    if hours is not None and not (math.isfinite(hours) and hours > 0):
        raise typer.BadParameter(f"must be a positive number of hours, got {hours}")
    return hours


def _check_drift(drift: float) -> float:
    if not (math.isfinite(drift) and 0.0 <= drift <= 1.0):
        raise typer.BadParameter(f"must be between 0 and 1, got {drift}")
    return drift


@app.command()
def generate(
    out: Annotated[Path, typer.Option(help="Events file to write (.jsonl or .jsonl.gz).")] = Path(
        "runs/crawl.jsonl.gz"
    ),
    pages: Annotated[int, typer.Option(min=1, help="Pages in the crawl.")] = 20_000,
    crawls: Annotated[int, typer.Option(min=2, help="Crawl rounds (fetches of every page).")] = 10,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same file.")] = 0,
    content: Annotated[
        str, typer.Option(help="What pages carry: embedding, text, both or none.")
    ] = "embedding",
    embedding_dim: Annotated[
        int, typer.Option(min=2, help="Dimension of the generated embeddings.")
    ] = DEFAULT_EMBEDDING_DIM,
    regime: Annotated[
        str,
        typer.Option(
            callback=_check_regime,
            help="Kind of site: paper (weekly web pages), news (section pages every 12 h), "
            "docs (sparse documentation site), aggregator (awesome lists).",
        ),
    ] = "paper",
    interval_hours: Annotated[
        float | None,
        typer.Option(
            callback=_check_interval_hours,
            help="Hours between crawls (default: the regime's: news 12, the others 168).",
        ),
    ] = None,
    embedding_drift: Annotated[
        float,
        typer.Option(
            callback=_check_drift,
            help="Per fetch, embeddings move by noise of this norm (text: this share of words "
            "replaced); 0 keeps content fixed between edits.",
        ),
    ] = 0.0,
) -> None:
    """Write a seeded synthetic crawl with the link dynamics of a kind of site."""

    if content not in ("embedding", "text", "both", "none"):
        raise typer.BadParameter("content must be one of embedding, text, both, none")
    try:
        config = GeneratorConfig(
            pages=pages,
            crawls=crawls,
            seed=seed,
            content=content,
            embedding_dim=embedding_dim,
            regime=regime,
            interval_days=None if interval_hours is None else interval_hours / 24.0,
            embedding_drift=embedding_drift,
        )
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    info = write_events(out, config)
    hours = config.interval_days * 24
    console.print(
        f"wrote {info['events']:,} events ({pages:,} {regime} pages × {crawls} crawls, "
        f"every {hours:g} h) to {out}"
    )


SCORER_HELP = (
    f"One of {', '.join(SCORER_NAMES)}. Learned: online (River, learns as labels arrive), "
    "batch (the latest registered model; LBLA stands in without one, with the reason code "
    "no_model), ensemble (both and LBLA)."
)


@app.command()
def replay(
    events: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, metavar="EVENTS", help="Events file (JSON Lines, .gz ok)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")] = Path(
        "runs/replay"
    ),
    scorer: Annotated[str, typer.Option(callback=_check_scorer, help=SCORER_HELP)] = DEFAULT_SCORER,
    registry: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Model registry for the batch / ensemble scorers (its latest model, used "
            "throughout). Without one, or with an empty one, no batch model.",
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Events per batch (the output does not depend on it).")
    ] = DEFAULT_BATCH_SIZE,
    history: Annotated[int, typer.Option(min=0, help="Intervals kept per page.")] = (
        DEFAULT_HISTORY
    ),
    neighbours: Annotated[
        int, typer.Option(min=1, help="Related pages per page.")
    ] = DEFAULT_NEIGHBOURS,
    drift_similarity: Annotated[
        float,
        typer.Option(
            min=-1.0,
            max=1.0,
            help="Search a page's related pages again when the cosine similarity of its "
            "embedding to the one they were found with falls below this (1: on every change).",
        ),
    ] = DEFAULT_DRIFT_SIMILARITY,
    drift_growth: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Search a changed page's related pages again once the index has grown this "
            "much since they were found.",
        ),
    ] = DEFAULT_DRIFT_GROWTH,
    embedding_dim: Annotated[
        int, typer.Option(min=2, help="Dimension of the events' embeddings (fixed per run).")
    ] = DEFAULT_EMBEDDING_DIM,
    max_outlinks: Annotated[
        int,
        typer.Option(min=1, help="An event with more outlinks is rejected whole (not truncated)."),
    ] = DEFAULT_MAX_OUTLINKS,
    fetch_budget_per_day: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Fetches a day the crawler spends: next_fetch_at then follows the square-root "
            "allocation of that budget.",
        ),
    ] = None,
    compact_store: Annotated[
        bool,
        typer.Option(
            envvar="LOOKAROUND_COMPACT_STORE",
            help="Keep stats, related-page weights and look-around rows in half precision, "
            "as workers with LOOKAROUND_COMPACT_STORE=true do.",
        ),
    ] = DEFAULT_COMPACT_STORE,
    earliest_fetch: Annotated[
        str,
        typer.Option(
            envvar="LOOKAROUND_EARLIEST_FETCH",
            help="Earliest fetched_at accepted (ISO-8601; no timezone: UTC).",
        ),
    ] = "1990-01-01T00:00:00Z",
    max_fetch_ahead_seconds: Annotated[
        float,
        typer.Option(
            min=0,
            envvar="LOOKAROUND_MAX_FETCH_AHEAD_SECONDS",
            help="How far past this machine's clock a fetched_at may lie (a generated crawl "
            "that runs into the future needs more).",
        ),
    ] = DEFAULT_MAX_AHEAD_SECONDS,
    max_url_length: Annotated[
        int,
        typer.Option(min=16, envvar="LOOKAROUND_MAX_URL_LENGTH", help="Longest page URL."),
    ] = DEFAULT_MAX_URL_LENGTH,
    max_event_bytes: Annotated[
        int,
        typer.Option(min=1024, envvar="LOOKAROUND_MAX_EVENT_BYTES", help="Largest event."),
    ] = DEFAULT_MAX_EVENT_BYTES,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Replay an events file through the core.

    In this process: no broker, no Redis. Writes the run directory (OUT).
    """

    config = PipelineConfig(
        history=history,
        neighbours=neighbours,
        drift_similarity=drift_similarity,
        drift_growth=drift_growth,
        embedding_dim=embedding_dim,
        fetch_budget_per_day=fetch_budget_per_day,
        compact_store=compact_store,
    )
    summary = _replay(
        events,
        out,
        scorer=scorer,
        config=config,
        batch_size=batch_size,
        max_outlinks=max_outlinks,
        limits=EventLimits(
            max_url_length=max_url_length,
            earliest=_epoch_seconds(earliest_fetch, "--earliest-fetch"),
            max_ahead_seconds=max_fetch_ahead_seconds,
            max_event_bytes=max_event_bytes,
        ),
        progress=not quiet,
        registry_dir=registry,
    )
    _print_summary(summary, out)


def _epoch_seconds(text: str, option: str) -> float:
    """Epoch seconds of an ISO-8601 time given on the command line (no timezone: UTC)."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{option}: expected an ISO-8601 time, got {text!r}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _replay(events: Path, out: Path, **options: Any):  # type: ignore[no-untyped-def]
    """`streams.replay.replay`, saying when a batch model is missing and failing when the run
    accepted no event (the run directory is written either way)."""

    _warn_without_model(options.get("scorer", DEFAULT_SCORER), options.get("registry_dir"))
    summary = run_replay(events, out, **options)
    problem = nothing_accepted(summary)
    if problem is not None:
        raise InputError(problem)
    return summary


def _warn_without_model(scorer: str, registry: Path | None) -> None:
    note = missing_model(scorer, registry)
    if note is not None:
        console.print(f"[yellow]warning:[/yellow] {note}", soft_wrap=True, highlight=False)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Directory for the crawl and the run.")] = Path(
        "runs/demo"
    ),
    pages: Annotated[int, typer.Option(min=1, help="Pages of the generated crawl.")] = 10_000,
    crawls: Annotated[int, typer.Option(min=2, help="Weekly crawls of the generated crawl.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the generated crawl.")] = 0,
    events: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="Replay this events file instead of generating."
        ),
    ] = None,
    scorer: Annotated[str, typer.Option(callback=_check_scorer, help=SCORER_HELP)] = DEFAULT_SCORER,
) -> None:
    """Generate a crawl, replay it, evaluate it.

    The main job from nothing (or from --events); prints the headline table.
    """

    out.mkdir(parents=True, exist_ok=True)
    if events is None:
        events = out / "crawl.jsonl.gz"
        info = write_events(events, GeneratorConfig(pages=pages, crawls=crawls, seed=seed))
        console.print(f"generated {info['events']:,} events → {events}")
    run_dir = out / "run"
    summary = _replay(events, run_dir, scorer=scorer)
    _print_summary(summary, run_dir)
    _evaluate_and_print(run_dir, _with_run_scorer(run_dir, DEFAULT_EVAL_SCORERS))


def _parse_scorers(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise typer.BadParameter("give at least one scorer")
    for name in names:
        _check_scorer(name)
    return names


@app.command()
def evaluate(
    run_dir: Annotated[
        Path,
        typer.Argument(
            exists=True, file_okay=False, metavar="RUN_DIR", help="Run directory of a replay."
        ),
    ],
    scorers: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated scorers to compare (plus random and oracle); default: the "
            "run's own scorer and " + ",".join(DEFAULT_EVAL_SCORERS) + ". A learned scorer "
            "(online, batch, ensemble) is judged on the predictions the replay recorded, so "
            "only the run's own one can be named."
        ),
    ] = None,
) -> None:
    """Judge every ranking on a replay's run directory.

    Writes report.md, report.html, CSVs and plots into RUN_DIR.
    """
    names = (
        _with_run_scorer(run_dir, DEFAULT_EVAL_SCORERS)
        if scorers is None
        else _parse_scorers(scorers)
    )
    recorded = _run_scorer(run_dir)
    for name in names:
        if name in LEARNED and name != recorded:
            raise typer.BadParameter(
                f"{name} is a learned scorer and this run was replayed with {recorded}: "
                f"replay with --scorer {name} to judge it"
            )
    _evaluate_and_print(run_dir, names)


def _run_scorer(run_dir: Path) -> str | None:
    summary = run_dir / SUMMARY_FILE
    if not summary.exists():
        return None
    return json.loads(summary.read_text()).get("scorer")


def _with_run_scorer(run_dir: Path, names: tuple[str, ...]) -> tuple[str, ...]:
    own = _run_scorer(run_dir)
    return tuple(dict.fromkeys(((own,) if own else ()) + names))


def _evaluate_and_print(run_dir: Path, scorers: tuple[str, ...]) -> None:
    # Deferred: batch.report loads matplotlib, a start-up cost every other command would pay.
    from batch.report import HEADLINE_COLUMNS, headline_rows, write_report

    if not (run_dir / FEATURES_FILE).exists():
        raise InputError(
            f"{run_dir} has no {FEATURES_FILE}: give the run directory of "
            "`lookaround replay` or `lookaround replay-topic`"
        )
    result = write_report(run_dir, scorers)
    table = Table(title="stream view, target nnl_total (new outlinks at the next fetch)")
    for i, label in enumerate(HEADLINE_COLUMNS.values()):
        table.add_column(label, justify="left" if i == 0 else "right", overflow="fold")
    for row in headline_rows(result.headline):
        table.add_row(*row)
    screen = out_console()
    screen.print(table)
    screen.print(
        f"report: {result.html} (also {result.markdown.name}, evaluation.csv, plots/)",
        highlight=False,
    )


def _print_summary(summary, out: Path) -> None:  # type: ignore[no-untyped-def]
    table = Table(title=f"replay with scorer {summary.scorer}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name in (
        "events_read",
        "accepted",
        "rejected",
        "applied",
        "duplicate",
        "stale",
        "dropped_outlinks",
        "pages",
        "indexed_pages",
        "labelled_rows",
        "events_per_second",
    ):
        value = getattr(summary, name)
        table.add_row(name.replace("_", " "), f"{value:,}")
    screen = out_console()
    screen.print(table)
    screen.print(
        f"output: {out}/ (priorities.jsonl.gz, features.parquet, rejects.jsonl, summary.json)",
        highlight=False,
    )
    if summary.rejected:
        console.print(
            f"[yellow]note:[/yellow] {summary.rejected:,} events rejected: {out}/rejects.jsonl "
            "says which field and why",
            soft_wrap=True,
            highlight=False,
        )


def _register_command_groups() -> None:
    """Commands kept in their own modules (live pipeline, operations, models), added to the
    one app."""

    cli_crawl.register(app)
    cli_live.register(app)
    cli_ops.register(app)
    cli_models.register(app)
    cli_simulate.register(app)
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = _Command


_register_command_groups()

if __name__ == "__main__":
    app()
