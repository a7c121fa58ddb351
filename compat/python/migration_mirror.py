"""Migration from Apache Kafka with MirrorMaker 2 (dedicated mode), Kafka -> Keel.

Not part of the default suite (pytest collects test_*.py): compat/migration/run.sh
starts a fresh Apache Kafka and a fresh Keel and runs it as
`compat/python/run.sh <keel bootstrap> migration_mirror.py`, with KAFKA_SOURCE naming
the Kafka bootstrap and MM2_CLASSPATH the Connect/MirrorMaker 2 classpath.

On Kafka: three topics of four partitions each (one compacted), 100,002 keyed records
with CreateTime timestamps a day old, and a consumer group that committed part of one
topic. MirrorMaker 2 with the IdentityReplicationPolicy mirrors them into Keel. Then:
every partition holds the same records on both sides (count, and a checksum of keys,
values and timestamps, in offset order), the topic configs and partition counts came
along, the group's offsets arrive translated, and a consumer of that group started on
Keel resumes at or before where it stopped on Kafka, skipping nothing. And the way
back: a topic written on Keel is mirrored into Kafka whole.
"""

import os
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "migration"))
from compare import partition_digests  # noqa: E402 - compat/migration/compare.py, the users' tool
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

TOPICS = {"mm-orders": {}, "mm-trades": {}, "mm-accounts": {"cleanup.policy": "compact"}}
PARTITIONS = 4
RECORDS_PER_TOPIC = 33334
GROUP = "mm-group"
MIRROR_DEADLINE_S = 180
OFFSETS_DEADLINE_S = 60


def _ends(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm-check"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def _committed(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()


def _produce(producer, topic, key, value, **kwargs):
    """Produces one record, waiting for room while the client's queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, **kwargs)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.1)


def _fill_source(source):
    admin = AdminClient({"bootstrap.servers": source})
    fs = admin.create_topics([NewTopic(t, PARTITIONS, 1, config=cfg) for t, cfg in TOPICS.items()])
    for f in fs.values():
        f.result(60)
    producer = Producer({"bootstrap.servers": source, "linger.ms": 20, "acks": "all"})
    day_ago = int(time.time() * 1000) - 86_400_000
    for i in range(RECORDS_PER_TOPIC):
        for t in TOPICS:
            # Keys repeat on the compacted topic, so compaction may drop some there.
            key = b"k%d" % (i % 5000 if t == "mm-accounts" else i)
            _produce(producer, t, key, b"%s-%d" % (t.encode(), i), timestamp=day_ago + i)
    assert producer.flush(120) == 0, "records left unsent to Kafka"
    # A group that read part of mm-orders, about 60% of each partition.
    c = Consumer({"bootstrap.servers": source, "group.id": GROUP, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    ends = _ends(source, "mm-orders")
    c.assign([TopicPartition("mm-orders", p, 0) for p in range(PARTITIONS)])
    positions = {}
    deadline = time.time() + 60
    while len(positions) < PARTITIONS and time.time() < deadline:
        m = c.poll(1)
        if m is None or m.error():
            continue
        if m.offset() + 1 >= ends[m.partition()] * 6 // 10:
            positions[m.partition()] = m.offset() + 1
            c.pause([TopicPartition("mm-orders", m.partition())])
    # A fresh Kafka may still be loading its group coordinator: retry while it says so.
    deadline = time.time() + 60
    while True:
        try:
            c.commit(offsets=[TopicPartition("mm-orders", p, o) for p, o in positions.items()], asynchronous=False)
            break
        except KafkaException as e:
            if not e.args[0].retriable() and e.args[0].code() != KafkaError.NOT_COORDINATOR or time.time() > deadline:
                raise
            time.sleep(0.5)
    c.close()
    return positions


def _mirror_config(workdir, kafka, keel, flow="kafka->keel", topics="mm-.*"):
    """MirrorMaker 2's configuration for one flow, `kafka->keel` or `keel->kafka`."""
    back = "keel->kafka" if flow == "kafka->keel" else "kafka->keel"
    path = os.path.join(workdir, "mm2.properties")
    with open(path, "w") as f:
        f.write("\n".join([
            "clusters = kafka, keel",
            "kafka.bootstrap.servers = %s" % kafka,
            "keel.bootstrap.servers = %s" % keel,
            "%s.enabled = true" % flow,
            "%s.enabled = false" % back,
            "%s.topics = %s" % (flow, topics),
            "%s.groups = mm-.*" % flow,
            "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
            "sync.group.offsets.enabled = true",
            "sync.group.offsets.interval.seconds = 1",
            "emit.checkpoints.interval.seconds = 1",
            "refresh.topics.interval.seconds = 5",
            "refresh.groups.interval.seconds = 2",
            # One node each: every internal topic with one replica.
            "replication.factor = 1",
            "offset-syncs.topic.replication.factor = 1",
            "checkpoints.topic.replication.factor = 1",
            "heartbeats.topic.replication.factor = 1",
            "config.storage.replication.factor = 1",
            "offset.storage.replication.factor = 1",
            "status.storage.replication.factor = 1",
            "",
        ]))
    return path


def _start_mirror(classpath, config):
    workdir = os.path.dirname(config)
    log = open(os.path.join(workdir, "mm2.log"), "w")
    return subprocess.Popen(
        ["java", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
         "org.apache.kafka.connect.mirror.MirrorMaker", config],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir)


def _stop_mirror(mm2):
    mm2.terminate()
    try:
        mm2.wait(30)
    except subprocess.TimeoutExpired:
        mm2.kill()


def test_mirror_maker_2_moves_topics_and_group_offsets_into_keel(bootstrap):
    source, classpath = os.environ.get("KAFKA_SOURCE"), os.environ.get("MM2_CLASSPATH")
    if not source or not classpath:
        pytest.skip("KAFKA_SOURCE and MM2_CLASSPATH are not set (run compat/migration/run.sh)")
    committed_on_kafka = _fill_source(source)
    source_ends = {t: _ends(source, t) for t in TOPICS}
    records = sum(sum(e.values()) for e in source_ends.values())

    workdir = tempfile.mkdtemp(prefix="keel-mm2-")
    started = time.time()
    mm2 = _start_mirror(classpath, _mirror_config(workdir, source, bootstrap))
    try:
        while True:
            mirrored = {}
            try:
                mirrored = {t: _ends(bootstrap, t) for t in TOPICS}
            except Exception:  # noqa: BLE001 - the topics do not exist on Keel yet
                pass
            if mirrored == source_ends:
                break
            assert mm2.poll() is None, "MirrorMaker 2 exited; see %s/mm2.log" % workdir
            assert time.time() - started < MIRROR_DEADLINE_S, "mirrored %s of %s" % (mirrored, source_ends)
            time.sleep(0.5)
        took = time.time() - started
        print("figure: MirrorMaker 2 mirrored %d records (3 topics, %d partitions) from Kafka into Keel "
              "in %.1f s from its start, %.0f records/s" % (records, 3 * PARTITIONS, took, records / took))

        # Same records, keys, values and timestamps, partition by partition.
        for t in TOPICS:
            assert partition_digests(bootstrap, t) == partition_digests(source, t), t
        # Configs and partition counts came along.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        meta = admin.list_topics(timeout=10)
        for t in TOPICS:
            assert len(meta.topics[t].partitions) == PARTITIONS, t
        r = ConfigResource(ConfigResource.Type.TOPIC, "mm-accounts")
        configs = admin.describe_configs([r])[r].result(30)
        assert configs["cleanup.policy"].value == "compact"

        # The group's offsets arrive translated: at or before where it stopped.
        deadline = time.time() + OFFSETS_DEADLINE_S
        while True:
            on_keel = _committed(bootstrap, "mm-orders")
            if all(on_keel.get(p, -1) >= 0 for p in committed_on_kafka):
                break
            assert time.time() < deadline, "group offsets on Keel: %s (on Kafka: %s)" % (on_keel, committed_on_kafka)
            time.sleep(0.5)
        print("figure: group offsets on Kafka %s, translated on Keel %s, %.1f s after the mirror caught up"
              % (committed_on_kafka, on_keel, time.time() - started - took))
    finally:
        _stop_mirror(mm2)
    for p, offset in committed_on_kafka.items():
        assert on_keel[p] <= offset, "partition %d: translated %d past Kafka's %d (records skipped)" % (p, on_keel[p], offset)

    # A consumer of the group, now on Keel, resumes there and reads to the end: no
    # record it had not consumed on Kafka is skipped.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.subscribe(["mm-orders"])
    first, eof = {}, set()
    deadline = time.time() + 60
    while len(eof) < PARTITIONS and time.time() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
            continue
        first.setdefault(m.partition(), m.offset())
    c.close()
    for p in range(PARTITIONS):
        assert first.get(p) == on_keel[p], "partition %d resumed at %s, committed %d" % (p, first.get(p), on_keel[p])


def test_mirror_maker_2_takes_a_topic_back_to_kafka(bootstrap):
    """The way back: a topic written on Keel mirrored into Kafka, whole."""
    source, classpath = os.environ.get("KAFKA_SOURCE"), os.environ.get("MM2_CLASSPATH")
    if not source or not classpath:
        pytest.skip("KAFKA_SOURCE and MM2_CLASSPATH are not set (run compat/migration/run.sh)")
    topic = "back-orders"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(20000):
        _produce(producer, topic, b"k%d" % i, b"back-%d" % i)
    assert producer.flush(120) == 0, "records left unsent to Keel"
    ends = _ends(bootstrap, topic)
    workdir = tempfile.mkdtemp(prefix="keel-mm2-back-")
    started = time.time()
    mm2 = _start_mirror(classpath, _mirror_config(workdir, source, bootstrap, flow="keel->kafka", topics="back-.*"))
    try:
        while True:
            try:
                if _ends(source, topic) == ends:
                    break
            except Exception:  # noqa: BLE001 - not on Kafka yet
                pass
            assert mm2.poll() is None, "MirrorMaker 2 exited; see %s/mm2.log" % workdir
            assert time.time() - started < MIRROR_DEADLINE_S, "the topic did not reach Kafka"
            time.sleep(0.5)
    finally:
        _stop_mirror(mm2)
    print("figure: MirrorMaker 2 mirrored %d records from Keel back into Kafka in %.1f s from its start"
          % (sum(ends.values()), time.time() - started))
    assert partition_digests(source, topic) == partition_digests(bootstrap, topic)
