//! AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the producer's
//! open transaction, so the offsets it then commits with TxnOffsetCommit are
//! committed or dropped with the transaction's marker.

use std::rc::Rc;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};

use crate::cluster::routing;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::txn::requests::AddOffsets;
use crate::txn::shell as txn_shell;

pub const VERSIONS: (i16, i16) = (0, 4);
/// The first version that may answer PRODUCER_FENCED ([`super::fenced_as_understood`]).
const VERSION_FENCED: i16 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let resp = AddOffsetsToTxnResponse::default();
    let group = req.group_id.0.to_string();
    // As Kafka: WRITE on the transactional id, then READ on the group.
    if !super::authorized(
        shard,
        ctx,
        acl::operation::WRITE,
        acl::resource::TRANSACTIONAL_ID,
        req.transactional_id.0.as_str(),
    ) {
        return resp.with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group) {
        return resp.with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    if group.is_empty() {
        return resp.with_error_code(errors::INVALID_GROUP_ID);
    }
    let offsets_partition = match routing::coordinator_of(shard, &group).await {
        Ok((_, p)) => p,
        Err(code) => return resp.with_error_code(code),
    };
    let txn_id = req.transactional_id.0.to_string();
    let (producer_id, epoch) = (req.producer_id.0, req.producer_epoch);
    let added = txn_shell::on_coordinator(shard, &txn_id.clone(), |partition| AddOffsets {
        partition,
        txn_id,
        producer_id,
        epoch,
        offsets_partition,
    })
    .await;
    match added {
        Ok(Ok(())) => resp,
        Ok(Err(code)) | Err(code) => resp.with_error_code(super::fenced_as_understood(code, version, VERSION_FENCED)),
    }
}
