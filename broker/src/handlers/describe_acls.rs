//! DescribeAcls: Keel has no authorizer yet, so it answers SECURITY_DISABLED as Kafka
//! does when no authorizer is configured.

use crate::security::context::RequestContext;
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};

use super::str_bytes;
use crate::errors;

pub const VERSIONS: (i16, i16) = (1, 3);

pub fn handle(_ctx: &RequestContext, _req: DescribeAclsRequest) -> DescribeAclsResponse {
    DescribeAclsResponse::default()
        .with_error_code(errors::SECURITY_DISABLED)
        .with_error_message(Some(str_bytes("No Authorizer is configured.")))
}
