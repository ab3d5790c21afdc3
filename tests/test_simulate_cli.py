"""`lookaround simulate` and `lookaround timeline` end to end: outputs, the figures recomputed
from the fetch log and the timeline alone, user mistakes as messages and exit codes, and the
README's command on S-timeline (skips where ../shared is absent)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import orjson
import pytest
from isal import igzip
from typer.testing import CliRunner

from batch.discovery import measure
from batch.policies import POLICY_NAMES
from batch.timeline import DAY
from streams.cli import app
from streams.simulate import FETCHES_FILE, RESULTS_FILE
from streams.timeline_io import read_timeline

ROOT = Path(__file__).resolve().parents[1]
S_TIMELINE = ROOT.parent / "shared" / "data" / "S-timeline" / "versions.jsonl.gz"
T0 = 1_767_225_600.0


def site_lines(days: int = 20) -> list[dict]:
    """A hub linking 30 pages that gains a link to a newborn page every day; every third day
    page p1 links somewhere new outside the site."""
    pages = [f"https://site.org/p{i}" for i in range(30)]
    out = [{"url": "https://site.org/", "at": T0, "outlinks": pages, "text": "home"}]
    out += [{"url": p, "at": T0, "outlinks": [], "text": f"page {p}"} for p in pages]
    for day in range(1, days):
        born = f"https://site.org/new{day}"
        pages = [*pages, born]
        out.append({"url": "https://site.org/", "at": T0 + (day + 0.4) * DAY, "outlinks": pages})
        out.append({"url": born, "at": T0 + (day + 0.3) * DAY, "outlinks": [], "text": born})
        if day % 3 == 0:
            links = [f"https://ext.org/{d}" for d in range(day + 1)]
            out.append({"url": pages[1], "at": T0 + (day + 0.5) * DAY, "outlinks": links})
    return out


@pytest.fixture
def timeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "site.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in site_lines()))
    return path


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


def said(result) -> str:  # type: ignore[no-untyped-def]
    """The command's output with the terminal's line breaks undone."""
    return " ".join(result.output.split())


def test_simulate_writes_logs_figures_and_report(timeline_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke("simulate", str(timeline_file), "--budget", "10%,5", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "oracle" in result.output and "report" in result.output
    for name in ("report.html", "report.md", "summary.csv", RESULTS_FILE, FETCHES_FILE):
        assert (out / name).stat().st_size > 0
    assert "data:image/png;base64," in (out / "report.html").read_text()
    results = json.loads((out / RESULTS_FILE).read_text())
    assert [(c["policy"], c["budget"]) for c in results["crawls"]] == [
        (p, b) for b in ("10%", "5") for p in POLICY_NAMES
    ]
    # Every figure again from the timeline and the fetch log alone.
    timeline = read_timeline(timeline_file).timeline
    with igzip.open(out / FETCHES_FILE, "rb") as fh:
        log = [orjson.loads(line) for line in fh]
    for crawl in results["crawls"]:
        mine = [r for r in log if (r["policy"], r["budget"]) == (crawl["policy"], crawl["budget"])]
        again = measure(
            timeline,
            [r["url"] for r in mine],
            [_epoch(r["at"]) for r in mine],
            [r["origin"] == "discovered" for r in mine],
        ).summary()
        assert {k: crawl[k] for k in again} == pytest.approx(again), crawl["policy"]
    uniform = next(c for c in results["crawls"] if c["policy"] == "uniform")
    assert uniform["fetches"] == int(0.10 * 31 * 20)  # 3.1 a day for 20 days


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--budget", "lots"), "budget 'lots'"),
        (("--policy", "uniform,fifo"), "unknown policy 'fifo'"),
        (("--scorer", "magic"), "unknown scorer"),
        (("--end", "soon"), "ISO-8601"),
    ],
)
def test_a_users_mistake_is_a_message_and_exit_code_2(
    timeline_file: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = invoke("simulate", str(timeline_file), "--out", str(tmp_path / "x"), *args)
    assert result.exit_code == 2
    assert message in said(result)
    assert "Traceback" not in result.output


def test_bad_lines_are_rejected_and_kept_aside(timeline_file: Path, tmp_path: Path) -> None:
    with open(timeline_file, "a") as fh:
        fh.write('{"url": "https://site.org/q", "at": "whenever", "outlinks": []}\nnot json\n')
    out = tmp_path / "run"
    result = invoke(
        "simulate", str(timeline_file), "--budget", "5", "--policy", "uniform", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "2 lines rejected" in said(result)
    rejects = [json.loads(x) for x in (out / "timeline_rejects.jsonl").read_text().splitlines()]
    good = len(site_lines())
    assert [(r["field"], r["line"]) for r in rejects] == [("at", good + 1), ("$", good + 2)]
    dead = tmp_path / "dead.jsonl"  # no page alive at the start: 5% of nothing
    dead.write_text('{"url": "https://site.org/", "at": 1767225600, "status": 404, "outlinks": []}')
    result = invoke("simulate", str(dead), "--budget", "5%", "--out", str(tmp_path / "z"))
    assert result.exit_code == 2 and "0 here" in said(result), result.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("nonsense\n")
    result = invoke("simulate", str(empty), "--out", str(tmp_path / "y"))
    assert result.exit_code == 2 and "no valid timeline record" in said(result)


def test_a_timeline_from_repeated_crawls_simulates(tmp_path: Path) -> None:
    events = tmp_path / "crawls.jsonl"
    lines = []
    for crawl in range(4):
        for r in site_lines(days=15):
            if r["at"] <= T0 + crawl * 4 * DAY:  # the state at each crawl
                lines.append({**r, "fetched_at": T0 + crawl * 4 * DAY, "crawl": crawl})
    events.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "at"}) + "\n" for r in lines)
    )
    path = tmp_path / "derived.jsonl.gz"
    result = invoke("timeline", str(events), "--out", str(path))
    assert result.exit_code == 0, result.output
    derived = read_timeline(path).timeline
    assert derived.start == T0 and len(derived.births()) == 11  # born by day 12
    result = invoke("simulate", str(events), "--budget", "20%", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "derived from the crawls" in said(result)


def readme_command() -> list[str]:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^lookaround simulate .+$", text, flags=re.MULTILINE)
    assert found, "the README shows how to run the simulation"
    return shlex.split(found.group(0))


def test_the_readmes_simulation_command_gives_its_table(tmp_path: Path) -> None:
    """Runs the README's command as written (its output directory moved to a temporary one);
    the policies that do not depend on the scorer must give the README's figures exactly."""
    if not S_TIMELINE.exists():
        pytest.skip(f"{S_TIMELINE} is absent (development data, not shipped)")
    argv = readme_command()
    argv[argv.index("--out") + 1] = str(tmp_path / "run")
    argv = [str(ROOT / a) if a.startswith("../shared") else a for a in argv]
    result = invoke(*argv[1:], "--quiet")
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "run" / RESULTS_FILE).read_text())
    readme = (ROOT / "README.md").read_text()
    for crawl in results["crawls"]:
        if crawl["policy"] == "lookaround":
            continue
        row = (
            f"| {crawl['budget']} | {crawl['policy']} | {crawl['found_7d']:,} "
            f"| {crawl['found_1d']:,} | {crawl['found']:,} |"
        )
        assert row in readme, row
