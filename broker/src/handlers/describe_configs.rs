//! DescribeConfigs for topics and the broker: every known config with its value in
//! force, where it comes from, and (when asked) its synonyms.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use crate::config::BrokerConfig;
use crate::errors;
use crate::metadata::configs::{self, Kind, Source};
use crate::metadata::Metadata;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (1, 4);

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

// ConfigSource codes of the protocol.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

pub fn source_code(s: Source) -> i8 {
    match s {
        Source::Topic => SOURCE_DYNAMIC_TOPIC,
        Source::Broker => SOURCE_DYNAMIC_BROKER,
        Source::ClusterDefault => SOURCE_DYNAMIC_DEFAULT_BROKER,
        Source::StaticBroker => SOURCE_STATIC_BROKER,
        Source::Default => SOURCE_DEFAULT,
    }
}

fn type_code(k: Kind) -> i8 {
    match k {
        Kind::Bool => 1,
        Kind::Str => 2,
        Kind::Int => 3,
        Kind::Long => 5,
        Kind::Ratio => 6,
        Kind::List => 7,
    }
}

/// (name, value, source) of every topic config, optionally only `keys`.
pub fn topic_config_entries(
    topic: &BTreeMap<String, String>,
    meta: &Metadata,
    keys: Option<&[String]>,
) -> Vec<(&'static str, String, Source)> {
    configs::TOPIC_CONFIGS
        .iter()
        .filter(|d| keys.map(|k| k.iter().any(|k| k == d.name)).unwrap_or(true))
        .filter_map(|d| {
            let (value, source) = configs::effective(d.name, topic, &meta.broker_configs)?;
            Some((d.name, value, configs::reported(source, d.broker_name, meta)))
        })
        .collect()
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let meta = shard.meta();
    let results = req
        .resources
        .into_iter()
        .map(|res| {
            let keys: Option<Vec<String>> =
                res.configuration_keys.as_ref().map(|k| k.iter().map(|s| s.to_string()).collect());
            let mut out = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            // As Kafka: DESCRIBE_CONFIGS on the topic, or on the cluster for a broker.
            let refusal = match res.resource_type {
                RESOURCE_TOPIC => (!super::authorized(
                    shard,
                    ctx,
                    acl::operation::DESCRIBE_CONFIGS,
                    acl::resource::TOPIC,
                    res.resource_name.as_str(),
                ))
                .then_some((errors::TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")),
                RESOURCE_BROKER => (!super::cluster_authorized(shard, ctx, acl::operation::DESCRIBE_CONFIGS))
                    .then_some((errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")),
                _ => None,
            };
            if let Some((code, message)) = refusal {
                return out.with_error_code(code).with_error_message(Some(str_bytes(message)));
            }
            let entries = match res.resource_type {
                RESOURCE_TOPIC => match meta.topics.get(res.resource_name.as_str()) {
                    Some(t) => topic_config_entries(&t.configs, &meta, keys.as_deref())
                        .into_iter()
                        .map(|(name, value, source)| {
                            let def = configs::topic_def(name).expect("listed config");
                            let mut e = entry(name, value, source, def.kind, version);
                            if req.include_synonyms {
                                e.synonyms = synonyms(name, &t.configs, &meta);
                            }
                            e
                        })
                        .collect(),
                    None => {
                        out.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                        out.error_message = Some(str_bytes(&format!("Topic {} does not exist", res.resource_name)));
                        Vec::new()
                    }
                },
                RESOURCE_BROKER
                    if res.resource_name.is_empty()
                        || res.resource_name.as_str() == shard.config.node_id.to_string() =>
                {
                    broker_entries(&shard.config, &meta, keys.as_deref(), version)
                }
                RESOURCE_BROKER => {
                    out.error_code = errors::INVALID_REQUEST;
                    out.error_message = Some(str_bytes("Unknown broker id"));
                    Vec::new()
                }
                _ => {
                    out.error_code = errors::INVALID_REQUEST;
                    out.error_message = Some(str_bytes("Unsupported resource type"));
                    Vec::new()
                }
            };
            out.configs = entries;
            out
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn entry(name: &str, value: String, source: Source, kind: Kind, version: i16) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(&value)))
        .with_config_source(source_code(source));
    if version >= 3 {
        e.config_type = type_code(kind);
    }
    e
}

fn synonyms(name: &str, topic: &BTreeMap<String, String>, meta: &Metadata) -> Vec<DescribeConfigsSynonym> {
    let def = configs::topic_def(name).expect("listed config");
    let mut out = Vec::new();
    if let Some(v) = topic.get(name) {
        out.push(
            DescribeConfigsSynonym::default()
                .with_name(str_bytes(name))
                .with_value(Some(str_bytes(v)))
                .with_source(SOURCE_DYNAMIC_TOPIC),
        );
    }
    if let Some(v) = meta.broker_configs.get(def.broker_name) {
        out.push(
            DescribeConfigsSynonym::default()
                .with_name(str_bytes(def.broker_name))
                .with_value(Some(str_bytes(v)))
                .with_source(source_code(configs::reported(Source::Broker, def.broker_name, meta))),
        );
    }
    if let Some(v) = configs::static_topic_defaults().get(def.broker_name) {
        out.push(
            DescribeConfigsSynonym::default()
                .with_name(str_bytes(def.broker_name))
                .with_value(Some(str_bytes(v)))
                .with_source(SOURCE_STATIC_BROKER),
        );
    }
    if !def.broker_name.is_empty() {
        out.push(
            DescribeConfigsSynonym::default()
                .with_name(str_bytes(def.broker_name))
                .with_value(Some(str_bytes(def.default)))
                .with_source(SOURCE_DEFAULT),
        );
    }
    out
}

fn broker_entries(
    config: &BrokerConfig,
    meta: &Metadata,
    keys: Option<&[String]>,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    let wanted = |n: &str| keys.map(|k| k.iter().any(|k| k == n)).unwrap_or(true);
    let mut out: Vec<_> = configs::TOPIC_CONFIGS
        .iter()
        .filter(|d| !d.broker_name.is_empty() && wanted(d.broker_name))
        .map(|d| match (meta.broker_configs.get(d.broker_name), configs::static_topic_defaults().get(d.broker_name)) {
            (Some(v), _) => {
                let source = configs::reported(Source::Broker, d.broker_name, meta);
                entry(d.broker_name, v.clone(), source, d.kind, version)
            }
            (None, Some(v)) => entry(d.broker_name, v.clone(), Source::StaticBroker, d.kind, version),
            (None, None) => entry(d.broker_name, d.default.to_string(), Source::Default, d.kind, version),
        })
        .collect();
    out.extend(configs::static_broker_configs(config).into_iter().filter(|c| wanted(c.name)).map(|c| {
        let source = if c.default { SOURCE_DEFAULT } else { SOURCE_STATIC_BROKER };
        entry(c.name, c.value, Source::Default, c.kind, version).with_config_source(source).with_read_only(true)
    }));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}
