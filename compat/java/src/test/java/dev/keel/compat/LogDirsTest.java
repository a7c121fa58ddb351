package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.errors.LogDirNotFoundException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Several data directories through the AdminClient: describeLogDirs lists each, and
 * alterReplicaLogDirs moves a partition from one to the other while an idempotent producer
 * keeps producing; a consumer then reads back exactly what was acknowledged, in order. Needs
 * a broker with at least two data directories (./test.sh starts Keel with two); skipped
 * otherwise.
 */
class LogDirsTest {
    private static Admin admin;

    @BeforeAll
    static void setUp() {
        admin = Broker.admin();
    }

    @AfterAll
    static void tearDown() {
        admin.close();
    }

    private static Map<String, LogDirDescription> dirs(Node node) throws Exception {
        return admin.describeLogDirs(List.of(node.id())).allDescriptions().get().get(node.id());
    }

    /** The directory holding the partition's current (not future) replica, or null. */
    private static String dirOf(Map<String, LogDirDescription> dirs, TopicPartition tp) {
        for (Map.Entry<String, LogDirDescription> e : dirs.entrySet()) {
            var info = e.getValue().replicaInfos().get(tp);
            if (info != null && !info.isFuture()) {
                return e.getKey();
            }
        }
        return null;
    }

    @Test
    @Timeout(120)
    void alterReplicaLogDirsMovesAPartitionWhileProducing() throws Exception {
        var nodes = admin.describeCluster().nodes().get();
        Assumptions.assumeTrue(nodes.size() == 1, "moves between one broker's directories: a cluster of " + nodes.size() + " brokers is not this test's setup");
        Node node = Broker.singleNode(admin);
        Map<String, LogDirDescription> before = dirs(node);
        Assumptions.assumeTrue(before.size() >= 2, "the broker has " + before.size() + " data directory; needs 2");
        for (Map.Entry<String, LogDirDescription> e : before.entrySet()) {
            assertNull(e.getValue().error(), "log dir " + e.getKey());
            assertTrue(e.getValue().totalBytes().orElse(0L) > 0, "total bytes of " + e.getKey());
            assertTrue(e.getValue().usableBytes().orElse(-1L) >= 0, "usable bytes of " + e.getKey());
        }

        String topic = Broker.uniqueTopic("logdirs-move");
        Broker.createTopic(admin, topic, 1, Map.of("segment.bytes", "1048576"));
        TopicPartition tp = new TopicPartition(topic, 0);
        String source = dirOf(dirs(node), tp);
        assertTrue(source != null, "partition listed in a log dir");
        String target = before.keySet().stream().filter(d -> !d.equals(source)).findFirst().orElseThrow();
        TopicPartitionReplica replica = new TopicPartitionReplica(topic, 0, node.id());

        // An unknown directory is refused as Kafka refuses it.
        ExecutionException unknown = assertThrows(ExecutionException.class, () -> admin
            .alterReplicaLogDirs(Map.of(replica, "/no/such/keel/dir")).all().get());
        assertInstanceOf(LogDirNotFoundException.class, unknown.getCause());

        List<String> acked = Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean stop = new AtomicBoolean();
        List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
        Thread producing = new Thread(() -> {
            try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of(
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                    ProducerConfig.ACKS_CONFIG, "all",
                    ProducerConfig.LINGER_MS_CONFIG, "2"))) {
                byte[] pad = new byte[1000];
                for (int i = 0; !stop.get(); i++) {
                    String value = "v" + i;
                    byte[] bytes = (value + new String(pad, StandardCharsets.ISO_8859_1)).getBytes(StandardCharsets.ISO_8859_1);
                    producer.send(new ProducerRecord<>(topic, 0, null, bytes), (md, e) -> {
                        if (e == null) {
                            acked.add(value);
                        } else {
                            failures.add(e);
                        }
                    });
                    if (i % 200 == 199) {
                        Thread.sleep(5);
                    }
                }
                producer.flush();
            } catch (Throwable t) {
                failures.add(t);
            }
        });
        producing.start();
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (acked.size() < 3000 && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(acked.size() >= 3000, "producer got going: " + acked.size() + " acked, " + failures);

        admin.alterReplicaLogDirs(Map.of(replica, target)).all().get();
        deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (!target.equals(dirOf(dirs(node), tp))) {
            assertTrue(System.nanoTime() < deadline, "partition not in " + target + " after 30 s: " + dirs(node));
            Thread.sleep(50);
        }
        int atSwitch = acked.size();
        Thread.sleep(500);
        stop.set(true);
        producing.join();
        assertTrue(failures.isEmpty(), "producer failures: " + failures);
        assertTrue(acked.size() > atSwitch, "kept producing after the move: " + atSwitch + " -> " + acked.size());

        Map<String, LogDirDescription> after = dirs(node);
        assertEquals(target, dirOf(after, tp));
        assertFalse(after.get(source).replicaInfos().containsKey(tp), "nothing left in " + source);
        ReplicaLogDirInfo info = admin.describeReplicaLogDirs(List.of(replica)).all().get().get(replica);
        assertEquals(target, info.getCurrentReplicaLogDir());
        assertNull(info.getFutureReplicaLogDir());

        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of("max.partition.fetch.bytes", "1048576"))) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> records = Broker.pollAtLeast(consumer, acked.size(), Duration.ofSeconds(60));
            List<String> values = new ArrayList<>();
            for (int i = 0; i < records.size(); i++) {
                assertEquals(i, records.get(i).offset(), "contiguous offsets");
                String v = new String(records.get(i).value(), StandardCharsets.ISO_8859_1);
                values.add(v.substring(0, v.length() - 1000));
            }
            assertEquals(acked.size(), values.size(), "no loss, no duplicate");
            assertEquals(new ArrayList<>(acked), values, "every acknowledged record once, in order");
        }
    }
}
