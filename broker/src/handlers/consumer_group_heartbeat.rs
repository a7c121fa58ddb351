//! ConsumerGroupHeartbeat (KIP-848): join, stay, reconcile, leave — one request type,
//! answered at once by the group's coordinator shard (nothing is ever parked).

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use uuid::Uuid;

use crate::cluster::routing;
use crate::coordinator::requests::ConsumerHeartbeat;
use crate::errors;
use crate::groups::consumer::HeartbeatRequest;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

fn failed(code: i16, message: &str) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default().with_error_code(code).with_error_message(Some(str_bytes(message)))
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = req.group_id.0.to_string();
    // As Kafka: READ on the group.
    if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id) {
        return ConsumerGroupHeartbeatResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    if group_id.is_empty() {
        return failed(errors::INVALID_REQUEST, "GroupId can't be empty.");
    }
    if version >= 1 && req.member_id.is_empty() {
        return failed(errors::INVALID_REQUEST, "MemberId can't be empty.");
    }
    let hb = HeartbeatRequest {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_deref().map(str::to_string),
        rack_id: req.rack_id.as_deref().map(str::to_string),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req.subscribed_topic_names.map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_deref().map(str::to_string),
        server_assignor: req.server_assignor.as_deref().map(str::to_string),
        owned: req.topic_partitions.map(|tps| tps.into_iter().map(|tp| (tp.topic_id, tp.partitions)).collect()),
        client_id: ctx.client_id.as_deref().unwrap_or("").to_string(),
        client_host: String::new(),
        new_member_id: Uuid::new_v4().to_string(),
    };
    let gid = group_id.clone();
    // As Kafka: a regex matches only the topics the member may DESCRIBE.
    let requester = shard.security.authorizer.requester_of(ctx);
    let result = routing::on_coordinator(shard, &group_id, |partition| ConsumerHeartbeat {
        partition,
        group_id: gid,
        heartbeat: hb,
        requester,
    })
    .await
    .unwrap_or_else(|code| Err((code, String::new())));
    match result {
        Err((code, message)) => {
            let mut resp = ConsumerGroupHeartbeatResponse::default().with_error_code(code);
            if !message.is_empty() {
                resp.error_message = Some(str_bytes(&message));
            }
            resp
        }
        Ok(r) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&r.member_id)))
            .with_member_epoch(r.member_epoch)
            .with_heartbeat_interval_ms(r.heartbeat_interval_ms)
            .with_assignment(r.assignment.map(|parts| {
                Assignment::default().with_topic_partitions(
                    parts
                        .into_iter()
                        .map(|(id, p)| TopicPartitions::default().with_topic_id(id).with_partitions(p))
                        .collect(),
                )
            })),
    }
}
