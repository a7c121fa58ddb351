//! `keel group ...`: list, describe (members, committed offsets, lag), delete, seek.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest,
};
use serde_json::{json, Value};

use super::client::{check, coordinator_busy, failed, kafka_error, str_bytes, topic_name, usage, CliResult, Client};
use super::output::{print_json, Format, Table};
use super::topic::{leaders, list_offsets, topic_metadata, EARLIEST, LATEST};
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct GroupArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: GroupCommand,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List consumer groups of every broker.
    List,
    /// Members, committed offsets and lag of a group.
    Describe { group: String },
    /// Delete groups (they must be empty).
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Commit new offsets for a topic's partitions; the group must be empty.
    Seek {
        group: String,
        #[arg(long)]
        topic: String,
        /// start, end or an OFFSET for every partition.
        #[arg(long)]
        to: String,
    },
}

pub fn run(args: GroupArgs) -> CliResult<()> {
    let format = args.client.format;
    let mut client = Client::connect(&args.client.brokers())?;
    match args.command {
        GroupCommand::List => list(&mut client, format),
        GroupCommand::Describe { group } => describe(&mut client, format, &group),
        GroupCommand::Delete { groups } => delete(&mut client, format, &groups),
        GroupCommand::Seek { group, topic, to } => seek(&mut client, format, &group, &topic, &to),
    }
}

fn group_id(name: &str) -> GroupId {
    GroupId(str_bytes(name))
}

fn list(client: &mut Client, format: Format) -> CliResult<()> {
    let mut groups = BTreeMap::new();
    for node in client.broker_ids()? {
        let response = client.broker(node)?.send(&ListGroupsRequest::default())?;
        check(response.error_code, None, &format!("list groups of broker {node}"))?;
        for g in response.groups {
            let state = match g.group_state.as_str() {
                "" => Value::Null,
                s => json!(s),
            };
            groups.insert(g.group_id.0.to_string(), (state, g.protocol_type.to_string(), node));
        }
    }
    let mut table = Table::new(&["GROUP", "STATE", "PROTOCOL TYPE", "COORDINATOR"]);
    for (name, (state, protocol_type, node)) in groups {
        table.row(vec![json!(name), state, json!(protocol_type), json!(node)]);
    }
    table.print(format);
    Ok(())
}

fn describe(client: &mut Client, format: Format, group: &str) -> CliResult<()> {
    let request = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
    let response =
        client.send_to_coordinator(group, &request, |r| r.groups.iter().any(|g| coordinator_busy(g.error_code)))?;
    let described = response.groups.into_iter().next().ok_or_else(|| failed(format!("group {group}: no answer")))?;
    check(described.error_code, described.error_message.as_ref(), &format!("group {group}"))?;
    let mut members = Table::new(&["MEMBER", "CLIENT", "HOST"]);
    for m in &described.members {
        members.row(vec![json!(m.member_id.as_str()), json!(m.client_id.as_str()), json!(m.client_host.as_str())]);
    }
    let offsets = committed_with_lag(client, group)?;
    match format {
        Format::Json => print_json(&json!({
            "group": group,
            "state": described.group_state.as_str(),
            "protocol_type": described.protocol_type.as_str(),
            "protocol": described.protocol_data.as_str(),
            "members": members.to_json(),
            "offsets": offsets.to_json(),
        })),
        Format::Table => {
            println!("GROUP     {group}");
            println!("STATE     {}", described.group_state.as_str());
            println!("PROTOCOL  {} {}", described.protocol_type.as_str(), described.protocol_data.as_str());
            println!("MEMBERS   {}\n", described.members.len());
            if !described.members.is_empty() {
                println!("{}", members.render());
            }
            print!("{}", offsets.render());
        }
    }
    Ok(())
}

/// Committed offsets of every partition the group has committed, with the high
/// watermark and the lag (high watermark − committed).
fn committed_with_lag(client: &mut Client, group: &str) -> CliResult<Table> {
    let request = OffsetFetchRequest::default().with_group_id(group_id(group)).with_topics(None);
    let response = client.send_to_coordinator(group, &request, |r| coordinator_busy(r.error_code))?;
    check(response.error_code, None, &format!("committed offsets of group {group}"))?;
    let mut table = Table::new(&["TOPIC", "PARTITION", "COMMITTED", "END", "LAG"]);
    let mut topics: Vec<_> = response.topics.iter().collect();
    topics.sort_by(|a, b| a.name.0.as_str().cmp(b.name.0.as_str()));
    for t in topics {
        let name = t.name.0.as_str();
        let partition_leaders = leaders(&topic_metadata(client, name)?);
        let ends = list_offsets(client, name, &partition_leaders, LATEST)?;
        let mut partitions: Vec<_> = t.partitions.iter().collect();
        partitions.sort_by_key(|p| p.partition_index);
        for p in partitions {
            check(p.error_code, None, &format!("committed offset of {name}/{}", p.partition_index))?;
            let end = ends.get(&p.partition_index).copied();
            let lag = end.filter(|_| p.committed_offset >= 0).map(|e| (e - p.committed_offset).max(0));
            table.row(vec![json!(name), json!(p.partition_index), json!(p.committed_offset), json!(end), json!(lag)]);
        }
    }
    Ok(table)
}

fn delete(client: &mut Client, format: Format, groups: &[String]) -> CliResult<()> {
    let mut table = Table::new(&["GROUP", "STATUS"]);
    let mut errors = 0;
    for group in groups {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
        let response = client
            .send_to_coordinator(group, &request, |r| r.results.iter().any(|g| coordinator_busy(g.error_code)))?;
        for r in &response.results {
            let status = if r.error_code == 0 {
                "deleted".to_string()
            } else {
                errors += 1;
                kafka_error(r.error_code, None)
            };
            table.row(vec![json!(r.group_id.0.as_str()), Value::String(status)]);
        }
    }
    table.print(format);
    if errors > 0 {
        return Err(failed(format!("{errors} of {} groups not deleted", groups.len())));
    }
    Ok(())
}

fn seek(client: &mut Client, format: Format, group: &str, topic: &str, to: &str) -> CliResult<()> {
    let partition_leaders = leaders(&topic_metadata(client, topic)?);
    let targets: BTreeMap<i32, i64> = match to {
        "start" => list_offsets(client, topic, &partition_leaders, EARLIEST)?,
        "end" => list_offsets(client, topic, &partition_leaders, LATEST)?,
        n => {
            let offset = n
                .parse::<i64>()
                .ok()
                .filter(|o| *o >= 0)
                .ok_or_else(|| usage(format!("bad --to {n:?}: expected start, end or an OFFSET")))?;
            partition_leaders.keys().map(|&p| (p, offset)).collect()
        }
    };
    let partitions = targets
        .iter()
        .map(|(&p, &o)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(o)
                .with_committed_leader_epoch(-1)
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(str_bytes(""))
        .with_retention_time_ms(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)]);
    let busy = |r: &kafka_protocol::messages::OffsetCommitResponse| {
        r.topics.iter().flat_map(|t| t.partitions.iter()).any(|p| coordinator_busy(p.error_code))
    };
    let response = client.send_to_coordinator(group, &request, busy)?;
    let mut table = Table::new(&["TOPIC", "PARTITION", "OFFSET", "STATUS"]);
    let mut errors = 0;
    for t in &response.topics {
        for p in &t.partitions {
            let status = if p.error_code == 0 {
                "committed".to_string()
            } else {
                errors += 1;
                kafka_error(p.error_code, None)
            };
            let offset = targets.get(&p.partition_index).copied();
            table.row(vec![json!(topic), json!(p.partition_index), json!(offset), Value::String(status)]);
        }
    }
    table.print(format);
    if errors > 0 {
        return Err(failed(format!(
            "group {group}: {errors} partitions not committed (a group must be empty to seek)"
        )));
    }
    Ok(())
}
