"""Shared fixtures for the Python client compatibility suite.

Every test talks to the broker named by KEEL_BOOTSTRAP (host:port). Topics get
names unique to the run and are deleted when the session ends. No test uses a
consumer group except test_f_groups.py: consumers are assigned partitions and start at explicit
offsets, and never commit.
"""

import os
import uuid
import warnings

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with a deprecated
    # importlib.resources call at import time; nothing to act on here.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

import keelcompat


def pytest_report_header(config):
    import confluent_kafka

    return [
        "KEEL_BOOTSTRAP=%s" % os.environ.get("KEEL_BOOTSTRAP", "(unset)"),
        "confluent-kafka %s, librdkafka %s, kafka-python %s"
        % (getattr(confluent_kafka, "__version__", None) or confluent_kafka.version(), confluent_kafka.libversion()[0], kafka.__version__),
    ]


@pytest.fixture(scope="session")
def bootstrap():
    value = os.environ.get("KEEL_BOOTSTRAP")
    if not value:
        pytest.fail("KEEL_BOOTSTRAP is not set; run compat/python/run.sh <bootstrap>")
    return value


@pytest.fixture(scope="session")
def run_id():
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def admin(bootstrap):
    return AdminClient(keelcompat.common_config(bootstrap))


class TopicFactory:
    """Creates uniquely named topics and deletes them at the end of the run."""

    def __init__(self, admin, run_id):
        self.admin = admin
        self.run_id = run_id
        self.created = []
        self.counter = 0

    def name(self, label):
        self.counter += 1
        return "keel-py-%s-%s-%d" % (self.run_id, label, self.counter)

    def create(self, label, partitions=1, config=None):
        name = self.name(label)
        futures = self.admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
            operation_timeout=30,
            request_timeout=30,
        )
        futures[name].result(timeout=60)
        self.created.append(name)
        keelcompat.wait_for_topic(self.admin, name, partitions)
        return name

    def forget(self, name):
        if name in self.created:
            self.created.remove(name)

    def cleanup(self):
        if not self.created:
            return
        try:
            futures = self.admin.delete_topics(list(self.created), operation_timeout=30, request_timeout=30)
            for fut in futures.values():
                try:
                    fut.result(timeout=60)
                except KafkaException:
                    pass
        except KafkaException:
            pass


@pytest.fixture(scope="session")
def topics(admin, run_id):
    factory = TopicFactory(admin, run_id)
    yield factory
    factory.cleanup()


class ConfluentProduced:
    """Per compression codec, one topic filled by an idempotent acks=all
    confluent-kafka producer, produced on first use and shared by the tests
    that read it back (confluent-kafka and kafka-python consumers)."""

    def __init__(self, bootstrap, topics):
        self.bootstrap = bootstrap
        self.topics = topics
        self.done = {}

    def get(self, codec):
        if codec not in self.done:
            topic = self.topics.create("ck-" + codec, partitions=keelcompat.PARTITIONS)
            recs = keelcompat.make_records(
                keelcompat.RECORDS_PER_TOPIC, seed="ck-" + codec, partitions=keelcompat.PARTITIONS
            )
            keelcompat.confluent_produce(self.bootstrap, topic, recs, codec)
            self.done[codec] = (topic, recs)
        return self.done[codec]


@pytest.fixture(scope="session")
def confluent_produced(bootstrap, topics):
    return ConfluentProduced(bootstrap, topics)
