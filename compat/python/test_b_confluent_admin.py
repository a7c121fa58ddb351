"""(b) confluent-kafka AdminClient: create_topics with partitions and
configs, list_topics metadata, describe_configs, delete_topics."""

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, ResourceType

import keelcompat as kc

CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "7654321",
    "max.message.bytes": "300000",
    "segment.bytes": "16777216",
}


def test_admin_topic_lifecycle(admin, topics):
    name = topics.name("admin")
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=5, replication_factor=1, config=CONFIGS)],
        operation_timeout=30,
        request_timeout=30,
    )
    assert set(futures) == {name}
    assert futures[name].result(timeout=60) is None
    topics.created.append(name)

    # Metadata: the topic, its five partitions, each led by a listed broker
    # that is also its only replica and in sync.
    md = kc.wait_for_topic(admin, name, 5)
    brokers = md.brokers
    assert len(brokers) >= 1
    for b in brokers.values():
        assert b.id >= 0 and b.host and b.port > 0
    t = md.topics[name]
    assert sorted(t.partitions) == [0, 1, 2, 3, 4]
    for pid, p in t.partitions.items():
        assert p.id == pid
        assert p.leader in brokers
        assert p.replicas == [p.leader]
        assert p.isrs == [p.leader]

    # The full listing names the topic too.
    all_md = admin.list_topics(timeout=10)
    assert name in all_md.topics
    assert all_md.cluster_id, "metadata carries no cluster id"

    # Creating it again fails with TOPIC_ALREADY_EXISTS.
    again = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)], request_timeout=30)
    try:
        again[name].result(timeout=60)
        raise AssertionError("second create_topics of %s succeeded" % name)
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, e

    # describe_configs returns what was set, marked as topic overrides, and
    # the broker's defaults for the rest.
    res = ConfigResource(ResourceType.TOPIC, name)
    entries = admin.describe_configs([res], request_timeout=30)[res].result(timeout=60)
    for k, v in CONFIGS.items():
        assert k in entries, "describe_configs lacks %s" % k
        assert entries[k].value == v, "%s = %r, set %r" % (k, entries[k].value, v)
        assert entries[k].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, "%s source %r" % (k, entries[k].source)
        assert not entries[k].is_default
    for k in ("min.insync.replicas", "message.timestamp.type", "compression.type"):
        assert k in entries, "describe_configs lacks %s" % k
        assert entries[k].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["message.timestamp.type"].value == "CreateTime"

    # delete_topics, after which metadata stops listing the topic.
    dfut = admin.delete_topics([name], operation_timeout=30, request_timeout=30)
    assert dfut[name].result(timeout=60) is None
    topics.forget(name)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if name not in admin.list_topics(timeout=10).topics:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("%s still listed 30s after delete_topics" % name)
    md = admin.list_topics(topic=name, timeout=10)
    t = md.topics.get(name)
    assert t is not None and t.error is not None
    assert t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, t.error


def test_admin_delete_unknown_topic(admin, topics):
    name = topics.name("never-created")
    fut = admin.delete_topics([name], request_timeout=30)
    try:
        fut[name].result(timeout=60)
        raise AssertionError("deleting missing topic %s succeeded" % name)
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e
