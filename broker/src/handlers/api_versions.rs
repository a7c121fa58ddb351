//! ApiVersions: advertises exactly the APIs and versions in `handlers::APIS`,
//! and the one feature clients change behaviour on: `transaction.version`, finalized
//! at the configured level (1 by default). At 2 Kafka 4 clients use KIP-890's
//! transaction protocol (partitions added by the first write, an epoch bump at every
//! commit or abort); at 1 they add partitions with AddPartitionsToTxn.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use keel_protocol::frame::{self, FrameError};

use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 4);

fn table() -> Vec<ApiVersion> {
    super::APIS
        .iter()
        .map(|a| {
            ApiVersion::default()
                .with_api_key(a.key as i16)
                .with_min_version(a.versions.0)
                .with_max_version(a.versions.1)
        })
        .collect()
}

/// The highest `transaction.version` Keel supports.
pub const TRANSACTION_VERSION_MAX: i16 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    _ctx: &RequestContext,
    _version: i16,
    _req: ApiVersionsRequest,
) -> ApiVersionsResponse {
    let transaction_version = shard.config.transaction_version;
    let name = StrBytes::from_static_str("transaction.version");
    ApiVersionsResponse::default()
        .with_error_code(errors::NONE)
        .with_api_keys(table())
        .with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(name.clone())
            .with_min_version(0)
            .with_max_version(TRANSACTION_VERSION_MAX)])
        // As KRaft's brokers: the epoch is the version of the metadata the answer was
        // made from (a relaying node learns the controller's from it).
        .with_finalized_features_epoch(shard.meta().version as i64)
        .with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(name)
            .with_min_version_level(transaction_version)
            .with_max_version_level(transaction_version)])
}

pub fn unsupported_version_response(correlation_id: i32) -> Result<Bytes, FrameError> {
    let body = ApiVersionsResponse::default().with_error_code(errors::UNSUPPORTED_VERSION).with_api_keys(table());
    frame::encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)
}
