"""The one exception for a user's mistake: a file, a run directory or a setting that cannot be
used as given.

Its message says what is wrong and what to do; the command line prints it without a traceback
and exits with status 2. It is a `ValueError`, so code that catches those still does.

>>> str(InputError("runs/x has no labelled rows: replay a crawl with two or more crawls"))
'runs/x has no labelled rows: replay a crawl with two or more crawls'
"""

from __future__ import annotations


class InputError(ValueError):
    """What the user gave cannot be used; the message says why and what to do."""
