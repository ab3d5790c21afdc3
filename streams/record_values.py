"""A batch of consumed record values parsed into the pipeline's `Fetch` records, or rejects.

A worker may parse in a parser process while its main process runs the pipeline
(``parse_processes``); what crosses between them is `ParsedValues`, which pickles as columns.
Kept apart from the worker (`streams.live`) because it is all a parser process imports.
"""

from __future__ import annotations

from collections.abc import Sequence

from online.events import DEFAULT_LIMITS, EventError, EventLimits
from online.fetch import Fetch, fetch_columns, fetches_from_columns, parse_fetch


class ParsedValues(list):
    """`parse_values`' result: a list that crosses from the parser process to the worker's
    main process as columns (`fetch_columns`): unpickling columns costs the main process a
    fraction of what unpickling one object per event does (bench/live_throughput.py
    --parse-processes)."""

    def __reduce__(self) -> tuple:
        fetch_at = [i for i, item in enumerate(self) if isinstance(item, Fetch)]
        rejects = [(i, item) for i, item in enumerate(self) if not isinstance(item, Fetch)]
        columns = fetch_columns([self[i] for i in fetch_at])
        return (_parsed_values, (len(self), fetch_at, columns, rejects))


def _parsed_values(
    n: int, fetch_at: list[int], columns: tuple[tuple, ...], rejects: list[tuple[int, tuple]]
) -> ParsedValues:
    out = ParsedValues([None] * n)
    for i, fetch in zip(fetch_at, fetches_from_columns(columns), strict=True):
        out[i] = fetch
    for i, reject in rejects:
        out[i] = reject
    return out


def parse_values(
    values: Sequence[bytes | None],
    embedding_dim: int,
    max_outlinks: int,
    limits: EventLimits = DEFAULT_LIMITS,
) -> ParsedValues:
    """Each value parsed: its `Fetch`, or (field, reason) when rejected. Picklable, so a
    worker can run it in a parser process while its main process runs the pipeline."""
    out = ParsedValues()
    for value in values:
        try:
            out.append(
                parse_fetch(
                    value if value is not None else b"",
                    embedding_dim=embedding_dim,
                    max_outlinks=max_outlinks,
                    limits=limits,
                )
            )
        except EventError as err:
            out.append((err.field, err.reason))
    return out
