"""(j) Seek, then consume: librdkafka's own binary search by timestamp (its test
0059-bsearch) and a longer seek-then-consume loop.

The data and the consumer are 0059's: 1,000 records on one partition, produced
with acks=all, each carrying the topic name as value and an explicit CreateTime
starting an hour ago (+100..109 ms per record); the record at offset 357 is
the one searched for. The consumer assigns the first mid point, then seeks
(waiting for the seek to take effect) and consumes one record per step, with
fetch.wait.max.ms=1, fetch.error.backoff.ms=1 and queued.min.messages=1.

What a broker controls here is checked, not librdkafka's own timing: with
queued.min.messages=1 librdkafka (2.x) postpones a partition's next Fetch by
fetch.queue.backoff.ms (1 s by default) whenever its fetch decision runs while
the consumer queue still holds anything of the partition, the barrier op a
seek enqueues included. Whether a seek pays that second depends on which of
the client's threads runs first, against Kafka as against Keel. So the tests
assert that every back-off librdkafka logs is that local "Queue full" one,
never a Fetch error from the broker, and, with fetch.queue.backoff.ms=1, that
a seek plus one record takes far less than the one-second back-off.
"""

import logging
import os
import statistics
import time

from confluent_kafka import Consumer, Producer, TopicPartition, TIMESTAMP_CREATE_TIME

import keelcompat as kc

COUNT = 1000
GOLDEN = 357
SEEK_TIMEOUT_S = 5.0
# librdkafka's default fetch.queue.backoff.ms: the wait the tests tell apart.
QUEUE_BACKOFF_MS = 1000
# Seeks of the loop test; benches/seek-bsearch.sh asks for more.
SEEKS = int(os.environ.get("KEEL_SEEKS", "50"))
# Seeks of the 0059 test: one search (10 steps) as 0059 does, unless asked.
BSEARCH_SEEKS = int(os.environ.get("KEEL_SEEKS", "1"))


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def produce_0059(bootstrap, topic):
    """0059's producer: one partition, acks=all, CreateTime an hour old.
    Returns the timestamp of the record at GOLDEN."""
    cfg = kc.common_config(bootstrap)
    cfg.update({"acks": "all"})
    producer = Producer(cfg)
    timestamps = {}

    def report(err, msg):
        assert err is None, "delivery failed: %s" % err
        ts_type, ts = msg.timestamp()
        assert ts_type == TIMESTAMP_CREATE_TIME
        timestamps[msg.offset()] = ts

    ts = int(time.time()) * 1000 - 3600 * 1000
    for i in range(COUNT):
        producer.produce(topic, value=topic.encode(), partition=0, timestamp=ts, on_delivery=report)
        producer.poll(0)
        ts += 100 + (i % 10)
    assert producer.flush(30) == 0, "not all records delivered"
    assert sorted(timestamps) == list(range(COUNT))
    return timestamps[GOLDEN]


def consumer_0059(bootstrap, topic, extra=None):
    handler = Collect()
    log = logging.getLogger("keel-seek-%s" % topic)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(handler)
    cfg = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": topic,
        "api.version.request": True,
        "fetch.wait.max.ms": 1,
        "fetch.error.backoff.ms": 1,
        "queued.min.messages": 1,
        "enable.auto.commit": False,
        "debug": "fetch",
        "logger": log,
    }
    cfg.update(extra or {})
    return Consumer(cfg), handler


def get_msg(consumer, topic, offset, use_seek):
    """0059's get_msg(): assign (first step) or seek, then consume one record."""
    tp = TopicPartition(topic, 0, offset)
    start = time.monotonic()
    if use_seek:
        consumer.seek(tp)
    else:
        consumer.assign([tp])
    msg = consumer.poll(SEEK_TIMEOUT_S)
    elapsed = time.monotonic() - start
    assert msg is not None, "no record within %.0f s of seeking to %d" % (SEEK_TIMEOUT_S, offset)
    assert msg.error() is None, "consume error after seeking to %d: %s" % (offset, msg.error())
    assert msg.offset() == offset, "sought %d, consumed %d" % (offset, msg.offset())
    ts_type, _ = msg.timestamp()
    assert ts_type == TIMESTAMP_CREATE_TIME, "offset %d: timestamp type %d" % (offset, ts_type)
    return msg, elapsed


def bsearch(consumer, topic, golden_ts, first_step):
    """Returns the per-step times of one binary search for golden_ts."""
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    assert (low, high) == (0, COUNT)
    steps = []
    while True:
        mid = low + (high - low) // 2
        msg, elapsed = get_msg(consumer, topic, mid, use_seek=first_step + len(steps) > 0)
        steps.append(elapsed)
        ts = msg.timestamp()[1]
        if ts == golden_ts:
            assert msg.offset() == GOLDEN
            return steps
        assert low != high, "search exhausted at %d without finding %d" % (msg.offset(), golden_ts)
        if ts < golden_ts:
            low = msg.offset() + 1
        else:
            high = msg.offset() - 1


def backoffs(handler):
    """librdkafka's Fetch back-off log lines, split into its own queue-full ones
    and any other (a Fetch error answered by the broker, a lost connection)."""
    lines = [line for line in handler.lines if line.startswith("BACKOFF") and "Fetch backoff" in line]
    local = [line for line in lines if "Queue full" in line]
    return local, [line for line in lines if "Queue full" not in line]


def summary(steps):
    """Median, p99 and max of the per-seek times, and how many seeks paid a
    back-off (over half of it)."""
    ms = sorted(s * 1000 for s in steps)
    p99 = ms[min(len(ms) - 1, (len(ms) * 99) // 100)]
    slow = sum(1 for m in ms if m > QUEUE_BACKOFF_MS / 2)
    return "median %.1f ms, p99 %.1f ms, max %.1f ms over %d seeks, %d over %d ms" % (
        statistics.median(ms),
        p99,
        ms[-1],
        len(ms),
        slow,
        QUEUE_BACKOFF_MS // 2,
    )


def test_bsearch_as_0059(bootstrap, topics):
    topic = topics.create("bsearch")
    golden_ts = produce_0059(bootstrap, topic)
    consumer, handler = consumer_0059(bootstrap, topic)
    try:
        steps = []
        while len(steps) < BSEARCH_SEEKS:
            steps += bsearch(consumer, topic, golden_ts, first_step=len(steps))
        consumer.poll(0.1)  # serves the last log lines
    finally:
        consumer.close()
    local, other = backoffs(handler)
    print("0059 bsearch: %s; %d queue-full back-offs" % (summary(steps), len(local)))
    assert not other, "Fetch back-offs not of librdkafka's own queue: %s" % other[:5]
    # A seek pays at most the local back-off, never two in a row.
    slow = [s for s in steps if s > (QUEUE_BACKOFF_MS + 1500) / 1000]
    assert not slow, "seeks slower than one queue back-off: %s" % summary(steps)


def test_seek_consume_loop(bootstrap, topics):
    """SEEKS seeks (binary searches of 10 steps) with fetch.queue.backoff.ms=1: nothing
    left for a seek to wait on but the broker's answers."""
    topic = topics.create("seekloop")
    golden_ts = produce_0059(bootstrap, topic)
    consumer, handler = consumer_0059(bootstrap, topic, {"fetch.queue.backoff.ms": 1})
    try:
        steps = []
        while len(steps) < SEEKS:
            steps += bsearch(consumer, topic, golden_ts, first_step=len(steps))
        consumer.poll(0.1)
    finally:
        consumer.close()
    local, other = backoffs(handler)
    print("seek loop: %s" % summary(steps))
    assert not other, "Fetch back-offs not of librdkafka's own queue: %s" % other[:5]
    # The median seek far below the one-second back-off it was said to pay; a
    # broker that held Fetch answers, or failed them, would put it near 1 s.
    assert statistics.median(steps) < QUEUE_BACKOFF_MS / 5 / 1000, summary(steps)
