package dev.keel.compat;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.UnsupportedSaslMechanismException;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * SASL/OAUTHBEARER with Kafka's unsecured login module, refused tokens, and KIP-368
 * re-authentication. Set by compat/security/run.sh with system properties:
 * sec.oauth (HOST:PORT of a SASL_PLAINTEXT listener offering OAUTHBEARER with unsecured
 * tokens), sec.reauth (HOST:PORT of a SASL_PLAINTEXT listener whose sessions last 2 s,
 * connections.max.reauth.ms=2000), sec.user and sec.password (a SCRAM-SHA-512 user there),
 * sec.sasl_ssl (HOST:PORT of a SASL_SSL listener whose own mechanism list, SCRAM-SHA-256
 * and SCRAM-SHA-512, lacks OAUTHBEARER) and sec.ca (the PEM CA of its certificate).
 */
class OAuthTest {
    private static final int RECORDS = 200;

    private static String need(String name) {
        String v = System.getProperty(name);
        assertNotNull(v, "system property " + name + " (set by compat/security/run.sh)");
        return v;
    }

    private static Properties oauth() {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, need("sec.oauth"));
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        p.put(SaslConfigs.SASL_MECHANISM, "OAUTHBEARER");
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
            + "required unsecuredLoginStringClaim_sub=\"alice\";");
        return p;
    }

    @Test
    @Timeout(120)
    void produceConsumeOverOAuthBearerWithUnsecuredTokens() throws Exception {
        Properties base = oauth();
        String topic = "oauth-" + UUID.randomUUID();
        try (Admin admin = Admin.create(base)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        Properties pp = new Properties();
        pp.putAll(base);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, ("v" + i).getBytes(StandardCharsets.UTF_8)));
            }
            producer.flush();
        }
        Properties cp = new Properties();
        cp.putAll(base);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(new TopicPartition(topic, 0)));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (got.size() < RECORDS && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
        }
        assertEquals(RECORDS, got.size());
        assertEquals("v0", got.get(0));
    }

    /** The token the next client logs in with: what {@link FixedToken} hands out. */
    static volatile String fixedToken;

    /** A login callback handler that hands out {@link #fixedToken}, whatever it holds. */
    public static class FixedToken implements AuthenticateCallbackHandler {
        @Override
        public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> entries) {
        }

        @Override
        public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
            for (Callback c : callbacks) {
                if (!(c instanceof OAuthBearerTokenCallback)) {
                    throw new UnsupportedCallbackException(c);
                }
                String value = fixedToken;
                long now = System.currentTimeMillis();
                ((OAuthBearerTokenCallback) c).token(new OAuthBearerToken() {
                    public String value() { return value; }
                    public Set<String> scope() { return Set.of(); }
                    // The client believes it good for an hour: only the broker judges it.
                    public long lifetimeMs() { return now + 3_600_000L; }
                    public String principalName() { return "alice"; }
                    public Long startTimeMs() { return now; }
                });
            }
        }

        @Override
        public void close() {
        }
    }

    private static String unsecured(String claims) {
        Base64.Encoder enc = Base64.getUrlEncoder().withoutPadding();
        return enc.encodeToString("{\"alg\":\"none\"}".getBytes(StandardCharsets.UTF_8)) + "."
            + enc.encodeToString(claims.getBytes(StandardCharsets.UTF_8)) + ".";
    }

    private static void assertRefused(String token) {
        fixedToken = token;
        Properties p = oauth();
        p.put(SaslConfigs.SASL_LOGIN_CALLBACK_HANDLER_CLASS, FixedToken.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> producer.send(new ProducerRecord<>("oauth-refused", new byte[1])).get(20, TimeUnit.SECONDS));
            assertInstanceOf(SaslAuthenticationException.class, e.getCause());
            assertEquals("{\"status\":\"invalid_token\"}", e.getCause().getMessage());
        }
    }

    @Test
    @Timeout(60)
    void expiredTokenIsRefused() {
        long exp = System.currentTimeMillis() / 1000 - 60;
        assertRefused(unsecured("{\"sub\":\"alice\",\"exp\":" + exp + "}"));
    }

    @Test
    @Timeout(60)
    void garbageTokenIsRefused() {
        assertRefused("not-a-jwt");
    }

    private static double clientMetric(Map<MetricName, ? extends Metric> metrics, String name) {
        double total = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : metrics.entrySet()) {
            if (m.getKey().name().equals(name) && m.getValue().metricValue() instanceof Double) {
                total += (Double) m.getValue().metricValue();
            }
        }
        return total;
    }

    /** Produces over SCRAM-SHA-512 for more than 3 session lifetimes (2 s each): no error. */
    @Test
    @Timeout(120)
    void producerReauthenticatesAcrossSessionLifetimes() throws Exception {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, need("sec.reauth"));
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        p.put(SaslConfigs.SASL_MECHANISM, "SCRAM-SHA-512");
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.scram.ScramLoginModule required "
            + "username=\"" + need("sec.user") + "\" password=\"" + need("sec.password") + "\";");
        String topic = "reauth-" + UUID.randomUUID();
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(8);
            int sent = 0;
            while (System.nanoTime() < end) {
                List<Future<RecordMetadata>> batch = new ArrayList<>();
                for (int i = 0; i < 50; i++) {
                    batch.add(producer.send(new ProducerRecord<>(topic, ("r" + sent++).getBytes(StandardCharsets.UTF_8))));
                }
                for (Future<RecordMetadata> f : batch) {
                    f.get(30, TimeUnit.SECONDS);
                }
                Thread.sleep(20);
            }
            double reauths = clientMetric(producer.metrics(), "successful-reauthentication-total");
            double failed = clientMetric(producer.metrics(), "failed-reauthentication-total");
            System.out.println("reauth: " + sent + " records, " + reauths + " re-authentications, " + failed + " failed");
            assertTrue(reauths >= 3, "the producer re-authenticated " + reauths + " times");
            assertEquals(0.0, failed);
        }
    }

    /**
     * Per-listener mechanisms (Kafka's listener.name.sasl_ssl.sasl.enabled.mechanisms): the
     * same OAUTHBEARER login that the SASL_PLAINTEXT listener accepts is refused on the
     * SASL_SSL listener, with the enabled mechanisms of that listener in the error.
     */
    @Test
    @Timeout(60)
    void oauthBearerIsOfferedOnlyOnTheListenersThatEnableIt() throws Exception {
        try (Admin admin = Admin.create(oauth())) {
            assertNotNull(admin.describeCluster().clusterId().get(20, TimeUnit.SECONDS));
        }
        Properties p = oauth();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, need("sec.sasl_ssl"));
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, need("sec.ca"));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> producer.send(new ProducerRecord<>("oauth-elsewhere", new byte[1])).get(20, TimeUnit.SECONDS));
            assertInstanceOf(UnsupportedSaslMechanismException.class, e.getCause());
            System.out.println("SASL_SSL refused OAUTHBEARER: " + e.getCause().getMessage());
            // Kafka's order (its HashSet's), which Keel follows.
            assertTrue(e.getCause().getMessage().endsWith("enabled mechanisms are [SCRAM-SHA-512, SCRAM-SHA-256]"),
                e.getCause().getMessage());
        }
    }
}
