"""Every command in the README and docs/ works as written.

* Every command of every shell block, and every inline `lookaround ...` / `python ...` span, is
  checked: `lookaround` commands are parsed by the command line itself (options, choices,
  arguments; paths they expect to exist are made in a scratch directory), `python` scripts and
  modules answer ``--help`` and know every option given, `docker compose` names services and
  profiles the compose file has, `helm install` sets values the chart has, files named exist.
* The embedded and the live quick starts are run for real, as written (the live one against
  Redis, on its own ports, key prefix and consumer group), and the kafka-python snippet reads
  real priority updates from a real broker.
* The JSON examples validate against the schemas.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest
import typer
import yaml

from streams.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Programs the docs name that these tests do not run (their own tests or nothing can):
#: kubectl (a cluster), the shell's own and the system's tools.
NOT_RUN = {"kubectl", "kill", "apt-get", "redis-server", "time"}
OPERATORS = {"&&", "||", "&", ";", "|"}
REDIRECTS = {">", ">>", "<", "2>", "2>&1", "&>"}


def blocks(path: Path, languages: tuple[str, ...]) -> list[tuple[str, int]]:
    """(text, first line number) of each fenced block in one of ``languages``."""
    found, lines, at = [], path.read_text().splitlines(), 0
    while at < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[at])
        if fence is None:
            at += 1
            continue
        end = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("```"))
        if fence.group(1) in languages:
            found.append(("\n".join(lines[at + 1 : end]), at + 2))
        at = end + 1
    return found


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell snippet, as argument lists (env assignments, `time`,
    redirections and `&` dropped)."""
    commands: list[list[str]] = []
    for line in text.replace("\\\n", " ").splitlines():
        current: list[str] = []
        tokens = shlex.split(line, comments=True)
        skip = False
        for token in tokens:
            if skip:
                skip = False
                continue
            if token in OPERATORS:
                commands.append(current)
                current = []
            elif token in REDIRECTS:
                skip = token != "2>&1"
            elif not current and re.match(r"^[A-Z_][A-Z0-9_]*=", token):
                continue  # an environment assignment before the command
            else:
                current.append(token)
        commands.append(current)
    return [c for c in commands if c]


def inline_commands(path: Path) -> list[list[str]]:
    spans = re.findall(r"`((?:lookaround|python) [^`]*)`", path.read_text())
    spans = [" ".join(s.split()) for s in spans]  # a span may wrap across lines
    return [c for s in spans if "COMMAND" not in s for c in shell_commands(s)]


def all_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for text, line in blocks(page, ("bash", "sh", "shell")):
            found += [(f"{page.name}:{line}", c) for c in shell_commands(text)]
        found += [(f"{page.name} inline", c) for c in inline_commands(page)]
    return found


COMMANDS = all_commands()


def test_the_docs_have_commands() -> None:
    programs = {c[0] for _, c in COMMANDS}
    assert {"lookaround", "python", "docker", "helm"} <= programs
    assert len([c for _, c in COMMANDS if c[0] == "lookaround"]) >= 30


# -- checking one command -------------------------------------------------------------------------


def parse_lookaround(args: list[str], scratch: Path) -> None:
    """Parse ``lookaround ARGS`` as the command line would, without running it; paths it
    expects to exist are made in ``scratch`` (the working directory) first."""
    root = typer.main.get_command(app)
    for _ in range(10):
        try:
            if not args or args[0].startswith("-"):
                root.make_context("lookaround", list(args))  # --version, --help
                return
            sub = root.get_command(None, args[0])  # type: ignore[arg-type]
            assert sub is not None, f"no command {args[0]!r}"
            sub.make_context(args[0], list(args[1:]))
            return
        except typer.Exit:
            return  # --help, --version
        except typer.BadParameter as err:
            missing = re.match(r"(file|dir|path) '(.+)' does not exist", err.message)
            if missing is None:
                raise
            path = scratch / missing.group(2)
            if missing.group(1) == "dir":
                path.mkdir(parents=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    raise AssertionError(f"could not parse {args}")


def python_help(args: list[str]) -> str:
    """``--help`` of a ``python script.py`` / ``python -m module`` command (subcommand kept)."""
    if args[:2] == ["-m", "pip"] or args[:2] == ["-m", "pytest"]:
        return ""
    head = args[:2] if args[0] == "-m" else args[:1]
    rest = args[len(head) :]
    sub = [rest[0]] if rest and not rest[0].startswith("-") else []
    return _help((*head, *sub))


@functools.cache
def _help(command: tuple[str, ...]) -> str:
    done = subprocess.run(
        [sys.executable, *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_python(args: list[str]) -> None:
    if args[:2] == ["-m", "pip"]:
        extras = re.findall(r"\.\[(\w+)\]", " ".join(args))
        pyproject = (ROOT / "pyproject.toml").read_text()
        assert all(f"\n{e} = [" in pyproject for e in extras), extras
        return
    if args[:2] == ["-m", "pytest"]:
        return
    if args[0] != "-m":
        assert (ROOT / args[0]).is_file(), args[0]
    text = python_help(args)
    for option in (a for a in args if a.startswith("--")):
        assert option.split("=")[0] in text, f"{option} not in the help of {args}"


def check_docker(args: list[str]) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    profiles = {p for s in services.values() for p in s.get("profiles", ())}
    assert args[1] == "compose", args
    words = args[2:]
    for i, word in enumerate(words):
        if word == "--profile":
            assert words[i + 1] in profiles, words[i + 1]
    verb = next(w for w in words if w in {"up", "down", "exec", "logs", "run", "ps"})
    named = [w for w in words[words.index(verb) + 1 :] if not w.startswith("-")]
    if verb in {"exec", "run"}:
        assert named[0] in services, named[0]
    elif verb == "up":
        assert all(n in services for n in named), named


def check_helm(args: list[str]) -> None:
    assert args[1] == "install", args
    chart = ROOT / args[3]
    values = yaml.safe_load((chart / "values.yaml").read_text())
    for i, word in enumerate(args):
        if word == "--set":
            key = args[i + 1].split("=")[0]
            node = values
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{key} not in values.yaml"
                node = node[part]


def check_files(args: list[str]) -> None:
    """A built tool run on files (the helm renderer): the files are there."""
    for word in args[1:]:
        assert (ROOT / word).exists(), word


@pytest.mark.parametrize(
    ("where", "command"), COMMANDS, ids=[f"{w}: {' '.join(c)[:60]}" for w, c in COMMANDS]
)
def test_command_as_written(where: str, command: list[str], tmp_path: Path) -> None:
    program, args = command[0], command[1:]
    named = where.endswith("inline") and len(args) == 1 and not args[0].startswith("-")
    if program == "lookaround" and named:
        # a command named in prose: it exists
        assert typer.main.get_command(app).get_command(None, args[0]) is not None  # type: ignore[arg-type]
    elif program == "lookaround":
        # absolute paths (a container's volumes) are made under the scratch directory
        args = [a.lstrip("/") if a.startswith("/") else a for a in args]
        scratch = tmp_path / "a" / "b"  # "../shared/..." stays inside tmp_path
        scratch.mkdir(parents=True)
        cwd = Path.cwd()
        os.chdir(scratch)
        try:
            parse_lookaround(args, scratch)
        finally:
            os.chdir(cwd)
    elif program == "python":
        check_python(args)
    elif program == "docker":
        check_docker(command)
    elif program == "helm":
        check_helm(command)
    elif program == "go":
        assert (ROOT / command[-1]).is_file()  # built and run by tests/test_chart.py
    elif program.startswith("/tmp/"):
        check_files(command)
    elif program == "cd":
        assert (ROOT / args[0]).is_dir(), f"{where}: no directory {args[0]}"
    elif program == "scrapy":
        # run by tests/test_scrapy_loop.py; its settings checked by tests/test_readme_crawlers.py
        assert (ROOT / "examples" / "scrapy" / "scrapy.cfg").is_file()
    else:
        assert program in NOT_RUN, f"{where}: nothing checks {program!r}"


# -- run for real ----------------------------------------------------------------------------------


def readme_block(first_line: str) -> str:
    """The README's shell block whose first command starts with ``first_line``."""
    for text, _ in blocks(ROOT / "README.md", ("bash",)):
        if text.lstrip().startswith(first_line):
            return text
    raise AssertionError(f"no README block starting with {first_line!r}")


def run_block(text: str, cwd: Path, env: dict[str, str], timeout: float):  # type: ignore[no-untyped-def]
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + text
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_embedded_quick_start_runs(tmp_path: Path) -> None:
    done = run_block(readme_block("lookaround generate"), tmp_path, {}, 600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stream view, target nnl_total" in done.stdout and "recrawl queue: 10 of" in done.stdout
    assert (tmp_path / "runs" / "replay" / "report.html").exists()


@pytest.mark.timeout(600)
def test_live_quick_start_runs_and_checks_out(redis_client, tmp_path: Path) -> None:
    """The live quick start exactly as written, on free ports, its own key prefix and group."""
    from streams.kafka_io import free_port
    from streams.redis_store import RedisPageStore

    prefix = f"qs{uuid.uuid4().hex[:10]}"
    env = {
        "LOOKAROUND_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "LOOKAROUND_WEB_PORT": str(free_port()),
        "LOOKAROUND_REDIS_KEY_PREFIX": f"{prefix}:",
        "LOOKAROUND_APP_ID": prefix,
        "LOOKAROUND_REGISTRY_DIR": str(tmp_path / "models"),
    }
    try:
        done = run_block(readme_block("lookaround broker"), tmp_path, env, 540)
    finally:
        RedisPageStore(redis_client, prefix=f"{prefix}:").delete_all()
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    check = json.loads(done.stdout[done.stdout.index("{") : done.stdout.index("\n}") + 2])
    assert check["ok"] and check["compared"] == "every field"
    assert check["expected"] == check["matching"] == 8000
    assert "in recorded order" in done.stderr and "priorities match: 8,000 updates" in done.stderr
    assert "recrawl queue: 10 of 2,000 pages" in done.stdout
    assert (tmp_path / "runs" / "from-topic" / "report.html").exists()


def test_kafka_python_snippet_reads_priorities(broker, tmp_path: Path) -> None:
    """The README's consumer, as written but for the broker's address: a new group reads the
    updates already published, without a warning from kafka-python."""
    from kafka import KafkaProducer

    (snippet,) = (t for t, _ in blocks(ROOT / "README.md", ("python",)) if "KafkaConsumer" in t)
    assert '"localhost:9092"' in snippet
    updates = [
        {
            "url": f"https://a.example/{i}",
            "score": float(i),
            "next_fetch_at": "2026-01-02T00:00:00Z",
        }
        for i in range(5)
    ]
    producer = KafkaProducer(bootstrap_servers=broker)
    for u in updates:
        producer.send("lookaround.priorities", key=u["url"].encode(), value=json.dumps(u).encode())
    producer.flush()
    producer.close()

    class Enough(Exception):
        pass

    seen: list[tuple] = []

    class Frontier:
        def reschedule(self, url: str, *, at: str, priority: float) -> None:
            seen.append((url, at, priority))
            if len(seen) == len(updates):
                raise Enough

    code = snippet.replace('"localhost:9092"', repr(broker))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Enough):
        warnings.simplefilter("always")
        exec(compile(code, "README.md", "exec"), {"frontier": Frontier()})
    # in order per partition; the partitions in any order
    assert sorted(seen) == sorted((u["url"], u["next_fetch_at"], u["score"]) for u in updates)
    assert not [w for w in caught if "kafka" in str(w.filename) and "serializ" in str(w.message)]


def test_json_examples_follow_the_schemas() -> None:
    from jsonschema import Draft202012Validator

    checker = Draft202012Validator.FORMAT_CHECKER
    examples = [json.loads(t) for t, _ in blocks(ROOT / "README.md", ("json",))]
    assert len(examples) == 3  # an event, a priority update, a related update
    names = ("fetched-page", "priority-update", "priority-update")
    for example, name in zip(examples, names, strict=True):
        schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
        Draft202012Validator(schema, format_checker=checker).validate(example)
