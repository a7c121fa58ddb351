package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Transactions with the Java producer and consumer: commit and abort across topics and
 * partitions, control-marker offsets, the last stable offset (consumer endOffsets and
 * ListOffsets with READ_COMMITTED), consume-transform-produce with sendOffsetsToTransaction,
 * zombie fencing, the coordinator aborting a transaction past transaction.timeout.ms, the
 * admin ListTransactions/DescribeTransactions calls, and idempotent records interleaved with
 * an open transaction.
 *
 * <p>Every record of a committed transaction is followed by one control record (the
 * COMMIT or ABORT marker), which takes an offset; consumers never return it. The markers
 * are written after EndTxn returns, so what a commit makes visible is awaited, not assumed
 * at once. The time the coordinator takes to abort a timed-out transaction is printed as a
 * "TXN-FIGURE" line.
 *
 * <p>The Java client speaks transaction protocol version 2 (KIP-890: partitions and the group
 * are added to the transaction implicitly by Produce and TxnOffsetCommit, and every EndTxn
 * bumps the producer epoch) when the broker finalizes the feature transaction.version at 2,
 * as a new Kafka 4.x cluster does; otherwise version 1 (AddPartitionsToTxn, AddOffsetsToTxn,
 * one epoch per InitProducerId). The few answers that differ between the two are asserted
 * for the version the broker finalizes, so the class checks either.
 */
@Timeout(value = 45, unit = TimeUnit.SECONDS)
class TransactionsTest {
    private static final int PER_PARTITION = 5;
    private static final Duration READ_TIMEOUT = Duration.ofSeconds(15);
    /** How long a consumer is given to return records it must not return. */
    private static final Duration QUIET = Duration.ofMillis(1500);

    /** The finalized transaction.version feature level the broker advertises; 0 if none. */
    private static short transactionVersion(Admin admin) throws Exception {
        var level = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS)
            .finalizedFeatures().get("transaction.version");
        short v = level == null ? 0 : level.maxVersionLevel();
        System.out.println("TXN-OBSERVED transaction.version=" + v);
        return v;
    }

    private static String uniqueTransactionalId(String prefix) {
        return "compat-txn-" + prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    private static KafkaProducer<byte[], byte[]> transactional(String transactionalId, Map<String, String> extra) {
        Map<String, String> p = new HashMap<>(extra);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "keel-compat-" + transactionalId);
        return Broker.producer(p);
    }

    private static KafkaProducer<byte[], byte[]> transactional(String transactionalId) {
        return transactional(transactionalId, Map.of());
    }

    /** An idempotent, non-transactional producer. */
    private static KafkaProducer<byte[], byte[]> idempotent() {
        return Broker.producer(Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.ACKS_CONFIG, "all"));
    }

    private static KafkaConsumer<byte[], byte[]> reader(IsolationLevel level) {
        return Broker.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level.toString()));
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    private static TopicPartition tp(ConsumerRecord<?, ?> r) {
        return new TopicPartition(r.topic(), r.partition());
    }

    /** Sends one record to every partition of every topic; returns the futures in send order. */
    private static List<Future<RecordMetadata>> sendEach(KafkaProducer<byte[], byte[]> p, List<TopicPartition> tps,
                                                         String label, Map<TopicPartition, List<String>> sent) {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        for (int i = 0; i < PER_PARTITION; i++) {
            for (TopicPartition tp : tps) {
                String v = label + "-" + tp + "-" + i;
                sent.computeIfAbsent(tp, k -> new ArrayList<>()).add(v);
                fs.add(p.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, bytes(v))));
            }
        }
        return fs;
    }

    /** Offsets per partition of acknowledged sends, in send order. */
    private static Map<TopicPartition, List<Long>> offsets(List<Future<RecordMetadata>> fs) throws Exception {
        Map<TopicPartition, List<Long>> out = new LinkedHashMap<>();
        for (Future<RecordMetadata> f : fs) {
            RecordMetadata m = f.get(30, TimeUnit.SECONDS);
            out.computeIfAbsent(new TopicPartition(m.topic(), m.partition()), k -> new ArrayList<>()).add(m.offset());
        }
        return out;
    }

    private static List<Long> range(long from, long count) {
        List<Long> out = new ArrayList<>();
        for (long o = from; o < from + count; o++) {
            out.add(o);
        }
        return out;
    }

    /**
     * Assigns tps, reads from the beginning until {@code expected} records arrived, then
     * polls for {@link #QUIET} more and fails on anything beyond. Checks no record comes
     * twice and offsets rise within each partition.
     */
    private static Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> readExactly(
            KafkaConsumer<byte[], byte[]> c, List<TopicPartition> tps, int expected) {
        c.assign(tps);
        c.seekToBeginning(tps);
        List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(c, expected, READ_TIMEOUT);
        assertEquals(expected, got.size(), "records read: " + describe(got));
        List<ConsumerRecord<byte[], byte[]>> extra = Broker.pollAtLeast(c, 1, QUIET);
        assertTrue(extra.isEmpty(), "records beyond the expected ones: " + describe(extra));
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> byTp = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            List<ConsumerRecord<byte[], byte[]>> list = byTp.computeIfAbsent(tp(r), k -> new ArrayList<>());
            if (!list.isEmpty()) {
                long prev = list.get(list.size() - 1).offset();
                assertTrue(r.offset() > prev, tp(r) + ": offset " + r.offset() + " after " + prev);
            }
            list.add(r);
        }
        return byTp;
    }

    private static String describe(List<ConsumerRecord<byte[], byte[]>> rs) {
        return rs.stream().map(r -> tp(r) + "@" + r.offset() + "=" + text(r.value())).collect(Collectors.joining(", ", "[", "]"));
    }

    private static List<String> values(List<ConsumerRecord<byte[], byte[]>> rs) {
        return rs == null ? List.of() : rs.stream().map(r -> text(r.value())).collect(Collectors.toList());
    }

    private static List<Long> offsetsOf(List<ConsumerRecord<byte[], byte[]>> rs) {
        return rs == null ? List.of() : rs.stream().map(ConsumerRecord::offset).collect(Collectors.toList());
    }

    private static long awaitMillis(BooleanSupplier done, Duration timeout, String what) throws InterruptedException {
        long start = System.nanoTime();
        long deadline = start + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out after " + timeout.toMillis() + " ms waiting for " + what);
            }
            Thread.sleep(20);
        }
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    }

    /** Waits until both isolation levels' endOffsets equal {@code want} on every partition. */
    private static void awaitEndOffsets(KafkaConsumer<byte[], byte[]> committed, KafkaConsumer<byte[], byte[]> uncommitted,
                                        List<TopicPartition> tps, long want) throws InterruptedException {
        Map<TopicPartition, Long> expect = tps.stream().collect(Collectors.toMap(t -> t, t -> want));
        awaitMillis(() -> committed.endOffsets(tps).equals(expect) && uncommitted.endOffsets(tps).equals(expect),
            Duration.ofSeconds(10), "read_committed and read_uncommitted endOffsets to reach " + want
                + " (last: committed " + committed.endOffsets(tps) + ", uncommitted " + uncommitted.endOffsets(tps) + ")");
    }

    private static String chain(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            sb.append(sb.length() == 0 ? "" : " <- ").append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return sb.toString();
    }

    @Test
    void commitAcrossTwoTopicsAndThreePartitions() throws Exception {
        String a = Broker.uniqueTopic("txn-commit-a");
        String b = Broker.uniqueTopic("txn-commit-b");
        Broker.createTopic(a, 3);
        Broker.createTopic(b, 3);
        List<TopicPartition> tps = new ArrayList<>(Broker.partitions(a, 3));
        tps.addAll(Broker.partitions(b, 3));

        Map<TopicPartition, List<String>> sent = new HashMap<>();
        List<Map<TopicPartition, List<Long>>> offsetsByTxn = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = transactional(uniqueTransactionalId("commit"))) {
            p.initTransactions();
            for (int txn = 0; txn < 2; txn++) {
                p.beginTransaction();
                List<Future<RecordMetadata>> fs = sendEach(p, tps, "t" + txn, sent);
                p.commitTransaction();
                offsetsByTxn.add(offsets(fs));
            }
        }
        // Each transaction's records are contiguous; its COMMIT marker takes the next offset,
        // so the second transaction starts two past the first one's last record.
        for (TopicPartition tp : tps) {
            assertEquals(range(0, PER_PARTITION), offsetsByTxn.get(0).get(tp), "first transaction on " + tp);
            assertEquals(range(PER_PARTITION + 1, PER_PARTITION), offsetsByTxn.get(1).get(tp), "second transaction on " + tp);
        }

        try (KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED)) {
            awaitEndOffsets(rc, ru, tps, 2L * PER_PARTITION + 2);
            for (KafkaConsumer<byte[], byte[]> c : List.of(rc, ru)) {
                Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> got = readExactly(c, tps, 2 * PER_PARTITION * tps.size());
                for (TopicPartition tp : tps) {
                    assertEquals(sent.get(tp), values(got.get(tp)), "values on " + tp);
                    List<Long> want = new ArrayList<>(range(0, PER_PARTITION));
                    want.addAll(range(PER_PARTITION + 1, PER_PARTITION));
                    assertEquals(want, offsetsOf(got.get(tp)), "offsets on " + tp);
                }
            }
        }
    }

    @Test
    void abortedRecordsAreHiddenFromReadCommittedOnly() throws Exception {
        String topic = Broker.uniqueTopic("txn-abort");
        Broker.createTopic(topic, 2);
        List<TopicPartition> tps = Broker.partitions(topic, 2);

        Map<TopicPartition, List<String>> aborted = new HashMap<>();
        Map<TopicPartition, List<String>> committed = new HashMap<>();
        Map<TopicPartition, List<Long>> abortedOffsets;
        Map<TopicPartition, List<Long>> committedOffsets;
        try (KafkaProducer<byte[], byte[]> p = transactional(uniqueTransactionalId("abort"))) {
            p.initTransactions();
            p.beginTransaction();
            List<Future<RecordMetadata>> fs = sendEach(p, tps, "aborted", aborted);
            p.flush(); // in the log before the abort, so read_uncommitted must see them
            abortedOffsets = offsets(fs);
            p.abortTransaction();
            p.beginTransaction();
            fs = sendEach(p, tps, "committed", committed);
            p.commitTransaction();
            committedOffsets = offsets(fs);
        }
        for (TopicPartition tp : tps) {
            assertEquals(range(0, PER_PARTITION), abortedOffsets.get(tp), "aborted transaction on " + tp);
            // The ABORT marker takes offset PER_PARTITION.
            assertEquals(range(PER_PARTITION + 1, PER_PARTITION), committedOffsets.get(tp), "committed transaction on " + tp);
        }

        try (KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED)) {
            awaitEndOffsets(rc, ru, tps, 2L * PER_PARTITION + 2);

            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> got = readExactly(rc, tps, PER_PARTITION * tps.size());
            for (TopicPartition tp : tps) {
                assertEquals(committed.get(tp), values(got.get(tp)), "read_committed values on " + tp);
                assertEquals(range(PER_PARTITION + 1, PER_PARTITION), offsetsOf(got.get(tp)), "read_committed offsets on " + tp);
                assertEquals(2L * PER_PARTITION + 2, rc.position(tp), "read_committed position past the COMMIT marker on " + tp);
            }

            got = readExactly(ru, tps, 2 * PER_PARTITION * tps.size());
            for (TopicPartition tp : tps) {
                List<String> want = new ArrayList<>(aborted.get(tp));
                want.addAll(committed.get(tp));
                assertEquals(want, values(got.get(tp)), "read_uncommitted values on " + tp);
            }
        }
    }

    @Test
    void lastStableOffsetStopsAtTheOpenTransaction() throws Exception {
        String topic = Broker.uniqueTopic("txn-lso");
        Broker.createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<TopicPartition> tps = List.of(tp);

        try (KafkaProducer<byte[], byte[]> plain = idempotent();
             KafkaProducer<byte[], byte[]> p = transactional(uniqueTransactionalId("lso"));
             KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED);
             Admin admin = Broker.admin()) {
            for (int i = 0; i < 3; i++) {
                assertEquals(i, plain.send(new ProducerRecord<>(topic, 0, null, bytes("plain-" + i))).get(30, TimeUnit.SECONDS).offset());
            }
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 2; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, bytes("open-" + i)));
            }
            p.flush();

            // The LSO is the first offset of the open transaction; the HW is past its records.
            assertEquals(Map.of(tp, 3L), rc.endOffsets(tps), "read_committed endOffsets while open");
            assertEquals(Map.of(tp, 5L), ru.endOffsets(tps), "read_uncommitted endOffsets while open");
            assertEquals(3L, admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(IsolationLevel.READ_COMMITTED))
                .partitionResult(tp).get().offset(), "ListOffsets latest READ_COMMITTED while open");
            assertEquals(5L, admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(IsolationLevel.READ_UNCOMMITTED))
                .partitionResult(tp).get().offset(), "ListOffsets latest READ_UNCOMMITTED while open");

            rc.assign(tps);
            rc.seekToBeginning(tps);
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(rc, 4, QUIET.multipliedBy(2));
            assertEquals(List.of("plain-0", "plain-1", "plain-2"), values(got), "read_committed stops at the LSO");
            assertEquals(3L, rc.position(tp), "read_committed position waits at the LSO");

            p.commitTransaction();
            awaitEndOffsets(rc, ru, tps, 6);
            got = Broker.pollAtLeast(rc, 2, READ_TIMEOUT);
            assertEquals(List.of("open-0", "open-1"), values(got), "read_committed after the commit");
            assertEquals(List.of(3L, 4L), offsetsOf(got));
            awaitMillis(() -> {
                rc.poll(Duration.ofMillis(100)).forEach(r -> fail("unexpected record " + r));
                return rc.position(tp) == 6L;
            }, Duration.ofSeconds(10), "read_committed position to pass the COMMIT marker");
        }
    }

    @Test
    void consumeTransformProduceCommitsGroupOffsetsWithTheTransaction() throws Exception {
        String in = Broker.uniqueTopic("txn-ctp-in");
        String out = Broker.uniqueTopic("txn-ctp-out");
        Broker.createTopic(in, 3);
        Broker.createTopic(out, 3);
        String group = "compat-txn-group-" + UUID.randomUUID().toString().substring(0, 8);
        List<TopicPartition> inTps = Broker.partitions(in, 3);
        List<TopicPartition> outTps = Broker.partitions(out, 3);

        Map<String, String> groupConsumer = Map.of(
            ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
            ConsumerConfig.CLIENT_ID_CONFIG, "keel-compat-" + group);
        try (KafkaProducer<byte[], byte[]> plain = idempotent();
             KafkaProducer<byte[], byte[]> p = transactional(uniqueTransactionalId("ctp"));
             KafkaConsumer<byte[], byte[]> c = Broker.consumer(groupConsumer);
             Admin admin = Broker.admin()) {
            produceInput(plain, in, 0, 4);
            c.subscribe(List.of(in));
            p.initTransactions();

            Map<TopicPartition, OffsetAndMetadata> first = transform(c, p, out, 12, "txn-1");
            assertEquals(inTps.stream().collect(Collectors.toMap(t -> t, t -> 4L)),
                first.entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())));
            p.commitTransaction();
            assertEquals(first, stableGroupOffsets(admin, group, inTps), "group offsets after the commit");

            produceInput(plain, in, 4, 2);
            Map<TopicPartition, OffsetAndMetadata> second = transform(c, p, out, 6, "txn-2");
            assertEquals(6L, second.get(inTps.get(0)).offset());
            p.flush(); // the aborted output in the log, not just dropped by the client
            p.abortTransaction();
            assertEquals(first, stableGroupOffsets(admin, group, inTps), "group offsets after the abort");
        }

        try (KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED)) {
            // 4 committed + marker + 2 aborted + marker per partition.
            awaitEndOffsets(rc, ru, outTps, 8);
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> got = readExactly(rc, outTps, 12);
            for (TopicPartition tp : outTps) {
                assertEquals(List.of("out-in-0", "out-in-1", "out-in-2", "out-in-3").stream()
                    .map(v -> v + "-p" + tp.partition()).collect(Collectors.toList()), values(got.get(tp)), "committed output on " + tp);
            }
            readExactly(ru, outTps, 18);
        }
    }

    /**
     * The group's offsets, asked with requireStable until every partition has one. Until the
     * COMMIT or ABORT marker reaches the group's offsets (EndTxn answers before that), the
     * broker answers UNSTABLE_OFFSET_COMMIT for the partitions with pending transactional
     * offsets, and the Admin client leaves those partitions out of its result.
     */
    private static Map<TopicPartition, OffsetAndMetadata> stableGroupOffsets(Admin admin, String group,
                                                                             List<TopicPartition> tps) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        int partial = 0;
        while (true) {
            Map<TopicPartition, OffsetAndMetadata> stored = admin.listConsumerGroupOffsets(group,
                new ListConsumerGroupOffsetsOptions().requireStable(true)).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            if (stored.keySet().containsAll(tps)) {
                if (partial > 0) {
                    System.out.println("TXN-OBSERVED " + partial + " requireStable answers without every partition before the markers");
                }
                return stored;
            }
            assertTrue(System.nanoTime() < deadline, "group offsets still unstable after 10 s: " + stored);
            partial++;
            Thread.sleep(50);
        }
    }

    private static void produceInput(KafkaProducer<byte[], byte[]> plain, String topic, int from, int count) throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        for (int i = from; i < from + count; i++) {
            for (int part = 0; part < 3; part++) {
                fs.add(plain.send(new ProducerRecord<>(topic, part, null, bytes("in-" + i + "-p" + part))));
            }
        }
        for (Future<RecordMetadata> f : fs) {
            f.get(30, TimeUnit.SECONDS);
        }
    }

    /**
     * Polls {@code count} records, begins a transaction, writes "out-" + value to the same
     * partition of {@code out} and adds the consumed offsets to the transaction. Returns the
     * offsets sent, without committing or aborting.
     */
    private static Map<TopicPartition, OffsetAndMetadata> transform(KafkaConsumer<byte[], byte[]> c, KafkaProducer<byte[], byte[]> p,
                                                                    String out, int count, String metadata) {
        List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(c, count, READ_TIMEOUT);
        assertEquals(count, got.size(), "records consumed in the group: " + describe(got));
        p.beginTransaction();
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            p.send(new ProducerRecord<>(out, r.partition(), null, bytes("out-" + text(r.value()))));
            next.put(tp(r), new OffsetAndMetadata(r.offset() + 1, metadata));
        }
        p.sendOffsetsToTransaction(next, c.groupMetadata());
        return next;
    }

    @Test
    void secondProducerFencesTheFirstAndAbortsItsTransaction() throws Exception {
        String topic = Broker.uniqueTopic("txn-fence");
        Broker.createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        String id = uniqueTransactionalId("fence");

        try (KafkaProducer<byte[], byte[]> zombie = transactional(id);
             KafkaProducer<byte[], byte[]> zombie2 = transactional(id);
             KafkaProducer<byte[], byte[]> current = transactional(id)) {
            zombie.initTransactions();
            zombie.beginTransaction();
            assertEquals(0L, zombie.send(new ProducerRecord<>(topic, 0, null, bytes("zombie-0"))).get(30, TimeUnit.SECONDS).offset());

            // A second producer with the same transactional.id: its InitProducerId aborts the
            // first one's open transaction and bumps the epoch.
            zombie2.initTransactions();
            // The fenced producer's next send fails, and so does its commit.
            Throwable sendFailure = assertThrows(Exception.class,
                () -> zombie.send(new ProducerRecord<>(topic, 0, null, bytes("zombie-1"))).get(30, TimeUnit.SECONDS),
                "send of a fenced producer");
            System.out.println("TXN-OBSERVED fenced send: " + chain(sendFailure));
            // INVALID_PRODUCER_EPOCH (47) in the Produce answer.
            assertInstanceOf(InvalidProducerEpochException.class, sendFailure.getCause(), chain(sendFailure));
            Throwable commitFailure = assertThrows(Exception.class, zombie::commitTransaction, "commit of a fenced producer");
            System.out.println("TXN-OBSERVED fenced commit after send: " + chain(commitFailure));
            assertInstanceOf(InvalidProducerEpochException.class, commitFailure, chain(commitFailure));

            // A fenced producer that only commits.
            zombie2.beginTransaction();
            zombie2.send(new ProducerRecord<>(topic, 0, null, bytes("zombie2-0"))).get(30, TimeUnit.SECONDS);
            current.initTransactions();
            Throwable commitOnly = assertThrows(Exception.class, zombie2::commitTransaction, "commit of a fenced producer");
            System.out.println("TXN-OBSERVED fenced commit: " + chain(commitOnly));
            assertInstanceOf(ProducerFencedException.class, commitOnly, chain(commitOnly));

            current.beginTransaction();
            current.send(new ProducerRecord<>(topic, 0, null, bytes("current-0")));
            current.commitTransaction();
        }

        try (KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED)) {
            assertEquals(List.of("current-0"), values(readExactly(rc, List.of(tp), 1).get(tp)), "read_committed");
            assertEquals(List.of("zombie-0", "zombie2-0", "current-0"), values(readExactly(ru, List.of(tp), 3).get(tp)),
                "read_uncommitted: the fenced producer's second send never reached the log");
        }
    }

    @Test
    void coordinatorAbortsATransactionPastItsTimeout() throws Exception {
        String topic = Broker.uniqueTopic("txn-timeout");
        Broker.createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<TopicPartition> tps = List.of(tp);
        String id = uniqueTransactionalId("timeout");

        try (KafkaProducer<byte[], byte[]> p = transactional(id, Map.of(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "3000"));
             KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED);
             Admin admin = Broker.admin()) {
            p.initTransactions();
            p.beginTransaction();
            long begun = System.nanoTime();
            for (int i = 0; i < 3; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, bytes("stalled-" + i)));
            }
            p.flush();
            assertEquals(Map.of(tp, 0L), rc.endOffsets(tps), "read_committed endOffsets while open");
            assertEquals(Map.of(tp, 3L), ru.endOffsets(tps), "read_uncommitted endOffsets while open");

            // The coordinator aborts it: the ABORT marker at offset 3 moves the LSO to 4.
            awaitMillis(() -> rc.endOffsets(tps).get(tp) == 4L, Duration.ofSeconds(25),
                "the coordinator to abort the timed-out transaction");
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - begun);
            System.out.printf("TXN-FIGURE broker=%s timeout_abort_after_ms=%d transaction_timeout_ms=3000%n", Broker.bootstrap(), ms);
            assertTrue(ms >= 2500, "aborted after " + ms + " ms, before transaction.timeout.ms=3000");
            assertEquals(Map.of(tp, 4L), ru.endOffsets(tps), "read_uncommitted endOffsets after the abort");

            // The coordinator records CompleteAbort once every marker is written.
            awaitMillis(() -> describe(admin, id).state() == TransactionState.COMPLETE_ABORT, Duration.ofSeconds(10),
                "state CompleteAbort after the timeout abort (last: " + describe(admin, id) + ")");

            rc.assign(tps);
            rc.seekToBeginning(tps);
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(rc, 1, QUIET);
            assertTrue(got.isEmpty(), "read_committed returned aborted records " + describe(got));
            ru.assign(tps);
            ru.seekToBeginning(tps);
            assertEquals(List.of("stalled-0", "stalled-1", "stalled-2"), values(Broker.pollAtLeast(ru, 3, READ_TIMEOUT)),
                "read_uncommitted still reads the aborted records");

            // The abort bumped the epoch. Under transaction version 2 an EndTxn one epoch behind
            // is taken for a retry of the last EndTxn, which was an abort, not a commit:
            // INVALID_TXN_STATE. Under version 1 the old epoch is fenced: PRODUCER_FENCED.
            Throwable commit = assertThrows(Exception.class, p::commitTransaction, "commit after the coordinator aborted");
            System.out.println("TXN-OBSERVED commit after timeout abort: " + chain(commit));
            if (transactionVersion(admin) >= 2) {
                assertInstanceOf(InvalidTxnStateException.class, commit, chain(commit));
            } else {
                assertInstanceOf(ProducerFencedException.class, commit, chain(commit));
            }
        }
    }

    @Test
    void adminListsAndDescribesTransactions() throws Exception {
        String topic = Broker.uniqueTopic("txn-admin");
        Broker.createTopic(topic, 2);
        List<TopicPartition> tps = Broker.partitions(topic, 2);
        String id = uniqueTransactionalId("admin");

        try (KafkaProducer<byte[], byte[]> p = transactional(id, Map.of(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000"));
             Admin admin = Broker.admin()) {
            p.initTransactions();
            TransactionDescription d = describe(admin, id);
            System.out.println("TXN-OBSERVED after initTransactions: " + d);
            assertEquals(TransactionState.EMPTY, d.state());
            assertEquals(20000, d.transactionTimeoutMs());
            assertTrue(d.topicPartitions().isEmpty(), d.toString());
            // The coordinator is one of the cluster's brokers (the only one on a single node).
            Set<Integer> nodes = admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).stream()
                    .map(org.apache.kafka.common.Node::id).collect(java.util.stream.Collectors.toSet());

            p.beginTransaction();
            for (TopicPartition tp : tps) {
                p.send(new ProducerRecord<>(topic, tp.partition(), null, bytes("admin")));
            }
            p.flush();
            d = describe(admin, id);
            System.out.println("TXN-OBSERVED open: " + d);
            assertEquals(TransactionState.ONGOING, d.state());
            assertEquals(Set.copyOf(tps), d.topicPartitions());
            assertTrue(nodes.contains(d.coordinatorId()), d + " names a coordinator outside " + nodes);
            assertTrue(d.transactionStartTimeMs().isPresent() && d.transactionStartTimeMs().getAsLong() > 0, d.toString());
            long producerId = d.producerId();
            int epoch = d.producerEpoch();
            long started = d.transactionStartTimeMs().getAsLong();
            // Version 2 bumps the epoch at every EndTxn; version 1 keeps it.
            int bump = transactionVersion(admin) >= 2 ? 1 : 0;

            TransactionListing listed = listed(admin, id, new ListTransactionsOptions());
            assertEquals(TransactionState.ONGOING, listed.state());
            assertEquals(producerId, listed.producerId());
            listed(admin, id, new ListTransactionsOptions().filterStates(Set.of(TransactionState.ONGOING)));
            assertTrue(admin.listTransactions(new ListTransactionsOptions().filterStates(Set.of(TransactionState.COMPLETE_ABORT)))
                .all().get(30, TimeUnit.SECONDS).stream().noneMatch(l -> l.transactionalId().equals(id)), "state filter");

            p.commitTransaction();
            awaitMillis(() -> describe(admin, id).state() == TransactionState.COMPLETE_COMMIT, Duration.ofSeconds(10),
                "state CompleteCommit");
            d = describe(admin, id);
            System.out.println("TXN-OBSERVED committed: " + d);
            assertTrue(d.topicPartitions().isEmpty(), d.toString());
            assertEquals(producerId, d.producerId());
            assertEquals(epoch + bump, (int) d.producerEpoch(), d.toString());
            // Kafka keeps the start time of the last transaction once it completed.
            assertEquals(started, d.transactionStartTimeMs().orElse(-1), d.toString());

            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, bytes("admin-aborted")));
            p.flush();
            assertEquals(Set.of(tps.get(0)), describe(admin, id).topicPartitions());
            p.abortTransaction();
            awaitMillis(() -> describe(admin, id).state() == TransactionState.COMPLETE_ABORT, Duration.ofSeconds(10),
                "state CompleteAbort");
            d = describe(admin, id);
            System.out.println("TXN-OBSERVED aborted: " + d);
            assertTrue(d.topicPartitions().isEmpty(), d.toString());
            assertEquals(epoch + 2 * bump, (int) d.producerEpoch(), d.toString());

            String unknown = uniqueTransactionalId("never-used");
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> admin.describeTransactions(List.of(unknown)).description(unknown).get(30, TimeUnit.SECONDS));
            assertInstanceOf(TransactionalIdNotFoundException.class, e.getCause(), chain(e));
        }
    }

    private static TransactionDescription describe(Admin admin, String id) {
        try {
            return admin.describeTransactions(List.of(id)).description(id).get(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new AssertionError("describeTransactions " + id + ": " + chain(e), e);
        }
    }

    private static TransactionListing listed(Admin admin, String id, ListTransactionsOptions options) throws Exception {
        List<TransactionListing> all = new ArrayList<>(admin.listTransactions(options).all().get(30, TimeUnit.SECONDS));
        return all.stream().filter(l -> l.transactionalId().equals(id)).findFirst()
            .orElseThrow(() -> new AssertionError(id + " not in listTransactions " + all));
    }

    @Test
    void idempotentRecordsInterleavedWithATransaction() throws Exception {
        String topic = Broker.uniqueTopic("txn-interleave");
        Broker.createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<TopicPartition> tps = List.of(tp);

        try (KafkaProducer<byte[], byte[]> plain = idempotent();
             KafkaProducer<byte[], byte[]> p = transactional(uniqueTransactionalId("interleave"));
             KafkaConsumer<byte[], byte[]> rc = reader(IsolationLevel.READ_COMMITTED);
             KafkaConsumer<byte[], byte[]> ru = reader(IsolationLevel.READ_UNCOMMITTED)) {
            p.initTransactions();
            assertEquals(0L, plain.send(new ProducerRecord<>(topic, 0, null, bytes("before-0"))).get(30, TimeUnit.SECONDS).offset());
            assertEquals(1L, plain.send(new ProducerRecord<>(topic, 0, null, bytes("before-1"))).get(30, TimeUnit.SECONDS).offset());
            p.beginTransaction();
            assertEquals(2L, p.send(new ProducerRecord<>(topic, 0, null, bytes("txn-0"))).get(30, TimeUnit.SECONDS).offset());
            assertEquals(3L, p.send(new ProducerRecord<>(topic, 0, null, bytes("txn-1"))).get(30, TimeUnit.SECONDS).offset());
            assertEquals(4L, plain.send(new ProducerRecord<>(topic, 0, null, bytes("during-0"))).get(30, TimeUnit.SECONDS).offset());
            assertEquals(5L, plain.send(new ProducerRecord<>(topic, 0, null, bytes("during-1"))).get(30, TimeUnit.SECONDS).offset());

            assertEquals(Map.of(tp, 2L), rc.endOffsets(tps), "read_committed endOffsets while open");
            assertEquals(Map.of(tp, 6L), ru.endOffsets(tps), "read_uncommitted endOffsets while open");
            rc.assign(tps);
            rc.seekToBeginning(tps);
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(rc, 3, QUIET.multipliedBy(2));
            assertEquals(List.of("before-0", "before-1"), values(got), "read_committed while the transaction is open");

            p.commitTransaction();
            got = Broker.pollAtLeast(rc, 4, READ_TIMEOUT);
            assertEquals(List.of("txn-0", "txn-1", "during-0", "during-1"), values(got), "read_committed after the commit");
            assertEquals(List.of(2L, 3L, 4L, 5L), offsetsOf(got));
            awaitEndOffsets(rc, ru, tps, 7);
        }
    }
}
