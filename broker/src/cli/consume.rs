//! `keel topic consume`: Fetch from each partition's leader and print one line per
//! record in an rpk-like `-f` format, or with `--format json` one JSON object per line.
//! No consumer group: positions live in this process only.
//!
//! When it stops: after `-n NUM` records; with `--exit-at-end`, once every partition
//! read has reached the high watermark it had when that partition was last fetched;
//! otherwise it follows new records until interrupted (Ctrl-C).

use std::collections::BTreeMap;
use std::io::Write;

use bytes::Bytes;
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::records::RecordBatchDecoder;
use serde_json::json;

use super::client::{failed, kafka_error, topic_name, usage, CliResult, Client};
use super::output::Format;
use super::topic::{leaders, list_offsets, topic_metadata, EARLIEST, LATEST};

const FETCH_WAIT_MS_MAX: i32 = 500;
const FETCH_BYTES_MAX: i32 = 50 << 20;
const PARTITION_FETCH_BYTES_MAX: i32 = 1 << 20;
/// Bytes of a v2 record batch header before `lastOffsetDelta` ends: base offset (8),
/// batch length (4), leader epoch (4), magic (1), CRC (4), attributes (2), delta (4).
const BATCH_HEADER_BYTES_MIN: usize = 27;

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Read only this partition (default: all).
    #[arg(short, long)]
    pub partition: Option<i32>,
    /// Where to start: start, end, OFFSET, -N (N before the end) or @TIMESTAMP_MS.
    #[arg(short, long, default_value = "start", allow_hyphen_values = true)]
    pub offset: String,
    /// Stop after NUM records.
    #[arg(short, long)]
    pub num: Option<u64>,
    /// Line format: %v value, %k key, %p partition, %o offset, %t topic, %T timestamp,
    /// %h headers, %% a percent sign; \n, \t and \\ escapes.
    #[arg(short = 'f', long, default_value = "%v\\n")]
    pub record_format: String,
    /// Stop once every partition read is at its high watermark.
    #[arg(long)]
    pub exit_at_end: bool,
}

/// Where consumption starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Start,
    End,
    At(i64),
    BeforeEnd(i64),
    Timestamp(i64),
}

pub fn parse_offset_spec(text: &str) -> CliResult<OffsetSpec> {
    let bad = || usage(format!("bad offset {text:?}: expected start, end, OFFSET, -N or @TIMESTAMP_MS"));
    match text {
        "start" | "oldest" => Ok(OffsetSpec::Start),
        "end" | "newest" => Ok(OffsetSpec::End),
        _ => {
            if let Some(ts) = text.strip_prefix('@') {
                return ts.parse().map(OffsetSpec::Timestamp).map_err(|_| bad());
            }
            if let Some(n) = text.strip_prefix('-') {
                return n.parse::<i64>().ok().filter(|n| *n >= 0).map(OffsetSpec::BeforeEnd).ok_or_else(bad);
            }
            text.parse::<i64>().ok().filter(|n| *n >= 0).map(OffsetSpec::At).ok_or_else(bad)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(Vec<u8>),
    Value,
    Key,
    Partition,
    Offset,
    Topic,
    Timestamp,
    Headers,
    /// The whole record as one JSON object (`--format json`).
    Json,
}

fn parse_format(text: &str) -> CliResult<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut literal = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let field = match c {
            '%' => match chars.next() {
                Some('v') => Piece::Value,
                Some('k') => Piece::Key,
                Some('p') => Piece::Partition,
                Some('o') => Piece::Offset,
                Some('t') => Piece::Topic,
                Some('T') => Piece::Timestamp,
                Some('h') => Piece::Headers,
                Some('%') => Piece::Text(b"%".to_vec()),
                other => {
                    return Err(usage(format!(
                        "bad format {text:?}: unknown %{}",
                        other.map(String::from).unwrap_or_default()
                    )))
                }
            },
            '\\' => match chars.next() {
                Some('n') => Piece::Text(b"\n".to_vec()),
                Some('t') => Piece::Text(b"\t".to_vec()),
                Some('r') => Piece::Text(b"\r".to_vec()),
                Some('\\') => Piece::Text(b"\\".to_vec()),
                other => {
                    return Err(usage(format!(
                        "bad format {text:?}: unknown \\{}",
                        other.map(String::from).unwrap_or_default()
                    )))
                }
            },
            c => {
                let mut b = [0u8; 4];
                literal.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                continue;
            }
        };
        if !literal.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut literal)));
        }
        pieces.push(field);
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

struct Position {
    leader: i32,
    next_offset: i64,
    high_watermark: i64,
}

pub fn run(client: &mut Client, output: Format, args: ConsumeArgs) -> CliResult<()> {
    let spec = parse_offset_spec(&args.offset)?;
    let format = parse_format(&args.record_format)?;
    // JSON lines replace the -f format (which is still checked above).
    let format = match output {
        Format::Json => vec![Piece::Json, Piece::Text(b"\n".to_vec())],
        Format::Table => format,
    };
    let metadata = topic_metadata(client, &args.topic)?;
    let mut partition_leaders = leaders(&metadata);
    if let Some(p) = args.partition {
        let leader = partition_leaders.get(&p).copied().ok_or_else(|| {
            usage(format!("topic {} has no partition {p} (it has {})", args.topic, partition_leaders.len()))
        })?;
        partition_leaders = BTreeMap::from([(p, leader)]);
    }
    let mut positions = start_positions(client, &args.topic, &partition_leaders, spec)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut printed = 0u64;
    loop {
        if args.num.is_some_and(|n| printed >= n) {
            break;
        }
        if args.exit_at_end && positions.values().all(|p| p.next_offset >= p.high_watermark) {
            break;
        }
        let leaders: Vec<i32> = {
            let mut l: Vec<i32> = positions.values().map(|p| p.leader).collect();
            l.sort_unstable();
            l.dedup();
            l
        };
        for leader in leaders {
            let limit = args.num.map(|n| n - printed);
            printed += fetch_from(client, &args.topic, leader, &mut positions, &format, limit, &mut out)?;
            if let Err(e) = out.flush() {
                return stdout_closed(e);
            }
        }
    }
    Ok(())
}

/// A closed stdout (`| head`) ends the command quietly.
fn stdout_closed(e: std::io::Error) -> CliResult<()> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Ok(());
    }
    Err(failed(format!("writing stdout: {e}")))
}

fn start_positions(
    client: &mut Client,
    topic: &str,
    partition_leaders: &BTreeMap<i32, i32>,
    spec: OffsetSpec,
) -> CliResult<BTreeMap<i32, Position>> {
    let starts = list_offsets(client, topic, partition_leaders, EARLIEST)?;
    let ends = list_offsets(client, topic, partition_leaders, LATEST)?;
    let by_time = match spec {
        OffsetSpec::Timestamp(ts) => Some(list_offsets(client, topic, partition_leaders, ts)?),
        _ => None,
    };
    let mut positions = BTreeMap::new();
    for (&partition, &leader) in partition_leaders {
        let (start, end) = (starts[&partition], ends[&partition]);
        let next_offset = match spec {
            OffsetSpec::Start => start,
            OffsetSpec::End => end,
            OffsetSpec::At(o) => o.clamp(start, end),
            OffsetSpec::BeforeEnd(n) => (end - n).max(start),
            OffsetSpec::Timestamp(_) => match by_time.as_ref().and_then(|t| t.get(&partition)) {
                Some(&o) if o >= 0 => o,
                _ => end,
            },
        };
        positions.insert(partition, Position { leader, next_offset, high_watermark: end });
    }
    Ok(positions)
}

/// One Fetch to `leader` for its partitions; prints what came back and moves the
/// positions on. Gives the number of records printed.
fn fetch_from(
    client: &mut Client,
    topic: &str,
    leader: i32,
    positions: &mut BTreeMap<i32, Position>,
    format: &[Piece],
    limit: Option<u64>,
    out: &mut impl Write,
) -> CliResult<u64> {
    let partitions = positions
        .iter()
        .filter(|(_, p)| p.leader == leader)
        .map(|(&partition, p)| {
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(p.next_offset)
                .with_partition_max_bytes(PARTITION_FETCH_BYTES_MAX)
                .with_current_leader_epoch(-1)
                .with_log_start_offset(-1)
                .with_last_fetched_epoch(-1)
        })
        .collect();
    let request = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(FETCH_WAIT_MS_MAX)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES_MAX)
        .with_isolation_level(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(partitions)]);
    let response = client.broker(leader)?.send(&request)?;
    if response.error_code != 0 {
        return Err(failed(format!("fetch from broker {leader}: {}", kafka_error(response.error_code, None))));
    }
    let mut printed = 0u64;
    for t in &response.responses {
        for p in &t.partitions {
            let position = positions
                .get_mut(&p.partition_index)
                .ok_or_else(|| failed(format!("fetch answered {topic}/{} which was not asked", p.partition_index)))?;
            if p.error_code != 0 {
                return Err(failed(format!(
                    "fetch {topic}/{}: {}",
                    p.partition_index,
                    kafka_error(p.error_code, None)
                )));
            }
            position.high_watermark = p.high_watermark;
            let Some(records) = p.records.clone() else { continue };
            let remaining = limit.map(|l| l - printed);
            printed += print_batches(records, topic, p.partition_index, position, format, remaining, out)?;
        }
    }
    Ok(printed)
}

/// Prints the records of complete batches at or after the position; a batch cut off at
/// the end of the response is fetched again next time.
fn print_batches(
    mut records: Bytes,
    topic: &str,
    partition: i32,
    position: &mut Position,
    format: &[Piece],
    limit: Option<u64>,
    out: &mut impl Write,
) -> CliResult<u64> {
    let mut printed = 0u64;
    while records.len() >= BATCH_HEADER_BYTES_MIN {
        let base_offset = i64::from_be_bytes(records[0..8].try_into().expect("8 bytes"));
        let batch_length = i32::from_be_bytes(records[8..12].try_into().expect("4 bytes"));
        let last_offset_delta = i32::from_be_bytes(records[23..27].try_into().expect("4 bytes"));
        let batch_bytes = 12 + batch_length.max(0) as usize;
        if records.len() < batch_bytes {
            break;
        }
        let mut batch = records.split_to(batch_bytes);
        let sets = RecordBatchDecoder::decode_all(&mut batch)
            .map_err(|e| failed(format!("{topic}/{partition}: cannot decode batch at offset {base_offset}: {e}")))?;
        for record in sets.iter().flat_map(|s| s.records.iter()) {
            if record.control || record.offset < position.next_offset {
                continue;
            }
            if limit.is_some_and(|l| printed >= l) {
                return Ok(printed);
            }
            if let Err(e) = write_record(out, format, topic, partition, record) {
                stdout_closed(e)?;
                // The reader went away (`| head`): nothing more to do.
                std::process::exit(0);
            }
            printed += 1;
            position.next_offset = record.offset + 1;
        }
        position.next_offset = position.next_offset.max(base_offset + last_offset_delta as i64 + 1);
    }
    Ok(printed)
}

fn write_record(
    out: &mut impl Write,
    format: &[Piece],
    topic: &str,
    partition: i32,
    record: &kafka_protocol::records::Record,
) -> std::io::Result<()> {
    for piece in format {
        match piece {
            Piece::Text(t) => out.write_all(t)?,
            Piece::Value => out.write_all(record.value.as_deref().unwrap_or_default())?,
            Piece::Key => out.write_all(record.key.as_deref().unwrap_or_default())?,
            Piece::Partition => write!(out, "{partition}")?,
            Piece::Offset => write!(out, "{}", record.offset)?,
            Piece::Topic => out.write_all(topic.as_bytes())?,
            Piece::Timestamp => write!(out, "{}", record.timestamp)?,
            Piece::Headers => {
                let pairs: Vec<String> = record
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        format!("{}={}", k.as_str(), String::from_utf8_lossy(v.as_deref().unwrap_or_default()))
                    })
                    .collect();
                out.write_all(pairs.join(",").as_bytes())?
            }
            Piece::Json => {
                fn text(b: &Option<Bytes>) -> Option<std::borrow::Cow<'_, str>> {
                    b.as_deref().map(String::from_utf8_lossy)
                }
                let headers: serde_json::Map<String, serde_json::Value> =
                    record.headers.iter().map(|(k, v)| (k.to_string(), json!(text(v)))).collect();
                let object = json!({
                    "topic": topic,
                    "partition": partition,
                    "offset": record.offset,
                    "timestamp": record.timestamp,
                    "key": text(&record.key),
                    "value": text(&record.value),
                    "headers": headers,
                });
                serde_json::to_writer(&mut *out, &object)?
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_specs() {
        assert_eq!(parse_offset_spec("start").unwrap(), OffsetSpec::Start);
        assert_eq!(parse_offset_spec("end").unwrap(), OffsetSpec::End);
        assert_eq!(parse_offset_spec("42").unwrap(), OffsetSpec::At(42));
        assert_eq!(parse_offset_spec("-5").unwrap(), OffsetSpec::BeforeEnd(5));
        assert_eq!(parse_offset_spec("@1700000000000").unwrap(), OffsetSpec::Timestamp(1_700_000_000_000));
        for bad in ["abc", "", "@x", "--1", "1.5"] {
            assert_eq!(parse_offset_spec(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn formats() {
        let f = parse_format("%k=%v\\n").unwrap();
        assert_eq!(f, vec![Piece::Key, Piece::Text(b"=".to_vec()), Piece::Value, Piece::Text(b"\n".to_vec())]);
        assert!(parse_format("%q").is_err());
    }
}
