"""Compares topics on two clusters, partition by partition: record counts, and a
SHA-256 of every record's key, value, headers and timestamp in offset order. The
offsets themselves may differ (a mirror starts at 0; a compacted source has gaps), so
only the sequence of records is compared.

    compat/python/.venv/bin/python compat/migration/compare.py SOURCE DEST TOPIC...

Prints one line per partition and exits 0 when every partition matches, 1 otherwise.
"""

import hashlib
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition


def partition_digests(bootstrap, topic, timeout_s=60):
    """{partition: (records, sha256 hex)} of `topic` on the cluster at `bootstrap`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "keel-compare", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    try:
        partitions = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        c.assign([TopicPartition(topic, p, lo) for p, (lo, _) in ends.items()])
        digests = {p: hashlib.sha256() for p in partitions}
        counts = {p: 0 for p in partitions}
        done = {p for p, (lo, hi) in ends.items() if lo >= hi}
        deadline = time.time() + timeout_s
        while len(done) < len(partitions):
            if time.time() > deadline:
                raise TimeoutError("%s on %s: read %s records, ends %s" % (topic, bootstrap, counts, ends))
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                continue
            p = m.partition()
            counts[p] += 1
            h = digests[p]
            for part in (m.key() or b"", m.value() or b"", repr(m.headers() or []).encode(), b"%d" % m.timestamp()[1]):
                h.update(b"%d:" % len(part) + part)
        return {p: (counts[p], digests[p].hexdigest()) for p in partitions}
    finally:
        c.close()


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    source, dest, topics = argv[1], argv[2], argv[3:]
    ok = True
    for topic in topics:
        a, b = partition_digests(source, topic), partition_digests(dest, topic)
        for p in sorted(set(a) | set(b)):
            same = a.get(p) == b.get(p)
            ok &= same
            print("%s %s-%d: source %s, dest %s" % ("same" if same else "DIFFERENT", topic, p,
                                                    a.get(p, ("missing",))[0], b.get(p, ("missing",))[0]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
