//! DescribeTransactions: each transactional id's state as its coordinator holds it
//! (TRANSACTIONAL_ID_NOT_FOUND for an unknown one).

use std::rc::Rc;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName, TransactionalId,
};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::transactions::state::TxnMeta;
use crate::txn::shell as txn_shell;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 0);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(req.transactional_ids.len());
    for id in req.transactional_ids {
        let txn_id = id.0.to_string();
        // As Kafka: DESCRIBE on each transactional id.
        if !super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::TRANSACTIONAL_ID, &txn_id) {
            states.push(describe(id, Err(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)));
            continue;
        }
        let found = txn_shell::describe(shard, &txn_id).await.and_then(|m| m.ok_or(errors::TRANSACTIONAL_ID_NOT_FOUND));
        states.push(describe(id, found));
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

fn describe(id: TransactionalId, found: Result<TxnMeta, i16>) -> TransactionState {
    let m = match found {
        Ok(m) => m,
        // Only the id and the error, the other fields left at the schema's defaults
        // (producer id and epoch 0), as Kafka answers.
        Err(code) => return TransactionState::default().with_transactional_id(id).with_error_code(code),
    };
    let mut topics: Vec<TopicData> = Vec::new();
    for (topic, p) in &m.partitions {
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == topic.as_str() => t.partitions.push(*p),
            _ => topics.push(TopicData::default().with_topic(TopicName(str_bytes(topic))).with_partitions(vec![*p])),
        }
    }
    TransactionState::default()
        .with_transactional_id(id)
        .with_transaction_state(str_bytes(m.status.name()))
        .with_transaction_timeout_ms(m.timeout_ms)
        .with_transaction_start_time_ms(m.start_ms)
        .with_producer_id(ProducerId(m.producer_id))
        .with_producer_epoch(m.producer_epoch)
        .with_topics(topics)
}
