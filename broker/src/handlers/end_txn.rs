//! EndTxn: commit or abort the producer's open transaction. The coordinator records
//! the decision (PrepareCommit or PrepareAbort) durably, writes the markers, records
//! the transaction complete, and answers once the markers are written, or after a
//! bound with the outcome already decided ([`crate::txn`]).

use std::rc::Rc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::txn::requests::EndTxn;
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
    let ended = txn_shell::on_coordinator(shard, &txn_id.clone(), |partition| EndTxn {
        partition,
        txn_id,
        producer_id,
        epoch,
        commit,
        bump,
    })
    .await;
    tracing::debug!(%txn_id_log, version, producer_id, epoch, commit, answer = ?ended, "EndTxn");
    let resp = EndTxnResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    match ended {
        Ok(Ok((id, epoch))) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
        Ok(Err(code)) | Err(code) => resp.with_error_code(super::fenced_as_understood(code, version, VERSION_FENCED)),
    }
}
