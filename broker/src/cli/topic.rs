//! `keel topic ...`: create, list, describe, alter-config, delete, add-partitions;
//! produce and consume live in their own files.

use std::collections::{BTreeMap, HashMap};

use clap::{Args, Subcommand};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, ListOffsetsRequest,
};
use serde_json::{json, Value};

use super::client::{check, failed, kafka_error, str_bytes, topic_name, usage, CliResult, Client};
use super::output::{print_done, print_json, Format, Table};
use super::{consume, produce, ClientArgs};

/// Timeout given to the broker for topic changes.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
/// Kafka's resource type of a topic in DescribeConfigs and IncrementalAlterConfigs.
const RESOURCE_TOPIC: i8 = 2;
/// ListOffsets timestamps that mean "the log start" and "the high watermark".
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

#[derive(Args, Debug)]
pub struct TopicArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: TopicCommand,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Partitions (default: the broker's num.partitions).
        #[arg(short, long)]
        partitions: Option<i32>,
        /// Replication factor (default: the broker's default.replication.factor).
        #[arg(short, long)]
        replicas: Option<i16>,
        /// Topic config, KEY=VALUE; repeat for more.
        #[arg(short, long = "config")]
        config: Vec<String>,
    },
    /// List topics.
    List,
    /// Partitions (leader, replicas, ISR, offsets) and configs of a topic.
    Describe { name: String },
    /// Set (-s KEY=VALUE) or delete (-d KEY) topic configs.
    AlterConfig {
        name: String,
        #[arg(short, long)]
        set: Vec<String>,
        #[arg(short, long)]
        delete: Vec<String>,
    },
    /// Delete topics.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Grow a topic to TOTAL partitions.
    AddPartitions {
        name: String,
        #[arg(short = 'n', long)]
        total: i32,
    },
    /// Write one record per line of stdin.
    Produce(produce::ProduceArgs),
    /// Print records.
    Consume(consume::ConsumeArgs),
}

pub fn run(args: TopicArgs) -> CliResult<()> {
    let format = args.client.format;
    let mut client = Client::connect(&args.client.brokers())?;
    match args.command {
        TopicCommand::Create { name, partitions, replicas, config } => {
            create(&mut client, format, &name, partitions, replicas, &config)
        }
        TopicCommand::List => list(&mut client, format),
        TopicCommand::Describe { name } => describe(&mut client, format, &name),
        TopicCommand::AlterConfig { name, set, delete } => alter_config(&mut client, format, &name, &set, &delete),
        TopicCommand::Delete { names } => delete_topics(&mut client, format, &names),
        TopicCommand::AddPartitions { name, total } => add_partitions(&mut client, format, &name, total),
        TopicCommand::Produce(p) => produce::run(&mut client, format, p),
        TopicCommand::Consume(c) => consume::run(&mut client, format, c),
    }
}

/// Splits `KEY=VALUE`; a missing `=` is a usage error.
pub fn key_value(text: &str, flag: &str) -> CliResult<(String, String)> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(usage(format!("bad {flag} {text:?}: expected KEY=VALUE"))),
    }
}

fn create(
    client: &mut Client,
    format: Format,
    name: &str,
    partitions: Option<i32>,
    replicas: Option<i16>,
    config: &[String],
) -> CliResult<()> {
    let configs = config
        .iter()
        .map(|c| {
            key_value(c, "-c")
                .map(|(k, v)| CreatableTopicConfig::default().with_name(str_bytes(&k)).with_value(Some(str_bytes(&v))))
        })
        .collect::<CliResult<Vec<_>>>()?;
    // Versions before 4 cannot ask for the broker's defaults.
    let defaults_allowed = client.any().version_for::<CreateTopicsRequest>()? >= 4;
    let fallback = if defaults_allowed { -1 } else { 1 };
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions.unwrap_or(fallback))
        .with_replication_factor(replicas.unwrap_or(fallback as i16))
        .with_configs(configs);
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = client.any().send(&request)?;
    for t in &response.topics {
        check(t.error_code, t.error_message.as_ref(), &format!("create topic {}", t.name.0.as_str()))?;
        let mut table = Table::new(&["TOPIC", "PARTITIONS", "REPLICAS", "STATUS"]);
        table.row(vec![
            json!(t.name.0.as_str()),
            json!(t.num_partitions),
            json!(t.replication_factor),
            json!("created"),
        ]);
        table.print(format);
    }
    Ok(())
}

fn list(client: &mut Client, format: Format) -> CliResult<()> {
    let response = client.metadata(None)?;
    let mut topics: Vec<&MetadataResponseTopic> = response.topics.iter().collect();
    topics.sort_by_key(|t| t.name.as_ref().map(|n| n.0.to_string()));
    let mut table = Table::new(&["NAME", "PARTITIONS", "REPLICAS", "INTERNAL"]);
    for t in topics {
        let replicas = t.partitions.first().map(|p| p.replica_nodes.len()).unwrap_or(0);
        let name = t.name.as_ref().map(|n| n.0.as_str()).unwrap_or("");
        table.row(vec![json!(name), json!(t.partitions.len()), json!(replicas), json!(t.is_internal)]);
    }
    table.print(format);
    Ok(())
}

/// The Metadata of one topic; an error when the broker does not know it.
pub fn topic_metadata(client: &mut Client, name: &str) -> CliResult<MetadataResponseTopic> {
    let response = client.metadata(Some(&[name.to_string()]))?;
    let topic =
        response.topics.into_iter().next().ok_or_else(|| failed(format!("topic {name}: not in the metadata")))?;
    check(topic.error_code, None, &format!("topic {name}"))?;
    Ok(topic)
}

/// Partition → leader node of a topic, in partition order.
pub fn leaders(topic: &MetadataResponseTopic) -> BTreeMap<i32, i32> {
    topic.partitions.iter().map(|p| (p.partition_index, p.leader_id.0)).collect()
}

/// ListOffsets at `timestamp` (or `EARLIEST`/`LATEST`) for the given partitions, asked
/// of each partition's leader. Offset -1 means no record at or after the timestamp.
pub fn list_offsets(
    client: &mut Client,
    topic: &str,
    partition_leaders: &BTreeMap<i32, i32>,
    timestamp: i64,
) -> CliResult<BTreeMap<i32, i64>> {
    let mut by_leader: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&partition, &leader) in partition_leaders {
        if leader < 0 {
            return Err(failed(format!("{topic}/{partition}: {}", kafka_error(5, None))));
        }
        by_leader.entry(leader).or_default().push(partition);
    }
    let mut offsets = BTreeMap::new();
    for (leader, partitions) in by_leader {
        let parts = partitions
            .iter()
            .map(|&p| {
                ListOffsetsPartition::default()
                    .with_partition_index(p)
                    .with_timestamp(timestamp)
                    .with_current_leader_epoch(-1)
            })
            .collect();
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(parts)]);
        let response = client.broker(leader)?.send(&request)?;
        for t in &response.topics {
            for p in &t.partitions {
                check(p.error_code, None, &format!("offsets of {topic}/{}", p.partition_index))?;
                offsets.insert(p.partition_index, p.offset);
            }
        }
    }
    Ok(offsets)
}

fn describe(client: &mut Client, format: Format, name: &str) -> CliResult<()> {
    let topic = topic_metadata(client, name)?;
    let partition_leaders = leaders(&topic);
    let starts = list_offsets(client, name, &partition_leaders, EARLIEST)?;
    let ends = list_offsets(client, name, &partition_leaders, LATEST)?;
    let mut partitions =
        Table::new(&["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "LOG START", "HIGH WATERMARK"]);
    for p in &topic.partitions {
        let ids = |nodes: &[kafka_protocol::messages::BrokerId]| json!(nodes.iter().map(|n| n.0).collect::<Vec<_>>());
        partitions.row(vec![
            json!(p.partition_index),
            json!(p.leader_id.0),
            json!(p.leader_epoch),
            ids(&p.replica_nodes),
            ids(&p.isr_nodes),
            json!(starts.get(&p.partition_index)),
            json!(ends.get(&p.partition_index)),
        ]);
    }
    let configs = describe_configs(client, name)?;
    let topic_id = topic.topic_id.to_string();
    match format {
        Format::Json => print_json(&json!({
            "name": name,
            "topic_id": topic_id,
            "internal": topic.is_internal,
            "partitions": partitions.to_json(),
            "configs": configs.to_json(),
        })),
        Format::Table => {
            println!("NAME      {name}");
            println!("ID        {topic_id}");
            println!("INTERNAL  {}\n", topic.is_internal);
            print!("{}\n{}", partitions.render(), configs.render());
        }
    }
    Ok(())
}

fn describe_configs(client: &mut Client, name: &str) -> CliResult<Table> {
    let resource = DescribeConfigsResource::default()
        .with_resource_type(RESOURCE_TOPIC)
        .with_resource_name(str_bytes(name))
        .with_configuration_keys(None);
    let request = DescribeConfigsRequest::default().with_resources(vec![resource]);
    let response = client.any().send(&request)?;
    let mut table = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
    for r in &response.results {
        check(r.error_code, r.error_message.as_ref(), &format!("configs of topic {name}"))?;
        let mut configs: Vec<_> = r.configs.iter().collect();
        configs.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        for c in configs {
            let value = if c.is_sensitive { json!("(sensitive)") } else { json!(c.value.as_ref().map(|v| v.as_str())) };
            table.row(vec![json!(c.name.as_str()), value, json!(config_source(c.config_source))]);
        }
    }
    Ok(table)
}

fn config_source(source: i8) -> &'static str {
    match source {
        1 => "topic",
        2 => "dynamic-broker",
        3 => "dynamic-default-broker",
        4 => "static-broker",
        5 => "default",
        6 => "dynamic-broker-logger",
        7 => "client-metrics",
        8 => "group",
        _ => "unknown",
    }
}

fn alter_config(client: &mut Client, format: Format, name: &str, set: &[String], delete: &[String]) -> CliResult<()> {
    if set.is_empty() && delete.is_empty() {
        return Err(usage("alter-config needs -s KEY=VALUE or -d KEY"));
    }
    let mut configs = Vec::new();
    for s in set {
        let (k, v) = key_value(s, "-s")?;
        configs.push(
            AlterableConfig::default()
                .with_name(str_bytes(&k))
                .with_config_operation(0)
                .with_value(Some(str_bytes(&v))),
        );
    }
    for d in delete {
        configs.push(AlterableConfig::default().with_name(str_bytes(d)).with_config_operation(1));
    }
    let resource = AlterConfigsResource::default()
        .with_resource_type(RESOURCE_TOPIC)
        .with_resource_name(str_bytes(name))
        .with_configs(configs);
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
    let response = client.any().send(&request)?;
    for r in &response.responses {
        check(r.error_code, r.error_message.as_ref(), &format!("alter configs of topic {name}"))?;
    }
    let set: serde_json::Map<String, Value> =
        set.iter().filter_map(|s| s.split_once('=')).map(|(k, v)| (k.to_string(), json!(v))).collect();
    print_done(
        format,
        &format!("altered configs of topic {name}"),
        json!({ "topic": name, "set": set, "deleted": delete }),
    );
    Ok(())
}

fn delete_topics(client: &mut Client, format: Format, names: &[String]) -> CliResult<()> {
    let request = DeleteTopicsRequest::default()
        .with_topic_names(names.iter().map(|n| topic_name(n)).collect())
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = client.any().send(&request)?;
    let mut table = Table::new(&["TOPIC", "STATUS"]);
    let mut errors = 0;
    for r in &response.responses {
        let name = r.name.as_ref().map(|n| n.0.as_str()).unwrap_or("?");
        let status = if r.error_code == 0 {
            "deleted".to_string()
        } else {
            errors += 1;
            kafka_error(r.error_code, r.error_message.as_ref())
        };
        table.row(vec![json!(name), Value::String(status)]);
    }
    table.print(format);
    if errors > 0 {
        return Err(failed(format!("{errors} of {} topics not deleted", names.len())));
    }
    Ok(())
}

fn add_partitions(client: &mut Client, format: Format, name: &str, total: i32) -> CliResult<()> {
    let topic = CreatePartitionsTopic::default().with_name(topic_name(name)).with_count(total).with_assignments(None);
    let request = CreatePartitionsRequest::default().with_topics(vec![topic]).with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = client.any().send(&request)?;
    for r in &response.results {
        check(r.error_code, r.error_message.as_ref(), &format!("add partitions to topic {name}"))?;
    }
    print_done(
        format,
        &format!("topic {name} now has {total} partitions"),
        json!({ "topic": name, "partitions": total }),
    );
    Ok(())
}
