//! AddPartitionsToTxn (versions 0–3, the client form): the transaction coordinator
//! records the partitions a producer is about to write in its open transaction, so
//! they get markers when it ends. Every partition of the request gets the same
//! answer; a partition that does not exist fails the request
//! (UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED for the rest), as in
//! Kafka.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use crate::errors;
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use crate::txn::shell as txn_shell;
use crate::txn::state::TxnPartition;

pub const VERSIONS: (i16, i16) = (0, 3);
/// The first version that may answer PRODUCER_FENCED ([`super::fenced_as_understood`]).
const VERSION_FENCED: i16 = 2;

pub async fn handle(shard: &Rc<Shard>, version: i16, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let txn_id = req.v3_and_below_transactional_id.0.to_string();
    let (producer_id, epoch) = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
    let wanted: Vec<TxnPartition> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect();
    let meta = shard.meta();
    let unknown: Vec<bool> = wanted.iter().map(|(t, p)| meta.owner(t, *p).is_none()).collect();
    let codes: Vec<i16> = if unknown.iter().any(|u| *u) {
        unknown
            .iter()
            .map(|u| if *u { errors::UNKNOWN_TOPIC_OR_PARTITION } else { errors::OPERATION_NOT_ATTEMPTED })
            .collect()
    } else {
        let partitions = wanted.clone();
        let added = txn_shell::on_coordinator(shard, &txn_id.clone(), move |s, partition| async move {
            let now = now_ms();
            let decide = |m: Option<&crate::txn::state::TxnMeta>| match m {
                None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
                Some(m) => m.add_partitions(producer_id, epoch, &partitions, now),
            };
            txn_shell::transition(&s, partition, &txn_id, decide).await.map(|_| ())
        })
        .await;
        let code = match added {
            Ok(Ok(())) => errors::NONE,
            Ok(Err(code)) | Err(code) => super::fenced_as_understood(code, version, VERSION_FENCED),
        };
        vec![code; wanted.len()]
    };
    let mut codes = codes.into_iter();
    let results = req
        .v3_and_below_topics
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
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}
