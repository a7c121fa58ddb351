package dev.keel.compat;

import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The 3 → 4 members rounds of {@link GroupsTest} repeated under CPU contention: busy loops,
 * one per core and bounded in time, compete with the broker and the clients throughout,
 * while a producer keeps writing. Each round uses a fresh group and passes only if every
 * partition ends owned exactly once, no record below a committed offset is processed
 * again, every record is processed and no member fails.
 *
 * <p>KEEL_GROUP_STRESS_ROUNDS sets the rounds per protocol (2 by default, the quick form;
 * {@code ./test.sh --stress} runs 10). Each round prints a "GROUPS-STRESS" line with its
 * result and rebalance time.
 */
class GroupsStressTest {
    private static final int ROUNDS = Integer.parseInt(System.getenv().getOrDefault("KEEL_GROUP_STRESS_ROUNDS", "2"));
    private static final Duration CONVERGE_TIMEOUT = Duration.ofSeconds(60);
    /** A burner never outlives this, even if the JVM dies. */
    private static final long BURN_SECONDS_MAX = 60 + ROUNDS * 120L;

    /** One busy loop per core, each a child process bounded in time. */
    private static final class Burners implements AutoCloseable {
        private final List<Process> procs = new ArrayList<>();

        Burners() throws Exception {
            for (int i = 0; i < Runtime.getRuntime().availableProcessors(); i++) {
                procs.add(new ProcessBuilder("timeout", Long.toString(BURN_SECONDS_MAX), "sh", "-c", "while :; do :; done")
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start());
            }
        }

        @Override
        public void close() throws InterruptedException {
            for (Process p : procs) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly().waitFor();
            }
        }
    }

    /** Milliseconds until done, or -1 at the timeout. */
    private static long await(BooleanSupplier done, Duration timeout) throws InterruptedException {
        long start = System.nanoTime();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() - start > timeout.toNanos()) {
                return -1;
            }
            Thread.sleep(20);
        }
        return (System.nanoTime() - start) / 1_000_000;
    }

    /** One round; returns null if it passed, else why it failed. The rebalance time goes in ms[0]. */
    private static String round(String label, Map<String, String> protocol, String topic, long[] ms) throws Exception {
        String group = "stress-group-" + label + "-" + UUID.randomUUID();
        GroupsTest.Ledger ledger = new GroupsTest.Ledger();
        List<GroupsTest.Member> members = new ArrayList<>();
        String failure = null;
        try {
            try (GroupsTest.Writer writer = new GroupsTest.Writer(topic, 20)) {
                for (int i = 0; i < 3; i++) {
                    members.add(new GroupsTest.Member(label + "-" + i, GroupsTest.memberProps(group, protocol), topic, ledger));
                }
                if (await(() -> GroupsTest.ownedExactlyOnce(members, 4), CONVERGE_TIMEOUT) < 0) {
                    return "3 members never owned 4 partitions each: " + GroupsTest.describe(members);
                }
                Thread.sleep(1000);
                members.add(new GroupsTest.Member(label + "-3", GroupsTest.memberProps(group, protocol), topic, ledger));
                ms[0] = await(() -> GroupsTest.ownedExactlyOnce(members, 3), CONVERGE_TIMEOUT);
                if (ms[0] < 0) {
                    return "4 members never owned 3 partitions each: " + GroupsTest.describe(members);
                }
                Thread.sleep(1000);
            }
            Map<TopicPartition, Long> end = GroupsTest.endOffsets(topic);
            long processed = await(() -> end.entrySet().stream().allMatch(e ->
                ledger.processed.getOrDefault(e.getKey(), Set.of()).size() >= e.getValue()), CONVERGE_TIMEOUT);
            if (processed < 0) {
                failure = "records never processed";
            } else if (!GroupsTest.ownedExactlyOnce(members, 3)) {
                failure = "not owned exactly once at the end: " + GroupsTest.describe(members);
            }
        } finally {
            for (GroupsTest.Member m : members) {
                try {
                    m.close();
                } catch (AssertionError e) {
                    failure = failure != null ? failure : e + ": " + e.getCause();
                }
            }
        }
        if (failure == null && !ledger.violations.isEmpty()) {
            failure = "records below a committed offset processed again: " + ledger.violations.subList(0, Math.min(5, ledger.violations.size()));
        }
        return failure;
    }

    private void rounds(String label, Map<String, String> protocol) throws Exception {
        String topic = Broker.uniqueTopic("stress-" + label);
        Broker.createTopic(topic, GroupsTest.PARTITIONS);
        List<String> failures = new ArrayList<>();
        List<Long> times = new ArrayList<>();
        try (Burners burners = new Burners()) {
            for (int n = 1; n <= ROUNDS; n++) {
                long[] ms = {-1};
                String failure = round(label, protocol, topic, ms);
                if (ms[0] >= 0) {
                    times.add(ms[0]);
                }
                if (failure != null) {
                    failures.add("round " + n + ": " + failure);
                }
                System.out.printf("GROUPS-STRESS broker=%s protocol=%s round=%d/%d %s rebalance_3_to_4_ms=%d%s%n",
                    Broker.bootstrap(), label, n, ROUNDS, failure == null ? "passed" : "FAILED", ms[0],
                    failure == null ? "" : " " + failure);
            }
        }
        times.sort(null);
        System.out.printf("GROUPS-STRESS broker=%s protocol=%s passed=%d/%d rebalance_3_to_4_ms median=%d max=%d%n",
            Broker.bootstrap(), label, ROUNDS - failures.size(), ROUNDS,
            times.isEmpty() ? -1 : times.get(times.size() / 2), times.isEmpty() ? -1 : times.get(times.size() - 1));
        assertEquals(List.of(), failures);
    }

    @Test
    @Timeout(3600)
    void eagerThreeThenFourUnderCpuLoad() throws Exception {
        rounds("eager", GroupsTest.classic(RangeAssignor.class));
    }

    @Test
    @Timeout(3600)
    void cooperativeThreeThenFourUnderCpuLoad() throws Exception {
        rounds("cooperative", GroupsTest.classic(CooperativeStickyAssignor.class));
    }
}
