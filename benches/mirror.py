"""One measurement of benches/mirror.sh: MirrorMaker 2 (dedicated mode) from a loaded
source Kafka into a fresh target (Keel or Kafka), then the consumer cut-over gap.

    mirror.py SOURCE TARGET LABEL WORKDIR TOPIC...      (MM2_CLASSPATH in the environment)

Throughput: MirrorMaker 2's JVM starts at t0; the target's end offsets (summed over
every partition of TOPIC...) are polled every 100 ms; the first poll that sees a record
is t_first, the first that sees the source's total is t_last. records/s and MB/s (10^6
bytes of record values) are given over t_first..t_last (the copy) and t0..t_last (with
MirrorMaker 2's start-up).

Cut-over gap, with the mirror caught up and still running: a consumer of a group known
to MirrorMaker 2 (it committed offset 0 before the mirror started) reads about half of
the first topic on the source, commits its position once and closes; that close
returning is t_stop. The target's committed offsets of the group are polled every 50 ms
until every partition shows a translated offset (t_synced); a consumer of the same group
is then started on the target and t_resumed is when it receives its first record. The
gap is t_resumed - t_stop. It checks that every partition resumes exactly at its
translated offset, never past where the source consumer stopped.

Prints one `mirror ...` line of key=value fields.
"""

import os
import subprocess
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

POLL_S = 0.1
MIRROR_DEADLINE_S = 900
SYNC_DEADLINE_S = 120


def ends(bootstrap, topics):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-mirror-check"})
    try:
        out = {}
        meta = c.list_topics(timeout=10)
        for t in topics:
            if t not in meta.topics or meta.topics[t].error is not None:
                continue
            for p in meta.topics[t].partitions:
                out[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
        return out
    finally:
        c.close()


def committed(bootstrap, group, topic, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)}
    finally:
        c.close()


def commit_zero(bootstrap, group, topic, partitions):
    """Makes `group` exist on the source, so that MirrorMaker 2 finds it when it starts."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.time() + 60
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, p, 0) for p in partitions], asynchronous=False)
                return
            except Exception:  # noqa: BLE001 - a fresh coordinator may still be loading
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def mirror_config(workdir, source, target):
    path = os.path.join(workdir, "mm2.properties")
    with open(path, "w") as f:
        f.write("\n".join([
            "clusters = source, target",
            "source.bootstrap.servers = %s" % source,
            "target.bootstrap.servers = %s" % target,
            "source->target.enabled = true",
            "target->source.enabled = false",
            "source->target.topics = mirror-.*",
            "source->target.groups = bench-.*",
            "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
            # The source stays read-only: MirrorMaker 2's offset syncs go to the target.
            "offset-syncs.topic.location = target",
            "tasks.max = 2",
            "sync.group.offsets.enabled = true",
            "sync.group.offsets.interval.seconds = 1",
            "emit.checkpoints.interval.seconds = 1",
            "refresh.topics.interval.seconds = 5",
            "refresh.groups.interval.seconds = 2",
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


def cut_over(source, target, group, topic, partitions):
    """Returns (gap_s, synced_s, re-read records)."""
    src_ends = ends(source, [topic])
    c = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    position, paused = {}, set()
    deadline = time.time() + 120
    while len(paused) < len(partitions):
        assert time.time() < deadline, "the source consumer read %s" % position
        for m in c.consume(1000, 1):
            if m.error():
                continue
            p = m.partition()
            if p in paused:
                continue
            position[p] = m.offset() + 1
            if position[p] >= src_ends[(topic, p)] // 2:
                paused.add(p)
                c.pause([TopicPartition(topic, p)])
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in position.items()], asynchronous=False)
    c.close()
    t_stop = time.time()

    while True:
        on_target = committed(target, group, topic, partitions)
        if all(on_target.get(p, -1) > 0 for p in partitions):
            break
        assert time.time() - t_stop < SYNC_DEADLINE_S, "offsets on the target: %s" % on_target
        time.sleep(0.05)
    t_synced = time.time()

    d = Consumer({"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    d.subscribe([topic])
    first = {}
    t_resumed = None
    deadline = time.time() + 120
    while len(first) < len(partitions):
        assert time.time() < deadline, "the target consumer got first records %s" % first
        for m in d.consume(100, 0.05):
            if m.error():
                continue
            if t_resumed is None:
                t_resumed = time.time()
            first.setdefault(m.partition(), m.offset())
    d.close()
    for p in partitions:
        assert first[p] == on_target[p], "partition %d resumed at %d, translated %d" % (p, first[p], on_target[p])
        assert on_target[p] <= position[p], "partition %d translated past the stop: %d > %d" % (
            p, on_target[p], position[p])
    reread = sum(position[p] - on_target[p] for p in partitions)
    return t_resumed - t_stop, t_synced - t_stop, reread


def main(argv):
    source, target, label, workdir, topics = argv[1], argv[2], argv[3], argv[4], argv[5:]
    classpath = os.environ["MM2_CLASSPATH"]
    value_bytes = int(os.environ.get("RECORD_BYTES", "1024"))
    os.makedirs(workdir, exist_ok=True)
    want = ends(source, topics)
    total = sum(want.values())
    group = "bench-cutover-%s" % label
    first_topic_partitions = sorted(p for (t, p) in want if t == topics[0])
    commit_zero(source, group, topics[0], first_topic_partitions)

    log = open(os.path.join(workdir, "mm2.log"), "w")
    t0 = time.time()
    mm2 = subprocess.Popen(
        ["java", "-Xms1g", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
         "org.apache.kafka.connect.mirror.MirrorMaker", mirror_config(workdir, source, target)],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        t_first = None
        while True:
            try:
                have = ends(target, topics)
            except Exception:  # noqa: BLE001 - the target may not have the topics yet
                have = {}
            now = time.time()
            n = sum(have.values())
            if n > 0 and t_first is None:
                t_first = now
            if have == want:
                t_last = now
                break
            assert mm2.poll() is None, "MirrorMaker 2 exited; see %s/mm2.log" % workdir
            assert now - t0 < MIRROR_DEADLINE_S, "mirrored %d of %d records" % (n, total)
            time.sleep(POLL_S)
        gap, synced, reread = cut_over(source, target, group, topics[0], first_topic_partitions)
    finally:
        mm2.terminate()
        try:
            mm2.wait(30)
        except subprocess.TimeoutExpired:
            mm2.kill()
    copy_s, all_s = t_last - t_first, t_last - t0
    print("mirror target=%s records=%d partitions=%d startup_s=%.1f copy_s=%.1f records_per_s=%.0f MB_per_s=%.1f "
          "with_startup_records_per_s=%.0f cutover_gap_s=%.2f offsets_synced_s=%.2f reread_records=%d"
          % (label, total, len(want), t_first - t0, copy_s, total / copy_s, total * value_bytes / copy_s / 1e6,
             total / all_s, gap, synced, reread), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
