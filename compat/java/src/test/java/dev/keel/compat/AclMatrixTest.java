package dev.keel.compat;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

/**
 * The authorisation matrix: every API below × {no ACL, allow, deny, prefixed allow,
 * superuser}, run with the Java clients against Keel and against Apache Kafka with
 * StandardAuthorizer (the oracle) in the same run; each cell's outcome (OK, with what
 * a listing showed, or the exception class) must be Kafka's.
 *
 * Set by compat/security/acls.sh: acl.keel and acl.kafka (HOST:PORT of each broker's
 * SASL_PLAINTEXT listener with SASL/PLAIN users admin (superuser), u_none, u_allow,
 * u_deny, u_prefixed, c_allow, c_deny, each with password NAME-secret), acl.out (a TSV
 * of every cell: api, scenario, Keel's outcome, Kafka's outcome).
 *
 * Scenarios: "none" runs as u_none (no ACL at all); "allow" as u_allow with a LITERAL
 * ALLOW of the operation; "deny" as u_deny with ALLOW ALL and a DENY of the operation;
 * "prefixed" as u_prefixed with a PREFIXED ALLOW covering the resource; "superuser" as
 * admin. Cluster APIs use c_allow and c_deny (their ACLs name the one CLUSTER resource,
 * so they must not leak into other cells) and have no prefixed cell: Kafka accepts no
 * other name than kafka-cluster.
 */
class AclMatrixTest {
    private static final List<String> SCENARIOS = List.of("none", "allow", "deny", "prefixed", "superuser");

    interface Action {
        String run(Properties client, String resource) throws Exception;
    }

    /** One API of the matrix: the resource its ACLs name and the operation it needs. */
    record Api(String name, ResourceType type, AclOperation operation, Action action) {
        String resource(String scenario) {
            switch (type) {
                case CLUSTER: return "kafka-cluster";
                case TRANSACTIONAL_ID: return "x-" + name + "-" + scenario;
                case GROUP: return "g-" + name + "-" + scenario;
                default: return "t-" + name + "-" + scenario;
            }
        }
    }

    private static final String GROUP_TOPIC = "t-groups";

    private static String need(String name) {
        String v = System.getProperty(name);
        assertNotNull(v, "system property " + name + " (set by compat/security/acls.sh)");
        return v;
    }

    private static Properties client(String bootstrap, String user) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        p.put(SaslConfigs.SASL_MECHANISM, "PLAIN");
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.plain.PlainLoginModule required "
            + "username=\"" + user + "\" password=\"" + user + "-secret\";");
        p.put(CommonClientConfigs.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        p.put(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        return p;
    }

    private static <T> T get(org.apache.kafka.common.KafkaFuture<T> f) throws Exception {
        return f.get(20, TimeUnit.SECONDS);
    }

    private static final List<Api> APIS = List.of(
        new Api("produce", ResourceType.TOPIC, AclOperation.WRITE, (p, r) -> {
            Properties pp = new Properties();
            pp.putAll(p);
            pp.put(ProducerConfig.ACKS_CONFIG, "1");
            pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
            pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
            pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
            pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
            try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
                producer.send(new ProducerRecord<>(r, new byte[] {1})).get(20, TimeUnit.SECONDS);
            }
            return "OK";
        }),
        new Api("fetch", ResourceType.TOPIC, AclOperation.READ, (p, r) -> {
            Properties cp = new Properties();
            cp.putAll(p);
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                consumer.assign(List.of(new TopicPartition(r, 0)));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (System.nanoTime() < deadline) {
                    if (!consumer.poll(Duration.ofMillis(200)).isEmpty()) {
                        return "OK:records";
                    }
                }
            }
            return "OK:none";
        }),
        new Api("describeTopics", ResourceType.TOPIC, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeTopics(List.of(r)).allTopicNames());
            }
            return "OK";
        }),
        // The host of the ACLs: this client's address, and another one.
        new Api("describeTopicsThisHost", ResourceType.TOPIC, AclOperation.DESCRIBE, (p, r) -> describeTopic(p, r)),
        new Api("describeTopicsOtherHost", ResourceType.TOPIC, AclOperation.DESCRIBE, (p, r) -> describeTopic(p, r)),
        new Api("listTopics", ResourceType.TOPIC, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                return get(a.listTopics().names()).contains(r) ? "OK:listed" : "OK:hidden";
            }
        }),
        new Api("createTopics", ResourceType.TOPIC, AclOperation.CREATE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.createTopics(List.of(new NewTopic(r, 1, (short) 1))).all());
            }
            return "OK";
        }),
        new Api("deleteTopics", ResourceType.TOPIC, AclOperation.DELETE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.deleteTopics(List.of(r)).all());
            }
            return "OK";
        }),
        new Api("createPartitions", ResourceType.TOPIC, AclOperation.ALTER, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.createPartitions(Map.of(r, NewPartitions.increaseTo(2))).all());
            }
            return "OK";
        }),
        new Api("describeConfigs", ResourceType.TOPIC, AclOperation.DESCRIBE_CONFIGS, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, r))).all());
            }
            return "OK";
        }),
        new Api("alterConfigs", ResourceType.TOPIC, AclOperation.ALTER_CONFIGS, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, r);
                AlterConfigOp op = new AlterConfigOp(new ConfigEntry("retention.ms", "100000"), AlterConfigOp.OpType.SET);
                get(a.incrementalAlterConfigs(Map.of(res, List.of(op))).all());
            }
            return "OK";
        }),
        new Api("listOffsets", ResourceType.TOPIC, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.listOffsets(Map.of(new TopicPartition(r, 0), OffsetSpec.latest())).all());
            }
            return "OK";
        }),
        new Api("deleteRecords", ResourceType.TOPIC, AclOperation.DELETE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.deleteRecords(Map.of(new TopicPartition(r, 0), RecordsToDelete.beforeOffset(0))).all());
            }
            return "OK";
        }),
        new Api("commitOffsets", ResourceType.GROUP, AclOperation.READ, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.alterConsumerGroupOffsets(r, Map.of(new TopicPartition(GROUP_TOPIC, 0), new OffsetAndMetadata(0))).all());
            }
            return "OK";
        }),
        new Api("fetchOffsets", ResourceType.GROUP, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                return "OK:" + get(a.listConsumerGroupOffsets(r).partitionsToOffsetAndMetadata()).size();
            }
        }),
        new Api("describeGroups", ResourceType.GROUP, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                ConsumerGroupDescription d = get(a.describeConsumerGroups(List.of(r),
                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).all()).get(r);
                return "OK:" + d.groupState() + ":" + new TreeSet<>(d.authorizedOperations());
            }
        }),
        new Api("listGroups", ResourceType.GROUP, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                Collection<GroupListing> all = get(a.listGroups().all());
                return all.stream().anyMatch(g -> g.groupId().equals(r)) ? "OK:listed" : "OK:hidden";
            }
        }),
        new Api("deleteGroups", ResourceType.GROUP, AclOperation.DELETE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.deleteConsumerGroups(List.of(r)).all());
            }
            return "OK";
        }),
        new Api("initTransactions", ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE, (p, r) -> {
            Properties pp = new Properties();
            pp.putAll(p);
            pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, r);
            pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
            try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
                producer.initTransactions();
            }
            return "OK";
        }),
        new Api("joinClassic", ResourceType.GROUP, AclOperation.READ, (p, r) -> join(p, r, "classic")),
        new Api("joinConsumer", ResourceType.GROUP, AclOperation.READ, (p, r) -> join(p, r, "consumer")),
        new Api("deleteOffsets", ResourceType.GROUP, AclOperation.DELETE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.deleteConsumerGroupOffsets(r, Set.of(new TopicPartition(GROUP_TOPIC, 0))).all());
            }
            return "OK";
        }),
        new Api("describeProducers", ResourceType.TOPIC, AclOperation.READ, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeProducers(List.of(new TopicPartition(r, 0))).all());
            }
            return "OK";
        }),
        new Api("describeTransactions", ResourceType.TRANSACTIONAL_ID, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                return "OK:" + get(a.describeTransactions(List.of(r)).all()).get(r).state();
            }
        }),
        new Api("listTransactions", ResourceType.TRANSACTIONAL_ID, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                return get(a.listTransactions().all()).stream().anyMatch(t -> t.transactionalId().equals(r))
                    ? "OK:listed" : "OK:hidden";
            }
        }),
        new Api("txnProduce", ResourceType.TOPIC, AclOperation.WRITE, (p, r) -> {
            try (KafkaProducer<byte[], byte[]> producer = transactional(p, "x-" + r)) {
                producer.initTransactions();
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(r, new byte[] {1}));
                producer.commitTransaction();
            }
            return "OK";
        }),
        new Api("txnOffsets", ResourceType.GROUP, AclOperation.READ, (p, r) -> {
            try (KafkaProducer<byte[], byte[]> producer = transactional(p, "x-" + r)) {
                producer.initTransactions();
                producer.beginTransaction();
                producer.sendOffsetsToTransaction(Map.of(new TopicPartition(GROUP_TOPIC, 0), new OffsetAndMetadata(0)),
                    new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(r));
                producer.commitTransaction();
            }
            return "OK";
        }),
        new Api("describeLogDirs", ResourceType.CLUSTER, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeLogDirs(List.of(1)).allDescriptions());
            }
            return "OK";
        }),
        new Api("listReassignments", ResourceType.CLUSTER, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.listPartitionReassignments().reassignments());
            }
            return "OK";
        }),
        new Api("describeQuorum", ResourceType.CLUSTER, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeMetadataQuorum().quorumInfo());
            }
            return "OK";
        }),
        new Api("describeCluster", ResourceType.CLUSTER, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                Set<AclOperation> ops = get(a.describeCluster(
                    new DescribeClusterOptions().includeAuthorizedOperations(true)).authorizedOperations());
                return "OK:" + new TreeSet<>(ops);
            }
        }),
        new Api("describeAcls", ResourceType.CLUSTER, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeAcls(AclBindingFilter.ANY).values());
            }
            return "OK";
        }),
        new Api("createAcls", ResourceType.CLUSTER, AclOperation.ALTER, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.createAcls(List.of(new AclBinding(
                    new ResourcePattern(ResourceType.TOPIC, "t-nobody", PatternType.LITERAL),
                    new AccessControlEntry("User:nobody", "*", AclOperation.READ, AclPermissionType.ALLOW)))).all());
            }
            return "OK";
        }),
        new Api("describeBrokerConfigs", ResourceType.CLUSTER, AclOperation.DESCRIBE_CONFIGS, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.BROKER, "1"))).all());
            }
            return "OK";
        }),
        new Api("alterBrokerConfigs", ResourceType.CLUSTER, AclOperation.ALTER_CONFIGS, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                ConfigResource res = new ConfigResource(ConfigResource.Type.BROKER, "1");
                AlterConfigOp op =
                    new AlterConfigOp(new ConfigEntry("log.retention.ms", "604800000"), AlterConfigOp.OpType.SET);
                get(a.incrementalAlterConfigs(Map.of(res, List.of(op))).all());
            }
            return "OK";
        }),
        new Api("describeScramUsers", ResourceType.CLUSTER, AclOperation.DESCRIBE, (p, r) -> {
            try (Admin a = Admin.create(p)) {
                get(a.describeUserScramCredentials().all());
            }
            return "OK";
        })
    );

    private static String describeTopic(Properties p, String r) throws Exception {
        try (Admin a = Admin.create(p)) {
            get(a.describeTopics(List.of(r)).allTopicNames());
        }
        return "OK";
    }

    private static KafkaProducer<byte[], byte[]> transactional(Properties p, String transactionalId) {
        Properties pp = new Properties();
        pp.putAll(p);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        return new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer());
    }

    /** A consumer of the group protocol given joins group `r`, subscribed to GROUP_TOPIC. */
    private static String join(Properties p, String r, String protocol) {
        Properties cp = new Properties();
        cp.putAll(p);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, r);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(GROUP_TOPIC));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(200));
                if (!consumer.assignment().isEmpty()) {
                    return "OK:assigned";
                }
            }
        } catch (TopicAuthorizationException | GroupAuthorizationException e) {
            // With neither the topic nor the group allowed, the consumer's background
            // thread asks for both at once and throws whichever refusal it meets first,
            // a race in the client (Keel once answered the group first where Kafka had
            // the topic): the cell compares that it is refused.
            return "refused (topic or group authorization)";
        }
        return "OK:unassigned";
    }

    private static String user(Api api, String scenario) {
        boolean cluster = api.type() == ResourceType.CLUSTER;
        switch (scenario) {
            case "none": return "u_none";
            case "allow": return cluster ? "c_allow" : "u_allow";
            case "deny": return cluster ? "c_deny" : "u_deny";
            case "prefixed": return "u_prefixed";
            default: return "admin";
        }
    }

    private static AclBinding acl(ResourceType type, String name, PatternType pattern, String user,
                                  AclOperation op, AclPermissionType permission) {
        return acl(type, name, pattern, user, "*", op, permission);
    }

    private static AclBinding acl(ResourceType type, String name, PatternType pattern, String user, String host,
                                  AclOperation op, AclPermissionType permission) {
        return new AclBinding(new ResourcePattern(type, name, pattern),
            new AccessControlEntry("User:" + user, host, op, permission));
    }

    /** The host the scenario ACLs of `api` name. */
    private static String host(Api api) {
        if (api.name().endsWith("ThisHost")) {
            return "127.0.0.1";
        }
        return api.name().endsWith("OtherHost") ? "10.9.9.9" : "*";
    }

    /** The ACLs of every cell, the topics and groups they use, created as admin. */
    private static void setUp(String bootstrap) throws Exception {
        try (Admin a = Admin.create(client(bootstrap, "admin"))) {
            List<NewTopic> topics = new ArrayList<>();
            List<AclBinding> acls = new ArrayList<>();
            topics.add(new NewTopic(GROUP_TOPIC, 1, (short) 1));
            for (Api api : APIS) {
                for (String scenario : SCENARIOS) {
                    String r = api.resource(scenario);
                    String u = user(api, scenario);
                    if (api.type() == ResourceType.TOPIC && !api.name().equals("createTopics")) {
                        topics.add(new NewTopic(r, 1, (short) 1));
                    }
                    boolean scoped = !scenario.equals("none") && !scenario.equals("superuser");
                    if (api.name().startsWith("txn") && scoped) {
                        // The transactional id each transactional cell writes with.
                        acls.add(acl(ResourceType.TRANSACTIONAL_ID, "x-" + r, PatternType.LITERAL, u, AclOperation.WRITE,
                            AclPermissionType.ALLOW));
                    }
                    if (api.type() == ResourceType.GROUP && scoped) {
                        acls.add(acl(ResourceType.TOPIC, GROUP_TOPIC, PatternType.LITERAL, u, AclOperation.READ,
                            AclPermissionType.ALLOW));
                    }
                    String h = host(api);
                    switch (scenario) {
                        case "allow":
                            acls.add(acl(api.type(), r, PatternType.LITERAL, u, h, api.operation(), AclPermissionType.ALLOW));
                            break;
                        case "deny":
                            acls.add(acl(api.type(), r, PatternType.LITERAL, u, AclOperation.ALL, AclPermissionType.ALLOW));
                            acls.add(acl(api.type(), r, PatternType.LITERAL, u, h, api.operation(), AclPermissionType.DENY));
                            break;
                        case "prefixed":
                            if (api.type() != ResourceType.CLUSTER) {
                                acls.add(acl(api.type(), api.resource(""), PatternType.PREFIXED, u, h, api.operation(),
                                    AclPermissionType.ALLOW));
                            }
                            break;
                        default:
                            break;
                    }
                }
            }
            get(a.createTopics(topics).all());
            get(a.createAcls(acls).all());
            // A record to fetch, and groups with a committed offset to describe and delete.
            Properties pp = client(bootstrap, "admin");
            pp.put(ProducerConfig.ACKS_CONFIG, "1");
            try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
                for (String scenario : SCENARIOS) {
                    producer.send(new ProducerRecord<>("t-fetch-" + scenario, new byte[] {1})).get(20, TimeUnit.SECONDS);
                }
                producer.send(new ProducerRecord<>(GROUP_TOPIC, new byte[] {1})).get(20, TimeUnit.SECONDS);
            }
            for (Api api : APIS) {
                for (String scenario : SCENARIOS) {
                    if (api.type() == ResourceType.GROUP && !api.name().startsWith("join")) {
                        get(a.alterConsumerGroupOffsets(api.resource(scenario),
                            Map.of(new TopicPartition(GROUP_TOPIC, 0), new OffsetAndMetadata(0))).all());
                    }
                    if (api.name().equals("describeTransactions") || api.name().equals("listTransactions")) {
                        Properties tp = client(bootstrap, "admin");
                        tp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, api.resource(scenario));
                        try (KafkaProducer<byte[], byte[]> producer =
                                 new KafkaProducer<>(tp, new ByteArraySerializer(), new ByteArraySerializer())) {
                            producer.initTransactions();
                        }
                    }
                }
            }
        }
        // ACLs reach the broker's authorizer from the metadata log.
        Thread.sleep(2000);
    }

    private static String outcome(Action action, Properties client, String resource) {
        try {
            return action.run(client, resource);
        } catch (Throwable t) {
            Throwable cause = t;
            while ((cause instanceof ExecutionException || cause.getClass() == org.apache.kafka.common.KafkaException.class)
                && cause.getCause() != null) {
                cause = cause.getCause();
            }
            return cause.getClass().getSimpleName();
        }
    }

    private static Map<String, String> runMatrix(String bootstrap) throws Exception {
        setUp(bootstrap);
        Map<String, String> out = new LinkedHashMap<>();
        for (Api api : APIS) {
            for (String scenario : SCENARIOS) {
                String key = api.name() + "\t" + scenario;
                if (scenario.equals("prefixed") && api.type() == ResourceType.CLUSTER) {
                    out.put(key, "n/a");
                    continue;
                }
                out.put(key, outcome(api.action(), client(bootstrap, user(api, scenario)), api.resource(scenario)));
            }
        }
        return out;
    }

    @Test
    @Timeout(1200)
    void everyCellIsKafkas() throws Exception {
        Map<String, String> kafka = runMatrix(need("acl.kafka"));
        Map<String, String> keel = runMatrix(need("acl.keel"));
        List<String> differ = new ArrayList<>();
        try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Path.of(need("acl.out"))))) {
            w.println("api\tscenario\tkeel\tkafka");
            for (Map.Entry<String, String> e : kafka.entrySet()) {
                String k = keel.get(e.getKey());
                w.println(e.getKey() + "\t" + k + "\t" + e.getValue());
                System.out.printf("%-40s keel=%-40s kafka=%s%n", e.getKey().replace('\t', ' '), k, e.getValue());
                if (!e.getValue().equals(k)) {
                    differ.add(e.getKey().replace('\t', ' ') + ": keel " + k + ", kafka " + e.getValue());
                }
            }
        }
        assertEquals(List.of(), differ, "cells where Keel's outcome is not Kafka's");
    }
}
