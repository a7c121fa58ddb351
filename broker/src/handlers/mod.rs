//! One file per Kafka API, each declaring the versions it serves. `prepare` checks a
//! frame's API key and version and decodes it on the connection's task; `run` executes
//! the handler and encodes its response.

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Encodable;
use keel_protocol::frame::{self, FrameError};

use crate::security::context::RequestContext;
use crate::shard::Shard;

/// Every API Keel serves, with the versions it serves. ApiVersions advertises exactly
/// this table.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, produce::VERSIONS.0, produce::VERSIONS.1),
    (ApiKey::Fetch, fetch::VERSIONS.0, fetch::VERSIONS.1),
    (ApiKey::ListOffsets, list_offsets::VERSIONS.0, list_offsets::VERSIONS.1),
    (ApiKey::Metadata, metadata::VERSIONS.0, metadata::VERSIONS.1),
    (ApiKey::ApiVersions, api_versions::VERSIONS.0, api_versions::VERSIONS.1),
    (ApiKey::CreateTopics, create_topics::VERSIONS.0, create_topics::VERSIONS.1),
    (ApiKey::DeleteTopics, delete_topics::VERSIONS.0, delete_topics::VERSIONS.1),
    (ApiKey::InitProducerId, init_producer_id::VERSIONS.0, init_producer_id::VERSIONS.1),
    (ApiKey::OffsetForLeaderEpoch, offset_for_leader_epoch::VERSIONS.0, offset_for_leader_epoch::VERSIONS.1),
    (ApiKey::DescribeConfigs, describe_configs::VERSIONS.0, describe_configs::VERSIONS.1),
    (ApiKey::AlterConfigs, alter_configs::VERSIONS.0, alter_configs::VERSIONS.1),
    (ApiKey::DescribeLogDirs, describe_log_dirs::VERSIONS.0, describe_log_dirs::VERSIONS.1),
    (ApiKey::AlterReplicaLogDirs, alter_replica_log_dirs::VERSIONS.0, alter_replica_log_dirs::VERSIONS.1),
    (ApiKey::CreatePartitions, create_partitions::VERSIONS.0, create_partitions::VERSIONS.1),
    (ApiKey::IncrementalAlterConfigs, incremental_alter_configs::VERSIONS.0, incremental_alter_configs::VERSIONS.1),
    (ApiKey::DescribeCluster, describe_cluster::VERSIONS.0, describe_cluster::VERSIONS.1),
    (ApiKey::DescribeTopicPartitions, describe_topic_partitions::VERSIONS.0, describe_topic_partitions::VERSIONS.1),
    (ApiKey::DescribeAcls, describe_acls::VERSIONS.0, describe_acls::VERSIONS.1),
    (ApiKey::CreateAcls, create_acls::VERSIONS.0, create_acls::VERSIONS.1),
    (ApiKey::DeleteAcls, delete_acls::VERSIONS.0, delete_acls::VERSIONS.1),
    (ApiKey::DescribeClientQuotas, describe_client_quotas::VERSIONS.0, describe_client_quotas::VERSIONS.1),
    (ApiKey::AlterClientQuotas, alter_client_quotas::VERSIONS.0, alter_client_quotas::VERSIONS.1),
    (ApiKey::DescribeQuorum, describe_quorum::VERSIONS.0, describe_quorum::VERSIONS.1),
    (ApiKey::DeleteRecords, delete_records::VERSIONS.0, delete_records::VERSIONS.1),
    (ApiKey::ElectLeaders, elect_leaders::VERSIONS.0, elect_leaders::VERSIONS.1),
    (
        ApiKey::AlterPartitionReassignments,
        alter_partition_reassignments::VERSIONS.0,
        alter_partition_reassignments::VERSIONS.1,
    ),
    (
        ApiKey::ListPartitionReassignments,
        list_partition_reassignments::VERSIONS.0,
        list_partition_reassignments::VERSIONS.1,
    ),
    // Authentication (the exchange runs on the connection: security::sasl) and SCRAM users.
    (ApiKey::SaslHandshake, sasl_handshake::VERSIONS.0, sasl_handshake::VERSIONS.1),
    (ApiKey::SaslAuthenticate, sasl_authenticate::VERSIONS.0, sasl_authenticate::VERSIONS.1),
    (
        ApiKey::DescribeUserScramCredentials,
        describe_user_scram_credentials::VERSIONS.0,
        describe_user_scram_credentials::VERSIONS.1,
    ),
    (
        ApiKey::AlterUserScramCredentials,
        alter_user_scram_credentials::VERSIONS.0,
        alter_user_scram_credentials::VERSIONS.1,
    ),
    // Consumer groups and offsets (group coordinator).
    (ApiKey::OffsetCommit, offset_commit::VERSIONS.0, offset_commit::VERSIONS.1),
    (ApiKey::OffsetFetch, offset_fetch::VERSIONS.0, offset_fetch::VERSIONS.1),
    (ApiKey::FindCoordinator, find_coordinator::VERSIONS.0, find_coordinator::VERSIONS.1),
    (ApiKey::JoinGroup, join_group::VERSIONS.0, join_group::VERSIONS.1),
    (ApiKey::Heartbeat, heartbeat::VERSIONS.0, heartbeat::VERSIONS.1),
    (ApiKey::LeaveGroup, leave_group::VERSIONS.0, leave_group::VERSIONS.1),
    (ApiKey::SyncGroup, sync_group::VERSIONS.0, sync_group::VERSIONS.1),
    (ApiKey::DescribeGroups, describe_groups::VERSIONS.0, describe_groups::VERSIONS.1),
    (ApiKey::ListGroups, list_groups::VERSIONS.0, list_groups::VERSIONS.1),
    (ApiKey::DeleteGroups, delete_groups::VERSIONS.0, delete_groups::VERSIONS.1),
    (ApiKey::OffsetDelete, offset_delete::VERSIONS.0, offset_delete::VERSIONS.1),
    (ApiKey::ConsumerGroupHeartbeat, consumer_group_heartbeat::VERSIONS.0, consumer_group_heartbeat::VERSIONS.1),
    (ApiKey::ConsumerGroupDescribe, consumer_group_describe::VERSIONS.0, consumer_group_describe::VERSIONS.1),
    // Transactions (transaction coordinator and markers).
    (ApiKey::AddPartitionsToTxn, add_partitions_to_txn::VERSIONS.0, add_partitions_to_txn::VERSIONS.1),
    (ApiKey::AddOffsetsToTxn, add_offsets_to_txn::VERSIONS.0, add_offsets_to_txn::VERSIONS.1),
    (ApiKey::EndTxn, end_txn::VERSIONS.0, end_txn::VERSIONS.1),
    (ApiKey::TxnOffsetCommit, txn_offset_commit::VERSIONS.0, txn_offset_commit::VERSIONS.1),
    (ApiKey::WriteTxnMarkers, write_txn_markers::VERSIONS.0, write_txn_markers::VERSIONS.1),
    (ApiKey::DescribeTransactions, describe_transactions::VERSIONS.0, describe_transactions::VERSIONS.1),
    (ApiKey::ListTransactions, list_transactions::VERSIONS.0, list_transactions::VERSIONS.1),
    (ApiKey::DescribeProducers, describe_producers::VERSIONS.0, describe_producers::VERSIONS.1),
];

pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _, _)| *k == key).map(|(_, min, max)| (*min, *max))
}

pub struct Request {
    pub api_key: ApiKey,
    pub version: i16,
    pub header: RequestHeader,
    pub body: RequestKind,
    /// The frame as received (without its size prefix), for forwarding.
    pub frame: Bytes,
}

pub enum Prepared {
    /// Answer without running a handler.
    Respond(Bytes),
    Run(Box<Request>),
}

/// Checks and decodes one frame. An error means the connection must be closed, as
/// Kafka does for unknown APIs, unsupported versions and undecodable requests.
pub fn prepare(_shard: &Shard, frame_bytes: Bytes) -> Result<Prepared, FrameError> {
    let prefix = frame::peek_prefix(&frame_bytes)?;
    let api_key =
        ApiKey::try_from(prefix.api_key).map_err(|_| FrameError::UnknownApiKey { api_key: prefix.api_key })?;
    let Some((min, max)) = supported_versions(api_key) else {
        return Err(FrameError::Malformed { api_key, version: prefix.api_version, reason: "API not supported".into() });
    };
    if prefix.api_version < min || prefix.api_version > max {
        if api_key == ApiKey::ApiVersions {
            // KIP-511: answer an unknown ApiVersions version with a v0 response that
            // carries UNSUPPORTED_VERSION and our table, so the client can downgrade.
            return Ok(Prepared::Respond(api_versions::unsupported_version_response(prefix.correlation_id)?));
        }
        return Err(FrameError::Malformed {
            api_key,
            version: prefix.api_version,
            reason: "unsupported version".into(),
        });
    }
    let decoded = frame::decode_request(frame_bytes.clone())?;
    Ok(Prepared::Run(Box::new(Request {
        api_key,
        version: decoded.version,
        header: decoded.header,
        body: decoded.body,
        frame: frame_bytes,
    })))
}

fn encode<R: Encodable>(req_key: ApiKey, version: i16, correlation_id: i32, body: &R) -> Option<Bytes> {
    match frame::encode_response(req_key, version, correlation_id, body) {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::error!(error = %e, "response encoding failed");
            None
        }
    }
}

/// The version from which a response's first field is `throttle_time_ms`, for the APIs
/// whose schema puts it first (all but ApiVersions, OffsetDelete, Produce and those
/// without one).
fn throttle_first_since(key: ApiKey) -> Option<i16> {
    use ApiKey::*;
    match key {
        Metadata | OffsetCommit | OffsetFetch => Some(3),
        JoinGroup | ListOffsets => Some(2),
        DescribeGroups | FindCoordinator | Heartbeat | LeaveGroup | ListGroups | SyncGroup => Some(1),
        Produce | ApiVersions | OffsetDelete | SaslHandshake | SaslAuthenticate | DescribeQuorum | WriteTxnMarkers => {
            None
        }
        _ => Some(0),
    }
}

/// A response with `throttle` in its `throttle_time_ms` (the larger of it and the
/// value already there), where that is the first field of the body; other responses
/// are returned as they are (the connection is muted all the same).
pub fn with_throttle(response: Bytes, key: ApiKey, version: i16, throttle: std::time::Duration) -> Bytes {
    if throttle_first_since(key).is_none_or(|since| version < since) {
        return response;
    }
    // Size prefix, correlation id, and the tagged fields of a flexible header
    // (ApiVersions, whose header is always v0, has no throttle first).
    let at = 8 + usize::from(key.response_header_version(version) >= 1);
    if response.len() < at + 4 {
        return response;
    }
    let ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
    let current = i32::from_be_bytes(response[at..at + 4].try_into().expect("four bytes"));
    let mut out = bytes::BytesMut::from(&response[..]);
    out[at..at + 4].copy_from_slice(&current.max(ms).to_be_bytes());
    out.freeze()
}

/// What a handler answers when it does not always answer with a response.
pub enum Answer<R> {
    Respond(R),
    /// Nothing is sent (Produce with acks=0, every batch appended).
    Silent,
    /// The connection is closed (Produce with acks=0 and a batch refused; an ACL
    /// request carrying the UNKNOWN code, which Kafka cannot parse).
    Close,
}

/// What a handler returns: a response, or an [`Answer`].
pub trait Reply {
    /// The frame sent back: `None` for none, [`CLOSE_CONNECTION`] to close.
    fn into_frame(self, key: ApiKey, version: i16, correlation_id: i32) -> Option<Bytes>;
}

impl<R: Encodable> Reply for R {
    fn into_frame(self, key: ApiKey, version: i16, correlation_id: i32) -> Option<Bytes> {
        encode(key, version, correlation_id, &self)
    }
}

impl<R: Encodable> Reply for Answer<R> {
    fn into_frame(self, key: ApiKey, version: i16, correlation_id: i32) -> Option<Bytes> {
        match self {
            Answer::Respond(response) => encode(key, version, correlation_id, &response),
            Answer::Silent => None,
            Answer::Close => Some(CLOSE_CONNECTION),
        }
    }
}

/// What `run` returns for a request whose connection must be closed instead of
/// answered (an empty frame is never a response: every response has a header).
pub const CLOSE_CONNECTION: Bytes = Bytes::new();

/// Runs a decoded request; `None` means no response is sent, [`CLOSE_CONNECTION`] that
/// the connection is closed after the responses before it.
pub async fn run(shard: &Rc<Shard>, ctx: &RequestContext, req: Request) -> Option<Bytes> {
    let (key, v, corr) = (req.api_key, req.version, req.header.correlation_id);
    // In a cluster, metadata changes are the controller's: a node that is not it
    // relays the request there and its answer back, as Kafka's brokers do.
    if crate::replication::cluster::CONTROLLER_APIS.contains(&key) && relayable(shard, ctx, &req.body) {
        if let Some(answer) = crate::replication::cluster::forward_to_controller(shard, &req.frame).await {
            return Some(answer);
        }
    }
    match req.body {
        RequestKind::Produce(r) => produce::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::Fetch(r) => fetch::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::ListOffsets(r) => list_offsets::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::Metadata(r) => metadata::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::ApiVersions(r) => api_versions::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::CreateTopics(r) => create_topics::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DeleteTopics(r) => delete_topics::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::InitProducerId(r) => init_producer_id::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::OffsetForLeaderEpoch(r) => {
            offset_for_leader_epoch::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::DescribeConfigs(r) => describe_configs::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::AlterConfigs(r) => alter_configs::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeLogDirs(r) => describe_log_dirs::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::AlterReplicaLogDirs(r) => {
            alter_replica_log_dirs::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::CreatePartitions(r) => create_partitions::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::IncrementalAlterConfigs(r) => {
            incremental_alter_configs::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::DescribeCluster(r) => describe_cluster::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeTopicPartitions(r) => {
            describe_topic_partitions::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::DescribeAcls(r) => describe_acls::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::CreateAcls(r) => create_acls::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DeleteAcls(r) => delete_acls::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeClientQuotas(r) => {
            describe_client_quotas::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::AlterClientQuotas(r) => {
            alter_client_quotas::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::DescribeQuorum(r) => describe_quorum::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DeleteRecords(r) => delete_records::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::ElectLeaders(r) => elect_leaders::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::AlterPartitionReassignments(r) => {
            alter_partition_reassignments::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::ListPartitionReassignments(r) => {
            list_partition_reassignments::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::SaslHandshake(r) => sasl_handshake::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::SaslAuthenticate(r) => sasl_authenticate::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeUserScramCredentials(r) => {
            describe_user_scram_credentials::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::AlterUserScramCredentials(r) => {
            alter_user_scram_credentials::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::OffsetCommit(r) => offset_commit::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::OffsetFetch(r) => offset_fetch::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::FindCoordinator(r) => find_coordinator::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::JoinGroup(r) => join_group::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::Heartbeat(r) => heartbeat::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::LeaveGroup(r) => leave_group::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::SyncGroup(r) => sync_group::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeGroups(r) => describe_groups::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::ListGroups(r) => list_groups::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DeleteGroups(r) => delete_groups::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::OffsetDelete(r) => offset_delete::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::ConsumerGroupHeartbeat(r) => {
            consumer_group_heartbeat::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            consumer_group_describe::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            add_partitions_to_txn::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::AddOffsetsToTxn(r) => add_offsets_to_txn::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::EndTxn(r) => end_txn::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::TxnOffsetCommit(r) => txn_offset_commit::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::WriteTxnMarkers(r) => write_txn_markers::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeTransactions(r) => {
            describe_transactions::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        RequestKind::ListTransactions(r) => list_transactions::handle(shard, ctx, v, r).await.into_frame(key, v, corr),
        RequestKind::DescribeProducers(r) => {
            describe_producers::handle(shard, ctx, v, r).await.into_frame(key, v, corr)
        }
        other => {
            // `prepare` only lets through what SUPPORTED lists, and each has an arm.
            unreachable!("no handler for a request prepare() accepted: {:?}", std::mem::discriminant(&other))
        }
    }
}

/// Whether the principal may do everything a controller request asks: only then is it
/// relayed to the controller, which sees the relaying node's principal (KIP-590's
/// envelope is not built). Otherwise it runs here, where its handler decides the
/// refusals (and the parts allowed are answered NOT_CONTROLLER).
fn relayable(shard: &Shard, ctx: &RequestContext, body: &RequestKind) -> bool {
    if !shard.security.authorizer.enabled() {
        return true;
    }
    match body {
        RequestKind::CreateTopics(r) => create_topics::relayed(shard, ctx, r),
        RequestKind::DeleteTopics(r) => delete_topics::relayed(shard, ctx, r),
        RequestKind::CreatePartitions(r) => create_partitions::relayed(shard, ctx, r),
        RequestKind::AlterConfigs(r) => alter_configs::relayed(shard, ctx, r),
        RequestKind::IncrementalAlterConfigs(r) => incremental_alter_configs::relayed(shard, ctx, r),
        RequestKind::DescribeQuorum(r) => describe_quorum::relayed(shard, ctx, r),
        RequestKind::AlterClientQuotas(r) => alter_client_quotas::relayed(shard, ctx, r),
        RequestKind::AlterPartitionReassignments(r) => alter_partition_reassignments::relayed(shard, ctx, r),
        RequestKind::AlterUserScramCredentials(r) => alter_user_scram_credentials::relayed(shard, ctx, r),
        RequestKind::CreateAcls(r) => create_acls::relayed(shard, ctx, r),
        RequestKind::DeleteAcls(r) => delete_acls::relayed(shard, ctx, r),
        _ => true,
    }
}

/// Groups items by owner shard, runs `f` on each owner with its items, and returns
/// the outputs in the items' original order.
pub async fn scatter<I, O, F, Fut>(shard: &Rc<Shard>, items: Vec<(usize, I)>, f: F) -> Vec<O>
where
    I: Send + 'static,
    O: Send + 'static,
    F: Fn(Rc<Shard>, Vec<I>) -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = Vec<O>> + 'static,
{
    let n = items.len();
    let mut per_shard: Vec<(Vec<usize>, Vec<I>)> = (0..shard.count).map(|_| (Vec::new(), Vec::new())).collect();
    for (i, (owner, item)) in items.into_iter().enumerate() {
        per_shard[owner].0.push(i);
        per_shard[owner].1.push(item);
    }
    let mut calls = Vec::new();
    let mut positions = Vec::new();
    for (owner, (pos, batch)) in per_shard.into_iter().enumerate() {
        if batch.is_empty() {
            continue;
        }
        let f = f.clone();
        positions.push(pos);
        calls.push(shard.submit_to(owner, move |s| f(s, batch)));
    }
    let results = keel_storage::flush::join_all(calls).await;
    let mut out: Vec<Option<O>> = (0..n).map(|_| None).collect();
    for (pos, outputs) in positions.into_iter().zip(results) {
        assert_eq!(pos.len(), outputs.len(), "an owner shard answers every item it was sent");
        for (i, o) in pos.into_iter().zip(outputs) {
            out[i] = Some(o);
        }
    }
    out.into_iter().map(|o| o.expect("every item answered")).collect()
}

/// Answers every partition a request names, in request order. `items` holds, per
/// partition, either what its owner needs to answer it or an answer already known
/// (a refusal decided up front). Partitions that exist are sent to their owner shards,
/// one call per owner, and answered there by `answer`; the others get `unknown`.
pub async fn answer_partitions<I, O, F, Fut>(
    shard: &Rc<Shard>,
    items: Vec<Result<(String, i32, I), O>>,
    unknown: O,
    answer: F,
) -> Vec<O>
where
    I: Send + 'static,
    O: Send + Clone + 'static,
    F: Fn(Rc<Shard>, String, i32, I) -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = O> + 'static,
{
    let meta = shard.meta();
    let mut out: Vec<Option<O>> = Vec::with_capacity(items.len());
    let mut work = Vec::new();
    let mut slots = Vec::new();
    for item in items {
        match item {
            Err(known) => out.push(Some(known)),
            Ok((topic, partition, input)) => match meta.owner(&topic, partition) {
                Some(owner) => {
                    slots.push(out.len());
                    work.push((owner, (topic, partition, input)));
                    out.push(None);
                }
                None => out.push(Some(unknown.clone())),
            },
        }
    }
    let found = scatter(shard, work, move |s, items: Vec<(String, i32, I)>| {
        let answer = answer.clone();
        async move {
            let mut answers = Vec::with_capacity(items.len());
            for (topic, partition, input) in items {
                answers.push(answer(s.clone(), topic, partition, input).await);
            }
            answers
        }
    })
    .await;
    for (slot, o) in slots.into_iter().zip(found) {
        out[slot] = Some(o);
    }
    out.into_iter().map(|o| o.expect("every partition answered")).collect()
}

/// An error code as a client of `version` understands it: PRODUCER_FENCED came with
/// KIP-588 (InitProducerId v4; AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2), and
/// Kafka answers older requests INVALID_PRODUCER_EPOCH, which those clients handle the
/// same way.
pub fn fenced_as_understood(code: i16, version: i16, first_version_with_fenced: i16) -> i16 {
    if code == crate::errors::PRODUCER_FENCED && version < first_version_with_fenced {
        crate::errors::INVALID_PRODUCER_EPOCH
    } else {
        code
    }
}

/// Whether the request's principal may do `operation` on a resource; a denial is
/// counted and logged. Asked on the connection's shard, before any scatter.
pub fn authorized(shard: &Shard, ctx: &RequestContext, operation: i8, resource_type: i8, name: &str) -> bool {
    let authorizer = &shard.security.authorizer;
    !authorizer.enabled() || authorizer.authorize(&shard.meta(), ctx, operation, resource_type, name)
}

/// As [`authorized`], without counting or logging: for filtering lists.
pub fn allowed(shard: &Shard, ctx: &RequestContext, operation: i8, resource_type: i8, name: &str) -> bool {
    let authorizer = &shard.security.authorizer;
    !authorizer.enabled() || authorizer.allows(&shard.meta(), ctx, operation, resource_type, name)
}

/// As [`allowed`], on the cluster.
pub fn cluster_allowed(shard: &Shard, ctx: &RequestContext, operation: i8) -> bool {
    use crate::security::acl;
    allowed(shard, ctx, operation, acl::resource::CLUSTER, acl::CLUSTER_NAME)
}

/// As [`allowed`], on a topic.
pub fn topic_allowed(shard: &Shard, ctx: &RequestContext, operation: i8, name: &str) -> bool {
    allowed(shard, ctx, operation, crate::security::acl::resource::TOPIC, name)
}

/// As [`allowed`], on what a config resource names: a topic's configs are the topic's,
/// the others (a broker's, a logger's) the cluster's.
pub fn config_allowed(shard: &Shard, ctx: &RequestContext, resource_type: i8, name: &str, operation: i8) -> bool {
    match resource_type {
        describe_configs::RESOURCE_TOPIC => topic_allowed(shard, ctx, operation, name),
        _ => cluster_allowed(shard, ctx, operation),
    }
}

/// Whether the principal may do `operation` on the cluster.
pub fn cluster_authorized(shard: &Shard, ctx: &RequestContext, operation: i8) -> bool {
    use crate::security::acl;
    authorized(shard, ctx, operation, acl::resource::CLUSTER, acl::CLUSTER_NAME)
}

/// The operations of a resource the principal may do, as the authorized-operations
/// bitfields carry them (every operation of the resource without an authorizer).
pub fn operations(shard: &Shard, ctx: &RequestContext, resource_type: i8, name: &str) -> i32 {
    shard.security.authorizer.operations(&shard.meta(), ctx, resource_type, name)
}

pub fn str_bytes(s: &str) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.to_string())
}

#[cfg(test)]
mod tests;
