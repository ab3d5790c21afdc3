"""The evaluation report: files, self-contained HTML, headline, CLI, and a run with no new links."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from batch.document import NO_NEW_LINKS
from batch.generate import GeneratorConfig
from batch.report import ReportResult, write_report
from streams.cli import app
from streams.replay import replay

RANKINGS = ["lbla", "nnl-pr", "nnl-av", "ccr", "random", "oracle"]


@pytest.fixture(scope="module")
def run_dir(generated_run) -> Path:
    return generated_run("report", GeneratorConfig(pages=300, crawls=4, seed=2))[1]


@pytest.fixture(scope="module")
def report(run_dir: Path) -> ReportResult:
    return write_report(run_dir)


@pytest.fixture(scope="module")
def static_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 pages fetched 3 times with identical outlinks: no page ever gains a link."""
    root = tmp_path_factory.mktemp("static")
    lines = []
    for crawl in range(3):
        for p in range(20):
            url = f"https://site{p % 3}.example.com/page{p}/"
            lines.append(
                {
                    "url": url,
                    "fetched_at": f"2026-01-{5 + 7 * crawl:02d}T00:00:{p:02d}Z",
                    "crawl": crawl,
                    "outlinks": [f"{url}child{i}" for i in range(3)] + ["https://ext.example.org/"],
                }
            )
    events = root / "events.jsonl"
    events.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    out = root / "run"
    replay(events, out, progress=False)
    return out


def test_report_files(run_dir: Path, report: ReportResult) -> None:
    result = report
    for path in (result.markdown, result.html, result.evaluation_csv, result.summary_csv):
        assert path.exists() and path.stat().st_size > 0, path
    assert set(result.plots) == {"precision_at_k", "yield", "spearman", "ccdf"}
    html = result.html.read_text()
    for path in result.plots.values():
        assert path.parent == run_dir / "plots"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.count("data:image/png;base64,") == len(result.plots)
    md = result.markdown.read_text()
    assert "nan" not in md.lower()
    assert "Precision@k%" in md and "ties" in md


def test_headline(report: ReportResult) -> None:
    head = report.headline
    assert head["ranking"].tolist() == RANKINGS
    oracle = head.set_index("ranking").loc["oracle"]
    assert oracle["p_auc"] == pytest.approx(1.0)
    assert oracle["spearman"] == pytest.approx(1.0)
    assert oracle["yield_relative_10"] == pytest.approx(1.0)
    learned = head.set_index("ranking").loc["nnl-av"]
    assert learned["p_auc"] > head.set_index("ranking").loc["random", "p_auc"]


def test_cli_evaluate(run_dir: Path) -> None:
    result = CliRunner().invoke(app, ["evaluate", str(run_dir), "--scorers", "lbla,nnl-pr"])
    assert result.exit_code == 0, result.output
    for name in ("lbla", "nnl-pr", "random", "oracle", "P@k% AUC", "report.html"):
        assert name in result.output
    bad = CliRunner().invoke(app, ["evaluate", str(run_dir), "--scorers", "nope"])
    assert bad.exit_code != 0


def test_no_new_links(static_run: Path) -> None:
    result = write_report(static_run)
    assert result.no_new_links
    md = result.markdown.read_text()
    assert NO_NEW_LINKS in md
    assert "nan" not in md.lower()
    head = result.headline
    assert head["p_auc"].isna().all()  # None, shown as "no new links"
    assert result.html.read_text().count("data:image/png;base64,") == len(result.plots)
    assert all(p.stat().st_size > 0 for p in result.plots.values())
