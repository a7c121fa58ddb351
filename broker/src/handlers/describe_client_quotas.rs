//! DescribeClientQuotas: the client quotas whose entity a filter matches, from the
//! cluster metadata, as Kafka's metadata image answers it. Needs DESCRIBE_CONFIGS on
//! the cluster.

use std::rc::Rc;

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use crate::errors;
use crate::quota::{self, FilterError};
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let refuse = |code: i16, message: &str| {
        DescribeClientQuotasResponse::default().with_error_code(code).with_error_message(Some(str_bytes(message)))
    };
    if !super::cluster_authorized(shard, ctx, acl::operation::DESCRIBE_CONFIGS) {
        return refuse(errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.");
    }
    let components = req.components.iter().map(|c| (c.entity_type.as_str(), c.match_type, c._match.as_deref()));
    let filter = match quota::parse_filter(components) {
        Ok(f) => f,
        Err(FilterError::Invalid(message)) => return refuse(errors::INVALID_REQUEST, &message),
        Err(FilterError::Unsupported(message)) => return refuse(errors::UNSUPPORTED_VERSION, &message),
    };
    let meta = shard.meta();
    let entries = meta
        .client_quotas
        .iter()
        .filter(|(entity, _)| quota::matches(entity, &filter, req.strict))
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .parts()
                        .into_iter()
                        .map(|(t, n)| {
                            EntityData::default().with_entity_type(str_bytes(t)).with_entity_name(n.map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    values.iter().map(|(k, v)| ValueData::default().with_key(str_bytes(k)).with_value(*v)).collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}
