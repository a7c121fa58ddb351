//! AddPartitionsToTxn. Versions 0–3 are the client form: the transaction coordinator
//! records the partitions a producer is about to write in its open transaction, so
//! they get markers when it ends. Versions 4–5 are the broker form (KIP-890): a batch
//! of transactions, each either added as in the client form or, with `verify_only`,
//! only checked (does the open transaction of this producer and epoch include each
//! partition? TRANSACTION_ABORTABLE for one it does not), which is what a partition
//! leader asks before a transactional batch may begin a transaction there. Every
//! partition of one transaction gets the same answer; a partition that does not exist
//! fails its transaction (UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED
//! for the rest), as in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::transactions::state::TxnPartition;
use crate::txn::requests::AddPartitions;
use crate::txn::shell as txn_shell;

pub const VERSIONS: (i16, i16) = (0, 5);
/// The first version that may answer PRODUCER_FENCED ([`super::fenced_as_understood`]).
const VERSION_FENCED: i16 = 2;
/// The first version of the broker form.
const VERSION_BATCHED: i16 = 4;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    if version < VERSION_BATCHED {
        let txn_id = req.v3_and_below_transactional_id.0.to_string();
        let (producer_id, epoch) = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
        let codes = match refusals(shard, ctx, &txn_id, &req.v3_and_below_topics) {
            Some(codes) => codes,
            None => one(shard, version, txn_id, producer_id, epoch, &req.v3_and_below_topics, false).await,
        };
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(results(req.v3_and_below_topics, codes));
    }
    // The broker form: as Kafka, CLUSTER_ACTION on the cluster.
    if !super::cluster_authorized(shard, ctx, acl::operation::CLUSTER_ACTION) {
        return AddPartitionsToTxnResponse::default().with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
    }
    let mut answers = Vec::with_capacity(req.transactions.len());
    for t in req.transactions {
        let id = t.transactional_id.0.to_string();
        let codes = one(shard, version, id, t.producer_id.0, t.producer_epoch, &t.topics, t.verify_only).await;
        answers.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id)
                .with_topic_results(results(t.topics, codes)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(answers)
}

/// The client form's checks, as Kafka's: WRITE on the transactional id (else every
/// partition is refused), then WRITE on each topic (the refused ones
/// TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED). `None`: all
/// authorized.
fn refusals(shard: &Shard, ctx: &RequestContext, txn_id: &str, topics: &[AddPartitionsToTxnTopic]) -> Option<Vec<i16>> {
    let partitions = |t: &AddPartitionsToTxnTopic| t.partitions.len();
    if !super::authorized(shard, ctx, acl::operation::WRITE, acl::resource::TRANSACTIONAL_ID, txn_id) {
        return Some(vec![errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED; topics.iter().map(partitions).sum()]);
    }
    let writable: Vec<bool> = topics
        .iter()
        .map(|t| super::authorized(shard, ctx, acl::operation::WRITE, acl::resource::TOPIC, t.name.0.as_str()))
        .collect();
    if writable.iter().all(|w| *w) {
        return None;
    }
    Some(
        topics
            .iter()
            .zip(writable)
            .flat_map(|(t, w)| {
                let code = if w { errors::OPERATION_NOT_ATTEMPTED } else { errors::TOPIC_AUTHORIZATION_FAILED };
                std::iter::repeat_n(code, partitions(t))
            })
            .collect(),
    )
}

/// The code of each partition of one transaction, in request order.
async fn one(
    shard: &Rc<Shard>,
    version: i16,
    txn_id: String,
    producer_id: i64,
    epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> Vec<i16> {
    let wanted: Vec<TxnPartition> =
        topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p))).collect();
    let meta = shard.meta();
    let unknown: Vec<bool> = wanted.iter().map(|(t, p)| meta.owner(t, *p).is_none()).collect();
    if unknown.iter().any(|u| *u) {
        return unknown
            .iter()
            .map(|u| if *u { errors::UNKNOWN_TOPIC_OR_PARTITION } else { errors::OPERATION_NOT_ATTEMPTED })
            .collect();
    }
    let count = wanted.len();
    let answered = txn_shell::on_coordinator(shard, &txn_id.clone(), |partition| AddPartitions {
        partition,
        txn_id,
        producer_id,
        epoch,
        wanted,
        verify_only,
    })
    .await;
    match answered {
        Ok(Ok(codes)) => codes,
        Ok(Err(code)) | Err(code) => vec![super::fenced_as_understood(code, version, VERSION_FENCED); count],
    }
}

fn results(topics: Vec<AddPartitionsToTxnTopic>, codes: Vec<i16>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut codes = codes.into_iter();
    topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(codes.next().expect("a code per partition"))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name).with_results_by_partition(partitions)
        })
        .collect()
}
