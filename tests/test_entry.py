"""The ``lookaround`` command's entry point stays light: multiprocessing's ``spawn`` runs the
program's main script again in every helper process (the replay's reader and writer, the
worker's parsers), so whatever that script imports, each helper loads before it works."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points


def test_the_console_script_is_the_light_entry_point():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "lookaround"]
    assert script.value == "streams.entry:app"


def test_importing_the_entry_point_loads_no_cli_models_or_clients():
    probe = (
        "import sys, streams.entry; "
        "print(sorted(m for m in ('streams.cli', 'faiss', 'sklearn', 'kafka', 'redis', 'typer')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_entry_point_runs_the_command_line():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from streams.entry import app; sys.exit(app())",
            "--help",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "generate" in out.stdout and "replay" in out.stdout
