package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.InvalidRecordException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Producer and consumer behaviours: size limits, auto-creation, long-poll fetch, unknown topics. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClientBehaviourTest {

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void recordLargerThanTopicMaxMessageBytesIsRejected() throws Exception {
        String topic = Broker.uniqueTopic("too-large");
        try (Admin admin = Broker.admin()) {
            Broker.createTopic(admin, topic, 1, Map.of("max.message.bytes", "10000"));
        }
        byte[] small1 = bytes("small-1");
        byte[] small2 = new byte[5000];
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(
                ProducerConfig.MAX_REQUEST_SIZE_CONFIG, "2000000",
                ProducerConfig.COMPRESSION_TYPE_CONFIG, "none",
                ProducerConfig.LINGER_MS_CONFIG, "0"))) {
            RecordMetadata m0 = producer.send(new ProducerRecord<>(topic, 0, null, small1)).get(30, TimeUnit.SECONDS);
            assertEquals(0, m0.offset());
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> producer.send(new ProducerRecord<>(topic, 0, null, new byte[50_000])).get(30, TimeUnit.SECONDS));
            assertInstanceOf(RecordTooLargeException.class, e.getCause(), "cause: " + e.getCause());
            RecordMetadata m1 = producer.send(new ProducerRecord<>(topic, 0, null, small2)).get(30, TimeUnit.SECONDS);
            assertEquals(1, m1.offset(), "the rejected record took no offset");
        }
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(consumer, 2, Duration.ofSeconds(20));
            assertEquals(2, got.size());
            assertArrayEquals(small1, got.get(0).value());
            assertArrayEquals(small2, got.get(1).value());
            assertEquals(2L, consumer.endOffsets(List.of(tp)).get(tp));
        }
    }

    /** Kafka refuses a keyless record on a compacted topic (INVALID_RECORD, KIP-467). */
    @Test
    void keylessRecordToCompactedTopicIsRefused() throws Exception {
        String topic = Broker.uniqueTopic("compact-keyless");
        try (Admin admin = Broker.admin()) {
            Broker.createTopic(admin, topic, 1, Map.of("cleanup.policy", "compact"));
        }
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, "0"))) {
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> producer.send(new ProducerRecord<>(topic, 0, null, bytes("no key"))).get(30, TimeUnit.SECONDS));
            assertInstanceOf(InvalidRecordException.class, e.getCause(), "cause: " + e.getCause());
            RecordMetadata m = producer.send(new ProducerRecord<>(topic, 0, bytes("k"), bytes("v"))).get(30, TimeUnit.SECONDS);
            assertEquals(0, m.offset(), "the refused record took no offset");
        }
    }

    /** An illegal topic name fails at once (INVALID_TOPIC_EXCEPTION), not after max.block.ms. */
    @Test
    void illegalTopicNameFailsFast() throws Exception {
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(ProducerConfig.MAX_BLOCK_MS_CONFIG, "40000"))) {
            Exception e = assertThrows(Exception.class,
                () -> producer.send(new ProducerRecord<>("keel-java-bad$name#!", bytes("v"))).get(50, TimeUnit.SECONDS));
            Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
            assertInstanceOf(InvalidTopicException.class, cause, "cause: " + cause);
        }
        long tookMs = (System.nanoTime() - started) / 1_000_000;
        assertTrue(tookMs < 20_000, "failed only after " + tookMs + " ms");
    }

    @Test
    void producingToUnknownTopicAutoCreatesIt() throws Exception {
        String topic = Broker.uniqueTopic("auto-create");
        try (Admin admin = Broker.admin()) {
            assertFalse(Broker.listTopics(admin).contains(topic));
            RecordMetadata m;
            try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of())) {
                m = producer.send(new ProducerRecord<>(topic, bytes("k"), bytes("first"))).get(30, TimeUnit.SECONDS);
            }
            assertEquals(0, m.partition());
            assertEquals(0, m.offset());
            assertTrue(Broker.listTopics(admin).contains(topic), "topic listed after auto-creation");
            TopicDescription d = Broker.awaitTopic(admin, topic, 1);
            assertEquals(1, d.partitions().size(), "auto-created topics get num.partitions=1");
        }
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(consumer, 1, Duration.ofSeconds(20));
            assertEquals(1, got.size());
            assertArrayEquals(bytes("k"), got.get(0).key());
            assertArrayEquals(bytes("first"), got.get(0).value());
        }
    }

    private static double fetchTotal(KafkaConsumer<byte[], byte[]> consumer) {
        for (Map.Entry<MetricName, ? extends Metric> e : consumer.metrics().entrySet()) {
            MetricName n = e.getKey();
            if (n.group().equals("consumer-fetch-manager-metrics") && n.name().equals("fetch-total")
                    && n.tags().size() == 1) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        throw new AssertionError("no fetch-total metric");
    }

    /**
     * A consumer positioned at the log end waits in a fetch (fetch.max.wait.ms=5000); a record
     * produced meanwhile must end the wait at once rather than after the full wait.
     */
    @Test
    void longPollFetchReturnsNewRecordPromptly() throws Exception {
        String topic = Broker.uniqueTopic("long-poll");
        Broker.createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, "0"));
             KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of(
                 ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "5000",
                 ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1"))) {
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, bytes("old-" + i))).get(30, TimeUnit.SECONDS);
            }
            consumer.assign(List.of(tp));
            consumer.seekToEnd(List.of(tp));
            assertEquals(3, consumer.position(tp), "position at the log end");

            // Idle at the log end: nothing arrives, and the broker holds each fetch open
            // instead of answering empty at once.
            double fetchesBefore = fetchTotal(consumer);
            long idleStart = System.nanoTime();
            while (System.nanoTime() - idleStart < TimeUnit.MILLISECONDS.toNanos(2500)) {
                assertTrue(consumer.poll(Duration.ofMillis(250)).isEmpty(), "no records at the log end");
            }
            double idleFetches = fetchTotal(consumer) - fetchesBefore;
            assertTrue(idleFetches <= 3, "fetches completed while idle for 2.5 s with max wait 5 s: " + idleFetches);

            byte[] value = bytes("new-record");
            long[] sentAt = new long[1];
            CompletableFuture<RecordMetadata> sent = CompletableFuture.supplyAsync(() -> {
                try {
                    Thread.sleep(300);
                    sentAt[0] = System.nanoTime();
                    return producer.send(new ProducerRecord<>(topic, 0, null, value)).get(30, TimeUnit.SECONDS);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            ConsumerRecord<byte[], byte[]> got = null;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            while (got == null && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(100));
                if (!recs.isEmpty()) {
                    assertEquals(1, recs.count());
                    got = recs.iterator().next();
                }
            }
            long receivedAt = System.nanoTime();
            RecordMetadata m = sent.get(30, TimeUnit.SECONDS);
            assertTrue(got != null, "the new record arrived");
            assertEquals(3, got.offset());
            assertEquals(m.offset(), got.offset());
            assertArrayEquals(value, got.value());
            long latencyMs = TimeUnit.NANOSECONDS.toMillis(receivedAt - sentAt[0]);
            assertTrue(latencyMs < 2000, "record delivered " + latencyMs + " ms after produce (fetch max wait 5000 ms)");
        }
    }

    @Test
    void unknownTopicWithoutAutoCreateIsNotCreated() throws Exception {
        String topic = Broker.uniqueTopic("unknown");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of(
                ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false"))) {
            List<PartitionInfo> parts = consumer.partitionsFor(topic);
            assertTrue(parts == null || parts.isEmpty(), "no partitions for an unknown topic: " + parts);
            assertFalse(consumer.listTopics().containsKey(topic));
            consumer.assign(List.of(tp));
            long start = System.nanoTime();
            while (System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(1500)) {
                assertTrue(consumer.poll(Duration.ofMillis(250)).isEmpty(), "nothing to read from an unknown topic");
            }
        }
        try (Admin admin = Broker.admin()) {
            assertFalse(Broker.listTopics(admin).contains(topic), "topic must not be auto-created");
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> admin.describeTopics(List.of(topic)).allTopicNames().get());
            assertInstanceOf(UnknownTopicOrPartitionException.class, e.getCause());
        }
    }

    /** The contrast: with the client's permission, a consumer's metadata request creates the topic. */
    @Test
    void unknownTopicWithConsumerAutoCreateIsCreated() throws Exception {
        String topic = Broker.uniqueTopic("consumer-auto");
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of(
                ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "true"))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            boolean created = false;
            try (Admin admin = Broker.admin()) {
                while (!created && System.nanoTime() < deadline) {
                    assertTrue(consumer.poll(Duration.ofMillis(200)).isEmpty());
                    created = Broker.listTopics(admin).contains(topic);
                }
                assertTrue(created, "topic created by the consumer's metadata request");
                assertEquals(1, Broker.awaitTopic(admin, topic, 1).partitions().size());
            }
        }
    }
}
