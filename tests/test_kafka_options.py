"""Kafka client options from settings: SASL and SSL reach both client libraries."""

from __future__ import annotations

import os
import ssl

from streams.kafka_io import aiokafka_options, kafka_python_options
from streams.settings import Settings


def test_plaintext_carries_no_credentials() -> None:
    s = Settings(kafka_bootstrap="a:9092,b:9093")
    for opts in (kafka_python_options(s), aiokafka_options(s)):
        assert opts["bootstrap_servers"] == ["a:9092", "b:9093"]
        assert opts["security_protocol"] == "PLAINTEXT"
        assert not any(k.startswith(("sasl", "ssl")) for k in opts)


def test_sasl_ssl_reaches_both_clients() -> None:
    s = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="crawler",
        kafka_sasl_password="s3cret",
    )
    py, aio = kafka_python_options(s), aiokafka_options(s)
    for opts in (py, aio):
        assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
        assert (opts["sasl_plain_username"], opts["sasl_plain_password"]) == ("crawler", "s3cret")
    assert isinstance(aio["ssl_context"], ssl.SSLContext)
    assert "s3cret" not in str(s.public_dict())


def test_kafka_python_checks_record_crcs_in_c() -> None:
    """kafka-python computes each record batch's CRC-32C (producing, and consuming with
    ``check_crcs``) in pure Python unless the ``crc32c`` package is there: that was 84% of
    `lookaround produce`'s time. The project installs it, and it is the same checksum."""
    from kafka.record import util

    assert util.crc32c_c is not None, "the crc32c package is missing: kafka-python is slow"
    for size in (0, 1, 7, 64, 4099):
        data = os.urandom(size)
        assert util.crc32c_c(data) == util.crc32c_py(data)
    assert util.calc_crc32c.__defaults__ == (util.crc32c_c,)  # what records use
    assert util.calc_crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
