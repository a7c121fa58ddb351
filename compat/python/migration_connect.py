"""A Kafka Connect distributed worker on Keel: FileStreamSource -> topic ->
FileStreamSink, across a restart of the worker.

Not part of the default suite: compat/migration/run.sh runs it with MM2_CLASSPATH
naming the Connect classpath. The worker keeps its configs, source offsets and status
in Keel's compacted topics and its sink's progress in a consumer group (Connect's own
rebalance protocol over JoinGroup/SyncGroup). Lines written to the source file must
all reach the sink file, in order; after the worker is stopped and started again,
nothing is lost, and lines read again are only those Connect's at-least-once delivery
allows (at most one commit interval's worth). The worker's topics and the pipeline's
topic have MIGRATION_KEEL_RF replicas (3 with compat/migration/run.sh --cluster).
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

LINES = 5000
DEADLINE_S = 120
# The replication factor of the worker's topics and the pipeline's topic: 3 against a
# 3-node Keel (compat/migration/run.sh --cluster).
KEEL_RF = int(os.environ.get("MIGRATION_KEEL_RF", "1"))


def _rest_port():
    """The worker's REST port: MIGRATION_CONNECT_PORT (compat/migration/run.sh sets
    it), else any free one."""
    if os.environ.get("MIGRATION_CONNECT_PORT"):
        return int(os.environ["MIGRATION_CONNECT_PORT"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rest(port, method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def _start_worker(workdir, classpath, bootstrap, port, run):
    props = os.path.join(workdir, "worker.properties")
    with open(props, "w") as f:
        f.write("\n".join([
            "bootstrap.servers = %s" % bootstrap,
            "group.id = keel-connect-%s" % run,
            "config.storage.topic = keel-connect-%s-configs" % run,
            "offset.storage.topic = keel-connect-%s-offsets" % run,
            "status.storage.topic = keel-connect-%s-status" % run,
            "config.storage.replication.factor = %d" % KEEL_RF,
            "offset.storage.replication.factor = %d" % KEEL_RF,
            "status.storage.replication.factor = %d" % KEEL_RF,
            # Topics the connectors create (the source's topic): KEEL_RF replicas too.
            "topic.creation.enable = true",
            "key.converter = org.apache.kafka.connect.storage.StringConverter",
            "value.converter = org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms = 500",
            "listeners = http://127.0.0.1:%d" % port,
            "",
        ]))
    log = open(os.path.join(workdir, "worker.log"), "a")
    worker = subprocess.Popen(
        ["java", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
         "org.apache.kafka.connect.cli.ConnectDistributed", props],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    deadline = time.time() + 90
    while True:
        assert worker.poll() is None, "the worker exited; see %s/worker.log" % workdir
        try:
            _rest(port, "GET", "/connectors")
            return worker
        except OSError:
            assert time.time() < deadline, "the worker's REST API did not come up"
            time.sleep(0.5)


def _stop(worker):
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def _sink_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _wait_for(path, want, worker):
    deadline = time.time() + DEADLINE_S
    while True:
        lines = _sink_lines(path)
        if want <= set(lines):
            return lines
        assert worker.poll() is None, "the worker exited"
        assert time.time() < deadline, "the sink has %d lines, %d of %d wanted" % (
            len(lines), len(want & set(lines)), len(want))
        time.sleep(0.5)


def test_file_stream_pipeline_survives_a_worker_restart(bootstrap):
    classpath = os.environ.get("MM2_CLASSPATH")
    if not classpath:
        pytest.skip("MM2_CLASSPATH is not set (run compat/migration/run.sh)")
    run = str(int(time.time()))
    workdir = tempfile.mkdtemp(prefix="keel-connect-")
    source, sink = os.path.join(workdir, "source.txt"), os.path.join(workdir, "sink.txt")
    topic = "keel-connect-%s-lines" % run
    first = ["line-%06d" % i for i in range(LINES)]
    second = ["line-%06d" % i for i in range(LINES, 2 * LINES)]
    with open(source, "w") as f:
        f.write("\n".join(first) + "\n")
    port = _rest_port()
    worker = _start_worker(workdir, classpath, bootstrap, port, run)
    try:
        started = time.time()
        _rest(port, "PUT", "/connectors/source/config", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": source, "topic": topic,
            "topic.creation.default.replication.factor": str(KEEL_RF), "topic.creation.default.partitions": "1"})
        _rest(port, "PUT", "/connectors/sink/config", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": sink, "topics": topic})
        _wait_for(sink, set(first), worker)
        print("figure: %d lines through FileStreamSource -> Keel -> FileStreamSink in %.1f s from the connectors' creation"
              % (LINES, time.time() - started))
        # Stopped while the source file grows, then started again.
        _stop(worker)
        with open(source, "a") as f:
            f.write("\n".join(second) + "\n")
        worker = _start_worker(workdir, classpath, bootstrap, port, run)
        lines = _wait_for(sink, set(first + second), worker)
    finally:
        _stop(worker)
    # In order, nothing lost; a line seen twice only as a re-read after the restart.
    seen = []
    for line in lines:
        if not seen or line > seen[-1]:
            seen.append(line)
    assert seen == first + second, "lines out of order or missing"
    duplicates = len(lines) - len(set(lines))
    print("figure: after the restart %d lines were written to the sink again (at-least-once)" % duplicates)
    assert duplicates <= LINES, "%d lines written twice" % duplicates
    # The worker's topics compacted, and they and the pipeline's topic with KEEL_RF replicas.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10)
    internal = ["keel-connect-%s-%s" % (run, t) for t in ("configs", "offsets", "status")]
    for t in internal + [topic]:
        replicas = {len(p.replicas) for p in meta.topics[t].partitions.values()}
        assert replicas == {KEEL_RF}, "%s: %s replicas, want %d" % (t, replicas, KEEL_RF)
    for t in internal:
        r = ConfigResource(ConfigResource.Type.TOPIC, t)
        assert admin.describe_configs([r])[r].result(30)["cleanup.policy"].value == "compact", t
