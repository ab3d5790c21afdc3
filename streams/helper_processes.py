"""How the replay's helper processes (the events reader, the outputs writer) run beside it.

On a machine with few cores the pipeline's own thread is the critical path: every event waits
for it, while the helpers have slack (their queues absorb it). With all of them runnable the
kernel shared the cores evenly, and the pipeline thread spent about 9 of 73 seconds of a
1,000,000-event replay waiting for a core. Helpers therefore run at a lower scheduling
priority: they get the cycles the pipeline leaves, and all of them when it waits.
"""

from __future__ import annotations

import contextlib
import os

#: Added to a helper process's niceness (lower priority); 0 leaves it alone.
HELPER_NICENESS = 10


def run_as_helper() -> None:
    """Lower the calling process's scheduling priority, where the platform allows."""
    if HELPER_NICENESS:
        with contextlib.suppress(AttributeError, OSError):  # no os.nice (Windows), or refused
            os.nice(HELPER_NICENESS)
