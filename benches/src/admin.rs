//! Topic creation and metadata, through the admin API (CreateTopics, Metadata).

use crate::options::ClientOptions;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use std::time::{Duration, Instant};

/// How long CreateTopics and the wait for partition leaders may take.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(120);
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Create `topics` with `partitions` each and `configs`; an existing topic is kept.
/// Returns once every partition of every topic has a leader.
pub fn create_topics(
    client: &ClientOptions,
    topics: &[String],
    partitions: u32,
    configs: &[(String, String)],
) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        client.admin_config().create().map_err(|error| format!("cannot create admin client: {error}"))?;
    let options =
        AdminOptions::new().operation_timeout(Some(TOPIC_READY_TIMEOUT)).request_timeout(Some(TOPIC_READY_TIMEOUT));
    // CreateTopics in chunks keeps each request a sane size with thousands of partitions.
    for chunk in topics.chunks(50) {
        let new_topics: Vec<NewTopic<'_>> = chunk
            .iter()
            .map(|name| {
                let mut topic = NewTopic::new(name, partitions as i32, TopicReplication::Fixed(1));
                for (key, value) in configs {
                    topic = topic.set(key, value);
                }
                topic
            })
            .collect();
        let results = futures_executor::block_on(admin.create_topics(&new_topics, &options))
            .map_err(|error| format!("CreateTopics failed: {error}"))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => return Err(format!("CreateTopics {name}: {code}")),
            }
        }
    }
    wait_for_leaders(client, topics, partitions)
}

/// Poll metadata until every partition of `topics` has a leader.
fn wait_for_leaders(client: &ClientOptions, topics: &[String], partitions: u32) -> Result<(), String> {
    let deadline = Instant::now() + TOPIC_READY_TIMEOUT;
    loop {
        match topic_partitions(client, topics) {
            Ok(found) if found.len() as u64 >= topics.len() as u64 * u64::from(partitions) => return Ok(()),
            Ok(_) | Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(250)),
            Ok(found) => {
                return Err(format!(
                    "only {} of {} partitions have a leader after {:?}",
                    found.len(),
                    topics.len() as u64 * u64::from(partitions),
                    TOPIC_READY_TIMEOUT
                ))
            }
            Err(error) => return Err(error),
        }
    }
}

/// Every (topic, partition) of `topics` that has a leader, in order.
pub fn topic_partitions(client: &ClientOptions, topics: &[String]) -> Result<Vec<(String, i32)>, String> {
    let consumer: BaseConsumer =
        client.admin_config().create().map_err(|error| format!("cannot create metadata client: {error}"))?;
    let mut found = Vec::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .map_err(|error| format!("Metadata for {topic} failed: {error}"))?;
        for described in metadata.topics() {
            if described.error().is_some() {
                continue;
            }
            let mut partitions: Vec<i32> = described
                .partitions()
                .iter()
                .filter(|partition| partition.leader() >= 0 && partition.error().is_none())
                .map(|partition| partition.id())
                .collect();
            partitions.sort_unstable();
            found.extend(partitions.into_iter().map(|id| (described.name().to_string(), id)));
        }
    }
    Ok(found)
}

/// Wait until the broker at `client.bootstrap` answers a Metadata request.
pub fn wait_for_broker(client: &ClientOptions, timeout: Duration) -> Result<(), String> {
    let consumer: BaseConsumer =
        client.admin_config().create().map_err(|error| format!("cannot create metadata client: {error}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match consumer.fetch_metadata(None, Duration::from_secs(2)) {
            Ok(metadata) if !metadata.brokers().is_empty() => return Ok(()),
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(250)),
            Ok(_) => return Err("broker answered Metadata with no brokers".into()),
            Err(error) => return Err(format!("broker not answering at {}: {error}", client.bootstrap)),
        }
    }
}
