//! `keel topic produce`: one record per stdin line, sent as v2 record batches to each
//! partition's leader. Partitioning follows Kafka's default: murmur2 of the key, round
//! robin without a key.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use bytes::{Bytes, BytesMut};
use clap::Args;
use indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

use super::client::{failed, kafka_error, str_bytes, topic_name, usage, CliResult, Client};
use super::output::{print_json, Format};
use super::topic::{key_value, leaders, topic_metadata};

/// A request is sent once it holds this many records...
const REQUEST_RECORDS_MAX: usize = 1_000;
/// ...or this many bytes of keys and values.
const REQUEST_BYTES_MAX: usize = 1 << 20;
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// Per-record errors of a partition shown in its error line.
const RECORD_ERRORS_SHOWN_MAX: usize = 3;

#[derive(Args, Debug)]
pub struct ProduceArgs {
    pub topic: String,
    /// Write every record to this partition.
    #[arg(short, long)]
    pub partition: Option<i32>,
    /// Key of every record (partitions by its murmur2 hash, as Kafka's producer does).
    #[arg(short, long)]
    pub key: Option<String>,
    /// Record header KEY=VALUE; repeat for more.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// all, 1 or 0.
    #[arg(long, default_value = "all")]
    pub acks: String,
}

/// Kafka's `Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for a key.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

fn parse_acks(acks: &str) -> CliResult<i16> {
    match acks {
        "all" | "-1" => Ok(-1),
        "1" => Ok(1),
        "0" => Ok(0),
        other => Err(usage(format!("bad --acks {other:?}: expected all, 1 or 0"))),
    }
}

struct Producer<'a> {
    client: &'a mut Client,
    topic: String,
    acks: i16,
    partition_leaders: BTreeMap<i32, i32>,
    pending: BTreeMap<i32, Vec<Record>>,
    pending_records: usize,
    pending_bytes: usize,
    produced: u64,
    errors: Vec<String>,
}

pub fn run(client: &mut Client, format: Format, args: ProduceArgs) -> CliResult<()> {
    let acks = parse_acks(&args.acks)?;
    let mut headers = IndexMap::new();
    for h in &args.headers {
        let (k, v) = key_value(h, "-H")?;
        headers.insert(str_bytes(&k), Some(Bytes::from(v)));
    }
    let metadata = topic_metadata(client, &args.topic)?;
    let partition_leaders = leaders(&metadata);
    let partitions = partition_leaders.len() as i32;
    if let Some(p) = args.partition {
        if !partition_leaders.contains_key(&p) {
            return Err(usage(format!("topic {} has no partition {p} (it has {partitions})", args.topic)));
        }
    }
    let key = args.key.map(Bytes::from);
    let fixed_partition = args.partition.or_else(|| key.as_ref().map(|k| partition_for_key(k, partitions)));
    let mut producer = Producer {
        client,
        topic: args.topic,
        acks,
        partition_leaders,
        pending: BTreeMap::new(),
        pending_records: 0,
        pending_bytes: 0,
        produced: 0,
        errors: Vec::new(),
    };
    let stdin = std::io::stdin().lock();
    let mut next_round_robin = 0;
    for line in stdin.split(b'\n') {
        let mut value = line.map_err(|e| failed(format!("reading stdin: {e}")))?;
        if value.last() == Some(&b'\r') {
            value.pop();
        }
        let partition = fixed_partition.unwrap_or_else(|| {
            let p = next_round_robin;
            next_round_robin = (next_round_robin + 1) % partitions;
            p
        });
        producer.add(partition, key.clone(), Bytes::from(value), &headers)?;
    }
    producer.flush()?;
    producer.finish(format)
}

impl Producer<'_> {
    fn add(
        &mut self,
        partition: i32,
        key: Option<Bytes>,
        value: Bytes,
        headers: &IndexMap<StrBytes, Option<Bytes>>,
    ) -> CliResult<()> {
        let batch = self.pending.entry(partition).or_default();
        self.pending_bytes += value.len() + key.as_ref().map_or(0, |k| k.len());
        batch.push(record(batch.len() as i64, key, value, headers.clone()));
        self.pending_records += 1;
        if self.pending_records >= REQUEST_RECORDS_MAX || self.pending_bytes >= REQUEST_BYTES_MAX {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends the pending records: one request per leader, one batch per partition.
    fn flush(&mut self) -> CliResult<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_records = 0;
        self.pending_bytes = 0;
        let mut by_leader: HashMap<i32, Vec<PartitionProduceData>> = HashMap::new();
        let mut counts: HashMap<i32, usize> = HashMap::new();
        for (partition, records) in pending {
            let mut buf = BytesMut::new();
            let options = RecordEncodeOptions { version: 2, compression: Compression::None };
            RecordBatchEncoder::encode(&mut buf, &records, &options)
                .map_err(|e| failed(format!("cannot encode records for {}/{partition}: {e}", self.topic)))?;
            counts.insert(partition, records.len());
            let leader = self.partition_leaders[&partition];
            let data = PartitionProduceData::default().with_index(partition).with_records(Some(buf.freeze()));
            by_leader.entry(leader).or_default().push(data);
        }
        for (leader, partitions) in by_leader {
            let sent: usize = partitions.iter().map(|p| counts[&p.index]).sum();
            let request = ProduceRequest::default()
                .with_acks(self.acks)
                .with_timeout_ms(PRODUCE_TIMEOUT_MS)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(&self.topic))
                    .with_partition_data(partitions)]);
            if leader < 0 {
                self.errors.push(format!("{}: no leader: {}", self.topic, kafka_error(5, None)));
                continue;
            }
            let conn = self.client.broker(leader)?;
            if self.acks == 0 {
                conn.send_only(&request)?;
                self.produced += sent as u64;
                continue;
            }
            let response = conn.send(&request)?;
            for t in &response.responses {
                for p in &t.partition_responses {
                    if p.error_code == 0 {
                        self.produced += counts.get(&p.index).copied().unwrap_or(0) as u64;
                    } else {
                        let mut reason = kafka_error(p.error_code, p.error_message.as_ref());
                        for r in p.record_errors.iter().take(RECORD_ERRORS_SHOWN_MAX) {
                            let message = r.batch_index_error_message.as_ref().map_or("", |m| m.as_str());
                            reason.push_str(&format!("; record {}: {message}", r.batch_index));
                        }
                        self.errors.push(format!("{}/{}: {reason}", self.topic, p.index));
                    }
                }
            }
        }
        Ok(())
    }

    /// Reports what was produced: a line on stderr (stdout stays free for pipes), or with
    /// `--format json` one object on stdout, errors included.
    fn finish(self, format: Format) -> CliResult<()> {
        match format {
            Format::Table => {
                for e in &self.errors {
                    eprintln!("keel: produce to {e}");
                }
                if self.errors.is_empty() {
                    eprintln!("produced {} records to {}", self.produced, self.topic);
                }
            }
            Format::Json => print_json(&serde_json::json!({
                "topic": self.topic,
                "produced": self.produced,
                "errors": self.errors,
            })),
        }
        if !self.errors.is_empty() {
            return Err(failed(format!(
                "{} produce requests failed; {} records produced",
                self.errors.len(),
                self.produced
            )));
        }
        Ok(())
    }
}

/// A record at `offset` within its batch, stamped now.
fn record(offset: i64, key: Option<Bytes>, value: Bytes, headers: IndexMap<StrBytes, Option<Bytes>>) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        timestamp_type: TimestampType::Creation,
        offset,
        // The encoder starts a new batch where `offset - sequence` changes, and Kafka
        // takes one batch per partition: keep it constant so the batch's base
        // sequence stays NO_SEQUENCE (only the base sequence is written).
        sequence: NO_SEQUENCE + offset as i32,
        timestamp: now_ms(),
        key,
        value: Some(value),
        headers,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors of Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&str, i32); 6] = [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            ("abc", 479470107),
        ];
        for (input, expected) in cases {
            assert_eq!(murmur2(input.as_bytes()), expected, "murmur2({input:?})");
        }
    }

    /// Kafka refuses a Produce with more than one batch for a partition.
    #[test]
    fn pending_records_of_a_partition_encode_as_one_batch() {
        let records: Vec<Record> =
            (0..5).map(|i| record(i, None, Bytes::from(format!("v{i}")), IndexMap::new())).collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        let batches = kafka_protocol::records::RecordBatchDecoder::decode_batch_info(&mut buf.freeze()).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!((batches[0].record_count, batches[0].base_sequence, batches[0].producer_id), (5, -1, -1));
    }

    #[test]
    fn keys_map_into_the_partition_range() {
        for key in ["a", "b", "key-17", ""] {
            let p = partition_for_key(key.as_bytes(), 3);
            assert!((0..3).contains(&p));
        }
    }
}
