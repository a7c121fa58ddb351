"""Helpers shared by the Python client compatibility tests: record generation,
producing with confluent-kafka, reading back with both clients, and exact
comparison of what was read against what was produced."""

import dataclasses
import traceback
import hashlib
import random
import time
from typing import List, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
RECORDS_PER_TOPIC = 150
DEADLINE_S = 45.0

Header = Tuple[str, Optional[bytes]]


@dataclasses.dataclass
class Rec:
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Header]
    timestamp: int  # milliseconds since the epoch, set by the producer
    partition: int
    offset: int = -1  # filled in from the delivery report

    def describe(self):
        def short(b):
            if b is None:
                return "None"
            return "%d bytes sha256:%s" % (len(b), hashlib.sha256(b).hexdigest()[:12])

        return "p%d@%d key=%s value=%s headers=%d ts=%d" % (
            self.partition,
            self.offset,
            short(self.key),
            short(self.value),
            len(self.headers),
            self.timestamp,
        )


def common_config(bootstrap):
    return {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "socket.timeout.ms": 30000,
        # Never let a metadata lookup create a topic (a deleted one included).
        "allow.auto.create.topics": False,
    }


def consumer_config(bootstrap):
    cfg = common_config(bootstrap)
    cfg.update(
        {
            # confluent-kafka insists on a group.id; the tests never join
            # the group (assign() only) and never commit or store offsets.
            "group.id": "keel-compat-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
            "enable.partition.eof": False,
        }
    )
    return cfg


def make_records(n, seed, partitions, base_ts=None, monotonic=False, null_header_values=True):
    """n records spread over partitions, covering empty and None keys and
    values, every byte value, large and incompressible payloads, and headers
    with repeated keys, binary, empty and None values (None header values
    become empty ones with null_header_values=False: kafka-python's producer
    refuses them, though its consumer reads them)."""
    rng = random.Random(seed)
    if base_ts is None:
        # Whole seconds an hour ago: inside any retention, clearly not "now".
        base_ts = (int(time.time()) - 3600) * 1000
    recs = []
    for i in range(n):
        if i == 0:
            key, value = b"", b""
        elif i == 1:
            key, value = b"tombstone-key", None
        elif i == 2:
            key, value = None, rng.randbytes(1000)
        elif i == 3:
            key, value = bytes(range(256)), bytes(range(256)) * 4
        elif i == 4:
            key, value = b"\x00", b"\x00" * 3
        elif i == 5:
            # Large and incompressible: spans most of a batch on its own.
            key, value = b"big", rng.randbytes(200_000)
        elif i == 6:
            # Large and very compressible.
            key, value = b"zeros", bytes(300_000)
        else:
            key = None if i % 11 == 0 else rng.randbytes(rng.randint(1, 40))
            value = rng.randbytes(rng.choice([0, 1, 7, 100, 1500, 4000]))
        headers = []
        kind = i % 5
        if kind == 1:
            headers = [("h", rng.randbytes(8))]
        elif kind == 2:
            # Repeated keys keep their order; values are binary, empty, None.
            headers = [
                ("dup", b"first"),
                ("bin", bytes([0, 255, 1, 254]) + rng.randbytes(16)),
                ("dup", b"second"),
                ("empty", b""),
                ("dup", b"\x00third"),
            ]
        elif kind == 3:
            headers = [("nullable", None if null_header_values else b""), ("utf8-ключ", "значение".encode())]
        elif kind == 4:
            headers = [("k%d" % j, rng.randbytes(j)) for j in range(12)]
        if monotonic:
            ts = base_ts + i * 1000
        else:
            # Explicit, not in produce order within a partition.
            ts = base_ts + (i * 7919) % 100_000
        recs.append(Rec(key, value, headers, ts, partition=i % partitions))
    return recs


def confluent_produce(bootstrap, topic, recs, codec, extra=None):
    """Produces recs with an idempotent acks=all producer and records each
    delivered offset; asserts every delivery succeeded where expected."""
    cfg = common_config(bootstrap)
    cfg.update(
        {
            "acks": "all",
            "enable.idempotence": True,
            "compression.type": codec,
            "linger.ms": 20,
            "batch.size": 256 * 1024,
        }
    )
    if extra:
        cfg.update(extra)
    producer = Producer(cfg)
    reports = {}

    def on_delivery(err, msg, i):
        reports[i] = (err, msg.topic(), msg.partition(), msg.offset(), msg.timestamp())

    for i, r in enumerate(recs):
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            timestamp=r.timestamp,
            headers=r.headers,
            on_delivery=lambda err, msg, i=i: on_delivery(err, msg, i),
        )
        producer.poll(0)
    remaining = producer.flush(DEADLINE_S)
    assert remaining == 0, "%d records still undelivered after %ss" % (remaining, DEADLINE_S)
    assert len(reports) == len(recs)
    for i, r in enumerate(recs):
        err, rtopic, rpart, roff, _ = reports[i]
        assert err is None, "record %d: delivery failed: %s" % (i, err)
        assert rtopic == topic
        assert rpart == r.partition, "record %d delivered to partition %d, produced to %d" % (i, rpart, r.partition)
        assert roff >= 0
        r.offset = roff
    check_contiguous(recs)
    return recs


def check_contiguous(recs):
    """Offsets per partition must be exactly 0..n-1, in produce order: one
    idempotent producer per partition cannot reorder or duplicate."""
    by_part = {}
    for r in recs:
        by_part.setdefault(r.partition, []).append(r.offset)
    for p, offs in by_part.items():
        assert offs == list(range(len(offs))), "partition %d offsets not contiguous from 0: %s" % (p, offs[:20])


def expected_map(recs):
    return {(r.partition, r.offset): r for r in recs}


def first_offsets(recs):
    """Offset before the first expected record of each partition."""
    first = {}
    for r in recs:
        first[r.partition] = min(first.get(r.partition, r.offset), r.offset)
    return {p: o - 1 for p, o in first.items()}


def confluent_read(bootstrap, topic, partitions, counts, start_offsets=None):
    """Reads counts[p] records of each partition p with assign() from
    start_offsets (default 0). Returns the messages."""
    consumer = Consumer(consumer_config(bootstrap))
    try:
        starts = start_offsets or {p: 0 for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in range(partitions)])
        want = sum(counts[p] - starts[p] for p in range(partitions))
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < want and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                err = msg.error()
                assert err is None, "consume error: %s" % err
                got.append(msg)
        assert len(got) == want, "read %d of %d records within %ss" % (len(got), want, DEADLINE_S)
        # Nothing beyond what was produced shows up.
        for msg in consumer.consume(num_messages=10, timeout=0.5):
            assert msg.error() is None, "consume error: %s" % msg.error()
            raise AssertionError("unexpected extra record at p%d@%d" % (msg.partition(), msg.offset()))
        return got
    finally:
        consumer.close()


def assert_confluent_messages(topic, msgs, recs):
    """Checks messages read by confluent-kafka byte for byte."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    exp = expected_map(recs)
    seen = set()
    last = first_offsets(recs)
    for msg in msgs:
        where = (msg.partition(), msg.offset())
        assert msg.topic() == topic
        assert where in exp, "record at unexpected position p%d@%d" % where
        assert where not in seen, "record p%d@%d read twice" % where
        seen.add(where)
        # Within a partition records arrive in offset order, without gaps.
        assert msg.offset() == last.get(msg.partition(), -2) + 1, "gap or reorder before p%d@%d" % where
        last[msg.partition()] = msg.offset()
        r = exp[where]
        assert msg.key() == r.key, "key mismatch at %s" % r.describe()
        assert msg.value() == r.value, "value mismatch at %s" % r.describe()
        assert (msg.headers() or []) == r.headers, "headers mismatch at %s: %r" % (r.describe(), msg.headers())
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, r.timestamp), "timestamp mismatch at %s: %r" % (
            r.describe(),
            msg.timestamp(),
        )
    assert seen == set(exp), "missing records: %s" % sorted(set(exp) - seen)[:10]


def assert_kafka_python_records(topic, records, recs):
    """Checks ConsumerRecords read by kafka-python byte for byte."""
    exp = expected_map(recs)
    seen = set()
    last = first_offsets(recs)
    for cr in records:
        where = (cr.partition, cr.offset)
        assert cr.topic == topic
        assert where in exp, "record at unexpected position p%d@%d" % where
        assert where not in seen, "record p%d@%d read twice" % where
        seen.add(where)
        assert cr.offset == last.get(cr.partition, -2) + 1, "gap or reorder before p%d@%d" % where
        last[cr.partition] = cr.offset
        r = exp[where]
        assert cr.key == r.key, "key mismatch at %s" % r.describe()
        assert cr.value == r.value, "value mismatch at %s" % r.describe()
        assert list(cr.headers) == r.headers, "headers mismatch at %s: %r" % (r.describe(), cr.headers)
        assert cr.timestamp == r.timestamp, "timestamp mismatch at %s: %r" % (r.describe(), cr.timestamp)
        assert cr.timestamp_type == 0, "timestamp type %r != CreateTime at %s" % (cr.timestamp_type, r.describe())
    assert seen == set(exp), "missing records: %s" % sorted(set(exp) - seen)[:10]


def kafka_python_read(bootstrap, topic, partitions, counts, start_offsets=None):
    """Reads with kafka-python's KafkaConsumer, assign() + seek(), no group."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=100,
        request_timeout_ms=30000,
        consumer_timeout_ms=1000,
    )
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        starts = start_offsets or {p: 0 for p in range(partitions)}
        for tp in tps:
            consumer.seek(tp, starts[tp.partition])
        want = sum(counts[p] - starts[p] for p in range(partitions))
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < want and time.monotonic() < deadline:
            for _, batch in consumer.poll(timeout_ms=500, max_records=1000).items():
                got.extend(batch)
        assert len(got) == want, "read %d of %d records within %ss" % (len(got), want, DEADLINE_S)
        extra = consumer.poll(timeout_ms=500)
        assert not any(extra.values()), "unexpected extra records: %r" % extra
        return got
    finally:
        consumer.close()


def wait_for_topic(admin, name, partitions, timeout=30.0):
    """Waits until metadata shows the topic with every partition led."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            if all(p.leader >= 0 and p.error is None for p in t.partitions.values()):
                return md
        last = t.error if t is not None else "absent"
        time.sleep(0.1)
    raise AssertionError("topic %s not ready with %d partitions after %ss (last: %s)" % (name, partitions, timeout, last))


def counts_of(recs, partitions):
    counts = {p: 0 for p in range(partitions)}
    for r in recs:
        counts[r.partition] += 1
    return counts


__all__ = [
    "CODECS",
    "PARTITIONS",
    "RECORDS_PER_TOPIC",
    "Rec",
    "KafkaError",
    "make_records",
    "confluent_produce",
    "confluent_read",
    "kafka_python_read",
    "assert_confluent_messages",
    "assert_kafka_python_records",
    "wait_for_topic",
    "counts_of",
    "check_contiguous",
]


def group_member(bootstrap, group, topic, strategy, name, state):
    """One member of a consumer group, run on its own thread until state["stop"] is set.

    It records, under state["lock"], every offset it processes (state["processed"]),
    any record below an offset already committed (state["violations"]), the offsets it
    commits (state["committed"]) and its assignment (state["assignments"][name]). A
    commit refused during a rebalance (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, as
    Kafka does too) is not committed, so the next owner may process those records again,
    which is allowed; it is recorded in state["commit_errors"] and the member goes on
    (ending the thread would close the consumer, a LeaveGroup). Any other error ends the
    member and is recorded in state["errors"].
    """
    try:
        c = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
        })
        c.subscribe([topic])
    except Exception:
        state.setdefault("errors", []).append((name, traceback.format_exc()))
        return
    try:
        while not state["stop"].is_set():
            offsets = {}
            for m in c.consume(100, 0.1):
                if m.error():
                    continue
                p = m.partition()
                with state["lock"]:
                    if m.offset() < state["committed"].get(p, 0):
                        state["violations"].append((name, p, m.offset(), state["committed"].get(p)))
                    state["processed"].setdefault(p, set()).add(m.offset())
                offsets[p] = m.offset() + 1
            if offsets:
                try:
                    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                             asynchronous=False)
                except KafkaException as e:
                    state.setdefault("commit_errors", []).append((name, str(e)))
                else:
                    with state["lock"]:
                        for p, o in offsets.items():
                            state["committed"][p] = max(state["committed"].get(p, 0), o)
            state["assignments"][name] = {tp.partition for tp in c.assignment()}
    except Exception:
        state.setdefault("errors", []).append((name, traceback.format_exc()))
    finally:
        state["assignments"].pop(name, None)
        c.close()
