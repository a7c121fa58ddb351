//! Projections of the admin and cluster APIs' answers (see `project.rs` for the rest).
//!
//! Several of these answers describe the broker itself rather than behaviour: its log
//! directories' paths and sizes, its quorum's voters and their offsets, the operations
//! an ACL-less broker allows. Each is reduced here to what two correct single-node
//! brokers must agree on (error codes, which entries are answered, which node leads),
//! and the reason for every field left out or reduced is given beside it.

use kafka_protocol::messages::ResponseKind;
use serde_json::{json, Value};

use crate::project::sort_by;

pub fn project_admin(response: &ResponseKind, prefix: &str) -> Option<Value> {
    let value = match response {
        ResponseKind::OffsetForLeaderEpoch(r) => {
            let topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            json!({
                                "partition": p.partition,
                                "error_code": p.error_code,
                                // Epoch numbers are each broker's own (Kafka starts at 0,
                                // Keel at its Raft term): only "defined or -1" compares.
                                "end_epoch": if p.leader_epoch < 0 { json!(p.leader_epoch) } else { json!("<epoch>") },
                                "end_offset": p.end_offset,
                            })
                        })
                        .collect();
                    json!({ "topic": t.topic.0.as_str(), "partitions": partitions })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics })
        }
        ResponseKind::DescribeTopicPartitions(r) => {
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
                                "leader_id": p.leader_id.0,
                                "leader_epoch": p.leader_epoch,
                                "replica_nodes": p.replica_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
                                "isr_nodes": p.isr_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
                                "eligible_leader_replicas": p.eligible_leader_replicas.as_ref().map(|l| l.iter().map(|n| n.0).collect::<Vec<_>>()),
                                "last_known_elr": p.last_known_elr.as_ref().map(|l| l.iter().map(|n| n.0).collect::<Vec<_>>()),
                                "offline_replicas": p.offline_replicas.iter().map(|n| n.0).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    json!({
                        "name": t.name.as_ref().map(|n| n.0.as_str()),
                        "error_code": t.error_code,
                        "topic_id": t.topic_id.to_string(),
                        "is_internal": t.is_internal,
                        "topic_authorized_operations": t.topic_authorized_operations,
                        "partitions": partitions,
                    })
                })
                .collect();
            let cursor = r
                .next_cursor
                .as_ref()
                .map(|c| json!({ "topic_name": c.topic_name.0.as_str(), "partition_index": c.partition_index }));
            // Kafka answers topics in name order; the order is part of paging.
            json!({ "throttle_time_ms": r.throttle_time_ms, "topics": topics, "next_cursor": cursor })
        }
        ResponseKind::DescribeCluster(r) => {
            let brokers: Vec<Value> = r
                .brokers
                .iter()
                .map(|b| json!({ "node_id": b.broker_id.0, "host": b.host.as_str(), "port": b.port, "rack": b.rack.as_ref().map(|r| r.as_str()), "is_fenced": b.is_fenced }))
                .collect();
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "error_message": r.error_message.as_ref().map(|m| m.as_str()),
                "endpoint_type": r.endpoint_type,
                "cluster_id": r.cluster_id.as_str(),
                "controller_id": r.controller_id.0,
                "brokers": brokers,
                "cluster_authorized_operations": r.cluster_authorized_operations,
            })
        }
        ResponseKind::ElectLeaders(r) => {
            // Kafka answers one entry per topic entry of the request, in its order.
            // A null request answers every topic of the broker; this sequence's are
            // compared.
            let results: Vec<Value> = r
                .replica_election_results
                .iter()
                .filter(|t| t.topic.0.as_str().starts_with(prefix))
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .partition_result
                        .iter()
                        .map(|p| json!({ "partition_id": p.partition_id, "error_code": p.error_code }))
                        .collect();
                    sort_by(&mut partitions, "partition_id");
                    json!({ "topic": t.topic.0.as_str(), "partitions": partitions })
                })
                .collect();
            let mut results = results;
            sort_by(&mut results, "topic");
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "replica_election_results": results })
        }
        ResponseKind::ListPartitionReassignments(r) => {
            let mut topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            json!({
                                "partition_index": p.partition_index,
                                "replica_nodes": p.replicas.iter().map(|n| n.0).collect::<Vec<_>>(),
                                "adding_replicas": p.adding_replicas.iter().map(|n| n.0).collect::<Vec<_>>(),
                                "removing_replicas": p.removing_replicas.iter().map(|n| n.0).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "topics": topics })
        }
        ResponseKind::AlterPartitionReassignments(r) => {
            let mut topics: Vec<Value> = r
                .responses
                .iter()
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.error_code }))
                        .collect();
                    sort_by(&mut partitions, "partition_index");
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "allow_replication_factor_change": r.allow_replication_factor_change,
                "responses": topics,
            })
        }
        ResponseKind::DescribeLogDirs(r) => {
            // A directory's path and its total and usable bytes are the machine's: they
            // differ, and accepted.txt says so. The topics are filtered to this
            // sequence's, since a directory holds every topic of the run.
            let results: Vec<Value> = r
                .results
                .iter()
                .map(|d| {
                    let mut topics: Vec<Value> = d
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str().starts_with(prefix))
                        .map(|t| {
                            let mut partitions: Vec<Value> = t
                                .partitions
                                .iter()
                                .map(|p| {
                                    json!({
                                        "partition_index": p.partition_index,
                                        "partition_size": p.partition_size,
                                        "offset_lag": p.offset_lag,
                                        "is_future_key": p.is_future_key,
                                    })
                                })
                                .collect();
                            sort_by(&mut partitions, "partition_index");
                            json!({ "name": t.name.0.as_str(), "partitions": partitions })
                        })
                        .collect();
                    sort_by(&mut topics, "name");
                    json!({
                        "error_code": d.error_code,
                        "log_dir": d.log_dir.as_str(),
                        "total_bytes": d.total_bytes,
                        "usable_bytes": d.usable_bytes,
                        "topics": topics,
                    })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "results": results })
        }
        ResponseKind::AlterReplicaLogDirs(r) => {
            let mut results: Vec<Value> = r
                .results
                .iter()
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.error_code }))
                        .collect();
                    sort_by(&mut partitions, "partition_index");
                    json!({ "topic_name": t.topic_name.0.as_str(), "partitions": partitions })
                })
                .collect();
            sort_by(&mut results, "topic_name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "results": results })
        }
        ResponseKind::DescribeAcls(r) => {
            let resources: Vec<Value> = r
                .resources
                .iter()
                .map(|res| {
                    json!({
                        "resource_type": res.resource_type,
                        "resource_name": res.resource_name.as_str(),
                        "pattern_type": res.pattern_type,
                        "acls": res.acls.len(),
                    })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "resources": resources })
        }
        ResponseKind::CreateAcls(r) => {
            let results: Vec<Value> = r
                .results
                .iter()
                .map(|a| json!({ "error_code": a.error_code, "error_message": a.error_message.as_ref().map(|m| m.as_str()) }))
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "results": results })
        }
        ResponseKind::DeleteAcls(r) => {
            let filter_results: Vec<Value> = r
                .filter_results
                .iter()
                .map(|f| {
                    let mut matching: Vec<Value> = f
                        .matching_acls
                        .iter()
                        .map(|a| {
                            json!({
                                "error_code": a.error_code,
                                "resource_type": a.resource_type,
                                "resource_name": a.resource_name.as_str(),
                                "pattern_type": a.pattern_type,
                                "principal": a.principal.as_str(),
                                "host": a.host.as_str(),
                                "operation": a.operation,
                                "permission_type": a.permission_type,
                            })
                        })
                        .collect();
                    sort_by(&mut matching, "resource_name");
                    json!({
                        "error_code": f.error_code,
                        "error_message": f.error_message.as_ref().map(|m| m.as_str()),
                        "matching_acls": matching,
                    })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "filter_results": filter_results })
        }
        ResponseKind::AlterClientQuotas(r) => {
            let entries: Vec<Value> = r
                .entries
                .iter()
                .map(|e| {
                    let entity: Vec<Value> = e
                        .entity
                        .iter()
                        .map(|d| json!({ "entity_type": d.entity_type.as_str(), "entity_name": d.entity_name.as_ref().map(|n| n.as_str()) }))
                        .collect();
                    json!({
                        "error_code": e.error_code,
                        "error_message": e.error_message.as_ref().map(|m| m.as_str()),
                        "entity": entity,
                    })
                })
                .collect();
            json!({ "throttle_time_ms": r.throttle_time_ms, "entries": entries })
        }
        ResponseKind::DescribeClientQuotas(r) => {
            // Entities and their values come in each broker's order (Kafka's are a hash
            // map's); sorted, only what is there is compared.
            let entries = r.entries.as_ref().map(|entries| {
                let mut entries: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        let mut entity: Vec<Value> = e
                            .entity
                            .iter()
                            .map(|d| json!({ "entity_type": d.entity_type.as_str(), "entity_name": d.entity_name.as_ref().map(|n| n.as_str()) }))
                            .collect();
                        sort_by(&mut entity, "entity_type");
                        let mut values: Vec<Value> =
                            e.values.iter().map(|v| json!({ "key": v.key.as_str(), "value": v.value })).collect();
                        sort_by(&mut values, "key");
                        json!({ "entity": entity, "values": values })
                    })
                    .collect();
                sort_by(&mut entries, "entity");
                entries
            });
            json!({
                "throttle_time_ms": r.throttle_time_ms,
                "error_code": r.error_code,
                "error_message": r.error_message.as_ref().map(|m| m.as_str()),
                "entries": entries,
            })
        }
        ResponseKind::DeleteGroups(r) => {
            let mut results: Vec<Value> = r
                .results
                .iter()
                .map(|g| json!({ "group_id": g.group_id.0.as_str(), "error_code": g.error_code }))
                .collect();
            sort_by(&mut results, "group_id");
            json!({ "throttle_time_ms": r.throttle_time_ms, "results": results })
        }
        ResponseKind::OffsetDelete(r) => {
            // Kafka answers the partitions it refused before asking the coordinator
            // first; the order carries no meaning.
            let mut topics: Vec<Value> = r
                .topics
                .iter()
                .map(|t| {
                    let mut partitions: Vec<Value> = t
                        .partitions
                        .iter()
                        .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.error_code }))
                        .collect();
                    sort_by(&mut partitions, "partition_index");
                    json!({ "name": t.name.0.as_str(), "partitions": partitions })
                })
                .collect();
            sort_by(&mut topics, "name");
            json!({ "throttle_time_ms": r.throttle_time_ms, "error_code": r.error_code, "topics": topics })
        }
        ResponseKind::DescribeQuorum(r) => {
            // The voters' offsets and times and the high watermark are each broker's
            // metadata log (Kafka's KRaft log against Keel's own), which accepted.txt
            // says; the shape, the leader and the error codes must agree.
            let voter = |v: &kafka_protocol::messages::describe_quorum_response::ReplicaState| {
                json!({
                    "replica_id": v.replica_id.0,
                    "replica_directory_id": v.replica_directory_id.to_string(),
                    "log_end_offset": v.log_end_offset,
                    "last_fetch_timestamp": v.last_fetch_timestamp,
                    "last_caught_up_timestamp": v.last_caught_up_timestamp,
                })
            };
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
                                "leader_id": p.leader_id.0,
                                "leader_epoch": p.leader_epoch,
                                "high_watermark": p.high_watermark,
                                "current_voters": p.current_voters.iter().map(voter).collect::<Vec<_>>(),
                                "observers": p.observers.iter().map(voter).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    json!({ "topic_name": t.topic_name.0.as_str(), "partitions": partitions })
                })
                .collect();
            let nodes: Vec<Value> = r
                .nodes
                .iter()
                .map(|n| {
                    let listeners: Vec<&str> = n.listeners.iter().map(|l| l.name.as_str()).collect();
                    json!({ "node_id": n.node_id.0, "listeners": listeners })
                })
                .collect();
            json!({ "error_code": r.error_code, "topics": topics, "nodes": nodes })
        }
        ResponseKind::WriteTxnMarkers(r) => {
            let markers: Vec<Value> = r
                .markers
                .iter()
                .map(|m| {
                    let mut topics: Vec<Value> = m
                        .topics
                        .iter()
                        .map(|t| {
                            let mut partitions: Vec<Value> = t
                                .partitions
                                .iter()
                                .map(|p| json!({ "partition_index": p.partition_index, "error_code": p.error_code }))
                                .collect();
                            sort_by(&mut partitions, "partition_index");
                            json!({ "name": t.name.0.as_str(), "partitions": partitions })
                        })
                        .collect();
                    sort_by(&mut topics, "name");
                    json!({ "producer_id": m.producer_id.0, "topics": topics })
                })
                .collect();
            json!({ "markers": markers })
        }
        ResponseKind::ConsumerGroupHeartbeat(r) => json!({
            "throttle_time_ms": r.throttle_time_ms,
            "error_code": r.error_code,
            "member_id": r.member_id.as_ref().map(|m| m.as_str()),
            "member_epoch": r.member_epoch,
            "heartbeat_interval_ms": r.heartbeat_interval_ms,
            "assignment": r.assignment.as_ref().map(|a| {
                let mut topics: Vec<Value> = a
                    .topic_partitions
                    .iter()
                    .map(|t| {
                        let mut partitions = t.partitions.clone();
                        partitions.sort_unstable();
                        json!({ "topic_id": t.topic_id.to_string(), "partitions": partitions })
                    })
                    .collect();
                sort_by(&mut topics, "topic_id");
                topics
            }),
        }),
        ResponseKind::ConsumerGroupDescribe(r) => {
            let mut groups: Vec<Value> = r
                .groups
                .iter()
                .map(|g| {
                    let members: Vec<Value> = g
                        .members
                        .iter()
                        .map(|m| {
                            let assignment = |a: &kafka_protocol::messages::consumer_group_describe_response::Assignment| {
                                let mut topics: Vec<Value> = a
                                    .topic_partitions
                                    .iter()
                                    .map(|t| {
                                        let mut partitions = t.partitions.clone();
                                        partitions.sort_unstable();
                                        json!({ "topic_name": t.topic_name.0.as_str(), "topic_id": t.topic_id.to_string(), "partitions": partitions })
                                    })
                                    .collect();
                                sort_by(&mut topics, "topic_name");
                                topics
                            };
                            let mut subscribed: Vec<&str> = m.subscribed_topic_names.iter().map(|n| n.0.as_str()).collect();
                            subscribed.sort_unstable();
                            json!({
                                "member_id": m.member_id.as_str(),
                                "instance_id": m.instance_id.as_ref().map(|i| i.as_str()),
                                "rack_id": m.rack_id.as_ref().map(|i| i.as_str()),
                                "member_epoch": m.member_epoch,
                                "client_id": m.client_id.as_str(),
                                "subscribed_topic_names": subscribed,
                                "subscribed_topic_regex": m.subscribed_topic_regex.as_ref().map(|i| i.as_str()),
                                "assignment": assignment(&m.assignment),
                                "target_assignment": assignment(&m.target_assignment),
                                "member_type": m.member_type,
                            })
                        })
                        .collect();
                    json!({
                        "group_id": g.group_id.0.as_str(),
                        "error_code": g.error_code,
                        "group_state": g.group_state.as_str(),
                        "group_epoch": g.group_epoch,
                        "assignment_epoch": g.assignment_epoch,
                        "assignor_name": g.assignor_name.as_str(),
                        "authorized_operations": g.authorized_operations,
                        "members": members,
                    })
                })
                .collect();
            sort_by(&mut groups, "group_id");
            json!({ "throttle_time_ms": r.throttle_time_ms, "groups": groups })
        }
        _ => return None,
    };
    Some(value)
}
