//! Names of the metrics the shards record themselves (the rest are published at
//! scrape time by [`crate::admin::publish`]), and the help text of each.

pub const REQUESTS: &str = "keel_requests_total";
pub const REQUEST_BYTES: &str = "keel_request_bytes_total";
pub const RESPONSE_BYTES: &str = "keel_response_bytes_total";
pub const REQUEST_LATENCY: &str = "keel_request_latency_seconds";
pub const TOPIC_BYTES_IN: &str = "keel_topic_bytes_in_total";
pub const TOPIC_RECORDS_IN: &str = "keel_topic_records_in_total";
pub const TOPIC_BATCHES_IN: &str = "keel_topic_batches_in_total";
pub const TOPIC_BYTES_OUT: &str = "keel_topic_bytes_out_total";
pub const PRODUCE_BATCH_BYTES: &str = "keel_produce_batch_bytes";
pub const FSYNC_SECONDS: &str = "keel_fsync_seconds";
pub const FLUSH_PASS_SECONDS: &str = "keel_flush_pass_seconds";
pub const FLUSH_PASS_LOGS: &str = "keel_flush_pass_logs";
pub const FLUSH_PASS_BYTES: &str = "keel_flush_pass_bytes";
pub const CONSUMER_GROUP_LAG: &str = "keel_consumer_group_lag";

/// Registers the help text of the metrics above.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(REQUESTS, "Kafka requests answered, by API");
    describe_counter!(REQUEST_BYTES, Unit::Bytes, "Kafka request bytes received (size prefix included), by API");
    describe_counter!(RESPONSE_BYTES, Unit::Bytes, "Kafka response bytes sent, by API");
    describe_gauge!(
        REQUEST_LATENCY,
        Unit::Seconds,
        "Request latency percentiles by API over the last 30-60 s, from the frame read to the response ready"
    );
    describe_counter!(TOPIC_BYTES_IN, Unit::Bytes, "Record batch bytes appended, by topic (owner shard)");
    describe_counter!(TOPIC_RECORDS_IN, "Records appended, by topic (owner shard)");
    describe_counter!(TOPIC_BATCHES_IN, "Record batches appended, by topic (owner shard)");
    describe_counter!(
        TOPIC_BYTES_OUT,
        Unit::Bytes,
        "Record bytes sent to fetching clients, by topic (answering shard)"
    );
    describe_gauge!(
        PRODUCE_BATCH_BYTES,
        Unit::Bytes,
        "Produce batch size percentiles (one partition's records of a request)"
    );
    describe_gauge!(FSYNC_SECONDS, Unit::Seconds, "fdatasync latency percentiles of the shard journal");
    describe_histogram!(
        FLUSH_PASS_SECONDS,
        Unit::Seconds,
        "Duration of the shard's group-commit passes (journal write and fdatasync of every dirty log)"
    );
    describe_gauge!(FLUSH_PASS_LOGS, "Group-commit size percentiles: dirty partition logs made durable per pass");
    describe_gauge!(FLUSH_PASS_BYTES, Unit::Bytes, "Group-commit size percentiles: journal bytes written per pass");
    describe_gauge!(
        CONSUMER_GROUP_LAG,
        "Records a consumer group has still to read: high watermark less committed offset, summed over its partitions"
    );
}
