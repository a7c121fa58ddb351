//! EndTxn: commit or abort the producer's open transaction. The coordinator records
//! the decision (PrepareCommit or PrepareAbort) durably, writes the markers, records
//! the transaction complete, and answers once the markers are written, or after a
//! bound with the outcome already decided ([`crate::txn`]).

use std::rc::Rc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use crate::txn::shell as txn_shell;

/// Version 5 is transaction protocol version 2 (KIP-890): the epoch moves at every
/// end, and the answer names the producer id and epoch to go on with.
pub const VERSIONS: (i16, i16) = (0, 5);
/// The first version that may answer PRODUCER_FENCED ([`super::fenced_as_understood`]).
const VERSION_FENCED: i16 = 2;

pub async fn handle(shard: &Rc<Shard>, ctx: &RequestContext, version: i16, req: EndTxnRequest) -> EndTxnResponse {
    let txn_id = req.transactional_id.0.to_string();
    // As Kafka: WRITE on the transactional id.
    if !super::authorized(shard, ctx, acl::operation::WRITE, acl::resource::TRANSACTIONAL_ID, &txn_id) {
        return EndTxnResponse::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    let (producer_id, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let bump = version >= 5;
    let txn_id_log = txn_id.clone();
    let ended = txn_shell::on_coordinator(shard, &txn_id.clone(), move |s, partition| async move {
        let now = now_ms();
        let decide = |m: Option<&crate::txn::state::TxnMeta>| match m {
            None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
            Some(m) => m.end(producer_id, epoch, commit, now, bump),
        };
        let (decided, completion) = txn_shell::transition(&s, partition, &txn_id, decide).await?;
        txn_shell::wait_completed(completion).await;
        // The producer to go on with: a new epoch after a bump (or a new producer id
        // once the epochs ran out), as the completed state holds it; or, when this
        // node stopped coordinating the id meanwhile, as the state this request made
        // durable does. Never the request's own epoch: a client told so after a bump
        // starts its sequences again under the old epoch, and its next batch is taken
        // for a duplicate of the ended transaction's first one (and acknowledged
        // without being written).
        let current = s.txn.borrow().txns.get(&txn_id).map(|m| (m.producer_id, m.producer_epoch));
        Ok(current.unwrap_or((decided.producer_id, decided.producer_epoch)))
    })
    .await;
    tracing::debug!(%txn_id_log, version, producer_id, epoch, commit, answer = ?ended, "EndTxn");
    let resp = EndTxnResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    match ended {
        Ok(Ok((id, epoch))) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
        Ok(Err(code)) | Err(code) => resp.with_error_code(super::fenced_as_understood(code, version, VERSION_FENCED)),
    }
}
