"""The ``lookaround`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from online.events import DEFAULT_EMBEDDING_DIM, DEFAULT_MAX_OUTLINKS
from online.history import DEFAULT_HISTORY
from online.scoring import DEFAULT_SCORER, LEARNED, SCORER_NAMES
from streams.rundir import FEATURES_FILE, SUMMARY_FILE

DEFAULT_EVAL_SCORERS = ("lbla", "nnl-pr", "nnl-av", "ccr")

app = typer.Typer(
    help="lookaround: tells a focused crawler which pages to recrawl first.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)


def _check_scorer(name: str) -> str:
    if name not in SCORER_NAMES:
        raise typer.BadParameter(f"unknown scorer {name!r}; choose one of {list(SCORER_NAMES)}")
    return name


@app.command()
def generate(
    out: Annotated[Path, typer.Option(help="Events file to write (.jsonl or .jsonl.gz).")] = Path(
        "runs/crawl.jsonl.gz"
    ),
    pages: Annotated[int, typer.Option(min=1, help="Pages in the crawl.")] = 20_000,
    crawls: Annotated[int, typer.Option(min=2, help="Weekly crawl rounds.")] = 10,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same file.")] = 0,
    content: Annotated[
        str, typer.Option(help="What pages carry: embedding, text, both or none.")
    ] = "embedding",
    embedding_dim: Annotated[int, typer.Option(min=2)] = DEFAULT_EMBEDDING_DIM,
) -> None:
    """Write a seeded synthetic crawl with paper-like link dynamics."""
    from batch.generate import GeneratorConfig, write_events

    if content not in ("embedding", "text", "both", "none"):
        raise typer.BadParameter("content must be one of embedding, text, both, none")
    config = GeneratorConfig(
        pages=pages, crawls=crawls, seed=seed, content=content, embedding_dim=embedding_dim
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    info = write_events(out, config)
    console.print(f"wrote {info['events']:,} events ({pages:,} pages × {crawls} crawls) to {out}")


@app.command()
def replay(
    events: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Events file.")],
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")] = Path(
        "runs/replay"
    ),
    scorer: Annotated[
        str, typer.Option(callback=_check_scorer, help=f"One of {', '.join(SCORER_NAMES)}.")
    ] = DEFAULT_SCORER,
    registry: Annotated[
        Path | None,
        typer.Option(help="Model registry for the batch / ensemble scorers (latest model)."),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1)] = 1000,
    history: Annotated[int, typer.Option(min=0, help="Intervals kept per page.")] = (
        DEFAULT_HISTORY
    ),
    neighbours: Annotated[int, typer.Option(min=1, help="Related pages per page.")] = 30,
    embedding_dim: Annotated[int, typer.Option(min=2)] = DEFAULT_EMBEDDING_DIM,
    max_outlinks: Annotated[int, typer.Option(min=1)] = DEFAULT_MAX_OUTLINKS,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Stream an events file through the core in this process (no broker, no Redis)."""
    from batch.registry import ArtifactRefused
    from streams.pipeline import PipelineConfig
    from streams.replay import replay as run_replay

    config = PipelineConfig(history=history, neighbours=neighbours, embedding_dim=embedding_dim)
    try:
        summary = run_replay(
            events,
            out,
            scorer=scorer,
            config=config,
            batch_size=batch_size,
            max_outlinks=max_outlinks,
            progress=not quiet,
            registry_dir=registry,
        )
    except (ArtifactRefused, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    _print_summary(summary, out)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Directory for the crawl and the run.")] = Path(
        "runs/demo"
    ),
    pages: Annotated[int, typer.Option(min=1)] = 10_000,
    crawls: Annotated[int, typer.Option(min=2)] = 10,
    seed: Annotated[int, typer.Option()] = 0,
    events: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Use this events file.")
    ] = None,
    scorer: Annotated[str, typer.Option(callback=_check_scorer)] = DEFAULT_SCORER,
) -> None:
    """The main job from nothing: generate a crawl (or take --events), replay it, evaluate it."""
    from batch.generate import GeneratorConfig, write_events
    from streams.replay import replay as run_replay

    out.mkdir(parents=True, exist_ok=True)
    if events is None:
        events = out / "crawl.jsonl.gz"
        info = write_events(events, GeneratorConfig(pages=pages, crawls=crawls, seed=seed))
        console.print(f"generated {info['events']:,} events → {events}")
    run_dir = out / "run"
    summary = run_replay(events, run_dir, scorer=scorer)
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
        Path, typer.Argument(exists=True, file_okay=False, help="Run directory of a replay.")
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
    """Evaluate a replay run: report.md / report.html, CSVs and plots in RUN_DIR."""
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
    from batch.report import HEADLINE_COLUMNS, headline_rows, write_report

    if not (run_dir / FEATURES_FILE).exists():
        raise typer.BadParameter(f"{run_dir} has no features.parquet; run `lookaround replay`")
    result = write_report(run_dir, scorers)
    table = Table(title="stream view, target nnl_total (new outlinks at the next fetch)")
    for i, label in enumerate(HEADLINE_COLUMNS.values()):
        table.add_column(label, justify="left" if i == 0 else "right")
    for row in headline_rows(result.headline):
        table.add_row(*row)
    Console().print(table)
    console.print(f"report: {result.html} (also {result.markdown.name}, evaluation.csv, plots/)")


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
    Console().print(table)
    console.print(
        f"output: {out}/ (priorities.jsonl.gz, features.parquet, rejects.jsonl, summary.json)"
    )


def _register_command_groups() -> None:
    """Commands kept in their own modules (live pipeline, models), added to the one app."""
    from batch import cli_models
    from streams import cli_live

    cli_live.register(app)
    cli_models.register(app)


_register_command_groups()

if __name__ == "__main__":
    app()
