"""(j) A topic with message.timestamp.type=LogAppendTime: the broker stamps every record
with the time it appended the batch, in milliseconds, whatever CreateTime the producer
set. Producers send batches of records with timestamps a day old, one batch at a time,
a few milliseconds apart; consumers (confluent-kafka and kafka-python) must see
timestamp type LogAppendTime, a millisecond value inside the batch's send window (from
just before it was sent to its acknowledgement), the same value for every record of a
batch, never decreasing along a partition, and the value the produce response reported
(librdkafka's delivery report). offsets_for_times finds batches by these times.
"""

import time

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

import keelcompat as kc

PARTS = 2
BATCHES = 6
PER_BATCH = 25


def _produce_batches(bootstrap, topic):
    """Returns {partition: [(first offset, sent_ms, acked_ms, [delivery timestamps])]}."""
    cfg = kc.common_config(bootstrap)
    # One batch per flush(): linger long enough that nothing leaves before it.
    cfg.update({"linger.ms": 1000, "acks": "all", "enable.idempotence": True})
    producer = Producer(cfg)
    day_ago = int(time.time() * 1000) - 86_400_000
    batches = {p: [] for p in range(PARTS)}
    for b in range(BATCHES):
        for p in range(PARTS):
            reports = []

            def on_delivery(err, msg, reports=reports):
                assert err is None, err
                reports.append((msg.offset(), msg.timestamp()))

            sent_ms = int(time.time() * 1000)  # floor: the stamp is at or after it
            for i in range(PER_BATCH):
                producer.produce(topic, partition=p, key=b"k%d" % i, value=b"b%d-r%d" % (b, i),
                                 timestamp=day_ago + i, on_delivery=on_delivery)
            assert producer.flush(30) == 0
            acked_ms = int(time.time() * 1000) + 1  # ceil
            reports.sort()
            offsets = [o for o, _ in reports]
            assert offsets == list(range(offsets[0], offsets[0] + PER_BATCH)), "not one batch: %s" % offsets
            batches[p].append((offsets[0], sent_ms, acked_ms, [ts for _, ts in reports]))
            time.sleep(0.02)  # the next batch gets a later millisecond
    return batches


def _confluent_read(bootstrap, topic):
    c = Consumer(kc.consumer_config(bootstrap))
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    got = {p: [] for p in range(PARTS)}
    deadline = time.time() + 30
    while sum(map(len, got.values())) < PARTS * BATCHES * PER_BATCH and time.time() < deadline:
        for m in c.consume(500, 0.5):
            assert m.error() is None, m.error()
            got[m.partition()].append((m.offset(), m.timestamp()))
    c.close()
    return got


def test_log_append_time_is_the_batch_append_millisecond(bootstrap, topics):
    topic = topics.create("logappend", partitions=PARTS, config={"message.timestamp.type": "LogAppendTime"})
    batches = _produce_batches(bootstrap, topic)
    got = _confluent_read(bootstrap, topic)
    for p in range(PARTS):
        assert len(got[p]) == BATCHES * PER_BATCH, "partition %d: %d records" % (p, len(got[p]))
        by_offset = dict(got[p])
        previous = 0
        for first, sent_ms, acked_ms, reported in batches[p]:
            seen = [by_offset[o] for o in range(first, first + PER_BATCH)]
            assert {t for t, _ in seen} == {TIMESTAMP_LOG_APPEND_TIME}, seen[:3]
            stamps = {ts for _, ts in seen}
            assert len(stamps) == 1, "partition %d batch at %d: several stamps %s" % (p, first, sorted(stamps))
            stamp = stamps.pop()
            assert sent_ms <= stamp <= acked_ms, "stamp %d outside the send window %d..%d" % (stamp, sent_ms, acked_ms)
            assert stamp >= previous, "stamps went backwards along partition %d" % p
            previous = stamp
            # The produce response's log_append_time_ms, as the delivery report gives it.
            assert set(reported) == {(TIMESTAMP_LOG_APPEND_TIME, stamp)}, reported[:3]


def test_log_append_time_seen_by_kafka_python_and_offsets_for_times(bootstrap, topics):
    topic = topics.create("logappend-kp", partitions=PARTS, config={"message.timestamp.type": "LogAppendTime"})
    batches = _produce_batches(bootstrap, topic)
    stamps = {p: [b[3][0][1] for b in batches[p]] for p in range(PARTS)}
    kp = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        kp.assign([KTP(topic, p) for p in range(PARTS)])
        kp.seek_to_beginning()
        records = []
        deadline = time.time() + 30
        while len(records) < PARTS * BATCHES * PER_BATCH and time.time() < deadline:
            for recs in kp.poll(timeout_ms=500).values():
                records.extend(recs)
        assert len(records) == PARTS * BATCHES * PER_BATCH
        for r in records:
            assert r.timestamp_type == 1, r  # LogAppendTime
            batch = r.offset // PER_BATCH
            assert r.timestamp == stamps[r.partition][batch], (r.partition, r.offset, r.timestamp)

        # ListOffsets by timestamp searches the broker's stamps, not the producers' CreateTime.
        for p in range(PARTS):
            for b in range(1, BATCHES):
                if stamps[p][b] == stamps[p][b - 1]:
                    continue  # two batches in one millisecond: the first of them is the answer
                found = kp.offsets_for_times({KTP(topic, p): stamps[p][b]})[KTP(topic, p)]
                assert found.offset == b * PER_BATCH and found.timestamp == stamps[p][b], (p, b, found)
            day_ago = int(time.time() * 1000) - 86_400_000
            assert kp.offsets_for_times({KTP(topic, p): day_ago})[KTP(topic, p)].offset == 0
    finally:
        kp.close()
