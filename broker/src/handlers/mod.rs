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
pub mod on_shard;
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

/// How a request may overlap the requests before it on its connection
/// ([`crate::net::order`] keeps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Changes nothing: overlaps the reads before it.
    Read,
    /// A Produce: overlaps the produces before it.
    Append,
    /// Any other change: overlaps nothing.
    Write,
}

/// The registry entry of a Kafka API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Api {
    pub key: ApiKey,
    /// The versions served (the handler's `VERSIONS`), which ApiVersions advertises;
    /// `prepare` refuses the others.
    pub versions: (i16, i16),
    /// Only the controller carries it out: in a cluster another node relays it there
    /// (see [`relay`]).
    pub relay: bool,
    /// Which requests before it on its connection it may overlap.
    pub order: Order,
    /// The handler's module.
    pub module: &'static str,
}

/// Builds the registry from one line per API: `Key (Order) => module;`, or
/// `Key (Order) => module, relayed;` for an API only the controller carries out. The
/// order says which requests before it on its connection it may overlap (reads,
/// produces, or none: see [`crate::net::order`]). The module
/// (a file of this directory) has `VERSIONS: (i16, i16)` and
/// `async fn handle(shard, ctx, version, request)` returning a response or an
/// [`Answer`]; a relayed one also `fn relayed(shard, ctx, &request) -> bool`. Out of
/// the lines come [`APIS`], `dispatch` (the request's handler) and `relayed` (its
/// relay check).
macro_rules! registry {
    ($($key:ident ($order:ident) => $module:ident $(, $relayed:ident)?;)*) => {
        /// Every API Keel serves, in the order ApiVersions lists them.
        pub const APIS: &[Api] = &[$(Api {
            key: ApiKey::$key,
            versions: $module::VERSIONS,
            relay: registry!(@relay $($relayed)?),
            order: Order::$order,
            module: stringify!($module),
        }),*];

        /// Runs a request's handler and encodes its answer.
        async fn dispatch(shard: &Rc<Shard>, ctx: &RequestContext, req: Request) -> Option<Bytes> {
            let (key, v, corr) = (req.api_key, req.version, req.header.correlation_id);
            match req.body {
                $(RequestKind::$key(r) => $module::handle(shard, ctx, v, r).await.into_frame(key, v, corr),)*
                other => {
                    // `prepare` only lets through what APIS lists, and each has an arm.
                    unreachable!("no handler for a request prepare() accepted: {:?}", std::mem::discriminant(&other))
                }
            }
        }

        /// A relayed API's check of the principal (see [`relay`]); false for the others.
        fn relayed(shard: &Shard, ctx: &RequestContext, body: &RequestKind) -> bool {
            match body {
                $($(RequestKind::$key(r) => $module::$relayed(shard, ctx, r),)?)*
                _ => false,
            }
        }

        /// A request of each API in APIS, with every field at its default.
        #[cfg(test)]
        fn sample(key: ApiKey) -> Option<RequestKind> {
            match key {
                $(ApiKey::$key => Some(RequestKind::$key(Default::default())),)*
                _ => None,
            }
        }
    };
    (@relay) => { false };
    (@relay relayed) => { true };
}

// Adding an API: its handler file, its `mod` line above and its line here.
registry! {
    Produce (Append) => produce;
    Fetch (Read) => fetch;
    ListOffsets (Read) => list_offsets;
    Metadata (Read) => metadata;
    ApiVersions (Read) => api_versions;
    CreateTopics (Write) => create_topics, relayed;
    DeleteTopics (Write) => delete_topics, relayed;
    InitProducerId (Write) => init_producer_id;
    OffsetForLeaderEpoch (Read) => offset_for_leader_epoch;
    DescribeConfigs (Read) => describe_configs;
    AlterConfigs (Write) => alter_configs, relayed;
    DescribeLogDirs (Read) => describe_log_dirs;
    AlterReplicaLogDirs (Write) => alter_replica_log_dirs;
    CreatePartitions (Write) => create_partitions, relayed;
    IncrementalAlterConfigs (Write) => incremental_alter_configs, relayed;
    DescribeCluster (Read) => describe_cluster;
    DescribeTopicPartitions (Read) => describe_topic_partitions;
    DescribeAcls (Read) => describe_acls;
    CreateAcls (Write) => create_acls, relayed;
    DeleteAcls (Write) => delete_acls, relayed;
    DescribeClientQuotas (Read) => describe_client_quotas;
    AlterClientQuotas (Write) => alter_client_quotas, relayed;
    DescribeQuorum (Read) => describe_quorum, relayed;
    DeleteRecords (Write) => delete_records;
    ElectLeaders (Write) => elect_leaders;
    AlterPartitionReassignments (Write) => alter_partition_reassignments, relayed;
    ListPartitionReassignments (Read) => list_partition_reassignments;
    // Authentication (the exchange runs on the connection: net::sasl) and SCRAM users.
    SaslHandshake (Write) => sasl_handshake;
    SaslAuthenticate (Write) => sasl_authenticate;
    DescribeUserScramCredentials (Read) => describe_user_scram_credentials;
    AlterUserScramCredentials (Write) => alter_user_scram_credentials, relayed;
    // Consumer groups and offsets (group coordinator).
    OffsetCommit (Write) => offset_commit;
    OffsetFetch (Read) => offset_fetch;
    FindCoordinator (Read) => find_coordinator;
    JoinGroup (Write) => join_group;
    Heartbeat (Write) => heartbeat;
    LeaveGroup (Write) => leave_group;
    SyncGroup (Write) => sync_group;
    DescribeGroups (Read) => describe_groups;
    ListGroups (Read) => list_groups;
    DeleteGroups (Write) => delete_groups;
    OffsetDelete (Write) => offset_delete;
    ConsumerGroupHeartbeat (Write) => consumer_group_heartbeat;
    ConsumerGroupDescribe (Read) => consumer_group_describe;
    // Transactions (transaction coordinator and markers).
    AddPartitionsToTxn (Write) => add_partitions_to_txn;
    AddOffsetsToTxn (Write) => add_offsets_to_txn;
    EndTxn (Write) => end_txn;
    TxnOffsetCommit (Write) => txn_offset_commit;
    WriteTxnMarkers (Write) => write_txn_markers;
    DescribeTransactions (Read) => describe_transactions;
    ListTransactions (Read) => list_transactions;
    DescribeProducers (Read) => describe_producers;
}

/// The registry entry of `key`, if Keel serves it.
pub fn api(key: ApiKey) -> Option<&'static Api> {
    APIS.iter().find(|a| a.key == key)
}

pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    api(key).map(|a| a.versions)
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
    // In a cluster, metadata changes are the controller's: a node that is not it
    // relays the request there and its answer back, as Kafka's brokers do.
    if relay(shard, ctx, &req) {
        if let Some(answer) = crate::cluster::nodes::forward_to_controller(shard, &req.frame).await {
            return Some(answer);
        }
    }
    dispatch(shard, ctx, req).await
}

/// Whether a request goes to the controller: when its API is relayed and the principal
/// may do everything it asks. The controller sees the relaying node's principal
/// (KIP-590's envelope is not built); a request not relayed runs here, where its
/// handler decides the refusals (and the parts allowed are answered NOT_CONTROLLER).
fn relay(shard: &Shard, ctx: &RequestContext, req: &Request) -> bool {
    api(req.api_key).is_some_and(|a| a.relay)
        && (!shard.security.authorizer.enabled() || relayed(shard, ctx, &req.body))
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

/// Whether the principal may ALTER_CONFIGS every (resource type, name) given: what
/// AlterConfigs and IncrementalAlterConfigs check before they are relayed.
pub fn configs_alterable<'a>(
    shard: &Shard,
    ctx: &RequestContext,
    mut resources: impl Iterator<Item = (i8, &'a str)>,
) -> bool {
    let alter = crate::security::acl::operation::ALTER_CONFIGS;
    resources.all(|(resource_type, name)| config_allowed(shard, ctx, resource_type, name, alter))
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

#[cfg(test)]
mod tests;
