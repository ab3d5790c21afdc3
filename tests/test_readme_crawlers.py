"""docs/crawlers.md's "From WARC archives" commands run as written (in a directory holding
archives of those names), and its "Use it with Scrapy" commands ask for what the tested crawl
uses."""

from __future__ import annotations

import gzip
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.warc import CaptureWriter

ROOT = Path(__file__).resolve().parents[1]
S_TIMELINE = ROOT.parent / "shared" / "data" / "S-timeline" / "versions.jsonl.gz"


def section_commands(title: str) -> list[str]:
    """The command lines of the first bash block of a section of docs/crawlers.md
    (continuations joined)."""
    text = (ROOT / "docs" / "crawlers.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _archive(path: Path, pages: int, day: int) -> None:
    writer = CaptureWriter(path)
    for k in range(pages):
        body = f'<html><body><p>page {k}</p><a href="/p{k + 1}">next</a></body></html>'.encode()
        writer.write(f"https://a.org/p{k}", 1_772_409_600 + day * 86_400 + k, 200,
                     [("Content-Type", "text/html")], body)  # fmt: skip
    writer.close()


@pytest.mark.timeout(300)
def test_from_warc_archives_commands_as_written(broker, tmp_path):
    commands = section_commands("From WARC archives")
    assert [c.split()[:2] for c in commands] == [
        ["lookaround", "import-warc"],
        ["lookaround", "replay"],
        ["lookaround", "import-warc"],
    ]
    for name in re.findall(r"crawl-\d+\.warc\.gz", commands[0]):
        _archive(tmp_path / name, 20, int(name[6:11]))
    from streams.harness import worker_settings
    from streams.kafka_io import ensure_topics
    from streams.topic_replay import read_topic

    settings = worker_settings(broker, f"readme{tmp_path.name[-6:]}")
    ensure_topics(settings)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LOOKAROUND_")},
        "LOOKAROUND_KAFKA_BOOTSTRAP": broker,
        "LOOKAROUND_TOPIC_FETCHED": settings.topic_fetched,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command.split("#", 1)[0]], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    out = re.search(r"--out (\S+)", commands[0]).group(1)
    with gzip.open(tmp_path / out) as fh:
        events = [orjson.loads(line) for line in fh]
    assert len(events) == 40 and events[0]["outlinks"] == ["https://a.org/p1"]
    summary = orjson.loads((tmp_path / "runs/from-warc/summary.json").read_bytes())
    assert summary["applied"] == 40
    assert len(read_topic(settings, settings.topic_fetched)) == 40


def test_use_it_with_scrapy_commands_ask_for_what_the_tested_crawl_uses():
    from streams.crawlers.harness import CrawlPlan, scrapy_command
    from streams.living_site import LivingSite  # noqa: F401 - the site the command serves
    from streams.settings import Settings

    commands = section_commands("Use it with Scrapy")
    site_line = next(c for c in commands if c.startswith("lookaround living-site"))
    crawl_line = next(c for c in commands if "scrapy crawl site" in c)
    assert "cd examples/scrapy" in crawl_line
    readme_settings = dict(
        arg.split("=", 1) for arg in shlex.split(crawl_line.split("&&", 1)[1])[::1] if "=" in arg
    )
    assert readme_settings["site"] == "http://127.0.0.1:8000"

    class Site:
        base_url = "http://127.0.0.1:8000"

    tested = scrapy_command(Site(), Settings(), CrawlPlan("budget", 7236, 1_786_838_400.0))
    tested_settings = dict(arg.split("=", 1) for arg in tested if "=" in arg)
    for name in ("LOOKAROUND_CLOCK_URL", "LOOKAROUND_RECRAWL_MODE", "LOOKAROUND_RECRAWL_UNTIL"):
        assert readme_settings[name] == tested_settings[name], name
    assert float(readme_settings["LOOKAROUND_REQUESTS_PER_MINUTE"]) == float(
        tested_settings["LOOKAROUND_REQUESTS_PER_MINUTE"]
    )
    # The living site's options exist as written.
    from typer.testing import CliRunner

    from streams.cli import app

    helped = CliRunner().invoke(app, ["living-site", "--help"])
    for option in re.findall(r"--[a-z-]+", site_line):
        assert option in helped.output, option
    project = (ROOT / "examples/scrapy/lookaround_example/settings.py").read_text()
    assert "streams.crawlers.scrapy.LookaroundEvents" in project
    assert "streams.crawlers.scrapy.LookaroundRecrawl" in project


@pytest.mark.skipif(not S_TIMELINE.exists(), reason=f"S-timeline not found at {S_TIMELINE}")
def test_the_readmes_scrapy_budget_is_five_percent_a_day():
    from streams.timeline_io import read_timeline

    timeline = read_timeline(S_TIMELINE).timeline
    crawl_line = next(c for c in section_commands("Use it with Scrapy") if "scrapy crawl" in c)
    per_minute = float(re.search(r"REQUESTS_PER_MINUTE=(\d+)", crawl_line).group(1))
    pages = len(timeline.alive_at(timeline.start))
    assert per_minute == pytest.approx(0.05 * pages * 60, abs=1)  # a simulated day a second
    until = re.search(r"RECRAWL_UNTIL=(\S+)", crawl_line).group(1)
    from datetime import datetime

    assert datetime.fromisoformat(until).timestamp() == timeline.end
