"""Serialised page-history size per page with 100 outlinks (floor: <= 1 KB).

A page with 100 unique outlinks (85 internal, 15 external) fetched 12 times, a few links
changing each time, so its window is full (H = 8) and every SP value is set.

    python bench/history_size.py
"""

from __future__ import annotations

from online.events import parse_event
from online.history import from_bytes, states_equal, to_bytes, update

FLOOR = 1024


def main() -> None:
    state = None
    for week in range(12):
        links = [f"https://www.site.org/section/page-{week + i}/" for i in range(85)]
        links += [f"https://external-{week + i}.example.net/path" for i in range(15)]
        event = parse_event(
            {
                "url": "https://www.site.org/section/",
                "fetched_at": 1_767_225_600 + week * 7 * 86_400,  # from 2026-01-01
                "outlinks": links,
                "content_size": 50_000 + week,
                "text_size": 8_000,
                "text_quality": 0.7,
                "content_digest": f"digest-{week // 2}",
                "inlinks_internal": 12,
                "inlinks_external": 3,
                "pagerank": 1e-5,
                "trustrank": 2e-6,
            }
        )
        state, _ = update(state, event)
    blob = to_bytes(state)
    assert states_equal(from_bytes(blob), state)
    print(f"outlinks: {len(state.fingerprints)}, window: {len(state.window)} intervals")
    ratio = len(blob) / FLOOR
    print(f"serialised history: {len(blob)} bytes per page (floor {FLOOR}; ratio {ratio:.2f})")


if __name__ == "__main__":
    main()
