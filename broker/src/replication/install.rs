//! Installing a leader's snapshot: copying the batches below it from the leader.
//!
//! A new member of a partition's group (a reassignment adds it) has nothing, and the
//! leader keeps its Raft log only from what every earlier member had (`GroupStorage`).
//! So the leader sends a Raft snapshot: its applied index and the Kafka offset there,
//! but not the batches. The new member copies those batches, from the leader's log
//! start up to that offset, as a Kafka follower would: with Fetch requests to the
//! leader's Kafka listener, one megabyte at a time, keeping each batch's offsets and
//! leader epoch (a compacted log keeps its gaps). Then the group goes on from the
//! snapshot with ordinary Raft appends.
//!
//! Why Fetch and not the Raft transport: the leader serves it from its read path with
//! its own limits, it needs no new message kinds, and a copy that fails half-way
//! starts again from where it stopped, from whoever leads by then (everything below
//! the snapshot is committed, so every later leader has it).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use keel_protocol::batch::BatchHeader;
use keel_raft::GroupId;
use keel_storage::log::{self, PartitionLog};
use keel_storage::StorageError;

use crate::errors;

/// Fetch version used: the first that names topics by id, as Raft groups do.
const FETCH_VERSION: i16 = 13;
/// Bytes asked for per Fetch.
const FETCH_BYTES: i32 = 1 << 20;
/// Largest Fetch response accepted.
const RESPONSE_BYTES_MAX: usize = 8 << 20;
/// How long one Fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// One partition's answer to a Fetch.
struct Fetched {
    error: i16,
    log_start: i64,
    records: Bytes,
}

/// Copies the batches of `group`'s partition below `upto` from its leader into `log`,
/// which is emptied first. `leader_addr` names the Kafka listener of the current leader
/// (asked again after each failure); `on_batch` sees every batch copied. Returns the
/// leader's log start offset, which the caller makes this log's start.
pub async fn copy_below(
    log: &Rc<RefCell<PartitionLog>>,
    group: GroupId,
    upto: i64,
    leader_addr: &dyn Fn() -> Option<String>,
    on_batch: &dyn Fn(&BatchHeader, &[u8]),
) -> Result<i64, String> {
    let mut next: Option<i64> = None;
    let mut log_start = 0;
    let mut failures = 0u32;
    loop {
        if next.is_some_and(|n| n >= upto) || (next.is_none() && upto == 0) {
            if next.is_none() {
                log::reset(log, 0).await.map_err(|e| e.to_string())?;
            }
            return Ok(log_start);
        }
        let answer = match leader_addr() {
            Some(addr) => fetch(&addr, group, next.unwrap_or(log_start)).await,
            None => Err("no leader known".to_string()),
        };
        let fetched = match answer {
            Ok(f) if f.error == errors::NONE => f,
            Ok(f) if f.error == errors::OFFSET_OUT_OF_RANGE && f.log_start > next.unwrap_or(log_start) => {
                // The leader's log starts later than this copy is (its retention moved
                // on): start again from there.
                log_start = f.log_start;
                next = None;
                continue;
            }
            other => {
                failures += 1;
                let why = match other {
                    Ok(f) => format!("error code {}", f.error),
                    Err(e) => e,
                };
                if failures % 50 == 1 {
                    tracing::warn!(%group, error = %why, "copying a partition from its leader: retrying");
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        failures = 0;
        log_start = log_start.max(fetched.log_start);
        let mut records = fetched.records;
        if records.is_empty() {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            continue;
        }
        while records.len() >= keel_protocol::batch::BATCH_HEADER_LEN {
            let header = BatchHeader::parse(&records).map_err(|e| e.to_string())?;
            let len = header.total_len();
            if records.len() < len {
                break;
            }
            let batch = records.split_to(len);
            if header.base_offset >= upto {
                next = Some(upto);
                break;
            }
            if next.is_some_and(|n| header.last_offset() < n) {
                continue;
            }
            keel_protocol::batch::validate(&batch).map_err(|e| format!("a copied batch failed its check: {e}"))?;
            if next.is_none() {
                log::reset(log, header.base_offset).await.map_err(|e| e.to_string())?;
            }
            append(log, &batch).await.map_err(|e| e.to_string())?;
            on_batch(&header, &batch);
            next = Some(header.last_offset() + 1);
        }
    }
}

async fn append(log: &Rc<RefCell<PartitionLog>>, batch: &[u8]) -> Result<(), StorageError> {
    log::roll_if_needed(log, batch.len()).await?;
    log.borrow_mut().append_copied(batch)?;
    Ok(())
}

/// One Fetch of `group`'s partition from `offset`, to the Kafka listener at `addr`.
async fn fetch(addr: &str, group: GroupId, offset: i64) -> Result<Fetched, String> {
    let topic_id = uuid::Uuid::from_u128(group.topic);
    let partition = FetchPartition::default()
        .with_partition(group.partition as i32)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(FETCH_BYTES);
    let request = FetchRequest::default()
        // Any replica id (>= 0): an out-of-range answer then names the log start.
        .with_replica_id(BrokerId(i32::MAX))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(vec![partition])]);
    let decoded: FetchResponse =
        crate::outbound::call(addr, ApiKey::Fetch, FETCH_VERSION, &request, RESPONSE_BYTES_MAX, FETCH_TIMEOUT).await?;
    if decoded.error_code != errors::NONE {
        return Ok(Fetched { error: decoded.error_code, log_start: -1, records: Bytes::new() });
    }
    let part = decoded.responses.into_iter().flat_map(|t| t.partitions).next().ok_or("no partition answered")?;
    Ok(Fetched { error: part.error_code, log_start: part.log_start_offset, records: part.records.unwrap_or_default() })
}
