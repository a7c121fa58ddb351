package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.WakeupException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Consumer groups with the real Java consumer: three members share a 12-partition topic
 * while a producer keeps writing, a fourth joins, and after the rebalance every partition
 * is owned exactly once and no record below an offset some member had committed is
 * processed again. Run for the eager (RangeAssignor) and cooperative
 * (CooperativeStickyAssignor) classic protocol and for KIP-848 (group.protocol=consumer).
 * Also: a member that dies without leaving is evicted after session.timeout.ms, and the
 * admin group operations (list, describe, alter/delete offsets, delete groups).
 *
 * <p>Each 3 → 4 rebalance time is printed as a "GROUPS-FIGURE" line.
 */
class GroupsTest {
    static final int PARTITIONS = 12;
    private static final Duration CONVERGE_TIMEOUT = Duration.ofSeconds(45);

    /** Committed offsets and processed records of all members of one group. */
    static final class Ledger {
        final Map<TopicPartition, Long> committed = new ConcurrentHashMap<>();
        final Map<TopicPartition, Set<Long>> processed = new ConcurrentHashMap<>();
        final List<String> violations = java.util.Collections.synchronizedList(new ArrayList<>());

        void process(String member, ConsumerRecord<byte[], byte[]> r) {
            TopicPartition tp = new TopicPartition(r.topic(), r.partition());
            long floor = committed.getOrDefault(tp, 0L);
            if (r.offset() < floor) {
                violations.add(member + " processed " + tp + "@" + r.offset() + " below the committed offset " + floor);
            }
            processed.computeIfAbsent(tp, k -> ConcurrentHashMap.newKeySet()).add(r.offset());
        }

        void committed(Map<TopicPartition, OffsetAndMetadata> offsets) {
            offsets.forEach((tp, o) -> committed.merge(tp, o.offset(), Math::max));
        }
    }

    /** One consumer in its own thread: poll, process, commitSync, publish its assignment. */
    static final class Member implements AutoCloseable {
        final String name;
        final AtomicReference<Set<TopicPartition>> assignment = new AtomicReference<>(Set.of());
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final AtomicBoolean running = new AtomicBoolean(true);
        final java.util.concurrent.atomic.AtomicInteger revocations = new java.util.concurrent.atomic.AtomicInteger();
        private final Thread thread;

        Member(String name, Properties props, String topic, Ledger ledger) {
            this.name = name;
            this.thread = new Thread(() -> run(props, topic, ledger), "member-" + name);
            thread.start();
        }

        private void run(Properties props, String topic, Ledger ledger) {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        if (!partitions.isEmpty()) {
                            revocations.incrementAndGet();
                        }
                        assignment.set(Set.copyOf(c.assignment()));
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        assignment.set(Set.copyOf(c.assignment()));
                    }
                });
                while (running.get()) {
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(100));
                    Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        ledger.process(name, r);
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    if (!next.isEmpty()) {
                        try {
                            c.commitSync(next);
                            ledger.committed(next);
                        } catch (KafkaException e) {
                            // Not committed (a rebalance is under way): these records may be
                            // processed again by the next owner, which is allowed.
                        }
                    }
                    assignment.set(Set.copyOf(c.assignment()));
                }
            } catch (WakeupException e) {
                // closing
            } catch (Throwable t) {
                failure.set(t);
            }
        }

        @Override
        public void close() throws InterruptedException {
            running.set(false);
            thread.join(30_000);
            if (failure.get() != null) {
                throw new AssertionError("member " + name + " failed", failure.get());
            }
        }
    }

    /** Writes to every partition in turn until stopped; remembers how many were acked. */
    static final class Writer implements AutoCloseable {
        final AtomicBoolean running = new AtomicBoolean(true);
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        private final Thread thread;

        Writer(String topic, int perPartitionPerSecond) {
            thread = new Thread(() -> {
                try (KafkaProducer<byte[], byte[]> p = Broker.producer(Map.of("linger.ms", "5"))) {
                    long i = 0;
                    while (running.get()) {
                        for (int part = 0; part < PARTITIONS; part++) {
                            p.send(new ProducerRecord<>(topic, part, null, ("v" + i).getBytes(StandardCharsets.UTF_8)));
                        }
                        i++;
                        Thread.sleep(1000 / perPartitionPerSecond);
                    }
                    p.flush();
                } catch (Throwable t) {
                    failure.set(t);
                }
            }, "writer");
            thread.start();
        }

        @Override
        public void close() throws InterruptedException {
            running.set(false);
            thread.join(30_000);
            if (failure.get() != null) {
                throw new AssertionError("writer failed", failure.get());
            }
        }
    }

    static Properties memberProps(String group, Map<String, String> protocol) {
        Properties p = Broker.consumerProps();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "keel-compat-" + group);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100");
        p.putAll(protocol);
        return p;
    }

    static Map<String, String> classic(Class<?> assignor) {
        return Map.of(
            ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic",
            ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor.getName(),
            ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000",
            ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
    }

    private static final Map<String, String> CONSUMER_PROTOCOL = Map.of(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");

    /** True when the members own disjoint sets of `perMember` partitions covering the topic. */
    static boolean ownedExactlyOnce(List<Member> members, int perMember) {
        Set<TopicPartition> all = new HashSet<>();
        for (Member m : members) {
            Set<TopicPartition> a = m.assignment.get();
            if (a.size() != perMember) {
                return false;
            }
            for (TopicPartition tp : a) {
                if (!all.add(tp)) {
                    return false;
                }
            }
        }
        return all.size() == PARTITIONS;
    }

    private static long awaitMillis(BooleanSupplier done, Duration timeout, String what) throws InterruptedException {
        long start = System.nanoTime();
        long deadline = start + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out after " + timeout.toSeconds() + " s waiting for " + what);
            }
            Thread.sleep(20);
        }
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    }

    static Map<TopicPartition, Long> endOffsets(String topic) {
        try (KafkaConsumer<byte[], byte[]> c = Broker.consumer(Map.of())) {
            return c.endOffsets(Broker.partitions(topic, PARTITIONS));
        }
    }

    static String describe(List<Member> members) {
        return members.stream().map(m -> m.name + "=" + m.assignment.get().stream().map(TopicPartition::partition)
            .sorted().collect(Collectors.toList())).collect(Collectors.joining(" "));
    }

    /** Three members, then a fourth; checks ownership, commits and that nothing is lost. */
    private void threeThenFour(String label, Map<String, String> protocol) throws Exception {
        String topic = Broker.uniqueTopic("groups-" + label);
        String group = "compat-group-" + label + "-" + UUID.randomUUID();
        Broker.createTopic(topic, PARTITIONS);
        Ledger ledger = new Ledger();
        List<Member> members = new ArrayList<>();
        try (Writer writer = new Writer(topic, 20)) {
            for (int i = 0; i < 3; i++) {
                members.add(new Member(label + "-" + i, memberProps(group, protocol), topic, ledger));
            }
            awaitMillis(() -> ownedExactlyOnce(members, 4), CONVERGE_TIMEOUT, "3 members to own 4 partitions each");
            Thread.sleep(1000);
            members.add(new Member(label + "-3", memberProps(group, protocol), topic, ledger));
            long ms = awaitMillis(() -> ownedExactlyOnce(members, 3), CONVERGE_TIMEOUT,
                "4 members to own 3 partitions each");
            System.out.printf("GROUPS-FIGURE broker=%s protocol=%s rebalance_3_to_4_ms=%d assignment=[%s]%n",
                Broker.bootstrap(), label, ms, describe(members));
            Thread.sleep(1500);
            writer.close();
            Map<TopicPartition, Long> end = endOffsets(topic);
            awaitMillis(() -> end.entrySet().stream().allMatch(e ->
                    ledger.processed.getOrDefault(e.getKey(), Set.of()).size() >= e.getValue()),
                CONVERGE_TIMEOUT, "every record to be processed");
            for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                Set<Long> seen = ledger.processed.get(e.getKey());
                for (long o = 0; o < e.getValue(); o++) {
                    assertTrue(seen.contains(o), e.getKey() + "@" + o + " never processed");
                }
            }
            assertTrue(ownedExactlyOnce(members, 3), "still balanced at the end: " + describe(members));
        } finally {
            for (Member m : members) {
                m.close();
            }
        }
        assertEquals(List.of(), ledger.violations, "records below a committed offset were processed again");
        // What the members committed is what the group stores.
        try (Admin admin = Broker.admin()) {
            Map<TopicPartition, OffsetAndMetadata> stored =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            for (Map.Entry<TopicPartition, Long> e : ledger.committed.entrySet()) {
                assertEquals(e.getValue(), stored.get(e.getKey()).offset(), "committed offset of " + e.getKey());
            }
        }
    }

    @Test
    @Timeout(120)
    void eagerRangeAssignorThreeThenFour() throws Exception {
        threeThenFour("eager", classic(RangeAssignor.class));
    }

    @Test
    @Timeout(120)
    void cooperativeStickyThreeThenFour() throws Exception {
        threeThenFour("cooperative", classic(CooperativeStickyAssignor.class));
    }

    @Test
    @Timeout(120)
    void consumerProtocolThreeThenFour() throws Exception {
        threeThenFour("kip848", CONSUMER_PROTOCOL);
    }

    /** A group member in a separate JVM, so the test can kill it without a LeaveGroup. */
    public static final class ChildMember {
        public static void main(String[] args) throws Exception {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, args[2]);
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, "org.apache.kafka.common.serialization.ByteArrayDeserializer");
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, "org.apache.kafka.common.serialization.ByteArrayDeserializer");
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args[3]);
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, "keel-compat-child");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                c.subscribe(List.of(args[1]));
                while (true) {
                    c.poll(Duration.ofMillis(200));
                }
            }
        }
    }

    @Test
    @Timeout(120)
    void deadMemberIsEvictedAfterSessionTimeout() throws Exception {
        int sessionMs = 6000;
        String topic = Broker.uniqueTopic("groups-evict");
        String group = "compat-group-evict-" + UUID.randomUUID();
        Broker.createTopic(topic, PARTITIONS);
        Ledger ledger = new Ledger();
        Map<String, String> protocol = Map.of(
            ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic",
            ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionMs),
            ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        String java = ProcessHandle.current().info().command().orElse("java");
        String classpath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        Process child = new ProcessBuilder(java, "-Xmx128m", "-cp", classpath, ChildMember.class.getName(),
            Broker.bootstrap(), topic, group, Integer.toString(sessionMs)).redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        try (Member survivor = new Member("survivor", memberProps(group, protocol), topic, ledger);
             Admin admin = Broker.admin()) {
            awaitMillis(() -> survivor.assignment.get().size() == PARTITIONS / 2 && twoMembers(admin, group),
                CONVERGE_TIMEOUT, "the survivor and the child to share the partitions");
            child.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            long ms = awaitMillis(() -> survivor.assignment.get().size() == PARTITIONS, CONVERGE_TIMEOUT,
                "the survivor to take over every partition");
            System.out.printf("GROUPS-FIGURE broker=%s eviction_after_kill_ms=%d session_timeout_ms=%d%n",
                Broker.bootstrap(), ms, sessionMs);
            assertTrue(ms >= sessionMs / 2, "partitions moved after " + ms + " ms, before the session could expire");
            assertTrue(ms <= sessionMs + 15_000, "partitions moved only after " + ms + " ms");
        } finally {
            child.destroyForcibly();
        }
    }

    private static boolean twoMembers(Admin admin, String group) {
        try {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            return d.members().size() == 2
                && d.members().stream().allMatch(m -> m.assignment().topicPartitions().size() == PARTITIONS / 2);
        } catch (ExecutionException | InterruptedException e) {
            return false;
        }
    }

    /**
     * KIP-345: a static member that restarts with its group.instance.id gets its partitions
     * back without a rebalance (the other member keeps its partitions throughout); an admin
     * can remove a departed static member by instance id instead of waiting for its session.
     */
    @Test
    @Timeout(120)
    void staticMemberRestartsWithoutRebalance() throws Exception {
        String topic = Broker.uniqueTopic("groups-static");
        String group = "compat-group-static-" + UUID.randomUUID();
        Broker.createTopic(topic, 6);
        Ledger ledger = new Ledger();
        Map<String, String> protocol = new HashMap<>(classic(RangeAssignor.class));
        Properties propsA = memberProps(group, protocol);
        propsA.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-a");
        Properties propsB = memberProps(group, protocol);
        propsB.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-b");
        try (Member b = new Member("b", propsB, topic, ledger); Admin admin = Broker.admin()) {
            Member a = new Member("a", propsA, topic, ledger);
            awaitMillis(() -> a.assignment.get().size() == 3 && b.assignment.get().size() == 3,
                CONVERGE_TIMEOUT, "two static members with 3 partitions each");
            Set<TopicPartition> aBefore = a.assignment.get();
            Set<TopicPartition> bBefore = b.assignment.get();
            int bRevocations = b.revocations.get();
            a.close();
            Member a2 = new Member("a2", propsA, topic, ledger);
            awaitMillis(() -> a2.assignment.get().equals(aBefore), CONVERGE_TIMEOUT, "the restarted member to get its partitions back");
            Thread.sleep(1500);
            assertEquals(bBefore, b.assignment.get());
            assertEquals(bRevocations, b.revocations.get(), "the other member never had partitions revoked");
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals(Set.of("static-a", "static-b"),
                d.members().stream().map(m -> m.groupInstanceId().orElse("")).collect(Collectors.toSet()));
            a2.close();
            admin.removeMembersFromConsumerGroup(group,
                new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("static-a")))).all().get();
            long ms = awaitMillis(() -> b.assignment.get().size() == 6, CONVERGE_TIMEOUT, "b to take every partition");
            assertTrue(ms < 8000, "b took over after " + ms + " ms: the removal, not the session timeout, did it");
        }
    }

    @Test
    @Timeout(120)
    void adminListsDescribesResetsAndDeletesGroups() throws Exception {
        String topic = Broker.uniqueTopic("groups-admin");
        String group = "compat-group-admin-" + UUID.randomUUID();
        Broker.createTopic(topic, 3);
        try (KafkaProducer<byte[], byte[]> p = Broker.producer(Map.of())) {
            for (int i = 0; i < 30; i++) {
                p.send(new ProducerRecord<>(topic, i % 3, null, new byte[]{(byte) i}));
            }
            p.flush();
        }
        try (Admin admin = Broker.admin()) {
            // An active member: listed and described as Stable, cannot be deleted.
            Properties props = memberProps(group, classic(RangeAssignor.class));
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                c.subscribe(List.of(topic));
                List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(c, 30, Duration.ofSeconds(30));
                assertEquals(30, got.size());
                c.commitSync(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(10, "meta-0")));
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                assertEquals(GroupState.STABLE, d.groupState());
                assertEquals(GroupType.CLASSIC, d.type());
                assertEquals("range", d.partitionAssignor());
                MemberDescription m = d.members().iterator().next();
                assertEquals(3, m.assignment().topicPartitions().size());
                Set<String> listed = admin.listGroups().all().get().stream().map(GroupListing::groupId)
                    .collect(Collectors.toSet());
                assertTrue(listed.contains(group), "listGroups shows " + group);
                ExecutionException busy = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> admin.deleteConsumerGroups(List.of(group)).all().get());
                assertInstanceOf(GroupNotEmptyException.class, busy.getCause());
            }
            // Empty now: offsets can be reset and deleted, then the group.
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            assertEquals(GroupState.EMPTY, d.groupState());
            Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            assertEquals(10, offsets.get(new TopicPartition(topic, 0)).offset());
            assertEquals("meta-0", offsets.get(new TopicPartition(topic, 0)).metadata());
            admin.alterConsumerGroupOffsets(group, Map.of(
                new TopicPartition(topic, 0), new OffsetAndMetadata(0),
                new TopicPartition(topic, 1), new OffsetAndMetadata(5))).all().get();
            offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            assertEquals(0, offsets.get(new TopicPartition(topic, 0)).offset());
            assertEquals(5, offsets.get(new TopicPartition(topic, 1)).offset());
            admin.deleteConsumerGroupOffsets(group, Set.of(new TopicPartition(topic, 1))).all().get();
            offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            assertTrue(!offsets.containsKey(new TopicPartition(topic, 1)) || offsets.get(new TopicPartition(topic, 1)) == null,
                "offset of partition 1 deleted: " + offsets);
            admin.deleteConsumerGroups(List.of(group)).all().get();
            ExecutionException gone = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                () -> admin.describeConsumerGroups(List.of(group)).all().get());
            assertTrue(gone.getCause() instanceof GroupIdNotFoundException
                    || gone.getCause() instanceof RetriableException,
                "describing a deleted group: " + gone.getCause());
        }
    }

    /**
     * KIP-848 broker-side regex (SubscriptionPattern, RE2J syntax): the coordinator matches
     * the pattern against whole topic names, assigns a topic created later that it matches,
     * and never one that shares only a prefix.
     */
    @Test
    @Timeout(120)
    void kip848SubscriptionPatternFollowsNewTopics() throws Exception {
        String prefix = Broker.uniqueTopic("regex");
        String first = prefix + "-a";
        String later = prefix + "-b";
        String other = prefix + "x-c";
        Broker.createTopic(first, 2);
        Broker.createTopic(other, 1);
        String group = "compat-group-regex-" + UUID.randomUUID();
        Map<String, String> props = new HashMap<>(CONSUMER_PROTOCOL);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of());
             KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(props)) {
            producer.send(new ProducerRecord<>(first, "one".getBytes(StandardCharsets.UTF_8))).get();
            producer.send(new ProducerRecord<>(other, "never".getBytes(StandardCharsets.UTF_8))).get();
            consumer.subscribe(new SubscriptionPattern(prefix + "-.*"));
            Set<String> seen = new HashSet<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
            boolean created = false;
            while (!seen.contains(later)) {
                assertTrue(System.nanoTime() < deadline, "records seen only from " + seen);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    seen.add(r.topic());
                }
                if (seen.contains(first) && !created) {
                    Broker.createTopic(later, 1);
                    producer.send(new ProducerRecord<>(later, "two".getBytes(StandardCharsets.UTF_8))).get();
                    created = true;
                }
            }
            assertEquals(Set.of(first, later), seen);
            assertEquals(Set.of(first, later),
                consumer.assignment().stream().map(TopicPartition::topic).collect(Collectors.toSet()));
            try (Admin admin = Broker.admin()) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                assertEquals(GroupType.CONSUMER, d.type());
                assertEquals(3, d.members().iterator().next().assignment().topicPartitions().size());
            }
        }
    }
}
