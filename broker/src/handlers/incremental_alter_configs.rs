//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic or broker configs.

use std::rc::Rc;

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

use super::alter_configs::{apply, refuse_duplicates, resource_target};
use crate::cluster::controller::{ConfigChange, Failure};
use crate::errors;
use crate::metadata::configs;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER_CONFIGS on every resource it names.
pub fn relayed(shard: &Shard, ctx: &RequestContext, req: &IncrementalAlterConfigsRequest) -> bool {
    super::configs_alterable(shard, ctx, req.resources.iter().map(|c| (c.resource_type, c.resource_name.as_str())))
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let meta = shard.meta();
    let mut changes: Vec<Result<ConfigChange, Failure>> = Vec::new();
    for r in &req.resources {
        let change = resource_target(shard, ctx, r.resource_type, &r.resource_name).and_then(|topic| {
            let current = match &topic {
                Some(t) => meta.topics.get(t).map(|t| t.configs.clone()).unwrap_or_default(),
                None => meta.broker_configs.clone(),
            };
            refuse_duplicates(r.configs.iter().map(|c| c.name.as_str()))?;
            let mut ops = Vec::new();
            for c in &r.configs {
                let name = c.name.to_string();
                let value = c.value.as_ref().map(|v| v.to_string());
                let op = match c.config_operation {
                    OP_SET => (name, value),
                    OP_DELETE => (name, None),
                    OP_APPEND | OP_SUBTRACT => {
                        let is_list = configs::topic_def(&name).map(|d| d.kind == configs::Kind::List).unwrap_or(false);
                        if !is_list {
                            return Err((errors::INVALID_CONFIG, format!("Config {name} is not a list")));
                        }
                        let default = configs::topic_def(&name).map(|d| d.default).unwrap_or_default();
                        let base = current.get(&name).cloned().unwrap_or_else(|| default.to_string());
                        let mut items: Vec<String> =
                            base.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
                        for v in value.unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
                            if c.config_operation == OP_APPEND {
                                if !items.iter().any(|i| i == v) {
                                    items.push(v.to_string());
                                }
                            } else {
                                items.retain(|i| i != v);
                            }
                        }
                        (name, Some(items.join(",")))
                    }
                    other => return Err((errors::INVALID_REQUEST, format!("Unknown config operation {other}"))),
                };
                ops.push(op);
            }
            Ok(ConfigChange { topic, replace: false, ops })
        });
        changes.push(change);
    }
    let results = apply(shard, changes, req.validate_only).await;
    let responses = req
        .resources
        .into_iter()
        .zip(results)
        .map(|(r, result)| {
            let mut out = AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            if let Err((code, message)) = result {
                out.error_code = code;
                out.error_message = Some(str_bytes(&message));
            }
            out
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
