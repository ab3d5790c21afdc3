"""What /health reports beyond "the worker runs and Redis answers": the broker and progress.

A worker whose broker is gone, or whose partition is stuck behind an event it cannot get past,
used to say "ok" while doing nothing. `HealthWatch` keeps the evidence:

* the broker: `probe_broker` asks it for metadata every few seconds (a fresh client each time,
  with a timeout); it is down once it has not answered for ``health_broker_seconds``;
* progress: when events wait (read, or a partition with lag) and nothing has been committed
  for ``health_stall_seconds``, the worker is stalled.

State changes are logged once each (broker unreachable / reachable again, stalled / moving
again), with a reminder every minute while a problem lasts: never one line per attempt.

>>> now = [0.0]
>>> w = HealthWatch(broker_seconds=10, stall_seconds=60, clock=lambda: now[0])
>>> w.broker_failed("refused"); w.problems()
[]
>>> now[0] = 11; w.broker_failed("refused"); w.problems()
['broker unreachable for 11 s: refused']
>>> w.broker_answered(); w.problems()
[]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from streams.logs import Throttle

log = logging.getLogger("lookaround.worker")

#: Seconds between reminders while a problem lasts.
REMINDER_SECONDS = 60.0


class HealthWatch:
    """Broker reachability and progress, as /health reports them (see the module docstring)."""

    def __init__(
        self,
        broker_seconds: float,
        stall_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_seconds = broker_seconds
        self.stall_seconds = stall_seconds
        self.clock = clock
        self.broker_error: str | None = None
        self._broker_since: float | None = None  # first failure of the current outage
        #: per (topic, partition): (last committed offset, when it last advanced, lag)
        self.partitions: dict[tuple[str, int], tuple[int, float, int]] = {}
        #: since when events have waited without a commit (None: nothing waits)
        self.waiting_since: float | None = None
        self._logged = Throttle(REMINDER_SECONDS, clock)

    # -- the broker ---------------------------------------------------------------------------

    def broker_failed(self, error: str) -> None:
        now = self.clock()
        if self._broker_since is None:
            self._broker_since = now
        self.broker_error = error
        if self.broker_down():
            due, _ = self._logged.due("broker")
            if due:
                log.error(
                    "broker unreachable for %.0f s: %s",
                    now - self._broker_since,
                    error,
                    extra={"state": "broker_down"},
                )

    def broker_answered(self) -> None:
        if self._logged.active("broker"):
            log.warning("broker reachable again", extra={"state": "broker_up"})
        self._logged.reset("broker")
        self._broker_since = None
        self.broker_error = None

    def broker_down(self) -> bool:
        since = self._broker_since
        return since is not None and self.clock() - since >= self.broker_seconds

    # -- progress -----------------------------------------------------------------------------

    def events_read(self) -> None:
        """Events arrived for processing (they wait until their batch commits)."""
        if self.waiting_since is None:
            self.waiting_since = self.clock()

    def committed(
        self, last: dict[tuple[str, int], int], highwater: Callable[[str, int], int | None]
    ) -> None:
        """A batch committed, up to ``last`` offsets per partition; ``idle``: nothing else
        waits. Lag is the partition's high-water mark past the committed offset."""
        now = self.clock()
        for (topic, partition), offset in last.items():
            old = self.partitions.get((topic, partition))
            advanced = now if old is None or offset > old[0] else old[1]
            high = highwater(topic, partition)
            lag = 0 if high is None else max(high - offset - 1, 0)
            self.partitions[(topic, partition)] = (offset, advanced, lag)
        self.waiting_since = now  # progress: the clock starts again for what still waits

    def idle(self) -> None:
        """Nothing read waits for a commit."""
        self.waiting_since = None

    def refresh_lag(
        self,
        highwater: Callable[[str, int], int | None],
        assigned: set[tuple[str, int]] | None = None,
    ) -> None:
        """Lag from the newest high-water marks (the broker may have more than last seen);
        partitions no longer ``assigned`` to this worker (a rebalance) are forgotten."""
        if assigned is not None:
            for tp in set(self.partitions) - assigned:
                del self.partitions[tp]
        for (topic, partition), (offset, advanced, lag) in list(self.partitions.items()):
            high = highwater(topic, partition)
            if high is not None:
                lag = max(high - offset - 1, 0)
            self.partitions[(topic, partition)] = (offset, advanced, lag)

    def stalled(self) -> list[str]:
        now = self.clock()
        out = []
        if self.waiting_since is not None and now - self.waiting_since >= self.stall_seconds:
            out.append(f"events waiting {now - self.waiting_since:.0f} s without a commit")
        for (topic, partition), (_, advanced, lag) in sorted(self.partitions.items()):
            if lag > 0 and now - advanced >= self.stall_seconds:
                out.append(
                    f"{topic}[{partition}] has lag {lag} and has not advanced for "
                    f"{now - advanced:.0f} s"
                )
        return out

    # -- the verdict --------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Why /health is 503 (empty: the broker answers and the worker moves)."""
        out = []
        if self.broker_down() and self._broker_since is not None:
            down = self.clock() - self._broker_since
            out.append(f"broker unreachable for {down:.0f} s: {self.broker_error}")
        stalled = self.stalled()
        if stalled:
            due, _ = self._logged.due("stalled")
            if due:
                log.error("worker stalled: %s", "; ".join(stalled), extra={"state": "stalled"})
        elif self._logged.active("stalled"):
            log.warning("worker moving again", extra={"state": "moving"})
            self._logged.reset("stalled")
        return out + stalled


async def probe_broker(
    watch: HealthWatch, options: dict[str, Any], every: float, timeout: float
) -> None:
    """Forever: ask the broker for metadata every ``every`` seconds (a fresh client with a
    ``timeout``), telling ``watch`` whether it answered."""
    from aiokafka.client import AIOKafkaClient

    while True:
        client = AIOKafkaClient(
            request_timeout_ms=int(timeout * 1000),
            connections_max_idle_ms=60_000,
            **options,
        )
        try:
            await asyncio.wait_for(client.bootstrap(), timeout)
            watch.broker_answered()
        except (TimeoutError, Exception) as exc:
            watch.broker_failed(f"{type(exc).__name__}: {exc}"[:300])
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), timeout)
        await asyncio.sleep(every)
