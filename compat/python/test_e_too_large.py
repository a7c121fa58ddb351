"""(e) A record larger than the topic's max.message.bytes is refused by the
broker: librdkafka reports MSG_SIZE_TOO_LARGE in the delivery report (and
kafka-python raises MessageSizeTooLargeError), the refused record takes no
offset, and the producer goes on working."""

import os

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import MessageSizeTooLargeError

import keelcompat as kc

LIMIT = 10_000


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_confluent_message_too_large(bootstrap, topics, idempotent):
    topic = topics.create("too-large", partitions=1, config={"max.message.bytes": str(LIMIT)})
    cfg = kc.common_config(bootstrap)
    cfg.update({"acks": "all", "enable.idempotence": idempotent, "compression.type": "none", "linger.ms": 0})
    producer = Producer(cfg)
    reports = []

    def cb(err, msg):
        reports.append((err, msg.offset(), len(msg.value() or b"")))

    # Incompressible, five times the topic limit, well under the client's
    # own message.max.bytes so that the broker is the one to refuse it.
    producer.produce(topic, value=os.urandom(5 * LIMIT), partition=0, on_delivery=cb)
    assert producer.flush(30) == 0
    assert len(reports) == 1
    err, _, size = reports[0]
    assert size == 5 * LIMIT
    assert err is not None, "oversized record was accepted"
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE, "got %s" % err

    small = os.urandom(100)
    producer.produce(topic, value=small, key=b"after", partition=0, on_delivery=cb)
    assert producer.flush(30) == 0
    assert len(reports) == 2
    err, offset, _ = reports[1]
    assert err is None, "record after the refused one failed: %s" % err
    assert offset == 0, "the refused record took an offset: next is %d" % offset

    msgs = kc.confluent_read(bootstrap, topic, 1, {0: 1})
    assert [(m.offset(), m.key(), m.value()) for m in msgs] == [(0, b"after", small)]


def test_kafka_python_message_too_large(bootstrap, topics):
    topic = topics.create("too-large-kp", partitions=1, config={"max.message.bytes": str(LIMIT)})
    # Not idempotent: kafka-python's idempotent producer treats the refusal
    # as fatal and stops, which is client policy, not broker behaviour.
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, enable_idempotence=False)
    try:
        fut = producer.send(topic, value=os.urandom(5 * LIMIT), partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            fut.get(timeout=30)
        md = producer.send(topic, value=b"fits", partition=0).get(timeout=30)
        assert md.offset == 0
    finally:
        producer.close(timeout=10)
