//! ConsumerGroupDescribe (KIP-848 groups): epochs, assignor, and each member's current
//! and target assignment. Classic groups answer GROUP_ID_NOT_FOUND, which makes the
//! admin client fall back to DescribeGroups.

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName};

use super::metadata::OPERATIONS_NOT_REQUESTED;
use crate::cluster::routing;
use crate::coordinator::requests::ConsumerDescribe;
use crate::groups::consumer::Assignment as Partitions;
use crate::metadata::Metadata;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

/// A consumer-protocol member (`memberType` 1 in v1).
const MEMBER_TYPE_CONSUMER: i8 = 1;

/// Authorized-operations bitfield for a group with no ACLs, as Kafka 4.4 answers
/// without an authorizer: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
fn assignment(meta: &Metadata, a: &Partitions) -> Assignment {
    Assignment::default().with_topic_partitions(
        a.iter()
            .map(|(id, parts)| {
                TopicPartitions::default()
                    .with_topic_id(*id)
                    .with_topic_name(TopicName(str_bytes(meta.topic_name(id).unwrap_or(""))))
                    .with_partitions(parts.iter().copied().collect())
            })
            .collect(),
    )
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let include_ops = req.include_authorized_operations;
    let calls = req.group_ids.into_iter().map(|group_id| async move {
        let id = group_id.0.to_string();
        // As Kafka: DESCRIBE on each group.
        if !super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::GROUP, &id) {
            return (group_id, Err((crate::errors::GROUP_AUTHORIZATION_FAILED, String::new())));
        }
        let found =
            routing::on_coordinator(shard, &id, |partition| ConsumerDescribe { partition, group_id: id.clone() })
                .await
                .unwrap_or_else(|code| Err((code, String::new())));
        (group_id, found)
    });
    let results = keel_storage::join::join_all(calls.collect()).await;
    let meta = shard.meta();
    let groups = results
        .into_iter()
        .map(|(group_id, found)| {
            let group_name = group_id.0.to_string();
            let g = DescribedGroup::default().with_group_id(group_id);
            match found {
                Err((code, message)) => {
                    g.with_error_code(code).with_error_message((!message.is_empty()).then(|| str_bytes(&message)))
                }
                Ok(d) => g
                    .with_authorized_operations(if include_ops {
                        super::operations(shard, ctx, acl::resource::GROUP, group_name.as_str())
                    } else {
                        OPERATIONS_NOT_REQUESTED
                    })
                    .with_group_state(str_bytes(&d.state))
                    .with_group_epoch(d.epoch)
                    .with_assignment_epoch(d.assignment_epoch)
                    .with_assignor_name(str_bytes(&d.assignor))
                    .with_members(
                        d.members
                            .into_iter()
                            .map(|m| {
                                let mut member = Member::default()
                                    .with_member_id(str_bytes(&m.member_id))
                                    .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                                    .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                                    .with_member_epoch(m.member_epoch)
                                    .with_client_id(str_bytes(&m.client_id))
                                    .with_client_host(str_bytes(&m.client_host))
                                    .with_subscribed_topic_names(
                                        m.subscribed_topic_names.iter().map(|t| TopicName(str_bytes(t))).collect(),
                                    )
                                    // Kafka answers "" for a member without a regex.
                                    .with_subscribed_topic_regex(Some(str_bytes(
                                        m.subscribed_topic_regex.as_deref().unwrap_or_default(),
                                    )))
                                    .with_assignment(assignment(&meta, &m.assignment))
                                    .with_target_assignment(assignment(&meta, &m.target_assignment));
                                if version >= 1 {
                                    member.member_type = MEMBER_TYPE_CONSUMER;
                                }
                                member
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
