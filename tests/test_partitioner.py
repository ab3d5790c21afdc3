"""The compiled Kafka partitioner (`streams.partitioner`) against aiokafka's plain-Python one:
a worker must put a key on the partition every Kafka client would."""

from __future__ import annotations

import doctest

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as reference_murmur2
from hypothesis import given
from hypothesis import strategies as st

from streams.partitioner import murmur2, partition_of


@given(st.binary(max_size=300))
def test_murmur2_equals_aiokafkas_for_any_bytes(data):
    assert murmur2(data) == reference_murmur2(data)


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=1000))
def test_partition_equals_the_default_partitioners(key, partitions):
    ids = list(range(partitions))
    assert partition_of(key, partitions) == DefaultPartitioner()(key, ids, ids)


def test_known_urls_spread_as_kafka_spreads_them():
    keys = [f"https://example.org/page/{i}".encode() for i in range(2000)]
    ids = list(range(6))
    ours = [partition_of(k, 6) for k in keys]
    assert ours == [DefaultPartitioner()(k, ids, ids) for k in keys]
    assert set(ours) == set(ids)  # every partition gets some


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError, match="partitions"):
        partition_of(b"x", 0)


def test_doctests():
    import streams.partitioner

    result = doctest.testmod(streams.partitioner)
    assert result.attempted > 0 and result.failed == 0
