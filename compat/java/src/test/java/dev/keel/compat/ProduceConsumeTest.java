package dev.keel.compat;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Produce through the Java producer, read back with an assign()-only consumer (no group). */
class ProduceConsumeTest {
    private static final int PARTITIONS = 3;

    /** What was sent, plus where the broker said it was stored. */
    private record Sent(int index, byte[] key, byte[] value, List<Header> headers, long timestamp,
                        RecordMetadata meta) {
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /**
     * Records with keys, values of mixed sizes (including empty and highly compressible ones),
     * headers (one with a null value) and explicit timestamps. Even indexes go to an explicit
     * partition, odd ones are placed by the key's hash.
     */
    private static List<Sent> produce(KafkaProducer<byte[], byte[]> producer, String topic, int n, long baseTs)
            throws Exception {
        Random rnd = new Random(n * 31L + baseTs);
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            byte[] key = bytes("key-" + i);
            byte[] value;
            switch (i % 4) {
                case 0 -> value = new byte[0];
                case 1 -> value = bytes(("value-" + i + "-").repeat(1 + i % 50));
                case 2 -> {
                    value = new byte[1 + rnd.nextInt(3000)];
                    rnd.nextBytes(value);
                }
                default -> value = bytes("v" + i);
            }
            List<Header> headers = List.of(
                new RecordHeader("idx", bytes(Integer.toString(i))),
                new RecordHeader("trace-" + (i % 3), new byte[]{(byte) i, 0, (byte) 0xff}),
                new RecordHeader("nullable", (byte[]) null));
            long ts = baseTs + i * 7L;
            Integer partition = (i % 2 == 0) ? i % PARTITIONS : null;
            ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition, ts, key, value, headers);
            records.add(r);
            futures.add(producer.send(r));
        }
        producer.flush();
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            RecordMetadata m = futures.get(i).get(30, TimeUnit.SECONDS);
            ProducerRecord<byte[], byte[]> r = records.get(i);
            List<Header> hs = new ArrayList<>();
            r.headers().forEach(hs::add);
            sent.add(new Sent(i, r.key(), r.value(), hs, r.timestamp(), m));
        }
        return sent;
    }

    private static List<ConsumerRecord<byte[], byte[]>> readAll(String topic, int partitions, int expected) {
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of())) {
            List<TopicPartition> tps = Broker.partitions(topic, partitions);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(consumer, expected, Duration.ofSeconds(30));
            // A short extra poll to catch records that should not be there.
            consumer.poll(Duration.ofMillis(300)).forEach(got::add);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long total = end.values().stream().mapToLong(Long::longValue).sum();
            assertEquals(expected, total, "sum of end offsets of " + topic);
            return got;
        }
    }

    private static void assertHeadersEqual(List<Header> expected, ConsumerRecord<byte[], byte[]> rec) {
        List<Header> actual = new ArrayList<>();
        rec.headers().forEach(actual::add);
        assertEquals(expected.size(), actual.size(), "header count at offset " + rec.offset());
        for (int i = 0; i < expected.size(); i++) {
            assertEquals(expected.get(i).key(), actual.get(i).key(), "header key");
            if (expected.get(i).value() == null) {
                assertNull(actual.get(i).value(), "null header value");
            } else {
                assertArrayEquals(expected.get(i).value(), actual.get(i).value(), "header value");
            }
        }
    }

    /** Checks everything that was sent came back exactly once, in order, at the acked offsets. */
    private static void verifyRoundTrip(List<Sent> sent, List<ConsumerRecord<byte[], byte[]>> got,
                                        boolean offsetsKnown) {
        assertEquals(sent.size(), got.size(), "number of records read back");
        Map<Integer, List<ConsumerRecord<byte[], byte[]>>> byPartition = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            byPartition.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r);
        }
        Map<Integer, List<Sent>> sentByPartition = new HashMap<>();
        for (Sent s : sent) {
            sentByPartition.computeIfAbsent(s.meta().partition(), k -> new ArrayList<>()).add(s);
        }
        assertEquals(sentByPartition.keySet(), byPartition.keySet(), "partitions holding records");
        for (Map.Entry<Integer, List<ConsumerRecord<byte[], byte[]>>> e : byPartition.entrySet()) {
            int partition = e.getKey();
            List<ConsumerRecord<byte[], byte[]>> recs = e.getValue();
            List<Sent> expected = sentByPartition.get(partition);
            assertEquals(expected.size(), recs.size(), "records in partition " + partition);
            for (int i = 0; i < recs.size(); i++) {
                ConsumerRecord<byte[], byte[]> r = recs.get(i);
                Sent s = expected.get(i);
                String where = "partition " + partition + " position " + i;
                assertEquals(i, r.offset(), "contiguous offsets from 0 in " + where);
                if (offsetsKnown) {
                    assertEquals(s.meta().offset(), r.offset(), "offset acked by the producer, " + where);
                }
                assertEquals(partition, r.partition());
                assertArrayEquals(s.key(), r.key(), "key at " + where);
                assertArrayEquals(s.value(), r.value(), "value at " + where);
                assertEquals(s.timestamp(), r.timestamp(), "timestamp at " + where);
                assertEquals(TimestampType.CREATE_TIME, r.timestampType(), "timestamp type at " + where);
                assertHeadersEqual(s.headers(), r);
            }
        }
    }

    @ParameterizedTest(name = "idempotent acks=all compression={0}")
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    @Timeout(value = 90, unit = TimeUnit.SECONDS)
    void idempotentProducerRoundTrip(String compression) throws Exception {
        String topic = Broker.uniqueTopic("rt-" + compression);
        Broker.createTopic(topic, PARTITIONS);
        int n = 600;
        long baseTs = System.currentTimeMillis() - 600_000L;
        List<Sent> sent;
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                ProducerConfig.COMPRESSION_TYPE_CONFIG, compression,
                ProducerConfig.LINGER_MS_CONFIG, "20",
                ProducerConfig.BATCH_SIZE_CONFIG, "32768"))) {
            sent = produce(producer, topic, n, baseTs);
        }
        for (Sent s : sent) {
            assertEquals(s.timestamp(), s.meta().timestamp(), "CreateTime echoed in RecordMetadata");
            assertTrue(s.meta().hasOffset(), "acks=all returns an offset");
            if (s.index() % 2 == 0) {
                assertEquals(s.index() % PARTITIONS, s.meta().partition(), "explicit partition honoured");
            }
        }
        long distinctPartitions = sent.stream().map(s -> s.meta().partition()).distinct().count();
        assertEquals(PARTITIONS, distinctPartitions, "records spread over all partitions");
        verifyRoundTrip(sent, readAll(topic, PARTITIONS, n), true);
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void acksZeroProducerRecordsAreReadable() throws Exception {
        String topic = Broker.uniqueTopic("acks0");
        Broker.createTopic(topic, PARTITIONS);
        int n = 200;
        long baseTs = System.currentTimeMillis() - 60_000L;
        List<Sent> sent;
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(
                ProducerConfig.ACKS_CONFIG, "0",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false",
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1",
                ProducerConfig.LINGER_MS_CONFIG, "5"))) {
            sent = produce(producer, topic, n, baseTs);
        }
        for (Sent s : sent) {
            assertTrue(!s.meta().hasOffset(), "acks=0 cannot know the offset");
        }
        verifyRoundTrip(sent, readAll(topic, PARTITIONS, n), false);
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void acksOneProducerRecordsAreReadable() throws Exception {
        String topic = Broker.uniqueTopic("acks1");
        Broker.createTopic(topic, PARTITIONS);
        int n = 200;
        long baseTs = System.currentTimeMillis() - 60_000L;
        List<Sent> sent;
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(
                ProducerConfig.ACKS_CONFIG, "1",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false",
                ProducerConfig.LINGER_MS_CONFIG, "5"))) {
            sent = produce(producer, topic, n, baseTs);
        }
        for (Sent s : sent) {
            assertTrue(s.meta().hasOffset(), "acks=1 returns an offset");
            assertEquals(s.timestamp(), s.meta().timestamp());
        }
        verifyRoundTrip(sent, readAll(topic, PARTITIONS, n), true);
    }
}
