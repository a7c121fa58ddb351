//! InitProducerId. Without a transactional id: a fresh producer id from the controller
//! for an idempotent producer, or the same id with a bumped epoch when a producer asks
//! to reset its sequences (KIP-360). With one: the transaction coordinator of that id
//! gives its producer id and a new epoch, fencing an earlier instance and aborting its
//! open transaction first ([`crate::transactions::state::TxnMeta::init`]).

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::txn::requests::InitProducer;
use crate::txn::shell as txn_shell;

pub const VERSIONS: (i16, i16) = (0, 5);
/// The first version that may answer PRODUCER_FENCED ([`super::fenced_as_understood`]).
const VERSION_FENCED: i16 = 4;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    // As Kafka: WRITE on the transactional id; an idempotent producer needs
    // IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    if let Some(txn_id) = req.transactional_id.as_ref() {
        if !super::authorized(shard, ctx, acl::operation::WRITE, acl::resource::TRANSACTIONAL_ID, txn_id.0.as_str()) {
            return resp.with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
    } else if !super::allowed(shard, ctx, acl::operation::IDEMPOTENT_WRITE, acl::resource::CLUSTER, acl::CLUSTER_NAME)
        && !shard.security.authorizer.allows_some(&shard.meta(), ctx, acl::operation::WRITE, acl::resource::TOPIC)
    {
        super::cluster_authorized(shard, ctx, acl::operation::IDEMPOTENT_WRITE);
        return resp.with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
    }
    if let Some(txn_id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) {
        return match transactional(shard, txn_id, &req).await {
            Ok((id, epoch)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
            Err(code) => resp.with_error_code(super::fenced_as_understood(code, version, VERSION_FENCED)),
        };
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        return resp.with_producer_id(req.producer_id).with_producer_epoch(req.producer_epoch + 1);
    }
    match crate::cluster::requests::allocate_producer_id(shard).await {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(code) => resp.with_error_code(code),
    }
}

async fn transactional(shard: &Rc<Shard>, txn_id: String, req: &InitProducerIdRequest) -> Result<(i64, i16), i16> {
    if txn_id.is_empty() {
        return Err(errors::INVALID_REQUEST);
    }
    let timeout = req.transaction_timeout_ms;
    if timeout <= 0 || timeout > shard.config.transaction_max_timeout_ms {
        return Err(errors::INVALID_TRANSACTION_TIMEOUT);
    }
    let expected = (req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    txn_shell::on_coordinator(shard, &txn_id.clone(), |partition| InitProducer { partition, txn_id, timeout, expected })
        .await?
}
