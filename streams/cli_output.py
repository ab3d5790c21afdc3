"""Where the commands write: messages to stderr, results to stdout.

Its own module so that every command group (`streams.cli` and the ``cli_*`` modules it
registers) can use it without importing the app that registers them.
"""

from __future__ import annotations

import sys

from rich.console import Console

#: Messages, warnings and progress: stderr, so stdout stays the command's result.
console = Console(stderr=True)


def out_console() -> Console:
    """stdout for results: as wide as the terminal, or unlimited when piped (no wrapping)."""
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 1000)
