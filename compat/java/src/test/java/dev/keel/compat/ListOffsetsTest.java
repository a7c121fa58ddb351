package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

/** ListOffsets: earliest, latest, by timestamp and max timestamp, through Admin and the consumer. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ListOffsetsTest {
    private static final int N = 10;
    /** Index of the record with the largest timestamp; it is not the last one. */
    private static final int MAX_TS_INDEX = 6;

    /** Timestamps increase by 1 s per record, except one record far ahead of the others. */
    private static long timestampOf(long base, int i) {
        return i == MAX_TS_INDEX ? base + 100_000 : base + i * 1_000L;
    }

    /**
     * Partition 0 receives one record per produce request (one batch each); partition 1
     * receives all of them in a single batch, so lookups must look inside a batch.
     */
    private static void produce(String topic, long base) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(
                ProducerConfig.LINGER_MS_CONFIG, "200",
                ProducerConfig.BATCH_SIZE_CONFIG, "1048576"))) {
            for (int i = 0; i < N; i++) {
                RecordMetadata m = producer.send(new ProducerRecord<>(topic, 0, timestampOf(base, i), null,
                    ("p0-" + i).getBytes(StandardCharsets.UTF_8))).get(30, TimeUnit.SECONDS);
                assertEquals(i, m.offset());
            }
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < N; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, 1, timestampOf(base, i), null,
                    ("p1-" + i).getBytes(StandardCharsets.UTF_8))));
            }
            producer.flush();
            for (int i = 0; i < N; i++) {
                assertEquals(i, fs.get(i).get(30, TimeUnit.SECONDS).offset());
            }
        }
    }

    private static Map<TopicPartition, ListOffsetsResultInfo> list(Admin admin, List<TopicPartition> tps, OffsetSpec spec)
            throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : tps) {
            req.put(tp, spec);
        }
        return admin.listOffsets(req).all().get();
    }

    @Test
    void listOffsetsByKindAndTimestamp() throws Exception {
        String topic = Broker.uniqueTopic("offsets");
        long base = System.currentTimeMillis() - 3_600_000L;
        List<TopicPartition> tps = Broker.partitions(topic, 2);
        try (Admin admin = Broker.admin()) {
            Broker.createTopic(admin, topic, 2, Map.of());

            // Empty partitions: earliest = latest = 0, no record at or after any timestamp.
            for (ListOffsetsResultInfo i : list(admin, tps, OffsetSpec.earliest()).values()) {
                assertEquals(0, i.offset());
            }
            for (ListOffsetsResultInfo i : list(admin, tps, OffsetSpec.latest()).values()) {
                assertEquals(0, i.offset());
            }
            for (ListOffsetsResultInfo i : list(admin, tps, OffsetSpec.forTimestamp(base)).values()) {
                assertEquals(-1, i.offset(), "no record in an empty partition");
            }

            produce(topic, base);

            for (TopicPartition tp : tps) {
                String p = tp.toString();
                assertEquals(0, list(admin, tps, OffsetSpec.earliest()).get(tp).offset(), "earliest " + p);
                assertEquals(N, list(admin, tps, OffsetSpec.latest()).get(tp).offset(), "latest " + p);

                // Exact timestamp of record 3.
                ListOffsetsResultInfo exact = list(admin, tps, OffsetSpec.forTimestamp(base + 3_000)).get(tp);
                assertEquals(3, exact.offset(), "forTimestamp exact " + p);
                assertEquals(base + 3_000, exact.timestamp(), "timestamp of the found record " + p);

                // Between records 2 and 3: the first record at or after it.
                ListOffsetsResultInfo between = list(admin, tps, OffsetSpec.forTimestamp(base + 2_500)).get(tp);
                assertEquals(3, between.offset(), "forTimestamp between " + p);
                assertEquals(base + 3_000, between.timestamp());

                // Before everything: the first record.
                ListOffsetsResultInfo before = list(admin, tps, OffsetSpec.forTimestamp(base - 10_000)).get(tp);
                assertEquals(0, before.offset(), "forTimestamp before all " + p);
                assertEquals(base, before.timestamp());

                // After record 9's timestamp but below the outlier: the outlier is the first
                // record whose timestamp is at or after it.
                ListOffsetsResultInfo outlier = list(admin, tps, OffsetSpec.forTimestamp(base + 50_000)).get(tp);
                assertEquals(MAX_TS_INDEX, outlier.offset(), "forTimestamp hitting the outlier " + p);
                assertEquals(base + 100_000, outlier.timestamp());

                // After every record: none.
                ListOffsetsResultInfo none = list(admin, tps, OffsetSpec.forTimestamp(base + 200_000)).get(tp);
                assertEquals(-1, none.offset(), "forTimestamp after all " + p);

                ListOffsetsResultInfo max = list(admin, tps, OffsetSpec.maxTimestamp()).get(tp);
                assertEquals(MAX_TS_INDEX, max.offset(), "maxTimestamp offset " + p);
                assertEquals(base + 100_000, max.timestamp(), "maxTimestamp timestamp " + p);
            }
        }

        // The consumer's view of the same offsets (ListOffsets from a consumer, no group).
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of())) {
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            Map<TopicPartition, Long> query = new HashMap<>();
            Map<TopicPartition, Long> late = new HashMap<>();
            for (TopicPartition tp : tps) {
                assertEquals(0L, begin.get(tp));
                assertEquals((long) N, end.get(tp));
                query.put(tp, base + 4_500);
                late.put(tp, base + 500_000);
            }
            Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(query);
            Map<TopicPartition, OffsetAndTimestamp> notFound = consumer.offsetsForTimes(late);
            for (TopicPartition tp : tps) {
                assertNotNull(found.get(tp));
                assertEquals(5, found.get(tp).offset());
                assertEquals(base + 5_000, found.get(tp).timestamp());
                assertNull(notFound.get(tp), "no offset after the last timestamp");
            }
        }
    }
}
