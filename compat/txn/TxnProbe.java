import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * The small client the transaction proofs (compat/txn/copier.sh, tools.sh) need around
 * Kafka's own tools, for what those tools do not do: hold a transaction open, read end
 * offsets at both isolation levels, watch a group's committed offsets, and check the
 * copier's output. Java client 4.4.0; compiled once per run with javac against Kafka's
 * classpath (compat/kafka/classpath.sh).
 *
 *   open BOOTSTRAP TXN_ID TOPIC PARTITION RECORDS TIMEOUT_MS
 *       begins a transaction, sends RECORDS records to TOPIC-PARTITION, flushes, prints
 *       "open"; then reads commands from stdin: "abort", "commit", "quit" (or end of
 *       input: exit with the transaction left open)
 *   produce BOOTSTRAP TOPIC PARTITION RECORDS   plain (non-transactional) records
 *   offsets BOOTSTRAP TOPIC PARTITION   "read_committed=N read_uncommitted=M" (ListOffsets latest)
 *   count BOOTSTRAP TOPIC PARTITION     records a read_committed consumer reads from the start
 *   monitor BOOTSTRAP GROUP TOPIC INTERVAL_MS
 *       every interval: "committed=a,b,c end=x,y,z at=T" (the group's committed offsets
 *       and the topic's end offsets, per partition, asked for from T, milliseconds since
 *       the epoch), or "unavailable ..." while the broker does not answer
 *   verify BOOTSTRAP INPUT OUTPUT
 *       reads INPUT whole and OUTPUT with read_committed, per partition, and prints
 *       "input=N output=M missing=A duplicated=B unexpected=C order_mismatch_partitions=D"
 */
public final class TxnProbe {
    private static final Duration READ_DEADLINE = Duration.ofSeconds(120);

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            usage();
        }
        String bootstrap = args[1];
        switch (args[0]) {
            case "open" -> open(bootstrap, args[2], new TopicPartition(args[3], Integer.parseInt(args[4])),
                Integer.parseInt(args[5]), Integer.parseInt(args[6]));
            case "produce" -> produce(bootstrap, new TopicPartition(args[2], Integer.parseInt(args[3])),
                Integer.parseInt(args[4]));
            case "offsets" -> offsets(bootstrap, new TopicPartition(args[2], Integer.parseInt(args[3])));
            case "count" -> System.out.println(
                read(bootstrap, new TopicPartition(args[2], Integer.parseInt(args[3])), IsolationLevel.READ_COMMITTED).size());
            case "monitor" -> monitor(bootstrap, args[2], args[3], Long.parseLong(args[4]));
            case "verify" -> verify(bootstrap, args[2], args[3]);
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: TxnProbe open|produce|offsets|count|monitor|verify BOOTSTRAP ...");
        System.exit(2);
    }

    private static void open(String bootstrap, String transactionalId, TopicPartition partition, int records,
                             int timeoutMs) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs);
        KafkaProducer<String, String> producer =
            new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
        producer.initTransactions();
        producer.beginTransaction();
        for (int i = 0; i < records; i++) {
            producer.send(new ProducerRecord<>(partition.topic(), partition.partition(), null,
                transactionalId + "-" + i)).get();
        }
        producer.flush();
        System.out.println("open");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            switch (line.trim()) {
                case "abort" -> {
                    producer.abortTransaction();
                    System.out.println("aborted");
                }
                case "commit" -> {
                    producer.commitTransaction();
                    System.out.println("committed");
                }
                case "quit" -> {
                    producer.close(Duration.ofSeconds(5));
                    return;
                }
                default -> System.out.println("unknown command " + line);
            }
        }
        // End of input: leave the transaction open, as a crashed producer would.
        Runtime.getRuntime().halt(0);
    }

    private static void produce(String bootstrap, TopicPartition partition, int records) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(partition.topic(), partition.partition(), null, "plain-" + i)).get();
            }
        }
    }

    private static Admin admin(String bootstrap, int timeoutMs) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, timeoutMs);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, timeoutMs);
        return Admin.create(props);
    }

    private static void offsets(String bootstrap, TopicPartition partition) throws Exception {
        try (Admin admin = admin(bootstrap, 30_000)) {
            long committed = latest(admin, List.of(partition), IsolationLevel.READ_COMMITTED).get(partition);
            long uncommitted = latest(admin, List.of(partition), IsolationLevel.READ_UNCOMMITTED).get(partition);
            System.out.println("read_committed=" + committed + " read_uncommitted=" + uncommitted);
        }
    }

    private static Map<TopicPartition, Long> latest(Admin admin, List<TopicPartition> partitions,
                                                    IsolationLevel isolation) throws Exception {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        partitions.forEach(p -> request.put(p, OffsetSpec.latest()));
        Map<TopicPartition, Long> result = new HashMap<>();
        admin.listOffsets(request, new ListOffsetsOptions(isolation)).all().get()
            .forEach((p, info) -> result.put(p, info.offset()));
        return result;
    }

    private static void monitor(String bootstrap, String group, String topic, long intervalMs) throws Exception {
        try (Admin admin = admin(bootstrap, 3_000)) {
            List<TopicPartition> partitions = null;
            while (true) {
                long asked = System.currentTimeMillis();
                try {
                    if (partitions == null) {
                        int count = admin.describeTopics(List.of(topic)).allTopicNames().get(5, TimeUnit.SECONDS)
                            .get(topic).partitions().size();
                        partitions = new ArrayList<>();
                        for (int p = 0; p < count; p++) {
                            partitions.add(new TopicPartition(topic, p));
                        }
                    }
                    Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                        .partitionsToOffsetAndMetadata().get(5, TimeUnit.SECONDS);
                    Map<TopicPartition, Long> end = latest(admin, partitions, IsolationLevel.READ_UNCOMMITTED);
                    StringBuilder c = new StringBuilder("committed=");
                    StringBuilder e = new StringBuilder(" end=");
                    for (int i = 0; i < partitions.size(); i++) {
                        TopicPartition p = partitions.get(i);
                        OffsetAndMetadata offset = committed.get(p);
                        c.append(i == 0 ? "" : ",").append(offset == null ? 0 : offset.offset());
                        e.append(i == 0 ? "" : ",").append(end.get(p));
                    }
                    System.out.println(c.append(e).append(" at=").append(asked));
                } catch (Exception err) {
                    System.out.println("unavailable " + err.getClass().getSimpleName());
                }
                System.out.flush();
                Thread.sleep(intervalMs);
            }
        }
    }

    /** Every record of a partition up to its end offset at this isolation level, in order. */
    private static List<String> read(String bootstrap, TopicPartition partition, IsolationLevel isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation.toString().toLowerCase());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long end = consumer.endOffsets(List.of(partition)).get(partition);
            long deadline = System.nanoTime() + READ_DEADLINE.toNanos();
            while (consumer.position(partition) < end) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("read " + partition + " only to " + consumer.position(partition)
                        + " of " + end + " in " + READ_DEADLINE.toSeconds() + " s");
                }
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    values.add(record.value());
                }
            }
        }
        return values;
    }

    private static void verify(String bootstrap, String input, String output) throws Exception {
        int partitions;
        try (Admin admin = admin(bootstrap, 30_000)) {
            partitions = admin.describeTopics(List.of(input)).allTopicNames().get().get(input).partitions().size();
        }
        Map<String, Integer> inputCounts = new HashMap<>();
        Map<String, Integer> outputCounts = new TreeMap<>();
        int inputTotal = 0;
        int outputTotal = 0;
        int orderMismatch = 0;
        for (int p = 0; p < partitions; p++) {
            List<String> in = read(bootstrap, new TopicPartition(input, p), IsolationLevel.READ_UNCOMMITTED);
            List<String> out = read(bootstrap, new TopicPartition(output, p), IsolationLevel.READ_COMMITTED);
            in.forEach(v -> inputCounts.merge(v, 1, Integer::sum));
            out.forEach(v -> outputCounts.merge(v, 1, Integer::sum));
            inputTotal += in.size();
            outputTotal += out.size();
            // The copier keeps each record's partition, and one producer writes each output
            // partition: exactly once means the same sequence, in the same order.
            if (!in.equals(out)) {
                orderMismatch++;
            }
            System.out.println("partition " + p + ": input=" + in.size() + " output=" + out.size()
                + (in.equals(out) ? " same sequence" : " DIFFERENT sequence"));
        }
        long inputDuplicates = inputCounts.values().stream().filter(c -> c > 1).count();
        long missing = inputCounts.keySet().stream().filter(v -> !outputCounts.containsKey(v)).count();
        long duplicated = outputCounts.entrySet().stream()
            .filter(e -> inputCounts.containsKey(e.getKey()))
            .mapToLong(e -> Math.max(0, e.getValue() - 1)).sum();
        long unexpected = outputCounts.keySet().stream().filter(v -> !inputCounts.containsKey(v)).count();
        List<String> examples = new ArrayList<>();
        inputCounts.keySet().stream().filter(v -> !outputCounts.containsKey(v)).sorted().limit(5)
            .forEach(v -> examples.add("missing:" + v));
        outputCounts.entrySet().stream().filter(e -> e.getValue() > 1).limit(5)
            .forEach(e -> examples.add("duplicated:" + e.getKey() + "x" + e.getValue()));
        if (!examples.isEmpty()) {
            System.out.println("examples: " + String.join(" ", examples));
        }
        System.out.println("input=" + inputTotal + " input_not_unique=" + inputDuplicates + " output=" + outputTotal
            + " missing=" + missing + " duplicated=" + duplicated + " unexpected=" + unexpected
            + " order_mismatch_partitions=" + orderMismatch);
    }
}
