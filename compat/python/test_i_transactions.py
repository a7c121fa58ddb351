"""(i) Transactions with librdkafka (confluent-kafka) and kafka-python.

- A committed transaction over two partitions is read by an isolation.level=read_committed
  consumer, every record once and in order; its COMMIT marker takes one offset, so the
  next transaction starts two past the last record.
- An aborted transaction is invisible to read_committed and visible to read_uncommitted;
  a committed one after it on the same partition is read past the aborted range.
- send_offsets_to_transaction then commit stores the group's offsets (read back with
  require_stable); after an abort they are unchanged.
- A second producer with the same transactional.id fences the first: the first one's
  commit fails with a fatal error and its open transaction is aborted.
- kafka-python's transactional producer: commit and abort, read by kafka-python's
  read_committed and read_uncommitted consumers.
"""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import ConsumerGroupTopicPartitions

import keelcompat as kc

TIMEOUT_S = 30
# How long a consumer is given to return records it must not return.
QUIET_S = 1.5


def _txn_id(run_id, label):
    return "keel-py-%s-txn-%s-%s" % (run_id, label, uuid.uuid4().hex[:6])


def _transactional(bootstrap, transactional_id, extra=None):
    cfg = kc.common_config(bootstrap)
    cfg.update({"transactional.id": transactional_id, "linger.ms": 5})
    if extra:
        cfg.update(extra)
    producer = Producer(cfg)
    producer.init_transactions(TIMEOUT_S)
    return producer


def _produce(producer, topic, values, partition, reports):
    for v in values:
        producer.produce(
            topic,
            value=v.encode(),
            partition=partition,
            on_delivery=lambda err, msg, v=v: reports.append((v, err, msg.partition(), msg.offset())),
        )
    producer.poll(0)


def _offsets(reports, partition):
    for v, err, _, _ in reports:
        assert err is None, "delivery of %s failed: %s" % (v, err)
    return [off for _, _, p, off in reports if p == partition]


def _read(bootstrap, topic, partitions, want, isolation):
    """Reads exactly `want` records from offset 0 of each partition, then checks
    nothing more comes for QUIET_S; returns {partition: [(offset, value)]}."""
    cfg = kc.consumer_config(bootstrap)
    cfg["isolation.level"] = isolation
    consumer = Consumer(cfg)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < want and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.2):
                assert msg.error() is None, "consume error: %s" % msg.error()
                got.append(msg)
        quiet_until = time.monotonic() + QUIET_S
        while time.monotonic() < quiet_until:
            for msg in consumer.consume(num_messages=100, timeout=0.2):
                assert msg.error() is None, "consume error: %s" % msg.error()
                got.append(msg)
        by_part = {}
        for msg in got:
            by_part.setdefault(msg.partition(), []).append((msg.offset(), msg.value().decode()))
        assert len(got) == want, "%s read %d records, want %d: %s" % (isolation, len(got), want, by_part)
        for p, recs in by_part.items():
            offs = [o for o, _ in recs]
            assert offs == sorted(set(offs)), "partition %d: offsets out of order or repeated: %s" % (p, offs)
        return by_part
    finally:
        consumer.close()


def test_confluent_commit_is_read_by_read_committed(bootstrap, topics, run_id):
    topic = topics.create("txn-commit", partitions=2)
    producer = _transactional(bootstrap, _txn_id(run_id, "commit"))
    reports = []
    sent = {0: [], 1: []}
    for txn in range(2):
        producer.begin_transaction()
        for p in (0, 1):
            values = ["t%d-p%d-%d" % (txn, p, i) for i in range(5)]
            sent[p] += values
            _produce(producer, topic, values, p, reports)
        producer.commit_transaction(TIMEOUT_S)
    for p in (0, 1):
        # Offsets 0-4, the COMMIT marker at 5, then 6-10 (and a marker at 11).
        assert _offsets(reports, p) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10], reports

    got = _read(bootstrap, topic, 2, 20, "read_committed")
    for p in (0, 1):
        assert [v for _, v in got[p]] == sent[p]
        assert [o for o, _ in got[p]] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_confluent_abort_is_hidden_from_read_committed(bootstrap, topics, run_id):
    topic = topics.create("txn-abort", partitions=1)
    producer = _transactional(bootstrap, _txn_id(run_id, "abort"))
    reports = []
    producer.begin_transaction()
    aborted = ["aborted-%d" % i for i in range(5)]
    _produce(producer, topic, aborted, 0, reports)
    assert producer.flush(TIMEOUT_S) == 0  # in the log before the abort
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    committed = ["committed-%d" % i for i in range(3)]
    _produce(producer, topic, committed, 0, reports)
    producer.commit_transaction(TIMEOUT_S)
    # The ABORT marker takes offset 5.
    assert _offsets(reports, 0) == [0, 1, 2, 3, 4, 6, 7, 8], reports

    got = _read(bootstrap, topic, 1, 3, "read_committed")
    assert got[0] == [(6, "committed-0"), (7, "committed-1"), (8, "committed-2")]
    got = _read(bootstrap, topic, 1, 8, "read_uncommitted")
    assert [v for _, v in got[0]] == aborted + committed


def _group_offsets(admin, group, tp):
    """The group's committed offset of tp, asked with require_stable: while the offsets of
    a transaction wait for its markers, the broker answers UNSTABLE_OFFSET_COMMIT (which
    librdkafka hands back rather than retrying), so ask again until the answer is stable."""
    deadline = time.monotonic() + TIMEOUT_S
    unstable = 0
    while True:
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [tp])], require_stable=True, request_timeout=TIMEOUT_S
        )
        [stored] = futures[group].result(timeout=TIMEOUT_S).topic_partitions
        if stored.error is None:
            if unstable:
                print("observed: %d UNSTABLE_OFFSET_COMMIT answers before the offsets were stable" % unstable)
            return stored.offset
        assert stored.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT, stored.error
        assert time.monotonic() < deadline, "offsets still unstable after %ss" % TIMEOUT_S
        unstable += 1
        time.sleep(0.05)


def test_confluent_send_offsets_to_transaction(bootstrap, topics, admin, run_id):
    src = topics.create("txn-ctp-in", partitions=1)
    dst = topics.create("txn-ctp-out", partitions=1)
    group = "keel-py-%s-txn-group-%s" % (run_id, uuid.uuid4().hex[:6])
    plain = Producer(kc.common_config(bootstrap))
    for i in range(6):
        plain.produce(src, value=b"in-%d" % i, partition=0)
    assert plain.flush(TIMEOUT_S) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = _transactional(bootstrap, _txn_id(run_id, "ctp"))
    try:
        consumer.subscribe([src])

        def transform(count):
            got = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < count and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=100, timeout=0.2):
                    assert msg.error() is None, msg.error()
                    got.append(msg)
            assert len(got) == count, "consumed %d of %d" % (len(got), count)
            producer.begin_transaction()
            for msg in got:
                producer.produce(dst, value=b"out-" + msg.value(), partition=0)
            offset = got[-1].offset() + 1
            producer.send_offsets_to_transaction(
                [TopicPartition(src, 0, offset)], consumer.consumer_group_metadata(), TIMEOUT_S
            )
            return offset

        assert transform(6) == 6
        producer.commit_transaction(TIMEOUT_S)
        assert _group_offsets(admin, group, TopicPartition(src, 0)) == 6
        [committed] = consumer.committed([TopicPartition(src, 0)], timeout=TIMEOUT_S)
        assert committed.offset == 6

        for i in range(6, 8):
            plain.produce(src, value=b"in-%d" % i, partition=0)
        assert plain.flush(TIMEOUT_S) == 0
        assert transform(2) == 8
        producer.abort_transaction(TIMEOUT_S)
        assert _group_offsets(admin, group, TopicPartition(src, 0)) == 6, "an aborted transaction moved the group's offset"
    finally:
        consumer.close()

    got = _read(bootstrap, dst, 1, 6, "read_committed")
    assert [v for _, v in got[0]] == ["out-in-%d" % i for i in range(6)]


@pytest.mark.parametrize("send_after_fencing", [True, False], ids=["send-then-commit", "commit"])
def test_confluent_fenced_producer_gets_a_fatal_error(bootstrap, topics, run_id, send_after_fencing):
    topic = topics.create("txn-fence", partitions=1)
    tid = _txn_id(run_id, "fence")
    zombie = _transactional(bootstrap, tid)
    reports = []
    zombie.begin_transaction()
    _produce(zombie, topic, ["zombie-0"], 0, reports)
    assert zombie.flush(TIMEOUT_S) == 0
    assert _offsets(reports, 0) == [0]

    # The second producer's InitProducerId aborts the first one's transaction and bumps the epoch.
    current = _transactional(bootstrap, tid)
    current.begin_transaction()
    _produce(current, topic, ["current-0"], 0, reports)
    current.commit_transaction(TIMEOUT_S)

    if send_after_fencing:
        _produce(zombie, topic, ["zombie-1"], 0, reports)
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(TIMEOUT_S)
    err = info.value.args[0]
    print("observed: fenced producer's commit_transaction: %s (code %s, fatal %s)" % (err, err.code(), err.fatal()))
    assert err.fatal(), "not fatal: %s" % err
    assert err.code() == KafkaError._FENCED, err

    if send_after_fencing:
        # The broker refused the fenced producer's record with INVALID_PRODUCER_EPOCH,
        # which librdkafka turns into the fatal _FENCED; without the send, EndTxn's
        # PRODUCER_FENCED does.
        zombie.flush(5)
        failed = [e for v, e, _, _ in reports if v == "zombie-1"]
        print("observed: fenced producer's delivery report: %s" % failed)
        assert len(failed) == 1 and failed[0] is not None, "the fenced producer's record was delivered: %s" % reports
        assert failed[0].code() == KafkaError.INVALID_PRODUCER_EPOCH, failed[0]
    got = _read(bootstrap, topic, 1, 1, "read_committed")
    assert got[0] == [(2, "current-0")], "offset 1 is the ABORT marker of the fenced transaction"
    got = _read(bootstrap, topic, 1, 2, "read_uncommitted")
    assert [v for _, v in got[0]] == ["zombie-0", "current-0"]


def test_kafka_python_commit_and_abort(bootstrap, topics, run_id):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = topics.create("txn-kp", partitions=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=_txn_id(run_id, "kp"), linger_ms=5)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        committed = [producer.send(topic, value=b"committed-%d" % i, partition=0) for i in range(3)]
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = [producer.send(topic, value=b"aborted-%d" % i, partition=0) for i in range(2)]
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        after = [producer.send(topic, value=b"after-%d" % i, partition=0) for i in range(2)]
        producer.commit_transaction()
        offsets = [f.get(timeout=TIMEOUT_S).offset for f in committed + aborted + after]
    finally:
        producer.close(timeout=10)
    # Markers at 3 (COMMIT), 6 (ABORT) and 9 (COMMIT).
    assert offsets == [0, 1, 2, 4, 5, 7, 8]

    def read(isolation, want):
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
            fetch_max_wait_ms=100,
        )
        try:
            tp = KTP(topic, 0)
            consumer.assign([tp])
            assert consumer.end_offsets([tp])[tp] == 10, "end offset with %s" % isolation
            consumer.seek(tp, 0)
            got = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < want and time.monotonic() < deadline:
                for _, batch in consumer.poll(timeout_ms=200).items():
                    got.extend((r.offset, r.value) for r in batch)
            extra = consumer.poll(timeout_ms=int(QUIET_S * 1000))
            assert not any(extra.values()), "unexpected extra records: %r" % extra
            assert consumer.position(tp) == 10, "position past the last COMMIT marker"
            return got
        finally:
            consumer.close()

    assert read("read_committed", 5) == [
        (0, b"committed-0"), (1, b"committed-1"), (2, b"committed-2"), (7, b"after-0"), (8, b"after-1")
    ]
    assert [o for o, _ in read("read_uncommitted", 7)] == [0, 1, 2, 4, 5, 7, 8]
