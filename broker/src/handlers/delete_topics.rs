//! DeleteTopics, by name or (v6+) by topic id, within the client's controller
//! mutation quota.

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use uuid::Uuid;

use crate::cluster::requests::DeleteTopics;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::throttle;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (1, 6);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: DELETE on every topic it names, by name or by a known id.
pub fn relayed(shard: &Shard, ctx: &RequestContext, req: &DeleteTopicsRequest) -> bool {
    use crate::security::acl::operation::DELETE;
    let meta = shard.meta();
    req.topic_names.iter().all(|n| super::topic_allowed(shard, ctx, DELETE, n))
        && req.topics.iter().all(|t| {
            let name = t.name.as_ref().map(|n| n.0.as_str()).or_else(|| meta.topic_name(&t.topic_id));
            name.is_some_and(|n| super::topic_allowed(shard, ctx, DELETE, n))
        })
}

/// From this version a controller mutation quota refuses topics once spent (KIP-599).
const MUTATION_QUOTA_STRICT_VERSION_MIN: i16 = 5;
/// From this version the client waits out a throttle itself (KIP-219).
const SELF_THROTTLE_VERSION_MIN: i16 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let meta = shard.meta();
    let wanted: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| match &t.name {
                Some(n) => (Some(n.0.to_string()), t.topic_id),
                None => (meta.topic_name(&t.topic_id).map(str::to_string), t.topic_id),
            })
            .collect()
    } else {
        req.topic_names.iter().map(|n| (Some(n.0.to_string()), Uuid::nil())).collect()
    };
    // As Kafka: DELETE on the topic; a missing one the principal may not DESCRIBE is
    // refused the same way, so refusals do not tell which topics exist.
    let refused: Vec<bool> = wanted
        .iter()
        .map(|(name, _)| {
            name.as_deref().is_some_and(|n| {
                !super::authorized(shard, ctx, acl::operation::DELETE, acl::resource::TOPIC, n)
                    && (meta.topics.contains_key(n)
                        || !super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, n))
            })
        })
        .collect();
    let names: Vec<String> =
        wanted.iter().zip(&refused).filter(|(_, r)| !**r).filter_map(|((n, _), _)| n.clone()).collect();
    let strict = version >= MUTATION_QUOTA_STRICT_VERSION_MIN;
    let (results, throttle) = throttle::mutate(shard, ctx, strict, version >= SELF_THROTTLE_VERSION_MIN, |quota| {
        DeleteTopics { names, quota }
    })
    .await;
    let mut results = results.into_iter();
    let responses = wanted
        .into_iter()
        .zip(refused)
        .map(|((name, id), refused)| {
            let mut r = DeletableTopicResult::default().with_name(name.as_deref().map(|n| TopicName(str_bytes(n))));
            if refused {
                r.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                r.topic_id = id;
                return r;
            }
            match name.map(|_| results.next().expect("a result per named topic")) {
                Some(Ok(topic_id)) => {
                    if version >= 6 {
                        r.topic_id = topic_id;
                    }
                }
                Some(Err((code, message))) => {
                    r.error_code = code;
                    if version >= 5 {
                        r.error_message = Some(str_bytes(&message));
                    }
                }
                None => {
                    r.error_code = errors::UNKNOWN_TOPIC_ID;
                    r.topic_id = id;
                }
            }
            r
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses).with_throttle_time_ms(throttle.as_millis() as i32)
}
