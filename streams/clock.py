"""Clocks a crawler reads its fetch times from: the real one, or a simulated one that runs fast
(the living test site's, `streams.living_site`), so a crawl of weeks of a site's life takes
minutes.

A `FastClock` is simulated time ``start`` at real time ``origin``, running ``speed`` simulated
seconds per real second; the real clock is ``FastClock(0, 0, 1)``. Every party of a crawl
(the site, the crawler's events, its recrawl scheduler, a WARC writer) reads the same clock,
so the site's page states and the events' ``fetched_at`` agree.

>>> clock = FastClock(start=1_000.0, origin=10.0, speed=86_400.0)
>>> clock.at(11.0) - clock.start
86400.0
>>> FastClock.from_dict(clock.as_dict()) == clock
True
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class FastClock:
    """Simulated epoch seconds ``start`` at real epoch seconds ``origin``, ``speed`` × as fast."""

    start: float
    origin: float
    speed: float

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"clock speed must be positive, got {self.speed}")

    @classmethod
    def starting_now(cls, start: float, speed: float) -> FastClock:
        """A clock that reads ``start`` now."""
        return cls(start=start, origin=time.time(), speed=speed)

    def at(self, real: float) -> float:
        """Simulated time at real epoch seconds ``real``."""
        return self.start + (real - self.origin) * self.speed

    def now(self) -> float:
        return self.at(time.time())

    def real_seconds(self, simulated: float) -> float:
        """Real seconds that ``simulated`` seconds of this clock last."""
        return simulated / self.speed

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FastClock:
        try:
            return cls(float(data["start"]), float(data["origin"]), float(data["speed"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a clock: {data!r} ({exc})") from None


#: The real clock.
REAL_CLOCK = FastClock(start=0.0, origin=0.0, speed=1.0)


def clock_from_url(url: str, timeout: float = 5.0) -> FastClock:
    """The clock a living site publishes at ``url`` (its ``/_clock``). Raises ValueError."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return FastClock.from_dict(json.loads(resp.read()))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"no clock at {url}: {exc}") from None
