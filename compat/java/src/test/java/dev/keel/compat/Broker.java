package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/** Connection settings and small helpers shared by the compatibility tests. */
final class Broker {
    static final Duration API_TIMEOUT = Duration.ofSeconds(30);
    private static final AtomicLong SEQ = new AtomicLong();

    private Broker() {
    }

    private static volatile String checkedBootstrap;

    /**
     * -Dbootstrap (or -Dkeel.bootstrap), else $KEEL_BOOTSTRAP, else 127.0.0.1:9092. The first
     * call checks that the address accepts TCP connections, so that a missing broker fails
     * every test at once instead of after client timeouts.
     */
    static String bootstrap() {
        String cached = checkedBootstrap;
        if (cached != null) {
            return cached;
        }
        String v = System.getProperty("bootstrap");
        if (v == null || v.isBlank()) {
            v = System.getProperty("keel.bootstrap");
        }
        if (v == null || v.isBlank()) {
            v = System.getenv("KEEL_BOOTSTRAP");
        }
        if (v == null || v.isBlank()) {
            v = "127.0.0.1:9092";
        }
        v = v.trim();
        String first = v.split(",")[0];
        int colon = first.lastIndexOf(':');
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(first.substring(0, colon), Integer.parseInt(first.substring(colon + 1))),
                5000);
        } catch (IOException | RuntimeException e) {
            throw new AssertionError("no broker reachable at " + v + ": " + e, e);
        }
        checkedBootstrap = v;
        return v;
    }

    static int bootstrapPort() {
        String first = bootstrap().split(",")[0];
        return Integer.parseInt(first.substring(first.lastIndexOf(':') + 1));
    }

    /** A topic name that no earlier run against the same broker has used. */
    static String uniqueTopic(String prefix) {
        return "compat-" + prefix + "-" + UUID.randomUUID().toString().substring(0, 8)
            + "-" + SEQ.incrementAndGet();
    }

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "keel-compat-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    static Properties producerProps() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "keel-compat-producer");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "45000");
        return p;
    }

    static KafkaProducer<byte[], byte[]> producer(Map<String, String> overrides) {
        Properties p = producerProps();
        p.putAll(overrides);
        return new KafkaProducer<>(p);
    }

    /** A consumer without a group: assign() and seek() only, no offset commits. */
    static Properties consumerProps() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "keel-compat-consumer");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    static KafkaConsumer<byte[], byte[]> consumer(Map<String, String> overrides) {
        Properties p = consumerProps();
        p.putAll(overrides);
        return new KafkaConsumer<>(p);
    }

    static void createTopic(Admin admin, String topic, int partitions, Map<String, String> configs)
            throws ExecutionException, InterruptedException, TimeoutException {
        NewTopic nt = new NewTopic(topic, partitions, REPLICATION_FACTOR).configs(configs);
        admin.createTopics(List.of(nt)).all().get(30, TimeUnit.SECONDS);
        awaitTopic(admin, topic, partitions);
    }

    static void createTopic(String topic, int partitions)
            throws ExecutionException, InterruptedException, TimeoutException {
        try (Admin admin = admin()) {
            createTopic(admin, topic, partitions, Map.of());
        }
    }

    /** Waits until describeTopics reports the topic with the given partition count and leaders. */
    static TopicDescription awaitTopic(Admin admin, String topic, int partitions)
            throws InterruptedException, ExecutionException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                boolean ready = d.partitions().size() == partitions
                    && d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty());
                if (ready) {
                    return d;
                }
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                    throw e;
                }
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("topic " + topic + " did not become ready with "
                    + partitions + " partitions within 30 s");
            }
            Thread.sleep(100);
        }
    }

    /** Replication factor of the topics the tests create: KEEL_TEST_RF, default 1. */
    static final short REPLICATION_FACTOR = Short.parseShort(System.getenv().getOrDefault("KEEL_TEST_RF", "1"));

    static Node singleNode(Admin admin) throws ExecutionException, InterruptedException {
        Collection<Node> nodes = admin.describeCluster().nodes().get();
        if (nodes.size() != 1) {
            throw new AssertionError("expected a single-node cluster, got " + nodes);
        }
        return nodes.iterator().next();
    }

    static Set<String> listTopics(Admin admin) throws ExecutionException, InterruptedException {
        return admin.listTopics().names().get();
    }

    /**
     * Polls until {@code expected} records arrived or the timeout passed; returns what arrived,
     * in arrival order.
     */
    static List<ConsumerRecord<byte[], byte[]>> pollAtLeast(KafkaConsumer<byte[], byte[]> consumer,
                                                            int expected, Duration timeout) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (out.size() < expected && System.nanoTime() < deadline) {
            ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
            recs.forEach(out::add);
        }
        return out;
    }

    static List<TopicPartition> partitions(String topic, int count) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            tps.add(new TopicPartition(topic, i));
        }
        return tps;
    }
}
