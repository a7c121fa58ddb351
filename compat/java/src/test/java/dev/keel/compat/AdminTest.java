package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AlterConfigsRequest;
import org.apache.kafka.common.requests.AlterConfigsResponse;
import org.apache.kafka.common.requests.ApiError;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/** AdminClient operations against a single-node broker. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AdminTest {
    private static Admin admin;

    @BeforeAll
    static void open() {
        admin = Broker.admin();
    }

    @AfterAll
    static void close() {
        if (admin != null) {
            admin.close(Duration.ofSeconds(10));
        }
    }

    private static ConfigResource topicResource(String topic) {
        return new ConfigResource(ConfigResource.Type.TOPIC, topic);
    }

    private static Config describeTopicConfig(String topic) throws Exception {
        ConfigResource r = topicResource(topic);
        return admin.describeConfigs(List.of(r)).all().get().get(r);
    }

    /**
     * The topic's configs once `name` reads `value`, or as they are after 10 s. A config
     * change is answered by the controller and reaches the other brokers after it (on
     * Kafka as on a Keel cluster), and describeConfigs may ask any broker.
     */
    private static Config describeTopicConfigOnce(String topic, String name, String value) throws Exception {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (true) {
            Config c = describeTopicConfig(topic);
            ConfigEntry e = c.get(name);
            if ((e != null && value.equals(e.value())) || System.nanoTime() > deadline) {
                return c;
            }
            Thread.sleep(100);
        }
    }

    private static void assertDynamic(Config config, String name, String value) {
        ConfigEntry e = config.get(name);
        assertNotNull(e, "config " + name + " is described");
        assertEquals(value, e.value(), "value of " + name);
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, e.source(), "source of " + name);
        assertFalse(e.isDefault(), name + " is not a default");
    }

    private static void assertNotDynamic(Config config, String name) {
        ConfigEntry e = config.get(name);
        assertNotNull(e, "config " + name + " is described");
        assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, e.source(),
            name + " must not be a topic override: " + e);
    }

    private static Throwable causeOf(ExecutionException e) {
        return e.getCause();
    }

    @Test
    void describeClusterReportsEveryNodeAndClusterId() throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        Collection<Node> nodes = r.nodes().get();
        // One node per bootstrap address: a single broker, or each node of a cluster.
        Set<Integer> bootstrapPorts = new java.util.TreeSet<>();
        for (String a : Broker.bootstrap().split(",")) {
            bootstrapPorts.add(Integer.parseInt(a.substring(a.lastIndexOf(':') + 1)));
        }
        assertEquals(bootstrapPorts.size(), nodes.size(), "nodes: " + nodes);
        for (Node node : nodes) {
            assertTrue(node.id() >= 0, "node id");
        }
        assertEquals(bootstrapPorts, new java.util.TreeSet<>(nodes.stream().map(Node::port).toList()),
            "advertised ports are the bootstrap ports");
        String clusterId = r.clusterId().get();
        assertNotNull(clusterId, "cluster id");
        assertFalse(clusterId.isBlank(), "cluster id");
        assertEquals(clusterId, admin.describeCluster().clusterId().get(), "cluster id is stable");
    }

    @Test
    void createTopicWithConfigsThenDescribe() throws Exception {
        String topic = Broker.uniqueTopic("admin-create");
        Map<String, String> configs = Map.of(
            "retention.ms", "3600000",
            "cleanup.policy", "compact",
            "max.message.bytes", "200000");
        CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1).configs(configs)));
        created.all().get();
        assertEquals(4, created.numPartitions(topic).get(), "numPartitions in the CreateTopics response");
        assertEquals(1, created.replicationFactor(topic).get(), "replicationFactor in the CreateTopics response");
        assertNotNull(created.topicId(topic).get(), "topic id in the CreateTopics response");

        TopicDescription d = Broker.awaitTopic(admin, topic, 4);
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertEquals(created.topicId(topic).get(), d.topicId(), "same topic id from create and describe");
        for (int i = 0; i < 4; i++) {
            TopicPartitionInfo p = d.partitions().get(i);
            assertEquals(i, p.partition());
            assertNotNull(p.leader(), "leader of partition " + i);
            assertEquals(List.of(p.leader().id()), p.replicas().stream().map(Node::id).toList(), "replicas");
            assertEquals(List.of(p.leader().id()), p.isr().stream().map(Node::id).toList(), "isr");
        }

        Set<String> names = Broker.listTopics(admin);
        assertTrue(names.contains(topic), "listTopics contains " + topic);
        TopicListing listing = admin.listTopics().namesToListings().get().get(topic);
        assertNotNull(listing);
        assertFalse(listing.isInternal());
        assertEquals(d.topicId(), listing.topicId(), "topic id from listTopics");

        Config cfg = describeTopicConfig(topic);
        for (Map.Entry<String, String> e : configs.entrySet()) {
            assertDynamic(cfg, e.getKey(), e.getValue());
        }
        // A config that was not set is reported, but not as a topic override.
        assertNotDynamic(cfg, "segment.bytes");
        assertNotDynamic(cfg, "min.insync.replicas");
    }

    /** Every replica of a new topic is in sync (KEEL_TEST_RF=3 in the cluster run). */
    @Test
    void describeTopicsShowsEveryReplicaInSync() throws Exception {
        String topic = Broker.uniqueTopic("admin-isr");
        Broker.createTopic(admin, topic, 2, Map.of());
        for (TopicPartitionInfo p : Broker.awaitTopic(admin, topic, 2).partitions()) {
            assertEquals(Broker.REPLICATION_FACTOR, p.replicas().size(), "replicas of partition " + p.partition());
            assertEquals(Set.copyOf(p.replicas()), Set.copyOf(p.isr()), "isr of partition " + p.partition());
        }
    }

    /**
     * Once a new topic is led by its preferred replicas, electLeaders has nothing to do:
     * PREFERRED and UNCLEAN answer ElectionNotNeeded per partition, an election over all
     * partitions leaves the topic out, and an unknown partition is UnknownTopicOrPartition.
     * The first PREFERRED election may still move a partition: a cluster's first leader
     * of a new partition is not always its preferred replica (Keel hands it over within
     * a second).
     */
    @Test
    void electLeadersOfANewTopicIsNotNeeded() throws Exception {
        String topic = Broker.uniqueTopic("admin-elect");
        Broker.createTopic(admin, topic, 2, Map.of());
        Set<TopicPartition> partitions = Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
        Map<TopicPartition, Optional<Throwable>> first =
            admin.electLeaders(ElectionType.PREFERRED, partitions).partitions().get();
        assertEquals(partitions, first.keySet(), "every partition answered");
        for (Map.Entry<TopicPartition, Optional<Throwable>> e : first.entrySet()) {
            e.getValue().ifPresent(t -> assertInstanceOf(ElectionNotNeededException.class, t, "" + e.getKey()));
        }
        for (ElectionType type : ElectionType.values()) {
            Map<TopicPartition, Optional<Throwable>> r = admin.electLeaders(type, partitions).partitions().get();
            assertEquals(partitions, r.keySet(), type + " answers every partition");
            for (Map.Entry<TopicPartition, Optional<Throwable>> e : r.entrySet()) {
                assertTrue(e.getValue().isPresent(), type + " " + e.getKey() + " needs no election");
                assertInstanceOf(ElectionNotNeededException.class, e.getValue().get(), type + " " + e.getKey());
            }
        }
        Map<TopicPartition, Optional<Throwable>> all = admin.electLeaders(ElectionType.PREFERRED, null).partitions().get();
        assertFalse(all.containsKey(new TopicPartition(topic, 0)), "left out of an election over all partitions: " + all);
        TopicPartition unknown = new TopicPartition(topic, 9);
        Map<TopicPartition, Optional<Throwable>> missing =
            admin.electLeaders(ElectionType.PREFERRED, Set.of(unknown)).partitions().get();
        assertInstanceOf(UnknownTopicOrPartitionException.class, missing.get(unknown).orElse(null), "" + missing);
    }

    @Test
    void createTopicValidateOnlyDoesNotCreate() throws Exception {
        String topic = Broker.uniqueTopic("admin-validate");
        admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)),
            new CreateTopicsOptions().validateOnly(true)).all().get();
        Thread.sleep(500);
        assertFalse(Broker.listTopics(admin).contains(topic), "validateOnly must not create the topic");
        ExecutionException e = assertThrows(ExecutionException.class,
            () -> admin.describeTopics(List.of(topic)).allTopicNames().get());
        assertInstanceOf(UnknownTopicOrPartitionException.class, causeOf(e));
    }

    @Test
    void createExistingTopicFails() throws Exception {
        String topic = Broker.uniqueTopic("admin-exists");
        Broker.createTopic(admin, topic, 1, Map.of());
        ExecutionException e = assertThrows(ExecutionException.class,
            () -> admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get());
        assertInstanceOf(TopicExistsException.class, causeOf(e));
        // The failed create did not change the topic.
        assertEquals(1, Broker.awaitTopic(admin, topic, 1).partitions().size());
    }

    @Test
    void describeBrokerConfigs() throws Exception {
        Node node = admin.describeCluster().nodes().get().iterator().next();
        ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, node.idString());
        Config cfg = admin.describeConfigs(List.of(r)).all().get().get(r);
        assertFalse(cfg.entries().isEmpty(), "broker config entries");
        ConfigEntry numPartitions = cfg.get("num.partitions");
        assertNotNull(numPartitions, "num.partitions is described");
        assertTrue(Integer.parseInt(numPartitions.value()) >= 1, "num.partitions value: " + numPartitions);
        ConfigEntry autoCreate = cfg.get("auto.create.topics.enable");
        assertNotNull(autoCreate, "auto.create.topics.enable is described");
        assertEquals("true", autoCreate.value());
        // Admin tools find the broker's listeners and log directories under Kafka's names.
        ConfigEntry advertised = cfg.get("advertised.listeners");
        assertNotNull(advertised, "advertised.listeners is described");
        assertTrue(advertised.value().contains(":" + node.port()), "advertised.listeners names the port clients use: " + advertised);
        assertNotNull(cfg.get("listeners"), "listeners is described");
        assertNotNull(cfg.get("log.dirs"), "log.dirs is described");
        assertFalse(cfg.get("log.dirs").value().isEmpty(), "log.dirs has a value");
    }

    @Test
    void incrementalAlterConfigsSetAndDelete() throws Exception {
        String topic = Broker.uniqueTopic("admin-incr");
        Broker.createTopic(admin, topic, 1, Map.of("retention.ms", "3600000"));
        ConfigResource r = topicResource(topic);

        admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("segment.ms", "600000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SET)
        ))).all().get();
        Config cfg = describeTopicConfigOnce(topic, "retention.ms", "7200000");
        assertDynamic(cfg, "retention.ms", "7200000");
        assertDynamic(cfg, "segment.ms", "600000");
        assertDynamic(cfg, "cleanup.policy", "compact");

        admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.APPEND)
        ))).all().get();
        cfg = describeTopicConfigOnce(topic, "cleanup.policy", "compact,delete");
        assertNotDynamic(cfg, "retention.ms");
        assertNotEquals("7200000", cfg.get("retention.ms").value(), "retention.ms back to the default");
        assertDynamic(cfg, "segment.ms", "600000");
        assertDynamic(cfg, "cleanup.policy", "compact,delete");

        // An unknown config name is rejected and changes nothing.
        ExecutionException e = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(Map.of(r,
            List.of(new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET))))
            .all().get());
        assertNotNull(causeOf(e));
        assertDynamic(describeTopicConfig(topic), "segment.ms", "600000");
    }

    /**
     * The legacy AlterConfigs request (API key 33) replaces the whole set of topic overrides.
     * The 4.x Admin client no longer exposes it, so it is sent over a raw connection.
     */
    @Test
    void legacyAlterConfigsReplacesOverrides() throws Exception {
        String topic = Broker.uniqueTopic("admin-legacy");
        Broker.createTopic(admin, topic, 1, Map.of("retention.ms", "3600000", "cleanup.policy", "compact"));
        ConfigResource r = topicResource(topic);
        try (RawConnection conn = new RawConnection(Broker.bootstrap())) {
            short version = conn.negotiatedVersion(ApiKeys.ALTER_CONFIGS);
            assertTrue(version >= 0, "broker supports AlterConfigs");
            Map<ConfigResource, AlterConfigsRequest.Config> change = Map.of(r, new AlterConfigsRequest.Config(List.of(
                new AlterConfigsRequest.ConfigEntry("retention.ms", "5400000"),
                new AlterConfigsRequest.ConfigEntry("segment.ms", "900000"))));

            // validateOnly changes nothing.
            AlterConfigsResponse validated = (AlterConfigsResponse) conn.send(
                new AlterConfigsRequest.Builder(change, true).build(version));
            assertEquals(Errors.NONE, validated.errors().get(r).error(), "validateOnly: " + validated.errors());
            Config before = describeTopicConfig(topic);
            assertDynamic(before, "retention.ms", "3600000");
            assertDynamic(before, "cleanup.policy", "compact");
            assertNotDynamic(before, "segment.ms");

            AlterConfigsResponse resp = (AlterConfigsResponse) conn.send(
                new AlterConfigsRequest.Builder(change, false).build(version));
            ApiError err = resp.errors().get(r);
            assertNotNull(err, "a result for the topic");
            assertEquals(Errors.NONE, err.error(), "AlterConfigs: " + err);
        }
        Config cfg = describeTopicConfigOnce(topic, "retention.ms", "5400000");
        assertDynamic(cfg, "retention.ms", "5400000");
        assertDynamic(cfg, "segment.ms", "900000");
        // Not in the request, so no longer an override.
        assertNotDynamic(cfg, "cleanup.policy");
        assertEquals("delete", cfg.get("cleanup.policy").value(), "cleanup.policy back to the default");
    }

    @Test
    void createPartitionsThenProduceToNewPartition() throws Exception {
        String topic = Broker.uniqueTopic("admin-partitions");
        Broker.createTopic(admin, topic, 2, Map.of());
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
        TopicDescription d = Broker.awaitTopic(admin, topic, 5);
        assertEquals(5, d.partitions().size());

        // Fewer partitions than now is rejected.
        ExecutionException e = assertThrows(ExecutionException.class,
            () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get());
        assertNotNull(causeOf(e));

        byte[] value = "to-the-new-partition".getBytes(StandardCharsets.UTF_8);
        RecordMetadata m;
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of())) {
            m = producer.send(new ProducerRecord<>(topic, 4, null, value)).get(30, TimeUnit.SECONDS);
        }
        assertEquals(4, m.partition());
        assertEquals(0, m.offset());
        try (KafkaConsumer<byte[], byte[]> consumer = Broker.consumer(Map.of())) {
            TopicPartition tp = new TopicPartition(topic, 4);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = Broker.pollAtLeast(consumer, 1, Duration.ofSeconds(20));
            assertEquals(1, got.size());
            assertArrayEquals(value, got.get(0).value());
            assertEquals(0, got.get(0).offset());
        }
    }

    @Test
    void deleteTopic() throws Exception {
        String topic = Broker.uniqueTopic("admin-delete");
        Broker.createTopic(admin, topic, 2, Map.of());
        assertTrue(Broker.listTopics(admin).contains(topic));
        admin.deleteTopics(List.of(topic)).all().get();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (Broker.listTopics(admin).contains(topic)) {
            if (System.nanoTime() > deadline) {
                fail("topic " + topic + " still listed 30 s after deleteTopics");
            }
            Thread.sleep(100);
        }
        ExecutionException e = assertThrows(ExecutionException.class,
            () -> admin.describeTopics(List.of(topic)).allTopicNames().get());
        assertInstanceOf(UnknownTopicOrPartitionException.class, causeOf(e));
        // Deleting it again reports that it does not exist.
        ExecutionException again = assertThrows(ExecutionException.class,
            () -> admin.deleteTopics(List.of(topic)).all().get());
        assertInstanceOf(UnknownTopicOrPartitionException.class, causeOf(again));
    }

    @Test
    void describeLogDirsShowsPartitionSizes() throws Exception {
        String topic = Broker.uniqueTopic("admin-logdirs");
        Broker.createTopic(admin, topic, 2, Map.of());
        try (KafkaProducer<byte[], byte[]> producer = Broker.producer(Map.of())) {
            for (int i = 0; i < 50; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, new byte[500]));
            }
            producer.flush();
        }
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        // Every node's directories: in a cluster each partition is on its replicas only.
        List<Integer> ids = admin.describeCluster().nodes().get().stream().map(Node::id).toList();
        Map<TopicPartition, ReplicaInfo> replicas = new HashMap<>();
        for (Map.Entry<Integer, Map<String, LogDirDescription>> perNode
                : admin.describeLogDirs(ids).allDescriptions().get().entrySet()) {
            Map<String, LogDirDescription> dirs = perNode.getValue();
            assertFalse(dirs.isEmpty(), "at least one log dir on node " + perNode.getKey());
            for (Map.Entry<String, LogDirDescription> e : dirs.entrySet()) {
                assertTrue(e.getValue().error() == null, "log dir " + e.getKey() + " error: " + e.getValue().error());
                e.getValue().replicaInfos().forEach((tp, info) ->
                    replicas.merge(tp, info, (a, b) -> a.size() >= b.size() ? a : b));
            }
        }
        assertTrue(replicas.containsKey(p0), "partition 0 listed");
        assertTrue(replicas.containsKey(p1), "partition 1 listed");
        assertTrue(replicas.get(p0).size() >= 50 * 500, "size of partition 0: " + replicas.get(p0).size());
        assertEquals(0, replicas.get(p1).size(), "empty partition 1 has size 0");
        assertFalse(replicas.get(p0).isFuture());
    }
}
