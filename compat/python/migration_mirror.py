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
Keel resumes at or before where it stopped on Kafka, skipping nothing, and reads what a
producer moved to Keel writes next. The way back: a topic written on Keel is mirrored
into Kafka whole, with a group's offsets. LogAppendTime: a LogAppendTime topic mirrored
into Keel and into Kafka by one MirrorMaker 2 comes out the same on both. With
MIGRATION_KEEL_RF=3 (compat/migration/run.sh --cluster) every topic made on Keel has 3
replicas.
"""

import os
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "migration"))
from compare import partition_digests  # noqa: E402 - compat/migration/compare.py, the users' tool
from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

TOPICS = {"mm-orders": {}, "mm-trades": {}, "mm-accounts": {"cleanup.policy": "compact"}}
PARTITIONS = 4
RECORDS_PER_TOPIC = 33334
GROUP = "mm-group"
MIRROR_DEADLINE_S = 180
OFFSETS_DEADLINE_S = 60
# Keel's replication factor for the mirrored topics and MirrorMaker 2's own topics: 3
# against a 3-node Keel (compat/migration/run.sh --cluster).
KEEL_RF = int(os.environ.get("MIGRATION_KEEL_RF", "1"))


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


def _until_eof(consumer, partitions, timeout_s=60):
    """The records `consumer` (with enable.partition.eof) polls until it reached the end
    of `partitions` partitions, or `timeout_s` passed."""
    eof = set()
    deadline = time.time() + timeout_s
    while len(eof) < partitions and time.time() < deadline:
        m = consumer.poll(1)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
            continue
        yield m


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


def _replication_factors():
    """MirrorMaker 2's replication factors: KEEL_RF on Keel (the mirrored topics,
    checkpoints, heartbeats and the Connect worker's configs, offsets and status topics
    kept there; the offset syncs of the way back), 1 on the single-node Kafka (the
    offset syncs of Kafka -> Keel, and what the way back keeps there). Per flow and per
    cluster: MirrorMaker 2 takes `A->B.` and `cluster.` prefixed settings over the
    top-level ones, and runs a heartbeats-only worker for each disabled flow too.
    """
    lines = ["%s = 1" % k for k in ("replication.factor", "offset-syncs.topic.replication.factor",
                                    "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor")]
    lines += ["kafka->keel.%s = %d" % (k, KEEL_RF) for k in ("replication.factor", "checkpoints.topic.replication.factor",
                                                             "heartbeats.topic.replication.factor")]
    lines += ["keel->kafka.offset-syncs.topic.replication.factor = %d" % KEEL_RF]
    for cluster, rf in (("kafka", 1), ("keel", KEEL_RF)):
        lines += ["%s.%s.storage.replication.factor = %d" % (cluster, k, rf) for k in ("config", "offset", "status")]
    return lines + [""]


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
        ] + _replication_factors()))
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
        # The mirrored topics and MirrorMaker 2's own topics on Keel: KEEL_RF replicas,
        # the Connect worker's configs, offsets and status compacted.
        internal = [t for t in meta.topics if t.startswith("mm2-") or t in ("heartbeats", "kafka.checkpoints.internal")]
        assert {"mm2-configs.kafka.internal", "mm2-offsets.kafka.internal", "mm2-status.kafka.internal",
                "heartbeats", "kafka.checkpoints.internal"} <= set(internal), sorted(meta.topics)
        for t in list(TOPICS) + internal:
            replicas = {len(p.replicas) for p in meta.topics[t].partitions.values()}
            assert replicas == {KEEL_RF}, "%s: %s replicas, want %d" % (t, replicas, KEEL_RF)
        for t in ("mm2-configs.kafka.internal", "mm2-offsets.kafka.internal", "mm2-status.kafka.internal"):
            r = ConfigResource(ConfigResource.Type.TOPIC, t)
            assert admin.describe_configs([r])[r].result(30)["cleanup.policy"].value == "compact", t
        print("figure: on Keel, %d replicas of every mirrored and internal topic (%s)" % (KEEL_RF, ", ".join(sorted(internal))))

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
    first = {}
    for m in _until_eof(c, PARTITIONS):
        first.setdefault(m.partition(), m.offset())
    c.close()
    for p in range(PARTITIONS):
        assert first.get(p) == on_keel[p], "partition %d resumed at %s, committed %d" % (p, first.get(p), on_keel[p])

    # Producers move: an idempotent producer writes to the mirrored topic on Keel (the
    # mirror stopped); its records follow the mirrored ones and the group reads them.
    before = _ends(bootstrap, "mm-orders")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(200):
        _produce(producer, "mm-orders", b"moved-%d" % i, b"moved-%d" % i)
    assert producer.flush(60) == 0, "records left unsent to Keel"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    c.assign([TopicPartition("mm-orders", p, o) for p, o in before.items()])
    moved = []
    deadline = time.time() + 30
    while len(moved) < 200 and time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            moved.append(m.value())
    c.close()
    assert sorted(moved) == sorted(b"moved-%d" % i for i in range(200))


def test_mirror_maker_2_takes_a_topic_back_to_kafka(bootstrap):
    """The way back: a topic written on Keel mirrored into Kafka, whole, and a group's
    offsets on Keel translated into Kafka, never past where it stopped."""
    source, classpath = os.environ.get("KAFKA_SOURCE"), os.environ.get("MM2_CLASSPATH")
    if not source or not classpath:
        pytest.skip("KAFKA_SOURCE and MM2_CLASSPATH are not set (run compat/migration/run.sh)")
    topic = "back-orders"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, KEEL_RF)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(20000):
        _produce(producer, topic, b"k%d" % i, b"back-%d" % i)
    assert producer.flush(120) == 0, "records left unsent to Keel"
    ends = _ends(bootstrap, topic)
    # A group on Keel that read half of each partition, to be moved back.
    half = {p: e // 2 for p, e in ends.items()}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm-back", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in half.items()], asynchronous=False)
    c.close()
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
        print("figure: MirrorMaker 2 mirrored %d records from Keel back into Kafka in %.1f s from its start"
              % (sum(ends.values()), time.time() - started))
        # The group's offsets arrive on Kafka translated: at or before where it stopped.
        deadline = time.time() + OFFSETS_DEADLINE_S
        while True:
            c = Consumer({"bootstrap.servers": source, "group.id": "mm-back"})
            back = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in half], timeout=10)}
            c.close()
            if all(back.get(p, -1) >= 0 for p in half):
                break
            assert time.time() < deadline, "group offsets on Kafka: %s (on Keel: %s)" % (back, half)
            time.sleep(0.5)
    finally:
        _stop_mirror(mm2)
    assert partition_digests(source, topic) == partition_digests(bootstrap, topic)
    # The way back keeps its offset syncs on its source, Keel: KEEL_RF replicas.
    syncs = admin.list_topics(timeout=10).topics["mm2-offset-syncs.kafka.internal"]
    assert {len(p.replicas) for p in syncs.partitions.values()} == {KEEL_RF}
    for p, offset in half.items():
        assert back[p] <= offset, "partition %d: translated %d past Keel's %d" % (p, back[p], offset)
    print("figure: the way back, group offsets on Keel %s, translated on Kafka %s" % (half, back))


LAT_PARTITIONS = 2
LAT_BATCHES = 4
LAT_PER_BATCH = 50


def _stamps(bootstrap, topic):
    """[(partition, offset, timestamp type, timestamp)] of every record of `topic`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-check", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(LAT_PARTITIONS)])
        return sorted((m.partition(), m.offset()) + m.timestamp() for m in _until_eof(c, LAT_PARTITIONS))
    finally:
        c.close()


def _count(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-check"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(LAT_PARTITIONS))
    finally:
        c.close()


def _timestamp_type(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    r = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([r])[r].result(30)["message.timestamp.type"].value


def test_mirror_maker_2_treats_log_append_time_topics_as_kafka_does(bootstrap):
    """A LogAppendTime topic on Kafka mirrored by one MirrorMaker 2 into Keel and, for
    the reference, into Kafka itself (a second cluster alias on the same Kafka; the
    copies are named `lsrc.<topic>` by the DefaultReplicationPolicy). MirrorMaker 2
    does not carry `message.timestamp.type` over (its DefaultConfigPropertyFilter
    excludes it), so a copy it creates is a CreateTime topic whose records carry the
    source's append times as their CreateTime: on Keel as on Kafka. A copy created
    beforehand as a LogAppendTime topic is stamped again by the target when MirrorMaker
    2 writes it: on Keel as on Kafka.
    """
    source, classpath = os.environ.get("KAFKA_SOURCE"), os.environ.get("MM2_CLASSPATH")
    if not source or not classpath:
        pytest.skip("KAFKA_SOURCE and MM2_CLASSPATH are not set (run compat/migration/run.sh)")
    lat = {"message.timestamp.type": "LogAppendTime"}
    on_kafka = AdminClient({"bootstrap.servers": source})
    for f in on_kafka.create_topics([NewTopic(t, LAT_PARTITIONS, 1, config=lat) for t in ("lat-plain", "lat-pre")]
                                    + [NewTopic("lsrc.lat-pre", LAT_PARTITIONS, 1, config=lat)]).values():
        f.result(60)
    on_keel = AdminClient({"bootstrap.servers": bootstrap})
    on_keel.create_topics([NewTopic("lsrc.lat-pre", LAT_PARTITIONS, KEEL_RF, config=lat)])["lsrc.lat-pre"].result(60)
    producer = Producer({"bootstrap.servers": source, "linger.ms": 1000, "acks": "all"})
    day_ago = int(time.time() * 1000) - 86_400_000
    for b in range(LAT_BATCHES):
        for t in ("lat-plain", "lat-pre"):
            for p in range(LAT_PARTITIONS):
                for i in range(LAT_PER_BATCH):
                    producer.produce(t, partition=p, key=b"k%d" % i, value=b"%d-%d" % (b, i), timestamp=day_ago + i)
        assert producer.flush(30) == 0
        time.sleep(0.02)
    source_stamps = {t: _stamps(source, t) for t in ("lat-plain", "lat-pre")}
    for t, recs in source_stamps.items():
        assert len(recs) == LAT_PARTITIONS * LAT_BATCHES * LAT_PER_BATCH, t
        assert {r[2] for r in recs} == {TIMESTAMP_LOG_APPEND_TIME}, t

    workdir = tempfile.mkdtemp(prefix="keel-mm2-lat-")
    config = os.path.join(workdir, "mm2.properties")
    pairs = [("lsrc", "lkeel"), ("lsrc", "lkafka"), ("lkeel", "lsrc"), ("lkafka", "lsrc"), ("lkeel", "lkafka"),
             ("lkafka", "lkeel")]
    with open(config, "w") as f:
        f.write("\n".join(
            ["clusters = lsrc, lkeel, lkafka", "lsrc.bootstrap.servers = %s" % source,
             "lkafka.bootstrap.servers = %s" % source, "lkeel.bootstrap.servers = %s" % bootstrap]
            + ["%s->%s.enabled = %s" % (a, b, "true" if i < 2 else "false") for i, (a, b) in enumerate(pairs)]
            + ["topics = lat-.*", "groups = lat-none", "emit.checkpoints.enabled = false",
               "refresh.topics.interval.seconds = 5"]
            + ["%s = 1" % k for k in ("replication.factor", "offset-syncs.topic.replication.factor",
                                      "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor")]
            + ["lsrc->lkeel.%s = %d" % (k, KEEL_RF) for k in ("replication.factor", "checkpoints.topic.replication.factor",
                                                              "heartbeats.topic.replication.factor")]
            + ["%s.%s.storage.replication.factor = %d" % (c, k, rf) for c, rf in (("lsrc", 1), ("lkafka", 1), ("lkeel", KEEL_RF))
               for k in ("config", "offset", "status")]
            + [""]))
    mirror_started_ms = int(time.time() * 1000)
    mm2 = _start_mirror(classpath, config)
    want = len(source_stamps["lat-plain"])
    try:
        deadline = time.time() + MIRROR_DEADLINE_S
        while True:
            counts = []
            for cluster in (bootstrap, source):
                for t in ("lsrc.lat-plain", "lsrc.lat-pre"):
                    try:
                        counts.append(_count(cluster, t))
                    except Exception:  # noqa: BLE001 - not created yet
                        counts.append(0)
            if counts == [want] * 4:
                break
            assert mm2.poll() is None, "MirrorMaker 2 exited; see %s/mm2.log" % workdir
            assert time.time() < deadline, "mirrored %s of %d" % (counts, want)
            time.sleep(0.5)
    finally:
        _stop_mirror(mm2)
    mirrored_ms = int(time.time() * 1000)

    # A copy MirrorMaker 2 created: CreateTime, carrying the source's append times.
    assert _timestamp_type(source, "lsrc.lat-plain") == "CreateTime"
    assert _timestamp_type(bootstrap, "lsrc.lat-plain") == _timestamp_type(source, "lsrc.lat-plain")
    expected = [(p, o, TIMESTAMP_CREATE_TIME, ts) for p, o, _, ts in source_stamps["lat-plain"]]
    assert _stamps(source, "lsrc.lat-plain") == expected, "Kafka -> Kafka"
    assert _stamps(bootstrap, "lsrc.lat-plain") == expected, "Kafka -> Keel"
    assert partition_digests(bootstrap, "lsrc.lat-plain") == partition_digests(source, "lat-plain")

    # A copy created beforehand as LogAppendTime: stamped again by the target.
    for name, cluster in (("Kafka -> Kafka", source), ("Kafka -> Keel", bootstrap)):
        copy = _stamps(cluster, "lsrc.lat-pre")
        assert [r[:2] for r in copy] == [r[:2] for r in source_stamps["lat-pre"]], name
        assert {r[2] for r in copy} == {TIMESTAMP_LOG_APPEND_TIME}, name
        assert all(mirror_started_ms <= r[3] <= mirrored_ms for r in copy), "%s: stamps %s outside %d..%d" % (
            name, sorted({r[3] for r in copy})[:5], mirror_started_ms, mirrored_ms)
    print("figure: a LogAppendTime topic mirrored by MirrorMaker 2: the copy it creates is CreateTime with the "
          "source's append times (Kafka and Keel alike); a LogAppendTime copy made beforehand is stamped again "
          "by the target (Kafka and Keel alike)")
