//! CreatePartitions: adds partitions to a topic, placed on the least-loaded shards,
//! within the client's controller mutation quota.

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use crate::cluster::requests::CreatePartitions;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::throttle;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 3);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER on every topic it names.
pub fn relayed(shard: &Shard, ctx: &RequestContext, req: &CreatePartitionsRequest) -> bool {
    req.topics.iter().all(|t| super::topic_allowed(shard, ctx, crate::security::acl::operation::ALTER, &t.name.0))
}

/// From this version a controller mutation quota refuses topics once spent (KIP-599).
const MUTATION_QUOTA_STRICT_VERSION_MIN: i16 = 3;
/// From this version the client waits out a throttle itself (KIP-219).
const SELF_THROTTLE_VERSION_MIN: i16 = 1;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    // As Kafka: ALTER on each topic.
    let refused: Vec<bool> = req
        .topics
        .iter()
        .map(|t| !super::authorized(shard, ctx, acl::operation::ALTER, acl::resource::TOPIC, t.name.0.as_str()))
        .collect();
    let changes: Vec<(String, i32)> =
        req.topics.iter().zip(&refused).filter(|(_, r)| !**r).map(|(t, _)| (t.name.0.to_string(), t.count)).collect();
    let validate_only = req.validate_only;
    let strict = version >= MUTATION_QUOTA_STRICT_VERSION_MIN;
    let (results, throttle) = throttle::mutate(shard, ctx, strict, version >= SELF_THROTTLE_VERSION_MIN, |quota| {
        CreatePartitions { changes, validate_only, quota }
    })
    .await;
    let mut results = results.into_iter();
    let results = req
        .topics
        .into_iter()
        .zip(refused)
        .map(|(t, refused)| {
            let mut out = CreatePartitionsTopicResult::default().with_name(t.name);
            let r = if refused {
                Err((errors::TOPIC_AUTHORIZATION_FAILED, "Authorization failed.".to_string()))
            } else {
                results.next().expect("a result per authorized topic")
            };
            if let Err((code, message)) = r {
                out.error_code = code;
                out.error_message = Some(str_bytes(&message));
            }
            out
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results).with_throttle_time_ms(throttle.as_millis() as i32)
}
