"""The ``lookaround`` command's entry point, kept light on purpose.

The replay's events reader and outputs writer (and the live worker's parser processes) are
started with multiprocessing's ``spawn``, which runs the program's main script again in each
child. Were that script to import `streams.cli` at its top, as the generated console script
does with its entry point's module, every helper process would load the whole CLI (models,
FAISS, Kafka clients: about 250 MB) before it did any work. Here the CLI is imported only when
the command runs, so a helper imports just what its own function needs.
"""

from __future__ import annotations

from typing import Any


def app() -> Any:
    """Run the ``lookaround`` command line (`streams.cli.app`)."""
    # Deferred: a spawned helper runs this script again; it must not load the whole CLI.
    from streams.cli import app as command

    return command()
