"""Group coordinator failover on a 3-node cluster, with kafka-python consumers.

Not part of the default suite (pytest collects test_*.py): ./test.sh's cluster stage
runs it last, as `compat/python/run.sh <bootstrap> cluster_failover.py` with
KEEL_CLUSTER_DIR naming the compat/cluster.sh directory, because it kill -9s a node.

A group consumes a third of a replicated topic and commits; the group's coordinator
is killed. The same consumer goes on, finds the new coordinator and commits there;
then a new consumer of the group resumes exactly at the last commit, and every
record was read: none is skipped.
"""

import os
import subprocess
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.errors import KafkaError

import keelcompat as kc

PARTITIONS = 3
RECORDS = 600
CLUSTER_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster.sh")
# The coordinator must move within this (an election takes about a second).
MOVE_DEADLINE_S = 15


def _coordinator(bootstrap, group):
    """The group's coordinator node id, or None while it cannot be described.

    A new admin client each time: librdkafka's admin client keeps the coordinator it
    found and answers NOT_COORDINATOR from it after the group has moved, and it drops
    a broker the cluster has fenced; a fresh client asks FindCoordinator anew."""
    admin = AdminClient(kc.common_config(bootstrap))
    try:
        return admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10).coordinator.id
    except Exception:  # noqa: BLE001 - retried by the caller while the coordinator moves
        return None


def _retrying(call, deadline_s=30):
    """Runs `call` again while it raises a retriable error. kafka-python 3.0 lets a
    refused connection to a dead node (where it may send FindCoordinator) escape
    poll() and commit(); an application retries, and so does this test."""
    deadline = time.time() + deadline_s
    while True:
        try:
            return call()
        except KafkaError as e:
            if not e.retriable or time.time() > deadline:
                raise
            time.sleep(0.1)


def _consume_until(consumer, seen, count, deadline_s=60):
    """Polls until `seen` holds `count` records; returns the first offset read per
    partition in this call."""
    first = {}
    deadline = time.time() + deadline_s
    while len(seen) < count:
        assert time.time() < deadline, "read %d of %d records" % (len(seen), count)
        for tp, records in _retrying(lambda: consumer.poll(timeout_ms=500)).items():
            for r in records:
                first.setdefault(tp.partition, r.offset)
                seen[(tp.partition, r.offset)] = int(r.value)
    return first


def test_group_resumes_after_coordinator_kill(bootstrap):
    cluster_dir = os.environ.get("KEEL_CLUSTER_DIR")
    if not cluster_dir:
        pytest.skip("KEEL_CLUSTER_DIR is not set (needs a compat/cluster.sh cluster)")
    admin = AdminClient(kc.common_config(bootstrap))
    run = uuid.uuid4().hex[:8]
    topic, group = "keel-py-failover-%s" % run, "keel-py-failover-%s" % run
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])[topic].result(60)
    kc.wait_for_topic(admin, topic, PARTITIONS)
    del admin  # not kept across the kill: see _coordinator
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5)
    for i in range(RECORDS):
        producer.send(topic, value=str(i).encode(), partition=i % PARTITIONS)
    producer.flush(30)
    producer.close()

    def consumer():
        return KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap.split(","),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=20,
        )

    killed = []
    try:
        _resume_after_kill(bootstrap, consumer, topic, group, cluster_dir, killed)
    finally:
        for node in killed:
            subprocess.run([CLUSTER_SH, "restart", str(node), cluster_dir], check=False)


def _resume_after_kill(bootstrap, consumer, topic, group, cluster_dir, killed):
    seen = {}
    first = consumer()
    try:
        _consume_until(first, seen, RECORDS // 3)
        first.commit()
        coordinator = _coordinator(bootstrap, group)
        assert coordinator is not None, "the group has no coordinator"
        subprocess.run([CLUSTER_SH, "kill", str(coordinator), cluster_dir], check=True)
        killed.append(coordinator)
        started = time.time()
        moved = None
        while moved in (None, coordinator):
            assert time.time() - started < MOVE_DEADLINE_S, "the coordinator did not move from %d" % coordinator
            time.sleep(0.1)
            moved = _coordinator(bootstrap, group)
        print("figure: group coordinator moved from node %d to %d in %d ms"
              % (coordinator, moved, (time.time() - started) * 1000))
        # The same member goes on and commits at the new coordinator.
        _consume_until(first, seen, 2 * RECORDS // 3)
        _retrying(first.commit)
        committed = {p: _retrying(lambda: first.committed(KTP(topic, p))) for p in range(PARTITIONS)}
    finally:
        first.close(autocommit=False)
    assert all(committed[p] is not None for p in range(PARTITIONS)), committed

    second = consumer()
    try:
        resumed_at = _consume_until(second, seen, RECORDS)
    finally:
        second.close(autocommit=False)
    for p in range(PARTITIONS):
        if committed[p] < RECORDS // PARTITIONS:
            assert resumed_at.get(p) == committed[p], "partition %d resumed at %s, committed %d" % (
                p, resumed_at.get(p), committed[p])
    assert sorted(seen.values()) == list(range(RECORDS)), "records skipped"
