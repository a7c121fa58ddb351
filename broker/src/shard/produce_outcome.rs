//! What a Produce asks of one partition beyond its batches, and what the partition
//! answers.

/// The transactional id of a Produce request, and whether its partitions join the
/// transaction by being written (Produce v12+, transaction protocol version 2).
#[derive(Debug, Clone)]
pub struct TxnWrite {
    pub id: String,
    pub add: bool,
}

/// What the produce path answers for one partition.
#[derive(Debug, Clone, Default)]
pub struct ProduceOutcome {
    pub error: i16,
    pub message: Option<String>,
    pub base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
    /// The records refused, by index, each with why (KIP-467 `record_errors`).
    pub record_errors: Vec<(i32, String)>,
}

impl ProduceOutcome {
    /// A refusal with no message.
    pub fn refused(code: i16) -> ProduceOutcome {
        ProduceOutcome {
            error: code,
            message: None,
            base_offset: -1,
            log_append_time: -1,
            log_start_offset: -1,
            record_errors: Vec::new(),
        }
    }

    /// A refusal with why.
    pub(super) fn error(code: i16, message: impl Into<String>) -> ProduceOutcome {
        ProduceOutcome { message: Some(message.into()), ..ProduceOutcome::refused(code) }
    }
}
