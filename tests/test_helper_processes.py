"""Helper processes end with the process that started them, even when it is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from batch.generate import GeneratorConfig, write_events
from batch.helper_processes import PIPE_BYTES, widen_pipe

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs Linux /proc to see process states"
)

# Each script starts helpers, prints their process ids, then waits to be killed. The helpers are
# busy or blocked when it dies: the reader on its full queue, the writer waiting for batches,
# the parser pool waiting for work.
SCRIPTS = {
    "replay reader and writer": """
        import multiprocessing as mp, sys, time
        from pathlib import Path
        from batch.reader import read_batches
        from streams.run_outputs import RunOutputs
        batches = read_batches(Path(sys.argv[1]), batch_size=10, parallel=True)
        next(batches)
        outputs = RunOutputs(Path(sys.argv[2]), 8, parallel=True)
        print(*[p.pid for p in mp.active_children()], flush=True)
        time.sleep(120)
    """,
    "live parser pool": """
        import multiprocessing as mp, os, time
        from batch.helper_processes import helper_pool
        pool = helper_pool(1)
        assert pool.submit(os.getpid).result() != os.getpid()
        print(*[p.pid for p in mp.active_children()], flush=True)
        time.sleep(120)
    """,
}


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an orphan's zombie may wait for a
    reaper that never comes in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.parametrize("helpers", sorted(SCRIPTS))
def test_helpers_end_when_their_parent_is_killed(helpers: str, tmp_path: Path) -> None:
    events = tmp_path / "crawl.jsonl.gz"
    write_events(events, GeneratorConfig(pages=300, crawls=3, seed=1), progress=False)
    root = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPTS[helpers]), str(events), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    pids: list[int] = []
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) == {"live parser pool": 1}.get(helpers, 2), f"helpers started: {pids}"
        assert all(_running(pid) for pid in pids)
        time.sleep(0.5)
        assert all(_running(pid) for pid in pids), "helpers must live while the parent does"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in pids if _running(pid)]
        assert not left, f"helpers outlived their killed parent: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_widened_pipe_takes_a_whole_batch_before_its_reader_reads() -> None:
    """The events reader writes a parsed batch (about 1.1 MB) ahead in one piece; a default
    Linux pipe takes 64 kB before its writer has to wait for the reader."""
    if int(Path("/proc/sys/fs/pipe-max-size").read_text()) < PIPE_BYTES and os.geteuid() != 0:
        pytest.skip("fs.pipe-max-size is below PIPE_BYTES for this unprivileged user")
    written = {}
    for widened in (False, True):
        read_end, write_end = os.pipe()
        try:
            if widened:
                assert widen_pipe(write_end) >= PIPE_BYTES
            os.set_blocking(write_end, False)
            written[widened] = os.write(write_end, b"x" * PIPE_BYTES)
        finally:
            os.close(read_end)
            os.close(write_end)
    assert written[True] == PIPE_BYTES > written[False]
