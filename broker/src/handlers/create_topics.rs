//! CreateTopics (with validate_only and topic configs), decided by the controller,
//! within the client's controller mutation quota.

use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::describe_configs::{source_code, topic_config_entries};
use crate::cluster::controller::TopicSpec;
use crate::cluster::requests::CreateTopics;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::throttle;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (2, 7);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: CREATE on the cluster or on every topic it names.
pub fn relayed(shard: &Shard, ctx: &RequestContext, req: &CreateTopicsRequest) -> bool {
    use crate::security::acl::operation::CREATE;
    super::cluster_allowed(shard, ctx, CREATE)
        || req.topics.iter().all(|t| super::topic_allowed(shard, ctx, CREATE, &t.name.0))
}

/// From this version a controller mutation quota refuses topics once spent (KIP-599).
const MUTATION_QUOTA_STRICT_VERSION_MIN: i16 = 6;
/// From this version the client waits out a throttle itself (KIP-219).
const SELF_THROTTLE_VERSION_MIN: i16 = 3;

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut specs = Vec::new();
    let mut early = Vec::new();
    // A name given twice creates nothing and is answered once, INVALID_REQUEST, as Kafka does.
    let mut counts = std::collections::HashMap::<&str, usize>::new();
    for t in &req.topics {
        *counts.entry(t.name.0.as_str()).or_default() += 1;
    }
    let mut answered = std::collections::HashSet::new();
    // As Kafka: CREATE on the cluster, else on each topic.
    let may_create_any = super::allowed(shard, ctx, acl::operation::CREATE, acl::resource::CLUSTER, acl::CLUSTER_NAME);
    for t in &req.topics {
        if !answered.insert(t.name.0.as_str()) {
            continue;
        }
        let duplicate = counts[t.name.0.as_str()] > 1;
        let bad_assignment = t.assignments.iter().any(|a| a.broker_ids.iter().any(|b| b.0 != shard.config.node_id));
        let explicit = !t.assignments.is_empty();
        let spec = TopicSpec {
            name: t.name.0.to_string(),
            partitions: if explicit { t.assignments.len() as i32 } else { t.num_partitions },
            replication_factor: if explicit { -1 } else { t.replication_factor },
            configs: t
                .configs
                .iter()
                .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                .collect(),
        };
        early.push(if duplicate {
            Some((errors::INVALID_REQUEST, "Duplicate topic name.".to_string()))
        } else if !may_create_any
            && !super::authorized(shard, ctx, acl::operation::CREATE, acl::resource::TOPIC, t.name.0.as_str())
        {
            Some((errors::TOPIC_AUTHORIZATION_FAILED, "Authorization failed.".to_string()))
        } else {
            bad_assignment
                .then(|| (errors::INVALID_REPLICA_ASSIGNMENT, "Unknown broker in replica assignment".to_string()))
        });
        specs.push(spec);
    }
    let to_create: Vec<TopicSpec> =
        specs.iter().zip(&early).filter(|(_, e)| e.is_none()).map(|(s, _)| s.clone()).collect();
    let validate_only = req.validate_only;
    let strict = version >= MUTATION_QUOTA_STRICT_VERSION_MIN;
    let (created, throttle) = throttle::mutate(shard, ctx, strict, version >= SELF_THROTTLE_VERSION_MIN, |quota| {
        CreateTopics { specs: to_create, validate_only, quota }
    })
    .await;
    let mut created = created.into_iter();
    let meta = shard.meta();
    let topics = specs
        .into_iter()
        .zip(early)
        .map(|(spec, early)| {
            let result = match early {
                Some(e) => Err(e),
                None => created.next().expect("a result per topic"),
            };
            let mut r =
                CreatableTopicResult::default().with_name(kafka_protocol::messages::TopicName(str_bytes(&spec.name)));
            match result {
                Ok(topic) => {
                    r.num_partitions = topic.partitions.len() as i32;
                    r.replication_factor = 1;
                    if version >= 7 {
                        r.topic_id = topic.id;
                    }
                    let describable =
                        super::allowed(shard, ctx, acl::operation::DESCRIBE_CONFIGS, acl::resource::TOPIC, &spec.name);
                    if version >= 5 && !describable {
                        r.topic_config_error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                    } else if version >= 5 {
                        let entries = topic_config_entries(&topic.configs, &meta, None);
                        r.configs = Some(
                            entries
                                .into_iter()
                                .map(|(name, value, source)| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str_bytes(name))
                                        .with_value(Some(str_bytes(&value)))
                                        .with_config_source(source_code(source))
                                })
                                .collect(),
                        );
                    }
                }
                Err((code, message)) => {
                    r.error_code = code;
                    r.error_message = Some(str_bytes(&message));
                    r.num_partitions = -1;
                    r.replication_factor = -1;
                }
            }
            r
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics).with_throttle_time_ms(throttle.as_millis() as i32)
}
