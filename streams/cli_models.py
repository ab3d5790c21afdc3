"""``lookaround train`` and ``lookaround experiment``: added to the app by streams/cli.py."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from batch.datasets import resolve_feature_set
from batch.evaluate import load_rows
from batch.generate import GeneratorConfig, write_events
from batch.models import DEFAULT_KIND, KINDS
from batch.registry import ModelRegistry
from batch.train import train_and_register
from streams.replay import replay
from streams.settings import Settings

console = Console(stderr=True)

KIND_HELP = "extratrees, ngboost, hgb, negbin or hurdle"


def _out() -> Console:
    """stdout for results: as wide as the terminal, or unlimited when piped (no wrapping)."""
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 1000)


def _progress_step():  # type: ignore[no-untyped-def]
    """A context manager per stage: a spinner while it runs, its time when done."""
    import time

    @contextmanager
    def step(text: str):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        with console.status(f"[bold]{text}[/] …", spinner="dots"):
            yield
        console.print(f"[green]✓[/] {text} [dim]({time.perf_counter() - t0:.1f} s)[/]")

    return step


def register(app: typer.Typer) -> None:
    """Add the model commands to the ``lookaround`` app."""

    @app.command()
    def train(
        run_dir: Annotated[
            Path,
            typer.Argument(
                exists=True, file_okay=False, metavar="RUN_DIR", help="Run directory of a replay."
            ),
        ],
        registry: Annotated[
            Path | None,
            typer.Option(help="Registry directory (default: LOOKAROUND_REGISTRY_DIR or ./models)."),
        ] = None,
        kind: Annotated[str, typer.Option(help=KIND_HELP)] = DEFAULT_KIND,
        feature_set: Annotated[
            str, typer.Option(help="SP, SP+SN, SP+SN+DP+DN, SP+SN+DP+DN/h0..h8, LBLA, LB, LA.")
        ] = "SP+SN+DP+DN",
        max_rows: Annotated[
            int | None, typer.Option(min=1, help="Train on a seeded sample of this many rows.")
        ] = None,
        holdout_crawls: Annotated[
            int, typer.Option(min=0, help="Last crawls held out for the scores (0: none).")
        ] = 1,
        refit: Annotated[
            bool, typer.Option(help="After scoring, refit on every labelled row.")
        ] = True,
        name: Annotated[str, typer.Option(help="Model name in the registry.")] = "link",
    ) -> None:
        """Fit a batch model on a run and register it.

        Scores it on held-out crawls first (the last --holdout-crawls), then refits on all
        labelled rows of RUN_DIR.
        """

        if kind not in KINDS:
            raise typer.BadParameter(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
        try:
            feature_set = resolve_feature_set(feature_set)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        root = registry if registry is not None else Settings().registry_dir
        result = train_and_register(
            run_dir,
            ModelRegistry(root),
            kind=kind,
            feature_set=feature_set,
            max_rows=max_rows,
            holdout_crawls=holdout_crawls,
            refit=refit,
            name=name,
            step=_progress_step(),
        )
        if result.scores:
            table = Table(title=f"held-out scores ({result.scores['rows']:,} rows)")
            table.add_column("measure")
            table.add_column("value", justify="right")
            for key, value in result.scores.items():
                shown = f"{value:.4f}" if isinstance(value, float) else f"{value}"
                table.add_row(key, shown)
            _out().print(table)
        art = result.artifact
        _out().print(
            f"registered [bold]{art.id}[/] ({art.meta['kind']}, {len(art.meta['features'])} "
            f"features, {result.training['rows_fitted']:,} rows) in {root}"
        )

    @app.command()
    def experiment(
        out: Annotated[Path, typer.Option(help="Directory for the report.")] = Path(
            "runs/experiment"
        ),
        run: Annotated[
            Path | None,
            typer.Option(exists=True, file_okay=False, help="Use this replay run directory."),
        ] = None,
        pages: Annotated[int, typer.Option(min=10, help="Without --run: generate pages.")] = 20_000,
        crawls: Annotated[int, typer.Option(min=4, help="Without --run: weekly crawls.")] = 10,
        seed: Annotated[int, typer.Option(help="Seed of the crawl and the models.")] = 0,
        holdout_crawls: Annotated[
            int, typer.Option(min=1, help="Last crawls held out for judging.")
        ] = 2,
        grid_trees: Annotated[int, typer.Option(min=1, help="Trees in the NL/LCR grids.")] = 50,
        grid_rows: Annotated[
            int, typer.Option(min=100, help="Training rows sampled for the NL/LCR grids.")
        ] = 40_000,
        models: Annotated[
            str, typer.Option(help=f"Comma list of batch models ({KIND_HELP}).")
        ] = "extratrees,ngboost,hgb,negbin,hurdle",
        quick: Annotated[
            bool,
            typer.Option(
                help="Histories 0, 1, 8 and feature sets SP, SP+semantic, LBLA only; small samples."
            ),
        ] = False,
    ) -> None:
        """Reproduce the paper's experiments as a report.

        NL by history and feature set, LCR, rankings, count models: experiment.md /
        experiment.html, CSVs and plots in OUT.
        """
        # Deferred: batch.experiment loads matplotlib, a start-up cost every command would pay.
        from batch.experiment import (
            ExperimentConfig,
            run_events_file,
            run_experiment,
            semantic_rows,
        )

        kinds = tuple(k.strip() for k in models.split(",") if k.strip())
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise typer.BadParameter(f"unknown model kinds {bad}; choose from {KINDS}")
        step = _progress_step()
        out.mkdir(parents=True, exist_ok=True)
        if run is None:
            events = out / "crawl.jsonl.gz"
            with step(f"generating {pages:,} pages × {crawls} crawls"):
                write_events(
                    events, GeneratorConfig(pages=pages, crawls=crawls, seed=seed), progress=False
                )
            run = out / "run"
            with step("replaying"):
                replay(events, run, progress=False)
        else:
            events = run_events_file(run)
        config = ExperimentConfig(
            holdout_crawls=holdout_crawls,
            grid_trees=grid_trees,
            grid_rows=grid_rows,
            models=kinds,
            seed=seed,
            **(
                {
                    "histories": (0, 1, 8),
                    "feature_sets": ("SP", "SP+semantic", "LBLA"),
                    "ranking_rows": 20_000,
                    "ngboost_rows": 2_000,
                    "ngboost_estimators": 100,
                    "importance_rows": 1_000,
                    "importance_repeats": 1,
                }
                if quick
                else {}
            ),
        )
        current: list = []

        def progress(text: str) -> None:
            if current:
                current.pop().__exit__(None, None, None)
            ctx = step(text)
            ctx.__enter__()
            current.append(ctx)

        rows = load_rows(run)
        if events is None:
            console.print(
                f"[yellow]note:[/] the events file of {run} is missing (summary.json): "
                "skipping feature set SP+semantic"
            )
        else:
            with step(f"semantic columns from {events.name}"):
                rows = semantic_rows(rows, events, seed=seed)
        result = run_experiment(rows, out, config, step=progress)
        if current:
            current.pop().__exit__(None, None, None)
        ranking = result.tables["ranking"]
        total = ranking[ranking["target"] == "nnl_total"].sort_values(
            "yield_share_10", ascending=False
        )
        table = Table(title="held-out ranking, nnl_total (mean over held-out rounds)")
        for col in ("ranking", "yield@10%", "P@k% AUC", "Spearman"):
            table.add_column(col, justify="left" if col == "ranking" else "right")
        for _, r in total.iterrows():
            table.add_row(
                str(r["ranking"]),
                *(
                    f"{r[c]:.4f}" if r[c] == r[c] else "n/a"
                    for c in ("yield_share_10", "p_auc", "spearman")
                ),
            )
        _out().print(table)
        _out().print(
            f"report: {result.html} (also {result.markdown.name}, CSVs, plots/)", highlight=False
        )
