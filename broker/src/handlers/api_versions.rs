//! ApiVersions: advertises exactly the APIs and versions in `handlers::SUPPORTED`.

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use keel_protocol::frame::{self, FrameError};

use crate::errors;

pub const VERSIONS: (i16, i16) = (0, 4);

fn table() -> Vec<ApiVersion> {
    super::SUPPORTED
        .iter()
        .map(|(k, min, max)| {
            ApiVersion::default().with_api_key(*k as i16).with_min_version(*min).with_max_version(*max)
        })
        .collect()
}

pub fn handle(_version: i16, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(errors::NONE)
        .with_api_keys(table())
        .with_finalized_features_epoch(-1)
}

pub fn unsupported_version_response(correlation_id: i32) -> Result<Bytes, FrameError> {
    let body = ApiVersionsResponse::default().with_error_code(errors::UNSUPPORTED_VERSION).with_api_keys(table());
    frame::encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)
}
