"""librdkafka consumer groups: three members over 12 partitions, then a fourth joins.

For the eager (range) and the cooperative (cooperative-sticky) protocols: after the
rebalance every partition is owned exactly once, no record below a committed offset is
processed again, and no record is lost. The rebalance time is printed as a figure.
"""

import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from keelcompat import group_member

PARTITIONS = 12
RECORDS_PER_PARTITION = 50
BALANCE_DEADLINE_S = 60


def _balanced(state, members, per_member):
    sets = [state["assignments"].get("m%d" % i, set()) for i in range(members)]
    owned = [p for s in sets for p in s]
    return all(len(s) == per_member for s in sets) and sorted(owned) == list(range(PARTITIONS))


def _wait_balanced(state, threads, members, per_member):
    deadline = time.time() + BALANCE_DEADLINE_S
    while not _balanced(state, members, per_member):
        assert all(t.is_alive() for t in threads), "a member's thread ended: %s" % state["assignments"]
        assert time.time() < deadline, "%d members never balanced: %s" % (members, state["assignments"])
        time.sleep(0.02)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_fourth_member_joins(bootstrap, topics, strategy):
    topic = topics.create("groups-" + strategy, partitions=PARTITIONS)
    group = "compat-group-%s-%s" % (strategy, uuid.uuid4().hex[:8])
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * RECORDS_PER_PARTITION):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0
    state = {"stop": threading.Event(), "lock": threading.Lock(), "assignments": {},
             "committed": {}, "violations": [], "processed": {}}
    threads = [threading.Thread(target=group_member, args=(bootstrap, group, topic, strategy, "m%d" % i, state))
               for i in range(3)]
    for t in threads:
        t.start()
    try:
        _wait_balanced(state, threads, 3, 4)
        time.sleep(1)
        started = time.time()
        fourth = threading.Thread(target=group_member, args=(bootstrap, group, topic, strategy, "m3", state))
        fourth.start()
        threads.append(fourth)
        _wait_balanced(state, threads, 4, 3)
        print("figure: librdkafka %s rebalance 3->4 members: %d ms" % (strategy, (time.time() - started) * 1000))
        time.sleep(2)
    finally:
        state["stop"].set()
        for t in threads:
            t.join(30)
    missing = [(p, o) for p in range(PARTITIONS) for o in range(RECORDS_PER_PARTITION)
               if o not in state["processed"].get(p, set())]
    assert not state["violations"], state["violations"][:5]
    assert not missing, missing[:5]
