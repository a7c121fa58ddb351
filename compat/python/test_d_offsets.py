"""(d) librdkafka get_watermark_offsets and offsets_for_times (ListOffsets
by timestamp) against records with known timestamps; kafka-python's
beginning_offsets, end_offsets and offsets_for_times on the same topic."""

import pytest
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

import keelcompat as kc

PARTS = 3  # partition 2 stays empty


@pytest.fixture(scope="module")
def timed_topic(bootstrap, topics):
    topic = topics.create("times", partitions=PARTS)
    recs = kc.make_records(60, seed="times", partitions=2, monotonic=True)
    kc.confluent_produce(bootstrap, topic, recs, "lz4")
    by_part = {p: sorted((r for r in recs if r.partition == p), key=lambda r: r.offset) for p in range(PARTS)}
    return topic, by_part


def expected_offset(part_recs, ts):
    """The earliest offset whose timestamp is at or after ts, else -1."""
    for r in part_recs:
        if r.timestamp >= ts:
            return r.offset
    return -1


def queries(part_recs):
    if not part_recs:
        return [0, 1, 2**41]
    first, last = part_recs[0].timestamp, part_recs[-1].timestamp
    mid = part_recs[len(part_recs) // 2]
    q = [0, first - 1, first, first + 1, mid.timestamp - 1, mid.timestamp, mid.timestamp + 1, last, last + 1]
    return q


def test_watermarks(bootstrap, timed_topic):
    topic, by_part = timed_topic
    consumer = Consumer(kc.consumer_config(bootstrap))
    try:
        for p in range(PARTS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
            assert (low, high) == (0, len(by_part[p])), "partition %d watermarks (%d, %d)" % (p, low, high)
    finally:
        consumer.close()


def test_offsets_for_times(bootstrap, timed_topic):
    topic, by_part = timed_topic
    consumer = Consumer(kc.consumer_config(bootstrap))
    try:
        for p in range(PARTS):
            for ts in queries(by_part[p]):
                res = consumer.offsets_for_times([TopicPartition(topic, p, ts)], timeout=30)
                assert len(res) == 1
                got = res[0]
                assert got.error is None, "partition %d ts %d: %s" % (p, ts, got.error)
                assert (got.topic, got.partition) == (topic, p)
                want = expected_offset(by_part[p], ts)
                if want == -1:
                    assert got.offset == OFFSET_END, "partition %d ts %d: got %d, want end" % (p, ts, got.offset)
                else:
                    assert got.offset == want, "partition %d ts %d: got %d, want %d" % (p, ts, got.offset, want)
        # Several partitions in one request.
        many = consumer.offsets_for_times(
            [TopicPartition(topic, p, by_part[0][3].timestamp) for p in range(PARTS)], timeout=30
        )
        for tp in many:
            want = expected_offset(by_part[tp.partition], by_part[0][3].timestamp)
            assert tp.offset == (OFFSET_END if want == -1 else want), tp
    finally:
        consumer.close()


def test_kafka_python_offset_lookups(bootstrap, timed_topic):
    topic, by_part = timed_topic
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tps = [KTP(topic, p) for p in range(PARTS)]
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert consumer.end_offsets(tps) == {tp: len(by_part[tp.partition]) for tp in tps}
        for p in range(PARTS):
            for ts in queries(by_part[p]):
                res = consumer.offsets_for_times({KTP(topic, p): ts})
                got = res[KTP(topic, p)]
                want = expected_offset(by_part[p], ts)
                if want == -1:
                    assert got is None, "partition %d ts %d: got %r, want none" % (p, ts, got)
                else:
                    assert got is not None and got.offset == want, "partition %d ts %d: got %r, want %d" % (p, ts, got, want)
                    # The returned timestamp is that of the record found.
                    assert got.timestamp == by_part[p][want].timestamp
    finally:
        consumer.close()
