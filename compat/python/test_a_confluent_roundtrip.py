"""(a) confluent-kafka (librdkafka) idempotent acks=all producer, every
compression codec, read back with an assign()-only consumer and compared byte
for byte: keys, values (empty, None, binary, large), headers (repeated keys,
binary, empty and None values), explicit timestamps, partitions, offsets."""

import pytest

import keelcompat as kc


@pytest.mark.parametrize("codec", kc.CODECS)
def test_confluent_produce_consume(bootstrap, confluent_produced, codec):
    topic, recs = confluent_produced.get(codec)
    counts = kc.counts_of(recs, kc.PARTITIONS)
    assert all(c > 0 for c in counts.values())
    msgs = kc.confluent_read(bootstrap, topic, kc.PARTITIONS, counts)
    kc.assert_confluent_messages(topic, msgs, recs)


def test_confluent_read_from_middle(bootstrap, confluent_produced):
    """assign() at a non-zero offset starts exactly there, also inside a
    compressed batch."""
    topic, recs = confluent_produced.get("zstd")
    counts = kc.counts_of(recs, kc.PARTITIONS)
    starts = {p: counts[p] // 2 for p in range(kc.PARTITIONS)}
    msgs = kc.confluent_read(bootstrap, topic, kc.PARTITIONS, counts, start_offsets=starts)
    tail = [r for r in recs if r.offset >= starts[r.partition]]
    kc.assert_confluent_messages(topic, msgs, tail)
