"""``lookaround simulate`` and ``lookaround timeline``: added to the app by streams/cli.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from batch.policies import check_policy
from batch.simulate import Budget, SimulationConfig
from online.scorers import DEFAULT_SCORER, SCORER_NAMES
from streams.simulate import run_simulation, write_run
from streams.timeline_io import EVENTS, REJECTS_NAME, read_timeline, write_rejects, write_timeline

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command()(simulate)
    app.command()(timeline)


def _end_time(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"--end {value!r}: expected an ISO-8601 time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _read(path: Path, end: float | None, out_dir: Path | None):  # type: ignore[no-untyped-def]
    """The timeline in ``path`` (or derived from the crawls in it); rejects reported and, with
    ``out_dir``, written there. Exits 2 when nothing in the file is valid."""

    try:
        read = read_timeline(path, end=end)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {path}: {exc}")
        raise typer.Exit(2) from None
    kind = "derived from the crawls in" if read.kind == EVENTS else "read from"
    console.print(f"timeline {kind} {path}: {read.timeline} ({read.lines:,} lines)")
    if read.rejects:
        first = read.rejects[0]
        where = ""
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_rejects(read.rejects, out_dir / REJECTS_NAME)
            where = f"; all in {out_dir / REJECTS_NAME}"
        console.print(
            f"[yellow]{len(read.rejects):,} lines rejected[/yellow] (first: line {first.line}, "
            f"{first.field}: {first.reason}{where})"
        )
    return read


def simulate(
    timeline_file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            metavar="TIMELINE",
            help="Timeline file (JSON Lines, .gz allowed), or an events file of repeated crawls.",
        ),
    ],
    budget: Annotated[
        str,
        typer.Option(
            help="Fetches a day, comma-separated: a number (125) or a share of the pages alive "
            "at the start (5%)."
        ),
    ] = "1%,2%,5%,10%,20%",
    policy: Annotated[
        str,
        typer.Option(
            help="Policies, comma-separated: lookaround, adaptive, uniform, change-rate, nnl-av, "
            "oracle (also lookaround-greedy, nnl-av-greedy, and lookaround-scheduled: a crawler "
            "that fetches each page at the next_fetch_at lookaround sets for the budget)."
        ),
    ] = "lookaround,adaptive,uniform,change-rate,nnl-av,oracle",
    out: Annotated[Path, typer.Option(help="Run directory to write.")] = Path("runs/simulate"),
    cycle_hours: Annotated[
        float, typer.Option(min=0.01, help="Hours between the policy's decisions.")
    ] = 1.0,
    politeness_seconds: Annotated[
        float, typer.Option(min=0.0, help="Least gap between two fetches of one host.")
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="Breaks ties between pages; same seed, same run.")] = 0,
    end: Annotated[
        str | None,
        typer.Option(help="End of the window (ISO-8601; default: the last change, whole days)."),
    ] = None,
    scorer: Annotated[
        str, typer.Option(help=f"Scorer of the lookaround policy: {', '.join(SCORER_NAMES)}.")
    ] = DEFAULT_SCORER,
    registry: Annotated[
        Path | None, typer.Option(help="Model registry for the batch / ensemble scorers.")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Recrawl a site's timeline under fetch budgets, one crawl per policy and budget; writes
    the fetch logs, the figures and report.html to OUT and prints the summary."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # Deferred: batch.sim_report loads matplotlib, a start-up cost every command would pay.
    from batch.sim_report import SHORT_COLUMNS, headline_rows, write_sim_report

    if scorer not in SCORER_NAMES:
        raise typer.BadParameter(f"unknown scorer {scorer!r}; choose one of {list(SCORER_NAMES)}")
    try:
        budgets = [Budget.parse(b) for b in budget.split(",") if b.strip()]
        policies = [p.strip() for p in policy.split(",") if p.strip()]
        for name in policies:
            check_policy(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not budgets or not policies:
        raise typer.BadParameter("give at least one budget and one policy")
    read = _read(timeline_file, _end_time(end), out)
    config = SimulationConfig(cycle_hours, politeness_seconds, seed)
    total = len(budgets) * len(policies)
    with Progress(
        TextColumn("simulate {task.fields[crawl]:<24}"),
        BarColumn(),
        TextColumn("{task.completed:.1f} / {task.total} crawls"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task("simulate", total=total, crawl="")
        done = {"crawls": 0, "label": ""}

        def progress(label: str, share: float) -> None:
            if label != done["label"]:
                if done["label"]:
                    done["crawls"] += 1
                done["label"] = label
            bar.update(task, completed=done["crawls"] + share, crawl=label)

        try:
            run = run_simulation(
                read.timeline,
                budgets,
                policies,
                config,
                scorer=scorer,
                registry_dir=registry,
                progress=progress,
            )
        except ValueError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
    write_run(run, out)
    tl = read.timeline
    about = [
        ("timeline", str(timeline_file)),
        ("window", f"{tl} ({tl.days:.0f} days)"),
        ("pages at the start (the index)", f"{run.pages_at_start:,}"),
        ("link appearances", f"{len(tl.link_appearances()):,}"),
        ("pages born / deleted", f"{len(tl.births()):,} / {len(tl.deaths()):,}"),
        ("lines rejected", f"{len(read.rejects):,}"),
        ("cycle (hours)", f"{cycle_hours:g}"),
        ("politeness (seconds)", f"{politeness_seconds:g}"),
        ("seed", str(seed)),
        ("lookaround scorer", scorer),
        ("run time (s)", f"{run.seconds:.1f}"),
    ]
    report = write_sim_report(
        out, run.crawls, about, pages_at_start=run.pages_at_start, start=tl.start
    )
    table = Table(
        title=f"closed-loop recrawl of {timeline_file.name} ({tl.days:.0f} days): link "
        "appearances found, delays in days",
        box=None,
    )
    for i, label in enumerate(SHORT_COLUMNS):
        table.add_column(label, justify="left" if i < 2 else "right")
    for row in headline_rows(run.crawls, compact=True):
        table.add_row(*row)
    Console().print(table)
    console.print(
        f"{total} crawls in {run.seconds:.1f} s; report: {report.html} (also report.md, "
        "results.json, summary.csv, fetches.jsonl.gz, plots/)"
    )


def timeline(
    events: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, metavar="EVENTS", help="Events file of repeated crawls."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Timeline file to write (.jsonl or .jsonl.gz).")] = Path(
        "runs/timeline.jsonl.gz"
    ),
    end: Annotated[
        str | None, typer.Option(help="End of the window (ISO-8601; default: whole days).")
    ] = None,
) -> None:
    """Derive a timeline from an events file of repeated crawls (each crawl's state valid until
    the next) and write it."""

    read = _read(events, _end_time(end), out.parent)
    records = write_timeline(read.timeline, out)
    console.print(f"wrote {records:,} versions of {len(read.timeline.urls):,} pages to {out}")
