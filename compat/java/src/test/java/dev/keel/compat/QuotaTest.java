package dev.keel.compat;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.CreatePartitionsOptions;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DeleteTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ThrottlingQuotaExceededException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.DataInputStream;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Client quotas with the Java clients against Keel and against Apache Kafka (the
 * oracle) in the same run.
 *
 * <p>Admin steps: AlterClientQuotas with valid and invalid alterations (entity types and
 * their combinations, unknown keys, fractional byte rates, empty names, validate-only,
 * removals) and DescribeClientQuotas with every kind of filter; each step's outcome
 * (the entries described, or the exception class and message) must be Kafka's.
 *
 * <p>Throttling: a producer and a consumer whose client ids have a byte-rate quota move
 * {@link #THROTTLED_BYTES}; each must be throttled (the client's throttle-time metric
 * above zero) and take at least the time the quota allows past Kafka's ten-second
 * burst, while a client id without a quota is never throttled. The times on both
 * brokers are printed.
 *
 * <p>Controller mutation quotas (KIP-599): an Admin client whose client id may create
 * or delete one partition a second creates, deletes and adds partitions past its
 * bucket; each topic's outcome must be Kafka's, and refusals must carry a throttle.
 *
 * <p>Request time: an Admin client with request_percentage 0.0001 asks describeCluster
 * 12 times and must wait out throttles; one without the quota must not.
 *
 * <p>Connection creation rate (KIP-612): with two connections a second allowed from
 * 127.0.0.3, connections from that address send ApiVersions; which of them are answered
 * must be Kafka's.
 *
 * <p>Set by compat/security/quotas.sh: quota.keel and quota.kafka (HOST:PORT, plaintext),
 * quota.out (a TSV: step, Keel's outcome, Kafka's outcome).
 */
class QuotaTest {
    static final long QUOTA = 512 * 1024;
    static final int RECORD = 1024;
    static final long THROTTLED_BYTES = 8L * 1024 * 1024;

    interface Step {
        String run(Admin admin) throws Exception;
    }

    private static String need(String name) {
        String v = System.getProperty(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException("set -D" + name + " (compat/security/quotas.sh does)");
        }
        return v;
    }

    private static ClientQuotaEntity entity(String... typeAndName) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < typeAndName.length; i += 2) {
            m.put(typeAndName[i], typeAndName[i + 1]);
        }
        return new ClientQuotaEntity(m);
    }

    private static Step alter(ClientQuotaEntity e, boolean validateOnly, Object... keyAndValue) {
        return admin -> {
            List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
            for (int i = 0; i < keyAndValue.length; i += 2) {
                Object v = keyAndValue[i + 1];
                ops.add(new ClientQuotaAlteration.Op((String) keyAndValue[i], v == null ? null : ((Number) v).doubleValue()));
            }
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(e, ops)),
                new AlterClientQuotasOptions().validateOnly(validateOnly)).all().get();
            return "OK";
        };
    }

    private static Step describe(boolean strict, ClientQuotaFilterComponent... components) {
        return admin -> {
            ClientQuotaFilter filter = strict ? ClientQuotaFilter.containsOnly(Arrays.asList(components))
                : ClientQuotaFilter.contains(Arrays.asList(components));
            Map<ClientQuotaEntity, Map<String, Double>> got = admin.describeClientQuotas(filter).entities().get();
            TreeMap<String, String> sorted = new TreeMap<>();
            got.forEach((e, v) -> sorted.put(new TreeMap<>(e.entries()).toString(), new TreeMap<>(v).toString()));
            return sorted.toString();
        };
    }

    private static String outcome(Step step, Admin admin) {
        try {
            return step.run(admin);
        } catch (Throwable t) {
            Throwable cause = t;
            while (cause instanceof ExecutionException && cause.getCause() != null) {
                cause = cause.getCause();
            }
            return cause.getClass().getSimpleName() + ": " + cause.getMessage();
        }
    }

    /** The admin steps, in order; each sees what the steps before it left. */
    private static Map<String, Step> steps() {
        String user = ClientQuotaEntity.USER, client = ClientQuotaEntity.CLIENT_ID, ip = ClientQuotaEntity.IP;
        String produce = "producer_byte_rate", consume = "consumer_byte_rate";
        Map<String, Step> s = new LinkedHashMap<>();
        s.put("describe nothing yet", describe(false));
        s.put("set user alice", alter(entity(user, "alice"), false, produce, 1024, consume, 2048));
        s.put("set user alice and client app", alter(entity(user, "alice", client, "app"), false,
            consume, 4096, "request_percentage", 50.5));
        s.put("set default user", alter(entity(user, null), false, produce, 8192));
        s.put("set default user and default client", alter(entity(user, null, client, null), false,
            "controller_mutation_rate", 10.0));
        s.put("set default client", alter(entity(client, null), false, consume, 1000));
        s.put("set client app", alter(entity(client, "app"), false, produce, 3000));
        s.put("set ip 127.0.0.1", alter(entity(ip, "127.0.0.1"), false, "connection_creation_rate", 10));
        s.put("set default ip", alter(entity(ip, null), false, "connection_creation_rate", 5));
        s.put("fractional byte rate", alter(entity(user, "bob"), false, produce, 1.5));
        s.put("unknown key", alter(entity(user, "bob"), false, "bogus_rate", 1));
        s.put("ip key on a user", alter(entity(user, "bob"), false, "connection_creation_rate", 1));
        s.put("byte rate on an ip", alter(entity(ip, "127.0.0.2"), false, produce, 1));
        s.put("user and ip", alter(entity(user, "bob", ip, "127.0.0.1"), false, produce, 1));
        s.put("empty client id", alter(entity(client, ""), false, produce, 1));
        s.put("not an ip", alter(entity(ip, "not an address"), false, "connection_creation_rate", 1));
        s.put("fractional connection rate", alter(entity(ip, "127.0.0.3"), false, "connection_creation_rate", 2.5));
        s.put("validate only", alter(entity(user, "carol"), true, produce, 1));
        s.put("remove a key never set", alter(entity(user, "dave"), false, produce, null));
        s.put("remove one of alice's keys", alter(entity(user, "alice"), false, produce, null));
        s.put("describe all", describe(false));
        s.put("describe all, strict", describe(true));
        s.put("describe user alice", describe(false, ClientQuotaFilterComponent.ofEntity(user, "alice")));
        s.put("describe user alice, strict", describe(true, ClientQuotaFilterComponent.ofEntity(user, "alice")));
        s.put("describe default user", describe(false, ClientQuotaFilterComponent.ofDefaultEntity(user)));
        s.put("describe default user, strict", describe(true, ClientQuotaFilterComponent.ofDefaultEntity(user)));
        s.put("describe any user", describe(false, ClientQuotaFilterComponent.ofEntityType(user)));
        s.put("describe any user and any client, strict", describe(true,
            ClientQuotaFilterComponent.ofEntityType(user), ClientQuotaFilterComponent.ofEntityType(client)));
        s.put("describe any client", describe(false, ClientQuotaFilterComponent.ofEntityType(client)));
        s.put("describe client app", describe(false, ClientQuotaFilterComponent.ofEntity(client, "app")));
        s.put("describe any ip", describe(false, ClientQuotaFilterComponent.ofEntityType(ip)));
        s.put("describe an unknown user", describe(false, ClientQuotaFilterComponent.ofEntity(user, "nobody")));
        s.put("describe user and ip", describe(false, ClientQuotaFilterComponent.ofEntityType(user),
            ClientQuotaFilterComponent.ofEntityType(ip)));
        s.put("describe an unknown entity type", describe(false, ClientQuotaFilterComponent.ofEntityType("group")));
        s.put("remove every quota of alice and app", alter(entity(user, "alice", client, "app"), false,
            consume, null, "request_percentage", null));
        s.put("describe any user after removals", describe(false, ClientQuotaFilterComponent.ofEntityType(user)));
        return s;
    }

    private static Map<String, String> runSteps(String bootstrap) throws Exception {
        Map<String, String> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            for (Map.Entry<String, Step> step : steps().entrySet()) {
                out.put(step.getKey(), outcome(step.getValue(), admin));
                if (step.getKey().startsWith("set") || step.getKey().startsWith("remove")) {
                    // Brokers apply quota changes from the metadata log after answering.
                    Thread.sleep(300);
                }
            }
            // Leave nothing behind that would throttle the clients below.
            Map<String, Step> cleanup = new LinkedHashMap<>();
            Map<ClientQuotaEntity, Map<String, Double>> all =
                admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            List<ClientQuotaAlteration> removals = new ArrayList<>();
            all.forEach((e, v) -> removals.add(new ClientQuotaAlteration(e,
                v.keySet().stream().map(k -> new ClientQuotaAlteration.Op(k, null)).toList())));
            admin.alterClientQuotas(removals).all().get();
        }
        return out;
    }

    private static Admin admin(String bootstrap, String clientId) {
        return Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
            AdminClientConfig.CLIENT_ID_CONFIG, clientId));
    }

    private static void setQuota(Admin admin, ClientQuotaEntity e, String key, Double value) throws Exception {
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(e, List.of(new ClientQuotaAlteration.Op(key, value)))))
            .all().get();
    }

    /** Each topic's outcome of a KafkaFuture map: OK, or the exception's class (and message if throttled). */
    private static String outcomes(Map<String, ? extends org.apache.kafka.common.KafkaFuture<?>> futures, List<Integer> throttles) {
        TreeMap<String, String> out = new TreeMap<>();
        futures.forEach((name, f) -> {
            try {
                f.get();
                out.put(name, "OK");
            } catch (Throwable t) {
                Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
                if (cause instanceof ThrottlingQuotaExceededException q) {
                    throttles.add(q.throttleTimeMs());
                    out.put(name, cause.getClass().getSimpleName() + ": " + cause.getMessage());
                } else {
                    out.put(name, cause.getClass().getSimpleName());
                }
            }
        });
        return out.toString();
    }

    /** Controller mutation steps on one broker; adds a throttle check to `checks`. */
    private static Map<String, String> mutations(String name, String bootstrap, List<String> checks) throws Exception {
        Map<String, String> out = new LinkedHashMap<>();
        List<Integer> throttles = new ArrayList<>();
        ClientQuotaEntity mutator = entity(ClientQuotaEntity.CLIENT_ID, "mutator");
        // Each step on a connection of its own: a client waits out a throttle on its
        // connection before it sends again, and by then the bucket has refilled.
        try (Admin setup = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            setQuota(setup, mutator, "controller_mutation_rate", 1.0);
            Thread.sleep(1000);
            CreateTopicsOptions noRetry = new CreateTopicsOptions().retryOnQuotaViolation(false);
            try (Admin admin = admin(bootstrap, "mutator")) {
                out.put("mutations: create 20 partitions, a full bucket", outcomes(admin.createTopics(
                    List.of(new NewTopic("mq-a", 20, (short) 1)), noRetry).values(), throttles));
            }
            try (Admin admin = admin(bootstrap, "mutator")) {
                out.put("mutations: create three topics, an empty bucket", outcomes(admin.createTopics(List.of(
                    new NewTopic("mq-b", 1, (short) 1), new NewTopic("mq-bad", 0, (short) 1),
                    new NewTopic("mq-c", 1, (short) 1)), noRetry).values(), throttles));
            }
            try (Admin admin = admin(bootstrap, "mutator")) {
                out.put("mutations: delete a topic, an empty bucket", outcomes(admin.deleteTopics(List.of("mq-a"),
                    new DeleteTopicsOptions().retryOnQuotaViolation(false)).topicNameValues(), throttles));
            }
            try (Admin admin = admin(bootstrap, "mutator")) {
                out.put("mutations: add partitions, an empty bucket", outcomes(admin.createPartitions(
                    Map.of("mq-a", NewPartitions.increaseTo(21)),
                    new CreatePartitionsOptions().retryOnQuotaViolation(false)).values(), throttles));
            }
            setQuota(setup, mutator, "controller_mutation_rate", null);
            // Whatever the steps left (every outcome above is compared).
            setup.deleteTopics(List.of("mq-a", "mq-b", "mq-c")).topicNameValues().values().forEach(f -> {
                try {
                    f.get();
                } catch (Exception e) {
                    // Not created.
                }
            });
        }
        boolean ok = throttles.size() == 4 && throttles.stream().allMatch(t -> t > 0);
        checks.add(String.format("%s refusals for the controller mutation quota carry a throttle\t%s\t%s",
            name, ok ? "PASS" : "FAIL", "throttles " + throttles + " ms"));
        return out;
    }

    /**
     * An Admin client whose client id may use 0.0001% of a request thread (Kafka) or core
     * (Keel) asks describeCluster 12 times, as does one without a quota; the client waits
     * out each throttle it is given, so the throttled one must take seconds and the free
     * one must not. Returns the two times.
     */
    private static double[] requestTime(String name, String bootstrap, List<String> checks) throws Exception {
        ClientQuotaEntity busy = entity(ClientQuotaEntity.CLIENT_ID, "busy");
        double[] seconds = new double[2];
        try (Admin setup = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            setQuota(setup, busy, "request_percentage", 0.0001);
            Thread.sleep(1000);
            String[] ids = {"busy", "not-busy"};
            for (int i = 0; i < 2; i++) {
                try (Admin admin = admin(bootstrap, ids[i])) {
                    long start = System.nanoTime();
                    for (int n = 0; n < 12; n++) {
                        admin.describeCluster().nodes().get();
                    }
                    seconds[i] = (System.nanoTime() - start) / 1e9;
                }
            }
            setQuota(setup, busy, "request_percentage", null);
        }
        boolean ok = seconds[0] >= 3 && seconds[1] < 3;
        checks.add(String.format("%s a client over its request_percentage waits out throttles, one without does not\t%s\t%s",
            name, ok ? "PASS" : "FAIL", String.format("%.2f s throttled, %.2f s free", seconds[0], seconds[1])));
        return seconds;
    }

    /** Whether a connection from `source` gets an answer to ApiVersions v0 within 5 s. */
    private static boolean answered(String bootstrap, String source) {
        String[] hostPort = bootstrap.split(":");
        try (Socket s = new Socket()) {
            s.bind(new InetSocketAddress(source, 0));
            s.connect(new InetSocketAddress(hostPort[0], Integer.parseInt(hostPort[1])), 5000);
            s.setSoTimeout(5000);
            OutputStream o = s.getOutputStream();
            // ApiVersions v0: size, api key 18, version 0, correlation id 1, null client id.
            o.write(new byte[] {0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, (byte) 0xff, (byte) 0xff});
            o.flush();
            int size = new DataInputStream(s.getInputStream()).readInt();
            return size > 0;
        } catch (Exception e) {
            return false;
        }
    }

    /** Connections from 127.0.0.3 under a connection creation rate of 2 a second. */
    private static Map<String, String> connectionRate(String bootstrap) throws Exception {
        ClientQuotaEntity ip = entity(ClientQuotaEntity.IP, "127.0.0.3");
        try (Admin setup = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            setQuota(setup, ip, "connection_creation_rate", 2.0);
            Thread.sleep(1000);
            StringBuilder seen = new StringBuilder();
            // Ten seconds' worth (20) pass; the 21st is over the rate.
            for (int i = 0; i < 21; i++) {
                seen.append(answered(bootstrap, "127.0.0.3") ? 'A' : '-');
            }
            setQuota(setup, ip, "connection_creation_rate", null);
            return Map.of("connection rate: 21 connections from 127.0.0.3 at 2 a second (A answered)", seen.toString());
        }
    }

    private static double metricMax(Map<MetricName, ? extends Metric> metrics, String name) {
        return metrics.entrySet().stream()
            .filter(e -> e.getKey().name().equals(name) && !e.getKey().tags().containsKey("node-id"))
            .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue())
            .filter(v -> !Double.isNaN(v)).max().orElse(0);
    }

    /** Produces THROTTLED_BYTES as clientId; returns seconds taken and the throttle metric's max. */
    private static double[] produce(String bootstrap, String topic, String clientId) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ProducerConfig.ACKS_CONFIG, "1");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        byte[] value = new byte[RECORD];
        long start = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (long sent = 0; sent < THROTTLED_BYTES; sent += RECORD) {
                producer.send(new ProducerRecord<>(topic, value));
            }
            producer.flush();
            double seconds = (System.nanoTime() - start) / 1e9;
            return new double[] {seconds, metricMax(producer.metrics(), "produce-throttle-time-max")};
        }
    }

    /** Consumes THROTTLED_BYTES from the start as clientId; returns seconds taken and the throttle metric's max. */
    private static double[] consume(String bootstrap, String topic, String clientId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        long start = System.nanoTime();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long got = 0;
            long deadline = System.nanoTime() + 120_000_000_000L;
            while (got < THROTTLED_BYTES && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (var r : records) {
                    got += r.value().length;
                }
            }
            assertTrue(got >= THROTTLED_BYTES, clientId + " read " + got + " bytes of " + THROTTLED_BYTES);
            double seconds = (System.nanoTime() - start) / 1e9;
            return new double[] {seconds, metricMax(consumer.metrics(), "fetch-throttle-time-max")};
        }
    }

    /** Runs the throttling checks on one broker; returns its figures, and adds a line per check to `checks`. */
    private static Map<String, double[]> throttling(String name, String bootstrap, List<String> checks) throws Exception {
        String topic = "quota-throttle";
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            admin.alterClientQuotas(List.of(
                new ClientQuotaAlteration(entity(ClientQuotaEntity.CLIENT_ID, "throttled-producer"),
                    List.of(new ClientQuotaAlteration.Op("producer_byte_rate", (double) QUOTA))),
                new ClientQuotaAlteration(entity(ClientQuotaEntity.CLIENT_ID, "throttled-consumer"),
                    List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", (double) QUOTA))))).all().get();
        }
        Thread.sleep(1000);
        Map<String, double[]> figures = new LinkedHashMap<>();
        figures.put("free producer", produce(bootstrap, topic, "free-producer"));
        figures.put("throttled producer", produce(bootstrap, topic, "throttled-producer"));
        figures.put("free consumer", consume(bootstrap, topic, "free-consumer"));
        figures.put("throttled consumer", consume(bootstrap, topic, "throttled-consumer"));
        // Past Kafka's ten-second burst, the quota's rate: a lower bound with a margin.
        double least = 0.7 * ((double) THROTTLED_BYTES / QUOTA - 10);
        for (var e : figures.entrySet()) {
            double seconds = e.getValue()[0], throttle = e.getValue()[1];
            System.out.printf("%s %-20s %6.2f s  throttle-time-max %.0f ms%n", name, e.getKey(), seconds, throttle);
            boolean throttled = e.getKey().startsWith("throttled");
            String detail = String.format("%.2f s, throttle-time-max %.0f ms", seconds, throttle);
            if (throttled) {
                boolean ok = throttle > 0 && seconds >= least;
                checks.add(String.format("%s %s is throttled to its quota (at least %.1f s)\t%s\t%s",
                    name, e.getKey(), least, ok ? "PASS" : "FAIL", detail));
            } else {
                checks.add(String.format("%s %s without a quota is never throttled\t%s\t%s",
                    name, e.getKey(), throttle == 0 ? "PASS" : "FAIL", detail));
            }
        }
        return figures;
    }

    @Test
    @Timeout(900)
    void quotasAreAlteredDescribedAndEnforcedAsKafkaDoes() throws Exception {
        Map<String, String> kafka = runSteps(need("quota.kafka"));
        Map<String, String> keel = runSteps(need("quota.keel"));
        List<String> differ = new ArrayList<>();
        try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Path.of(need("quota.out"))))) {
            w.println("step\tkeel\tkafka");
            for (Map.Entry<String, String> e : kafka.entrySet()) {
                String k = keel.get(e.getKey());
                w.println(e.getKey() + "\t" + k.replace('\t', ' ') + "\t" + e.getValue().replace('\t', ' '));
                System.out.printf("%-45s keel=%s%n%-45s kafka=%s%n", e.getKey(), k, "", e.getValue());
                if (!e.getValue().equals(k)) {
                    differ.add(e.getKey() + ": keel " + k + ", kafka " + e.getValue());
                }
            }
            List<String> checks = new ArrayList<>();
            Map<String, String> kafkaMore = new LinkedHashMap<>(mutations("kafka", need("quota.kafka"), checks));
            Map<String, String> keelMore = new LinkedHashMap<>(mutations("keel", need("quota.keel"), checks));
            double[] kafkaRequests = requestTime("kafka", need("quota.kafka"), checks);
            double[] keelRequests = requestTime("keel", need("quota.keel"), checks);
            w.println(String.format("figure\trequest_percentage 0.0001, 12 describeCluster\tkeel %.2f s\tkafka %.2f s",
                keelRequests[0], kafkaRequests[0]));
            kafkaMore.putAll(connectionRate(need("quota.kafka")));
            keelMore.putAll(connectionRate(need("quota.keel")));
            for (Map.Entry<String, String> e : kafkaMore.entrySet()) {
                String k = keelMore.get(e.getKey());
                w.println(e.getKey() + "\t" + k + "\t" + e.getValue());
                System.out.printf("%-45s keel=%s%n%-45s kafka=%s%n", e.getKey(), k, "", e.getValue());
                if (!e.getValue().equals(k)) {
                    differ.add(e.getKey() + ": keel " + k + ", kafka " + e.getValue());
                }
            }
            Map<String, double[]> kafkaFigures = throttling("kafka", need("quota.kafka"), checks);
            Map<String, double[]> keelFigures = throttling("keel", need("quota.keel"), checks);
            for (var e : kafkaFigures.entrySet()) {
                double[] k = keelFigures.get(e.getKey());
                w.println("figure\t" + e.getKey() + String.format("\tkeel %.2f s\tkafka %.2f s", k[0], e.getValue()[0]));
            }
            for (String c : checks) {
                w.println("check\t" + c);
            }
            List<String> failed = checks.stream().filter(c -> c.contains("\tFAIL\t")).toList();
            assertTrue(failed.isEmpty(), String.join("\n", failed));
        }
        assertEquals(List.of(), differ, "steps where Keel's outcome is not Kafka's");
    }
}
