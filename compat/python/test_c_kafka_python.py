"""(c) kafka-python: its producer (no compression and gzip, plus snappy, lz4
and zstd through the optional codec packages) read back by its own
KafkaConsumer with assign() + seek() and by confluent-kafka, and kafka-python
reading what confluent-kafka produced with every codec."""

import pytest
from kafka import KafkaProducer, codec as kcodec

import keelcompat as kc

KP_CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def codec_available(name):
    return {
        None: True,
        "gzip": kcodec.has_gzip(),
        "snappy": kcodec.has_snappy(),
        "lz4": kcodec.has_lz4(),
        "zstd": kcodec.has_zstd(),
    }[name]


def kafka_python_produce(bootstrap, topic, recs, compression):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        compression_type=compression,
        linger_ms=20,
        batch_size=256 * 1024,
        max_request_size=1024 * 1024,
        request_timeout_ms=30000,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp,
            )
            for r in recs
        ]
        producer.flush(timeout=kc.DEADLINE_S)
        for i, (r, fut) in enumerate(zip(recs, futures)):
            md = fut.get(timeout=kc.DEADLINE_S)
            assert md.topic == topic
            assert md.partition == r.partition, "record %d delivered to %d, produced to %d" % (i, md.partition, r.partition)
            assert md.offset >= 0
            r.offset = md.offset
    finally:
        producer.close(timeout=10)
    kc.check_contiguous(recs)


@pytest.mark.parametrize("compression", KP_CODECS, ids=lambda c: c or "none")
def test_kafka_python_roundtrip(bootstrap, topics, compression):
    if not codec_available(compression):
        pytest.skip("kafka-python lacks the %s codec package" % compression)
    name = compression or "none"
    topic = topics.create("kp-" + name, partitions=kc.PARTITIONS)
    recs = kc.make_records(120, seed="kp-" + name, partitions=kc.PARTITIONS, null_header_values=False)
    kafka_python_produce(bootstrap, topic, recs, compression)
    counts = kc.counts_of(recs, kc.PARTITIONS)

    got = kc.kafka_python_read(bootstrap, topic, kc.PARTITIONS, counts)
    kc.assert_kafka_python_records(topic, got, recs)

    # The other client reads the same bytes.
    msgs = kc.confluent_read(bootstrap, topic, kc.PARTITIONS, counts)
    kc.assert_confluent_messages(topic, msgs, recs)


@pytest.mark.parametrize("codec", kc.CODECS)
def test_kafka_python_reads_confluent(bootstrap, confluent_produced, codec):
    if not codec_available(None if codec == "none" else codec):
        pytest.skip("kafka-python lacks the %s codec package" % codec)
    topic, recs = confluent_produced.get(codec)
    counts = kc.counts_of(recs, kc.PARTITIONS)
    got = kc.kafka_python_read(bootstrap, topic, kc.PARTITIONS, counts)
    kc.assert_kafka_python_records(topic, got, recs)


def test_kafka_python_seek_middle(bootstrap, confluent_produced):
    """seek() to an offset inside a compressed batch starts exactly there."""
    topic, recs = confluent_produced.get("lz4")
    counts = kc.counts_of(recs, kc.PARTITIONS)
    starts = {p: counts[p] - 5 for p in range(kc.PARTITIONS)}
    got = kc.kafka_python_read(bootstrap, topic, kc.PARTITIONS, counts, start_offsets=starts)
    kc.assert_kafka_python_records(topic, got, [r for r in recs if r.offset >= starts[r.partition]])
