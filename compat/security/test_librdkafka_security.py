"""librdkafka (confluent-kafka) over SSL with mutual TLS and over SASL_SSL with
SCRAM-SHA-256; a wrong password is refused. Run by compat/security/run.sh through
compat/python/run.sh, with the listeners and files in the environment:
SEC_SSL, SEC_SASL_SSL (HOST:PORT), SEC_CERTS (the directory certs.sh filled),
SEC_USER and SEC_PASSWORD (a SCRAM-SHA-256 user)."""

import os
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CERTS = os.environ["SEC_CERTS"]
RECORDS = 200


def tls(bootstrap, protocol):
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": protocol,
        "ssl.ca.location": os.path.join(CERTS, "ca.pem"),
    }


def mutual_tls():
    c = tls(os.environ["SEC_SSL"], "SSL")
    c["ssl.certificate.location"] = os.path.join(CERTS, "client.crt")
    c["ssl.key.location"] = os.path.join(CERTS, "client.key")
    return c


def scram(password):
    c = tls(os.environ["SEC_SASL_SSL"], "SASL_SSL")
    c.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": os.environ["SEC_USER"], "sasl.password": password})
    return c


def round_trip(conf):
    topic = f"security-py-{uuid.uuid4()}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({**conf, "acks": "all"})
    delivered = []
    for i in range(RECORDS):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(30) == 0
    assert delivered == [None] * RECORDS
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 30
    while len(got) < RECORDS and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.close()
    assert got == [f"v{i}" for i in range(RECORDS)]


def test_produce_consume_over_mutual_tls():
    round_trip(mutual_tls())


def test_produce_consume_over_sasl_ssl_scram_sha_256():
    round_trip(scram(os.environ["SEC_PASSWORD"]))


def test_wrong_password_is_refused():
    errors = []
    p = Producer({**scram("not-the-password"), "error_cb": errors.append})
    deadline = time.time() + 20
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.time() < deadline:
        p.poll(0.2)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error, got {errors}"
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in auth[0].str(), auth[0].str()


def test_producer_reauthenticates_across_session_lifetimes():
    """KIP-368: SEC_REAUTH is a SASL_PLAINTEXT listener whose SASL sessions last 2 s
    (connections.max.reauth.ms=2000); librdkafka (2.2+) re-authenticates on the
    connection, so 8 s of producing sees no error and no disconnection."""
    conf = {
        "bootstrap.servers": os.environ["SEC_REAUTH"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": os.environ["SEC_USER"],
        "sasl.password": os.environ["SEC_PASSWORD"],
    }
    topic = f"reauth-py-{uuid.uuid4()}"
    admin = AdminClient(conf)  # kept alive until its future is done
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    errors = []
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "error_cb": errors.append})
    delivered = []
    end = time.time() + 8
    sent = 0
    while time.time() < end:
        for _ in range(50):
            p.produce(topic, f"r{sent}".encode(), on_delivery=lambda err, msg: delivered.append(err))
            sent += 1
        p.poll(0.02)
    assert p.flush(30) == 0
    assert len(delivered) == sent and all(e is None for e in delivered), [e for e in delivered if e][:3]
    assert errors == [], errors
