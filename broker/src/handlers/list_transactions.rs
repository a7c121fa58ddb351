//! ListTransactions: the transactional ids this broker coordinates, from every shard,
//! filtered by state, producer id and (v1) how long the transaction has run. Unknown
//! state names come back in `unknown_state_filters`, as Kafka answers.

use std::rc::Rc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId};

use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use crate::transactions::state::{TxnMeta, TxnStatus, ALL};
use crate::txn::requests::ListTransactions;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let per_shard = shard.call_all(ListTransactions).await;
    let wanted: Vec<String> = req.state_filters.iter().map(|s| s.to_string()).collect();
    let unknown: Vec<String> = wanted.iter().filter(|w| !ALL.iter().any(|s| s.name() == w.as_str())).cloned().collect();
    let running_longer = if version >= 1 { req.duration_filter } else { -1 };
    let now = now_ms();
    let mut listed: Vec<(String, TxnMeta)> = per_shard
        .into_iter()
        .flatten()
        .filter(|(_, m)| wanted.is_empty() || wanted.iter().any(|w| w == m.status.name()))
        .filter(|(_, m)| {
            req.producer_id_filters.is_empty() || req.producer_id_filters.contains(&ProducerId(m.producer_id))
        })
        .filter(|(_, m)| running_longer < 0 || (m.status == TxnStatus::Ongoing && now - m.start_ms > running_longer))
        .collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    // As Kafka: only the transactional ids the principal may DESCRIBE.
    listed.retain(|(id, _)| super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::TRANSACTIONAL_ID, id));
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown.iter().map(|u| str_bytes(u)).collect())
        .with_transaction_states(
            listed
                .into_iter()
                .map(|(id, m)| {
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(str_bytes(&id)))
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_transaction_state(str_bytes(m.status.name()))
                })
                .collect(),
        )
}
