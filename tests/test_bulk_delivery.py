"""`streams.bulk_delivery` on its own; a worker using it end to end is `tests/test_live.py`'s
(parity, fetch sizes, kill and restart, two workers rebalancing)."""

from __future__ import annotations

from types import SimpleNamespace

from streams import bulk_delivery


def _message(offset: int, generation: int) -> SimpleNamespace:
    return SimpleNamespace(offset=offset, generation_id=generation)


def test_only_the_current_generations_messages_are_kept_in_order():
    app = SimpleNamespace(consumer_generation_id=3)
    fetched = [_message(0, 2), _message(1, 3), _message(2, 2), _message(3, 3)]
    assert [m.offset for m in bulk_delivery.current(app, fetched)] == [1, 3]
    app.consumer_generation_id = 4  # a rebalance since: all of them are read again elsewhere
    assert bulk_delivery.current(app, fetched) == []


def test_install_patches_fausts_fetch_loop_once():
    from faust.transport.consumer import Consumer

    bulk_delivery.install()
    patched = Consumer._drain_messages
    bulk_delivery.install()
    assert Consumer._drain_messages is patched
    assert getattr(patched, "_lookaround", False)
