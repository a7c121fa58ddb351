"""What Apache Kafka answers that clients act on, found by users of other clients and
by the differential tester (compat/diff): each case here once diverged.

- A keyless record produced to a compacted topic is refused with INVALID_RECORD and a
  per-record error (KIP-467), so the client fails exactly that record.
- A topic name with illegal characters fails at once (INVALID_TOPIC_EXCEPTION from
  Metadata), instead of being retried until the delivery timeout.

Both run against Kafka too (./test.sh --oracle), where they pass the same way.
"""

import time

from confluent_kafka import KafkaError, KafkaException, Producer

import keelcompat as kc

# Far above what either case takes on Kafka (milliseconds): only a retry loop until
# the delivery timeout (message.timeout.ms, set to 60 s here) would reach it.
FAILS_FAST_S = 20


def _produce_one(bootstrap, topic, key, value):
    """Produces one record with acks=all; returns (error, seconds) from its delivery report."""
    cfg = kc.common_config(bootstrap)
    cfg.update({"acks": "all", "message.timeout.ms": 60000, "allow.auto.create.topics": True})
    producer = Producer(cfg)
    reports = []
    started = time.time()
    try:
        producer.produce(topic, key=key, value=value, on_delivery=lambda err, msg: reports.append(err))
    except KafkaException as e:
        # librdkafka refuses at once when its metadata already says the topic is
        # unknown: the same error, without a delivery report.
        return e.args[0], time.time() - started
    producer.flush(90)
    assert len(reports) == 1, "no delivery report"
    return reports[0], time.time() - started


def test_keyless_record_to_a_compacted_topic_is_refused(bootstrap, topics):
    topic = topics.create("compact-keyless", config={"cleanup.policy": "compact"})
    err, _ = _produce_one(bootstrap, topic, None, b"no key")
    assert err is not None, "a keyless record was accepted by a compacted topic"
    assert err.code() == KafkaError.INVALID_RECORD, err
    assert not err.retriable(), err
    # A keyed one is taken.
    err, _ = _produce_one(bootstrap, topic, b"k", b"with key")
    assert err is None, err


def test_illegal_topic_name_fails_fast(bootstrap):
    err, took = _produce_one(bootstrap, "keel-py-bad$name#!", b"k", b"v")
    assert err is not None, "a record was delivered to an illegal topic name"
    assert err.code() in (KafkaError.TOPIC_EXCEPTION, KafkaError._UNKNOWN_TOPIC), err
    assert took < FAILS_FAST_S, "failed only after %.1f s: %s" % (took, err)
