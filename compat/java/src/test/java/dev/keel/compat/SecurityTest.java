package dev.keel.compat;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Map;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The Java clients over SSL with mutual TLS, and over SASL_SSL with SCRAM-SHA-512; wrong
 * credentials refused. Set by compat/security/run.sh with system properties:
 * sec.ssl, sec.sasl_ssl (HOST:PORT of those listeners), sec.ca (PEM CA), sec.client_pem
 * (PEM key and certificate of the client), sec.user and sec.password (a SCRAM-SHA-512 user).
 */
class SecurityTest {
    private static final int RECORDS = 200;

    private static String need(String name) {
        String v = System.getProperty(name);
        assertNotNull(v, "system property " + name + " (set by compat/security/run.sh)");
        return v;
    }

    private static Properties tls(String bootstrap, String protocol) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, protocol);
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, need("sec.ca"));
        return p;
    }

    private static Properties mutualTls() {
        Properties p = tls(need("sec.ssl"), "SSL");
        p.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, need("sec.client_pem"));
        return p;
    }

    private static Properties scram(String password) {
        Properties p = tls(need("sec.sasl_ssl"), "SASL_SSL");
        p.put(SaslConfigs.SASL_MECHANISM, "SCRAM-SHA-512");
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.scram.ScramLoginModule required "
            + "username=\"" + need("sec.user") + "\" password=\"" + password + "\";");
        return p;
    }

    /** Creates a topic, produces RECORDS records and reads them back, all with `base` settings. */
    private static void roundTrip(Properties base) throws Exception {
        String topic = "security-" + UUID.randomUUID();
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
        assertEquals("v" + (RECORDS - 1), got.get(RECORDS - 1));
    }

    @Test
    @Timeout(120)
    void produceConsumeOverMutualTls() throws Exception {
        roundTrip(mutualTls());
    }

    @Test
    @Timeout(120)
    void produceConsumeOverSaslSslScram512() throws Exception {
        roundTrip(scram(need("sec.password")));
    }

    /** What kafka-configs --describe would show without its client-quota half (quotas are not served yet). */
    @Test
    @Timeout(60)
    void scramCredentialsAreDescribed() throws Exception {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, Broker.bootstrap());
        try (Admin admin = Admin.create(p)) {
            UserScramCredentialsDescription d =
                admin.describeUserScramCredentials(List.of(need("sec.user"))).all().get(30, TimeUnit.SECONDS)
                    .get(need("sec.user"));
            Map<ScramMechanism, Integer> got = new HashMap<>();
            for (ScramCredentialInfo info : d.credentialInfos()) {
                got.put(info.mechanism(), info.iterations());
            }
            assertEquals(Map.of(ScramMechanism.SCRAM_SHA_512, 4096, ScramMechanism.SCRAM_SHA_256, 8192), got);
        }
    }

    @Test
    @Timeout(60)
    void wrongPasswordIsRefused() {
        Properties p = scram("not-the-password");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> producer.send(new ProducerRecord<>("security-refused", new byte[1])).get(20, TimeUnit.SECONDS));
            assertInstanceOf(SaslAuthenticationException.class, e.getCause());
            assertTrue(e.getCause().getMessage().contains("invalid credentials with SASL mechanism SCRAM-SHA-512"),
                e.getCause().getMessage());
        }
    }

    @Test
    @Timeout(60)
    void noClientCertificateIsRefusedOnTheMutualTlsListener() {
        Properties p = tls(need("sec.ssl"), "SSL");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            ExecutionException e = assertThrows(ExecutionException.class,
                () -> producer.send(new ProducerRecord<>("security-refused", new byte[1])).get(20, TimeUnit.SECONDS));
            assertInstanceOf(SslAuthenticationException.class, e.getCause());
        }
    }
}
