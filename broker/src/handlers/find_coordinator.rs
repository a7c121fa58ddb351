//! FindCoordinator: on a single node every coordinator is this broker; in a cluster a
//! group's coordinator is the leader of its `__consumer_offsets` partition, and a
//! transactional id's the leader of its `__transaction_state` partition
//! (`routing::coordinator_node`), COORDINATOR_NOT_AVAILABLE while it has none. The key
//! is checked and its internal partition made to exist, so that the coordinator
//! answered is ready to take the key's requests. Batched keys (v4+) are answered one
//! by one.

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};

use crate::cluster::routing;
use crate::config::OFFSETS_TOPIC;
use crate::config::TRANSACTION_TOPIC;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 6);

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// The coordinator (node, host, port) of one key, or (error, message).
/// As Kafka, DESCRIBE on the group or transactional id is checked first.
async fn find(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    key_type: i8,
    key: &str,
) -> Result<(i32, String, i32), (i16, String)> {
    let refusal = match key_type {
        KEY_TYPE_GROUP => (!super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::GROUP, key))
            .then(|| (errors::GROUP_AUTHORIZATION_FAILED, "Group authorization failed.".to_string())),
        KEY_TYPE_TRANSACTION => (!super::authorized(
            shard,
            ctx,
            acl::operation::DESCRIBE,
            acl::resource::TRANSACTIONAL_ID,
            key,
        ))
        .then(|| (errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.".to_string())),
        _ => None,
    };
    if let Some(refusal) = refusal {
        return Err(refusal);
    }
    let (node, host, port) = coordinator(shard, key_type, key).await?;
    let (host, port) = crate::cluster::nodes::endpoint_of(shard, ctx.listener_name(), node, (host, port));
    Ok((node, host, port))
}

/// The coordinator of one key, with its inter-broker address.
async fn coordinator(shard: &Rc<Shard>, key_type: i8, key: &str) -> Result<(i32, String, i32), (i16, String)> {
    match key_type {
        KEY_TYPE_GROUP if key.is_empty() => Err((errors::INVALID_REQUEST, "Group id must not be empty.".into())),
        KEY_TYPE_GROUP => routing::coordinator_node(shard, OFFSETS_TOPIC, key)
            .await
            .map_err(|code| (code, "The coordinator is not available.".into())),
        KEY_TYPE_TRANSACTION if key.is_empty() => {
            Err((errors::INVALID_REQUEST, "Transactional id must not be empty.".into()))
        }
        KEY_TYPE_TRANSACTION => routing::coordinator_node(shard, TRANSACTION_TOPIC, key)
            .await
            .map_err(|code| (code, "The coordinator is not available.".into())),
        other => Err((errors::INVALID_REQUEST, format!("Unsupported coordinator key type {other}."))),
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let mut resp = FindCoordinatorResponse::default();
    if version < 4 {
        match find(shard, ctx, req.key_type, &req.key).await {
            Ok((node_id, host, port)) => {
                resp.node_id = node_id.into();
                resp.host = str_bytes(&host);
                resp.port = port;
                if version >= 1 {
                    resp.error_message = None;
                }
            }
            Err((code, message)) => {
                resp.error_code = code;
                resp.node_id = (-1).into();
                resp.port = -1;
                if version >= 1 {
                    resp.error_message = Some(str_bytes(&message));
                }
            }
        }
        return resp;
    }
    for key in req.coordinator_keys {
        let c = match find(shard, ctx, req.key_type, &key).await {
            Ok((node_id, host, port)) => Coordinator::default()
                .with_key(key)
                .with_node_id(node_id.into())
                .with_host(str_bytes(&host))
                .with_port(port)
                .with_error_message(None),
            Err((code, message)) => Coordinator::default()
                .with_key(key)
                .with_node_id((-1).into())
                .with_port(-1)
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message))),
        };
        resp.coordinators.push(c);
    }
    resp
}
