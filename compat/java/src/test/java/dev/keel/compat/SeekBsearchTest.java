package dev.keel.compat;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Seek, then consume: librdkafka's binary search by timestamp (its test 0059-bsearch) with the
 * Java consumer. 1,000 records on one partition with CreateTime an hour old (+100..109 ms each);
 * each step seeks to the middle of the range left and consumes one record; five searches make
 * 50 seeks. A seek plus one record must take far less than a second (the back-off a broker's
 * Fetch answers were suspected of causing), and return the record sought.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SeekBsearchTest {
    private static final int COUNT = 1000;
    private static final int GOLDEN = 357;
    /** Seeks of the test; benches/seek-bsearch.sh asks for more with -Dseeks. */
    private static final int SEEKS = Integer.getInteger("seeks", 50);

    /** Produces as 0059 does; returns every record's timestamp by offset. */
    private static long[] produce(String topic) throws Exception {
        long[] timestamps = new long[COUNT];
        long ts = System.currentTimeMillis() / 1000 * 1000 - 3_600_000L;
        byte[] value = topic.getBytes(StandardCharsets.UTF_8);
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(ProducerConfig.ACKS_CONFIG, "all"))) {
            for (int i = 0; i < COUNT; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, ts, null, value)));
                timestamps[i] = ts;
                ts += 100 + (i % 10);
            }
            producer.flush();
            for (int i = 0; i < COUNT; i++) {
                assertEquals(i, sent.get(i).get(30, TimeUnit.SECONDS).offset());
            }
        }
        return timestamps;
    }

    /** Seeks to offset and polls until the first record comes; returns it. */
    private static ConsumerRecord<byte[], byte[]> seekAndConsume(KafkaConsumer<byte[], byte[]> consumer,
                                                                 TopicPartition tp, long offset) {
        consumer.seek(tp, offset);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < deadline) {
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
            if (!records.isEmpty()) {
                ConsumerRecord<byte[], byte[]> r = records.records(tp).get(0);
                assertEquals(offset, r.offset(), "sought offset");
                assertEquals(TimestampType.CREATE_TIME, r.timestampType());
                return r;
            }
        }
        throw new AssertionError("no record within 5 s of seeking to " + offset);
    }

    @Test
    void seekThenConsumeBinarySearch() throws Exception {
        String topic = Broker.uniqueTopic("bsearch");
        Broker.createTopic(topic, 1);
        long[] timestamps = produce(topic);
        long golden = timestamps[GOLDEN];
        TopicPartition tp = new TopicPartition(topic, 0);
        List<Long> nanos = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of(
                ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "1",
                ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "1",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "1"))) {
            consumer.assign(List.of(tp));
            while (nanos.size() < SEEKS) {
                Map<TopicPartition, Long> end = consumer.endOffsets(List.of(tp));
                long low = 0;
                long high = end.get(tp);
                assertEquals(COUNT, high);
                while (true) {
                    long mid = low + (high - low) / 2;
                    long start = System.nanoTime();
                    ConsumerRecord<byte[], byte[]> r = seekAndConsume(consumer, tp, mid);
                    nanos.add(System.nanoTime() - start);
                    assertEquals(timestamps[(int) mid], r.timestamp(), "timestamp at " + mid);
                    if (r.timestamp() == golden) {
                        assertEquals(GOLDEN, r.offset());
                        break;
                    }
                    assertNotEquals(low, high, "search exhausted at " + mid);
                    if (r.timestamp() < golden) {
                        low = mid + 1;
                    } else {
                        high = mid - 1;
                    }
                }
            }
        }
        Collections.sort(nanos);
        double medianMs = nanos.get(nanos.size() / 2) / 1e6;
        double p99Ms = nanos.get(Math.min(nanos.size() - 1, nanos.size() * 99 / 100)) / 1e6;
        double maxMs = nanos.get(nanos.size() - 1) / 1e6;
        long slow = nanos.stream().filter(n -> n > 500_000_000L).count();
        System.out.printf("seek then consume: median %.1f ms, p99 %.1f ms, max %.1f ms over %d seeks, %d over 500 ms%n",
            medianMs, p99Ms, maxMs, nanos.size(), slow);
        assertTrue(medianMs < 200, "median seek then consume " + medianMs + " ms, max " + maxMs + " ms");
    }
}
