"""A user's mistake gets a message that says what to do and exit status 2, never a traceback.

Each case a new user met (issue 16) is fed here: through the command group in this process
(`CliRunner`: the same handler the installed command runs) and, for a few, through the
installed entry point in a subprocess, where an unhandled exception would print its traceback.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from batch.generate import GeneratorConfig, write_events
from online.scored import NO_MODEL
from streams.cli import INPUT_ERROR_EXIT, app, explain
from streams.replay import read_priorities


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def failed(result, *phrases: str) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(result.output.split())  # the console wraps long lines
    assert result.exit_code == INPUT_ERROR_EXIT, result.output
    assert "error:" in text
    for phrase in phrases:
        assert phrase in text, text


def run_installed(*args: str, cwd: Path, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """The installed command line (`python -m streams.cli`, what the script runs)."""
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli-errors") / "crawl.jsonl.gz"
    write_events(path, GeneratorConfig(pages=60, crawls=2, seed=3), progress=False)
    return path


@pytest.fixture(scope="module")
def one_crawl(tmp_path_factory) -> Path:
    """A crawl that fetched every page once: nothing can be labelled."""
    path = tmp_path_factory.mktemp("one-crawl") / "once.jsonl"
    lines = [
        orjson.dumps({"url": f"https://a.example/{i}", "fetched_at": 1_700_000_000 + i,
                      "outlinks": [f"https://a.example/{i}/x"]})
        for i in range(20)
    ]  # fmt: skip
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


# -- events files -------------------------------------------------------------------------------


def test_plain_text_named_gz(tmp_path: Path, crawl: Path) -> None:
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(gzip.decompress(crawl.read_bytes()))
    failed(
        invoke("replay", plain, "--out", tmp_path / "run", "--quiet"),
        "plain.jsonl.gz is named .gz but is not gzip-compressed",
        "rename it without .gz",
    )
    failed(invoke("produce", plain), "is named .gz but is not gzip-compressed")
    assert not (tmp_path / "run" / "summary.json").exists()


def test_gzip_without_gz_name(tmp_path: Path, crawl: Path) -> None:
    named = tmp_path / "crawl.jsonl"
    named.write_bytes(crawl.read_bytes())
    failed(
        invoke("replay", named, "--out", tmp_path / "run", "--quiet"),
        "is gzip-compressed but its name does not end in .gz",
        "crawl.jsonl.gz",
    )


@pytest.mark.parametrize("parallel", ["in-process", "reader process"])
def test_truncated_gzip_leaves_no_partial_run(tmp_path: Path, crawl: Path, parallel: str) -> None:
    cut = tmp_path / "cut.jsonl.gz"
    data = crawl.read_bytes()
    if parallel == "reader process":  # larger than the size from which a reader process runs
        data = data * (5 * 2**20 // len(data) + 1)
    cut.write_bytes(data[: len(data) - 4000])
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")  # a previous run's: must not pass for this one's
    result = invoke("replay", cut, "--out", run, "--quiet")
    failed(result, "cut.jsonl.gz is truncated", "nothing was written", "get the whole file")
    assert sorted(p.name for p in run.iterdir()) == []


def test_corrupt_gzip(tmp_path: Path, crawl: Path) -> None:
    data = bytearray(crawl.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(bytes(data))
    failed(invoke("replay", bad, "--out", tmp_path / "run", "--quiet"), "has corrupt compressed")


def test_empty_events_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    failed(invoke("replay", empty, "--out", tmp_path / "r1", "--quiet"), "empty.jsonl is empty")
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n  \n\n")
    failed(
        invoke("replay", blank, "--out", tmp_path / "r2", "--quiet"),
        "blank.jsonl has no events (no line that is not blank)",
    )
    failed(invoke("demo", "--events", empty, "--out", tmp_path / "d"), "is empty")


def test_parquet_given_as_events(tmp_path: Path, crawl: Path) -> None:
    invoke("replay", crawl, "--out", tmp_path / "run", "--quiet")
    features = tmp_path / "run" / "features.parquet"
    failed(
        invoke("replay", features, "--out", tmp_path / "again", "--quiet"),
        "features.parquet is a Parquet file; events are JSON Lines",
    )


def test_nothing_accepted_fails_with_the_run_written(tmp_path: Path) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text("col_a,col_b\n1,2\n3,4\n")
    run = tmp_path / "run"
    failed(
        invoke("replay", junk, "--out", run, "--quiet"),
        "none of the 3 events of",
        "rejected on '$'",
        "is it a JSON Lines file of fetched-page events?",
    )
    assert json.loads((run / "summary.json").read_text())["rejected"] == 3
    assert len((run / "rejects.jsonl").read_text().splitlines()) == 3


def test_installed_command_prints_no_traceback(tmp_path: Path, crawl: Path) -> None:
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(gzip.decompress(crawl.read_bytes()))
    done = run_installed("replay", plain, "--out", "run", "--quiet", cwd=tmp_path)
    assert done.returncode == INPUT_ERROR_EXIT
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stderr.startswith("error: ") and "not gzip-compressed" in done.stderr


# -- run directories ------------------------------------------------------------------------------


def test_evaluate_without_labelled_rows(tmp_path: Path, one_crawl: Path) -> None:
    run = tmp_path / "run"
    assert invoke("replay", one_crawl, "--out", run, "--quiet").exit_code == 0
    failed(
        invoke("evaluate", run),
        "has no labelled rows to judge a ranking on (20 fetches of 20 pages)",
        "replay a crawl that fetches pages at least twice",
    )
    failed(invoke("demo", "--events", one_crawl, "--out", tmp_path / "d"), "no labelled rows")


def test_evaluate_a_directory_that_is_no_run(tmp_path: Path) -> None:
    failed(invoke("evaluate", tmp_path), "has no features.parquet")


def test_train_and_experiment_on_a_tiny_run(tmp_path: Path, crawl: Path, one_crawl: Path) -> None:
    run = tmp_path / "run"  # 2 crawls: 1 labelled
    invoke("replay", crawl, "--out", run, "--quiet")
    failed(
        invoke("train", run, "--registry", tmp_path / "models"),
        "need more than 1 labelled crawl(s) to hold 1 out",
        "the run has 1",
        "--holdout-crawls",
    )
    failed(
        invoke("experiment", "--run", run, "--out", tmp_path / "x", "--quick"),
        "need more than 2 labelled crawl(s) to hold 2 out",
    )
    unlabelled = tmp_path / "once"
    invoke("replay", one_crawl, "--out", unlabelled, "--quiet")
    failed(
        invoke("train", unlabelled, "--registry", tmp_path / "m", "--holdout-crawls", "0"),
        "no labelled rows to fit on",
    )


# -- settings, ports, services ------------------------------------------------------------------


def test_bad_setting_names_the_variable(tmp_path: Path) -> None:
    failed(
        invoke("settings", env={"LOOKAROUND_WEB_PORT": "99999"}),
        "invalid settings: LOOKAROUND_WEB_PORT: Input should be less than or equal to 65535",
    )


def test_second_worker_on_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_installed(
            "worker",
            cwd=tmp_path,
            env={"LOOKAROUND_WEB_PORT": str(port), "LOOKAROUND_WEB_HOST": "127.0.0.1"},
        )
    text = " ".join(done.stderr.split())
    assert done.returncode == INPUT_ERROR_EXIT and "Traceback" not in done.stderr
    assert f"port {port} (127.0.0.1) for /health and /metrics: Address already in use" in text
    assert f"LOOKAROUND_WEB_PORT={port + 1} lookaround worker" in text


def test_broker_on_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        failed(invoke("broker", "--port", str(port)), f"port {port}", "a broker running already?")


def test_services_that_do_not_answer_are_explained() -> None:
    import kafka.errors
    import redis.exceptions

    no_kafka = kafka.errors.KafkaConnectionError("Unable to bootstrap from ['127.0.0.1:1']")
    assert "no Kafka broker answers" in explain(no_kafka)
    assert "LOOKAROUND_KAFKA_BOOTSTRAP" in explain(no_kafka)
    no_redis = redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1")
    assert "Redis does not answer" in explain(no_redis)
    assert explain(RuntimeError("a bug")) is None  # a bug keeps its traceback


def test_redis_that_does_not_answer(tmp_path: Path) -> None:
    failed(
        invoke(
            "state", "https://a.example/", env={"LOOKAROUND_REDIS_URL": "redis://127.0.0.1:1/0"}
        ),
        "Redis does not answer",
        "LOOKAROUND_REDIS_URL",
    )


# -- what a run says about itself ----------------------------------------------------------------


def test_batch_scorer_without_a_model_says_so(tmp_path: Path, crawl: Path) -> None:
    """One behaviour with no registry and with an empty one: LBLA stands in, a warning, and the
    reason code on every priority."""
    for name, extra in (("none", []), ("empty", ["--registry", tmp_path / "models"])):
        (tmp_path / "models").mkdir(exist_ok=True)
        run = tmp_path / name
        result = invoke("replay", crawl, "--out", run, "--quiet", "--scorer", "batch", *extra)
        assert result.exit_code == 0, result.output
        assert "warning:" in result.output and "LBLA stands in (reason no_model)" in " ".join(
            result.output.split()
        )
        updates = list(read_priorities(run))
        assert updates and all(u["reasons"][-1] == NO_MODEL for u in updates)
        assert all(u["scorer"]["models"] == {} for u in updates)


@pytest.mark.parametrize("scorer", ["ccr", "nnl-pr", "nnl-av", "lbla", "online"])
def test_every_scorer_suggests_a_next_fetch(tmp_path: Path, crawl: Path, scorer: str) -> None:
    run = tmp_path / "run"
    assert invoke("replay", crawl, "--out", run, "--quiet", "--scorer", scorer).exit_code == 0
    for u in read_priorities(run):
        assert u["next_fetch_at"] is not None and u["next_fetch_at"] > u["fetched_at"]


def test_results_on_stdout_unwrapped(tmp_path: Path, crawl: Path) -> None:
    """Piped: the output and report lines whole on stdout, the headline's headers not cut."""
    out = tmp_path / ("a-long-directory-name-" * 3)
    done = run_installed("demo", "--events", crawl, "--out", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        f"output: {out / 'run'}/ (priorities.jsonl.gz, features.parquet, rejects.jsonl, "
        "summary.json)" in lines
    )
    assert any(line.startswith(f"report: {out / 'run' / 'report.html'} (also") for line in lines)
    assert "yield@10% / best" in done.stdout and "…" not in done.stdout


def test_every_option_has_help_and_usage_reads_plainly() -> None:
    """--help of every command: each option and argument explained, arguments named in
    capitals without typer's braces, no "<bool>" for flags."""
    import typer

    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for param in command.params:
            assert getattr(param, "help", None), f"{name} {param.name}: no help"
        text = invoke(name, "--help").output
        usage = text.splitlines()[0]
        assert "{" not in usage and "<bool>" not in text, usage
        for param in command.params:
            if param.param_type_name == "argument":
                assert param.metavar and param.metavar.strip("[]").isupper(), (name, param.name)
