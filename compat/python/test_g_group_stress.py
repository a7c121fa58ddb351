"""librdkafka consumer groups under CPU contention: rounds of three members then a fourth.

Each round uses a fresh group on one 12-partition topic that a producer keeps writing
to (so members commit throughout the rebalances): three members join and balance, a
fourth joins, and the round passes only if

- every partition ends owned by exactly one live member (three each),
- no record below an offset a member had committed is processed again,
- every record is processed, and no member's thread fails.

Busy loops, one per core and bounded in time, compete with the broker and the clients
for the CPUs throughout. KEEL_GROUP_STRESS_ROUNDS sets the rounds per protocol (2 by
default, the quick form of the default run; `./test.sh --stress` runs 10). Each round's
result and rebalance time is printed as a "figure:" line; every round must pass.
"""

import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from keelcompat import group_member

PARTITIONS = 12
RECORDS_PER_PARTITION = 50
BALANCE_DEADLINE_S = 60
ROUNDS = int(os.environ.get("KEEL_GROUP_STRESS_ROUNDS", "2"))
# A burner never outlives this, even if the test process is killed.
BURN_S_MAX = 60 + ROUNDS * 120

BURNER = """
import sys, time
deadline = time.time() + float(sys.argv[1])
while time.time() < deadline:
    sum(range(1000))
"""


class Burners:
    """One busy loop per core, each a child process bounded in time."""

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", BURNER, str(BURN_S_MAX)])
                      for _ in range(os.cpu_count() or 2)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait(10)


class Writer:
    """Writes to every partition in turn until stopped; remembers the end offsets acked."""

    def __init__(self, bootstrap, topic):
        self.end = {}
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.thread = threading.Thread(target=self._run, args=(topic,))

    def _acked(self, err, msg):
        if err is None:
            p = msg.partition()
            self.end[p] = max(self.end.get(p, 0), msg.offset() + 1)

    def _run(self, topic):
        while not self.stop.is_set():
            for p in range(PARTITIONS):
                self.producer.produce(topic, value=b"w", partition=p, on_delivery=self._acked)
            self.producer.poll(0.05)
        self.producer.flush(30)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(60)


def _owned_once(state, members, per_member):
    sets = [state["assignments"].get("m%d" % i, set()) for i in range(members)]
    owned = sorted(p for s in sets for p in s)
    return all(len(s) == per_member for s in sets) and owned == list(range(PARTITIONS))


def _wait_owned_once(state, threads, members, per_member):
    deadline = time.time() + BALANCE_DEADLINE_S
    while not _owned_once(state, members, per_member):
        if state["errors"]:
            return "a member failed: %s" % (state["errors"][0],)
        dead = [t.name for t in threads if not t.is_alive()]
        if dead:
            return "member threads ended: %s" % dead
        if time.time() >= deadline:
            return "%d members not owning %d partitions each after %d s: %s" % (
                members, per_member, BALANCE_DEADLINE_S, state["assignments"])
        time.sleep(0.02)
    return None


def _round(bootstrap, topic, strategy):
    """One round; returns (failure or None, rebalance ms or None, commit errors)."""
    group = "stress-group-%s-%s" % (strategy, uuid.uuid4().hex[:8])
    state = {"stop": threading.Event(), "lock": threading.Lock(), "assignments": {}, "committed": {},
             "violations": [], "processed": {}, "errors": [], "commit_errors": []}

    def start(i):
        t = threading.Thread(target=group_member, name="m%d" % i,
                             args=(bootstrap, group, topic, strategy, "m%d" % i, state))
        t.start()
        return t

    threads = [start(i) for i in range(3)]
    failure, rebalance_ms, end = None, None, {}
    try:
        with Writer(bootstrap, topic) as writer:
            failure = _wait_owned_once(state, threads, 3, 4)
            if not failure:
                time.sleep(1)
                started = time.time()
                threads.append(start(3))
                failure = _wait_owned_once(state, threads, 4, 3)
                rebalance_ms = int((time.time() - started) * 1000)
            if not failure:
                time.sleep(1)
        end = dict(writer.end)
        if not failure:
            deadline = time.time() + 30
            while time.time() < deadline and any(
                    len(state["processed"].get(p, ())) < end.get(p, 0) for p in range(PARTITIONS)):
                time.sleep(0.1)
            if not _owned_once(state, 4, 3):
                failure = "not owned exactly once at the end: %s" % state["assignments"]
    finally:
        state["stop"].set()
        for t in threads:
            t.join(30)
    missing = [(p, o) for p in range(PARTITIONS) for o in range(end.get(p, 0))
               if o not in state["processed"].get(p, set())]
    if not failure and state["violations"]:
        failure = "records below a committed offset processed again: %s" % state["violations"][:5]
    if not failure and state["errors"]:
        failure = "a member failed: %s" % (state["errors"][0],)
    if not failure and missing:
        failure = "records never processed: %s" % missing[:5]
    refused = sorted({e.split(",")[0] for _, e in state["commit_errors"]})
    return failure, rebalance_ms, "%d commits refused %s" % (len(state["commit_errors"]), refused or "")


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_then_four_members_under_cpu_load(bootstrap, topics, strategy):
    topic = topics.create("stress-" + strategy, partitions=PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * RECORDS_PER_PARTITION):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    results = []
    with Burners():
        for n in range(ROUNDS):
            failure, ms, commits = _round(bootstrap, topic, strategy)
            results.append((failure, ms))
            print("figure: librdkafka %s stress round %d/%d %s, rebalance 3->4 %s ms, %s%s" % (
                strategy, n + 1, ROUNDS, "passed" if not failure else "FAILED",
                ms if ms is not None else "-", commits, "" if not failure else ": " + failure))
    times = [ms for f, ms in results if ms is not None]
    passed = sum(1 for f, _ in results if not f)
    print("figure: librdkafka %s under CPU load: %d/%d rounds passed; rebalance 3->4 median %s ms, max %s ms" % (
        strategy, passed, ROUNDS, int(statistics.median(times)) if times else "-", max(times) if times else "-"))
    assert passed == ROUNDS, [f for f, _ in results if f]
