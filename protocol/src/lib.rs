//! Keel's view of the Kafka wire protocol.
//!
//! Framing (size-prefixed frames with a hard limit), request decoding and response
//! encoding on top of the `kafka-protocol` crate, and a zero-copy view of RecordBatch v2
//! headers with in-place patching of the fields a broker owns (base offset, leader epoch,
//! LogAppendTime) and CRC32C validation.
//!
//! Runs on every shard. It never does I/O and knows nothing about shards or storage:
//! everything here is a pure function of bytes, so it is fuzzable and unit-tested alone.

pub mod alloc;
pub mod batch;
pub mod frame;

pub use batch::{BatchError, BatchHeader, BATCH_HEADER_LEN};
pub use frame::{decode_request, encode_response, FrameError, RequestFrame};
pub use kafka_protocol;
