//! Projects each decoded response onto the JSON fields the tester compares.
//!
//! kafka-protocol's messages implement neither `Serialize` nor a stable `Debug` worth
//! diffing, and most of their fields carry no behaviour a client depends on. So each
//! response gets an explicit projection: error codes per entry, names, partition indexes,
//! offsets, the records fetched. Everything here is raw; what legitimately differs
//! between two brokers is rewritten afterwards in one place, `normalize.rs`.
//!
//! Lists whose order the protocol does not promise (topics in Metadata, results in
//! CreateTopics) are sorted by name here, so only their content is compared.

use kafka_protocol::messages::ResponseKind;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::batches::fetched_records;
use crate::client::Answer;

/// Topic configs whose names and values are compared in DescribeConfigs answers.
pub const COMPARED_TOPIC_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
];

/// AlterConfigs and IncrementalAlterConfigs answer with the same fields in two
/// generated types.
macro_rules! alter_configs_response {
    ($r:expr) => {{
        let responses: Vec<Value> = $r
            .responses
            .iter()
            .map(|a| {
                json!({
                    "error_code": a.error_code,
                    "error_message": a.error_message.as_ref().map(|m| m.as_str()),
                    "resource_type": a.resource_type,
                    "resource_name": a.resource_name.as_str(),
                })
            })
            .collect();
        json!({ "throttle_time_ms": $r.throttle_time_ms, "responses": responses })
    }};
}

/// `prefix` keeps only this sequence's groups in ListGroups and transactional ids in
/// ListTransactions, which list every one on the broker.
pub fn project(answer: &Answer, prefix: &str) -> Value {
    match answer {
        Answer::NoResponse => json!({ "no_response": true }),
        Answer::Transport(error) => json!({ "transport_error": transport_kind(error) }),
        Answer::Response(response) => project_response(response, prefix),
    }
}

/// The kind of transport failure; its text depends on the OS and the moment.
fn transport_kind(error: &str) -> &'static str {
    if error.starts_with("decode") {
        "undecodable answer"
    } else if error.contains("timed out") || error.contains("WouldBlock") || error.contains("temporarily") {
        "timeout"
    } else {
        "connection closed"
    }
}

fn project_response(response: &ResponseKind, prefix: &str) -> Value {
    match response {
        ResponseKind::ApiVersions(r) => {
            let ranges: Map<String, Value> =
                r.api_keys.iter().map(|k| (k.api_key.to_string(), json!([k.min_version, k.max_version]))).collect();
            json!({ "error_code": r.error_code, "throttle_time_ms": r.throttle_time_ms, "api_versions": ranges })
        }
        ResponseKind::Metadata(r) => {
            let brokers: Vec<Value> = r
                .brokers
                .iter()
                .map(|b| json!({ "node_id": b.node_id.0, "host": b.host.as_str(), "port": b.port }))
                .collect();
            let mut topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            json!({
                                "partition_index": p.partition_index,
                                "error_code": p.error_code,
                                "leader_id": p.leader_id.0,
                                "leader_epoch": p.leader_epoch,
                                "replica_nodes": p.replica_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
                                "isr_nodes": p.isr_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    sort_by(&mut partitions, "partition_index");
                    json!({
                        "name": t.name.as_ref().map(|n| n.0.as_str()),
                        "error_code": t.error_code,
                        "topic_id": uuid(&t.topic_id),
                        "is_internal": t.is_internal,
                        "partitions": partitions,
                    })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "brokers": brokers,
                "cluster_id": r.cluster_id.as_ref().map(|c| c.as_str()),
                "controller_id": r.controller_id.0,
                "topics": topics,
            })
        }
        ResponseKind::CreateTopics(r) => {
            let mut topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name.0.as_str(),
                        "topic_id": uuid(&t.topic_id),
                        "error_code": t.error_code,
                        "error_message": t.error_message.as_ref().map(|m| m.as_str()),
                        "num_partitions": t.num_partitions,
                        "replication_factor": t.replication_factor,
                        // From v5 (KIP-525) the created topic's configs.
                        "configs": t.configs.as_ref().map(|configs| {
                            configs
                                .iter()
                                .filter(|c| COMPARED_TOPIC_CONFIGS.contains(&c.name.as_str()))
                                .map(|c| {
                                    let value = json!({
                                        "value": c.value.as_ref().map(|v| v.as_str()),
                                        "config_source": c.config_source,
                                        "read_only": c.read_only,
                                    });
                                    (c.name.as_str().to_string(), value)
                                })
                                .collect::<Map<String, Value>>()
                        }),
                        "config_names": t.configs.as_ref().map(|configs| {
                            let mut names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
                            names.sort_unstable();
                            names
                        }),
                    })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        ResponseKind::Produce(r) => {
            let topics: Vec<Value> = r
                .responses
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partition_responses
                        .iter()
                        .map(|p| {
                            json!({
                                "index": p.index,
                                "error_code": p.error_code,
                                "base_offset": p.base_offset,
                                "log_append_time_ms": p.log_append_time_ms,
                                "log_start_offset": p.log_start_offset,
                                "record_errors": p.record_errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(),
                                "error_message": p.error_message.as_ref().map(|m| m.as_str()),
                            })
                        })
                        .collect();
                    json!({ "name": t.name.0.as_str(), "topic_id": uuid(&t.topic_id), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "responses": topics })
        }
        ResponseKind::Fetch(r) => {
            let topics: Vec<Value> = r
                .responses
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let aborted = p.aborted_transactions.as_ref().map(|list| {
                                let mut list: Vec<(i64, i64)> =
                                    list.iter().map(|a| (a.first_offset, a.producer_id.0)).collect();
                                list.sort_unstable();
                                list.into_iter()
                                    .map(
                                        |(first_offset, id)| json!({ "producer_id": id, "first_offset": first_offset }),
                                    )
                                    .collect::<Vec<_>>()
                            });
                            json!({
                                "partition_index": p.partition_index,
                                "error_code": p.error_code,
                                "high_watermark": p.high_watermark,
                                "last_stable_offset": p.last_stable_offset,
                                "log_start_offset": p.log_start_offset,
                                "aborted_transactions": aborted,
                                "records": fetched_records(p.records.as_ref()),
                            })
                        })
                        .collect();
                    json!({ "topic": t.topic.0.as_str(), "topic_id": uuid(&t.topic_id), "partitions": partitions })
                })
                .collect();
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "session_id": r.session_id,
                "responses": topics,
            })
        }
        ResponseKind::ListOffsets(r) => {
            let topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            json!({
                                "partition_index": p.partition_index,
                                "error_code": p.error_code,
                                "timestamp": p.timestamp,
                                "offset": p.offset,
                                "leader_epoch": p.leader_epoch,
                            })
                        })
                        .collect();
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        ResponseKind::DeleteTopics(r) => {
            let mut topics: Vec<Value> = r
                .responses
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name.as_ref().map(|n| n.0.as_str()),
                        "topic_id": uuid(&t.topic_id),
                        "error_code": t.error_code,
                        "error_message": t.error_message.as_ref().map(|m| m.as_str()),
                    })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "responses": topics })
        }
        ResponseKind::DeleteRecords(r) => {
            let topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            json!({
                                "partition_index": p.partition_index,
                                "low_watermark": p.low_watermark,
                                "error_code": p.error_code,
                            })
                        })
                        .collect();
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        ResponseKind::OffsetCommit(r) => {
            let topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.error_code }))
                        .collect();
                    json!({ "name": t.name.0.as_str(), "topic_id": uuid(&t.topic_id), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        ResponseKind::OffsetFetch(r) => {
            let committed = |partition: i32, offset: i64, epoch: i32, metadata: Option<&str>, error: i16| {
                json!({
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "metadata": metadata,
                    "error_code": error,
                })
            };
            let mut topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let metadata = p.metadata.as_ref().map(|m| m.as_str());
                            committed(
                                p.partition_index,
                                p.committed_offset,
                                p.committed_leader_epoch,
                                metadata,
                                p.error_code,
                            )
                        })
                        .collect();
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            sort_by(&mut topics, "name");
            let groups: Vec<Value> = r
                .groups
                .iter()
                .map(|g| {
                    let mut topics: Vec<Value> = g
                        .topics
                        .iter()
                        .map(|t| {
                            let partitions: Vec<Value> = t
                                .partitions
                                .iter()
                                .map(|p| {
                                    let metadata = p.metadata.as_ref().map(|m| m.as_str());
                                    committed(p.partition_index, p.committed_offset, p.committed_leader_epoch, metadata, p.error_code)
                                })
                                .collect();
                            json!({ "name": t.name.0.as_str(), "topic_id": uuid(&t.topic_id), "partitions": partitions })
                        })
                        .collect();
                    sort_by(&mut topics, "name");
                    json!({ "group_id": g.group_id.0.as_str(), "error_code": g.error_code, "topics": topics })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "topics": topics, "groups": groups })
        }
        ResponseKind::JoinGroup(r) => {
            let members: Vec<Value> = r
                .members
                .iter()
                .map(|m| {
                    json!({
                        "member_id": m.member_id.as_str(),
                        "group_instance_id": m.group_instance_id.as_ref().map(|i| i.as_str()),
                        "metadata": hex(&m.metadata),
                    })
                })
                .collect();
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "generation_id": r.generation_id,
                "protocol_type": r.protocol_type.as_ref().map(|p| p.as_str()),
                "protocol_name": r.protocol_name.as_ref().map(|p| p.as_str()),
                "leader": r.leader.as_str(),
                "skip_assignment": r.skip_assignment,
                "member_id": r.member_id.as_str(),
                "members": members,
            })
        }
        ResponseKind::SyncGroup(r) => json!({
            "throttle_time_ms": r.throttle_time_ms,
            "error_code": r.error_code,
            "protocol_type": r.protocol_type.as_ref().map(|p| p.as_str()),
            "protocol_name": r.protocol_name.as_ref().map(|p| p.as_str()),
            "assignment": hex(&r.assignment),
        }),
        ResponseKind::Heartbeat(r) => json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code }),
        ResponseKind::LeaveGroup(r) => {
            let members: Vec<Value> = r
                .members
                .iter()
                .map(|m| {
                    json!({
                        "member_id": m.member_id.as_str(),
                        "group_instance_id": m.group_instance_id.as_ref().map(|i| i.as_str()),
                        "error_code": m.error_code,
                    })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "members": members })
        }
        ResponseKind::FindCoordinator(r) => {
            let coordinators: Vec<Value> = r
                .coordinators
                .iter()
                .map(|c| {
                    json!({
                        "key": c.key.as_str(),
                        "node_id": c.node_id.0,
                        "host": c.host.as_str(),
                        "port": c.port,
                        "error_code": c.error_code,
                        "error_message": c.error_message.as_ref().map(|m| m.as_str()),
                    })
                })
                .collect();
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "error_message": r.error_message.as_ref().map(|m| m.as_str()),
                "node_id": r.node_id.0,
                "host": r.host.as_str(),
                "port": r.port,
                "coordinators": coordinators,
            })
        }
        ResponseKind::DescribeConfigs(r) => {
            let results: Vec<Value> = r
                .results
                .iter()
                .map(|result| {
                    let mut names: Vec<&str> = result.configs.iter().map(|c| c.name.as_str()).collect();
                    names.sort_unstable();
                    let compared: Map<String, Value> = result
                        .configs
                        .iter()
                        .filter(|c| result.resource_type == 2 && COMPARED_TOPIC_CONFIGS.contains(&c.name.as_str()))
                        .map(|c| {
                            let value = json!({
                                "value": c.value.as_ref().map(|v| v.as_str()),
                                "config_source": c.config_source,
                                "read_only": c.read_only,
                            });
                            (c.name.as_str().to_string(), value)
                        })
                        .collect();
                    // Named apart so that accepted.txt can tell broker config names from
                    // topic config names.
                    let names_field = if result.resource_type == 4 { "broker_config_names" } else { "config_names" };
                    let mut projected = json!({
                        "resource_type": result.resource_type,
                        "resource_name": result.resource_name.as_str(),
                        "error_code": result.error_code,
                        "error_message": result.error_message.as_ref().map(|m| m.as_str()),
                        "configs": compared,
                    });
                    projected[names_field] = json!(names);
                    projected
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "results": results })
        }
        ResponseKind::AlterConfigs(r) => alter_configs_response!(r),
        ResponseKind::IncrementalAlterConfigs(r) => alter_configs_response!(r),
        ResponseKind::CreatePartitions(r) => {
            let mut results: Vec<Value> = r
                .results
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name.0.as_str(),
                        "error_code": t.error_code,
                        "error_message": t.error_message.as_ref().map(|m| m.as_str()),
                    })
                })
                .collect();
            sort_by(&mut results, "name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "results": results })
        }
        ResponseKind::DescribeGroups(r) => {
            let mut groups: Vec<Value> = r
                .groups
                .iter()
                .map(|g| {
                    json!({
                        "group_id": g.group_id.0.as_str(),
                        "error_code": g.error_code,
                        "error_message": g.error_message.as_ref().map(|m| m.as_str()),
                        "group_state": g.group_state.as_str(),
                        "protocol_type": g.protocol_type.as_str(),
                        "protocol_data": g.protocol_data.as_str(),
                        "members": g.members.iter().map(|m| json!({
                            "member_id": m.member_id.as_str(),
                            "group_instance_id": m.group_instance_id.as_ref().map(|i| i.as_str()),
                            "member_metadata": hex(&m.member_metadata),
                            "member_assignment": hex(&m.member_assignment),
                        })).collect::<Vec<Value>>(),
                    })
                })
                .collect();
            sort_by(&mut groups, "group_id");
            json!({ "throttle_time_ms": r.throttle_time_ms, "groups": groups })
        }
        ResponseKind::ListGroups(r) => {
            let mut groups: Vec<Value> = r
                .groups
                .iter()
                .filter(|g| g.group_id.0.as_str().starts_with(prefix))
                .map(|g| {
                    json!({
                        "group_id": g.group_id.0.as_str(),
                        "protocol_type": g.protocol_type.as_str(),
                        "group_state": g.group_state.as_str(),
                    })
                })
                .collect();
            sort_by(&mut groups, "group_id");
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "groups": groups })
        }
        other => project_transactions(other, prefix),
    }
}

/// The answers of the transactional producer and transaction admin APIs.
fn project_transactions(response: &ResponseKind, prefix: &str) -> Value {
    match response {
        ResponseKind::InitProducerId(r) => json!({
            "throttle_time_ms": r.throttle_time_ms,
            "error_code": r.error_code,
            "producer_id": r.producer_id.0,
            "producer_epoch": r.producer_epoch,
        }),
        ResponseKind::AddPartitionsToTxn(r) => {
            let mut topics: Vec<Value> = r
                .results_by_topic_v3_and_below
                .iter()
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .results_by_partition
                        .iter()
                        .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.partition_error_code }))
                        .collect();
                    sort_by(&mut partitions, "partition_index");
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "results_by_topic": topics })
        }
        ResponseKind::AddOffsetsToTxn(r) => {
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code })
        }
        ResponseKind::TxnOffsetCommit(r) => {
            let topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.error_code }))
                        .collect();
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        ResponseKind::EndTxn(r) => json!({
            "throttle_time_ms": r.throttle_time_ms,
            "error_code": r.error_code,
            "producer_id": r.producer_id.0,
            "producer_epoch": r.producer_epoch,
        }),
        ResponseKind::DescribeTransactions(r) => {
            let mut states: Vec<Value> = r
                .transaction_states
                .iter()
                .map(|t| {
                    let mut topics: Vec<Value> = t
                        .topics
                        .iter()
                        .map(|d| {
                            let mut partitions = d.partitions.clone();
                            partitions.sort_unstable();
                            json!({ "topic": d.topic.0.as_str(), "partitions": partitions })
                        })
                        .collect();
                    sort_by(&mut topics, "topic");
                    json!({
                        "error_code": t.error_code,
                        "transactional_id": t.transactional_id.0.as_str(),
                        "transaction_state": t.transaction_state.as_str(),
                        "transaction_timeout_ms": t.transaction_timeout_ms,
                        "transaction_start_time_ms": t.transaction_start_time_ms,
                        "producer_id": t.producer_id.0,
                        "producer_epoch": t.producer_epoch,
                        "topics": topics,
                    })
                })
                .collect();
            sort_by(&mut states, "transactional_id");
            json!({ "throttle_time_ms": r.throttle_time_ms, "transaction_states": states })
        }
        ResponseKind::ListTransactions(r) => {
            let mut states: Vec<Value> = r
                .transaction_states
                .iter()
                .filter(|t| t.transactional_id.0.as_str().starts_with(prefix))
                .map(|t| {
                    json!({
                        "transactional_id": t.transactional_id.0.as_str(),
                        "producer_id": t.producer_id.0,
                        "transaction_state": t.transaction_state.as_str(),
                    })
                })
                .collect();
            sort_by(&mut states, "transactional_id");
            let mut unknown: Vec<&str> = r.unknown_state_filters.iter().map(|s| s.as_str()).collect();
            unknown.sort_unstable();
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "unknown_state_filters": unknown,
                "transaction_states": states,
            })
        }
        ResponseKind::DescribeProducers(r) => {
            let topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            // The order is the broker's own (Kafka's is a hash map's) and
                            // the ids are each broker's, so producers are sorted by what
                            // they did.
                            let mut active = p.active_producers.clone();
                            active.sort_by_key(|a| {
                                (a.last_sequence, a.producer_epoch, a.last_timestamp, a.current_txn_start_offset)
                            });
                            let producers: Vec<Value> = active
                                .iter()
                                .map(|a| {
                                    json!({
                                        "producer_id": a.producer_id.0,
                                        "producer_epoch": a.producer_epoch,
                                        "last_sequence": a.last_sequence,
                                        "last_timestamp": a.last_timestamp,
                                        "coordinator_epoch": a.coordinator_epoch,
                                        "current_txn_start_offset": a.current_txn_start_offset,
                                    })
                                })
                                .collect();
                            json!({
                                "partition_index": p.partition_index,
                                "error_code": p.error_code,
                                "error_message": p.error_message.as_ref().map(|m| m.as_str()),
                                "active_producers": producers,
                            })
                        })
                        .collect();
                    sort_by(&mut partitions, "partition_index");
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        other => crate::project_admin::project_admin(other, prefix)
            .unwrap_or_else(|| json!({ "unprojected_response": format!("{:?}", std::mem::discriminant(other)) })),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn uuid(id: &Uuid) -> String {
    id.to_string()
}

pub fn sort_by(entries: &mut [Value], key: &str) {
    entries.sort_by(|a, b| a[key].to_string().cmp(&b[key].to_string()));
}
