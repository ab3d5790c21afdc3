"""How helper processes (the replay's events reader and outputs writer, the live worker's
parser pool) run beside the process that started them.

Priority: on a machine with few cores the pipeline's own thread is the critical path: every
event waits for it, while the replay's helpers have slack (their queues absorb it). With all of
them runnable the kernel shared the cores evenly, and the pipeline thread spent about 9 of 73
seconds of a 1,000,000-event replay waiting for a core. The replay's helpers therefore run at a
lower scheduling priority: they get the cycles the pipeline leaves, and all of them when it
waits.

Lifetime: a parent killed outright (SIGKILL, the OOM killer) runs no clean-up, and a helper
blocked on its queue would live on as an orphan, holding its memory (seen after the tests that
kill a worker: one 240 MB parser per kill). Every helper therefore watches its parent and ends
when the parent is gone.

Pipes: a parsed batch of 1,000 events is about 1.1 MB; through a pipe of Linux's default
64 kB the pipeline's process read it in 18 pieces, each waiting for the helper's sending
thread to be scheduled again (4 of 52 profiled seconds of a 300,000-event replay in
``posix.read``). `widen_pipe` lets the helper write a whole batch ahead.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

#: Added to a replay helper's niceness (lower priority); 0 leaves it alone.
HELPER_NICENESS = 10

#: How often a helper checks that its parent is still there.
PARENT_POLL_SECONDS = 0.5

#: Bytes a helper's pipe holds: Linux's limit for an unprivileged process by default.
PIPE_BYTES = 1 << 20


def run_as_helper(parent_pid: int) -> None:
    """Lower the calling process's scheduling priority, where the platform allows, and end it
    when ``parent_pid`` is gone."""
    exit_with_parent(parent_pid)
    if HELPER_NICENESS:
        with contextlib.suppress(AttributeError, OSError):  # no os.nice (Windows), or refused
            os.nice(HELPER_NICENESS)


def exit_with_parent(parent_pid: int) -> None:
    """End the calling process (exit status 1, no clean-up) once its parent is no longer
    ``parent_pid``: the parent died and the process was handed to another."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def helper_pool(processes: int) -> ProcessPoolExecutor:
    """A pool of ``processes`` spawned workers that end with the calling process."""
    return ProcessPoolExecutor(
        processes,
        mp_context=mp.get_context("spawn"),
        initializer=exit_with_parent,
        initargs=(os.getpid(),),
    )


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> int:
    """Let the pipe at ``fd`` hold ``size`` bytes, where the platform allows (Linux; a size
    above the system's ``fs.pipe-max-size`` is refused for an unprivileged process). Returns
    what it holds now, 0 where that is not known."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return 0
    try:
        return fcntl.fcntl(fd, set_size, size)
    except OSError:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
