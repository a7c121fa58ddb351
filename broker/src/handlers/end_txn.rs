//! EndTxn: commit or abort the producer's open transaction. The coordinator records
//! the decision (PrepareCommit or PrepareAbort) durably, writes the markers, records
//! the transaction complete, and answers once the markers are written, or after a
//! bound with the outcome already decided ([`crate::txn`]).

use std::rc::Rc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};

use crate::errors;
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use crate::txn::shell as txn_shell;

/// Version 5 belongs to transaction protocol version 2, which Keel does not finalize.
pub const VERSIONS: (i16, i16) = (0, 4);

pub async fn handle(shard: &Rc<Shard>, req: EndTxnRequest) -> EndTxnResponse {
    let txn_id = req.transactional_id.0.to_string();
    let (producer_id, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let ended = txn_shell::on_coordinator(shard, &txn_id.clone(), move |s, partition| async move {
        let now = now_ms();
        let decide = |m: Option<&crate::txn::state::TxnMeta>| match m {
            None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
            Some(m) => m.end(producer_id, epoch, commit, now),
        };
        let (_, completion) = txn_shell::transition(&s, partition, &txn_id, decide).await?;
        txn_shell::wait_completed(completion).await;
        Ok(())
    })
    .await;
    match ended {
        Ok(Ok(())) => EndTxnResponse::default(),
        Ok(Err(code)) | Err(code) => EndTxnResponse::default().with_error_code(code),
    }
}
