//! Consumers: read every partition with `assign()` and time each record.
//!
//! No consumer groups: Keel serves plain fetches before it has a group
//! coordinator, and a group's rebalance would add pauses that belong to neither
//! broker's data path. Partitions are dealt round-robin to the consumers. Each
//! record's payload starts with its intended send time, so end-to-end latency is
//! receive time minus intended time (one host, one clock).

use crate::options::LoadSpec;
use crate::stats::Recorder;
use crate::{unix_nanos, PAYLOAD_HEADER_BYTES};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest one `poll` blocks, so a consumer notices `stop` promptly.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);

/// Where consumers begin reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    Beginning,
    End,
}

/// Deal `partitions` round-robin to `consumers` consumers.
pub fn split_partitions(partitions: &[(String, i32)], consumers: usize) -> Vec<Vec<(String, i32)>> {
    let consumers = consumers.max(1).min(partitions.len().max(1));
    let mut shares = vec![Vec::new(); consumers];
    for (index, partition) in partitions.iter().enumerate() {
        shares[index % consumers].push(partition.clone());
    }
    shares
}

/// The intended send time a payload carries, if it is one of ours.
pub fn intended_time(payload: Option<&[u8]>) -> Option<u64> {
    let head = payload?.get(..PAYLOAD_HEADER_BYTES)?;
    let mut bytes = [0u8; PAYLOAD_HEADER_BYTES];
    bytes.copy_from_slice(head);
    let nanos = u64::from_le_bytes(bytes);
    // A timestamp from some other writer, or garbage: ignore rather than record nonsense.
    let plausible = nanos > 1_500_000_000_000_000_000 && nanos < 4_000_000_000_000_000_000;
    plausible.then_some(nanos)
}

/// Build a consumer and assign it its partitions.
pub fn create_consumer(
    spec: &LoadSpec,
    partitions: &[(String, i32)],
    start_at: StartAt,
) -> Result<BaseConsumer, String> {
    let consumer: BaseConsumer =
        spec.client.consumer_config().create().map_err(|error| format!("cannot create consumer: {error}"))?;
    let offset = match start_at {
        StartAt::Beginning => Offset::Beginning,
        StartAt::End => Offset::End,
    };
    let mut assignment = TopicPartitionList::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        assignment
            .add_partition_offset(topic, *partition, offset)
            .map_err(|error| format!("cannot assign {topic}/{partition}: {error}"))?;
    }
    consumer.assign(&assignment).map_err(|error| format!("assign failed: {error}"))?;
    Ok(consumer)
}

/// Poll until `stop`, recording every record; starts reading at `start` (backlog runs
/// start consumers late).
pub fn run_consumer(
    consumer: BaseConsumer,
    start: Instant,
    recorder: &Recorder,
    stop: &AtomicBool,
) -> Result<(), String> {
    while Instant::now() < start {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        std::thread::sleep(POLL_TIMEOUT.min(start.saturating_duration_since(Instant::now())));
    }
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(POLL_TIMEOUT) {
            Some(Ok(message)) => {
                let now_ns = unix_nanos();
                let payload = message.payload();
                let bytes = payload.map_or(0, <[u8]>::len);
                recorder.on_consume(intended_time(payload), bytes, now_ns);
            }
            Some(Err(error)) => recorder.on_error(format!("consume failed: {error}")),
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_dealt_round_robin() {
        let partitions: Vec<(String, i32)> = (0..5).map(|p| ("t".to_string(), p)).collect();
        let shares = split_partitions(&partitions, 2);
        assert_eq!(shares.len(), 2);
        assert_eq!(shares[0].iter().map(|(_, p)| *p).collect::<Vec<_>>(), vec![0, 2, 4]);
        assert_eq!(split_partitions(&partitions[..1], 4).len(), 1);
    }

    #[test]
    fn payload_timestamps_round_trip() {
        let now = unix_nanos();
        let mut payload = vec![0u8; 32];
        payload[..8].copy_from_slice(&now.to_le_bytes());
        assert_eq!(intended_time(Some(&payload)), Some(now));
        assert_eq!(intended_time(Some(&payload[..4])), None);
        assert_eq!(intended_time(Some(&[0u8; 16])), None);
        assert_eq!(intended_time(None), None);
    }
}
