//! Group administration on each coordinator shard: ListGroups, DescribeGroups,
//! DeleteGroups, and the deletion of offsets and groups that DeleteGroups, OffsetDelete
//! and offset retention share.

use std::rc::Rc;

use super::shell::{self, KeyValue};
use crate::cluster::routing;
use crate::errors;
use crate::groups::classic::DescribedMember;
use crate::groups::records::{self, RecordKey};
use crate::groups::Group;
use crate::shard::Shard;

#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    pub group_type: String,
}

#[derive(Debug, Clone, Default)]
pub struct DescribedGroup {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

/// This shard's groups, or COORDINATOR_LOAD_IN_PROGRESS while it replays.
pub fn list(shard: &Shard) -> Result<Vec<ListedGroup>, i16> {
    if !shard.coordinator.borrow().loaded || super::leadership::loading(shard) {
        return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
    }
    let c = shard.coordinator.borrow();
    Ok(c.groups
        .iter()
        .map(|(id, g)| ListedGroup {
            group_id: id.clone(),
            protocol_type: g.protocol_type().to_string(),
            state: g.state_name().to_string(),
            group_type: g.type_name().to_string(),
        })
        .collect())
}

/// Describes a group in the classic form (KIP-848 groups too); `Ok(None)` if unknown.
pub fn describe(shard: &Shard, partition: i32, group_id: &str) -> Result<Option<DescribedGroup>, i16> {
    routing::check_coordinator(shard, partition)?;
    let c = shard.coordinator.borrow();
    let Some(group) = c.groups.get(group_id) else {
        return Ok(None);
    };
    let (protocol_data, members) = match group {
        Group::Classic(g) => g.describe(),
        Group::Consumer(g) => g.describe_classic(&*shard.meta()),
    };
    Ok(Some(DescribedGroup {
        group_id: group_id.to_string(),
        state: group.state_name().to_string(),
        protocol_type: group.protocol_type().to_string(),
        protocol_data,
        members,
    }))
}

/// DeleteGroups for one group: only an empty group can go; its offsets go with it.
pub async fn delete_group(shard: Rc<Shard>, partition: i32, group_id: String) -> i16 {
    if let Err(code) = routing::check_coordinator(&shard, partition) {
        return code;
    }
    let offsets: Vec<(String, i32)> = {
        let c = shard.coordinator.borrow();
        match c.groups.get(&group_id) {
            None => return errors::GROUP_ID_NOT_FOUND,
            Some(g) if !g.is_empty() => return errors::NON_EMPTY_GROUP,
            Some(_) => c.offsets.group(&group_id).map(|(tp, _)| tp.clone()).collect(),
        }
    };
    match delete_offsets_and_group(&shard, partition, &group_id, offsets, true).await {
        Ok(()) => errors::NONE,
        Err(code) => code,
    }
}

/// Writes tombstones for `offsets` (and the group's metadata if `drop_group`), then
/// forgets them. The group is dropped only if it is still empty once durable.
pub async fn delete_offsets_and_group(
    shard: &Rc<Shard>,
    partition: i32,
    group_id: &str,
    offsets: Vec<(String, i32)>,
    drop_group: bool,
) -> Result<(), i16> {
    let mut tombstones: Vec<KeyValue> = offsets
        .iter()
        .map(|(topic, p)| {
            let key = RecordKey::Offset { group: group_id.to_string(), topic: topic.clone(), partition: *p };
            (records::encode_key(&key), None)
        })
        .collect();
    if drop_group {
        // Both kinds of group record: a group that changed protocol has left one of
        // each, and compaction keeps the older one until its own tombstone.
        for key in
            [RecordKey::Group { group: group_id.to_string() }, RecordKey::ConsumerGroup { group: group_id.to_string() }]
        {
            tombstones.push((records::encode_key(&key), None));
        }
    }
    if tombstones.is_empty() {
        return Ok(());
    }
    let base = shell::append(shard, partition, &tombstones).await?;
    let mut c = shard.coordinator.borrow_mut();
    for (i, tp) in offsets.into_iter().enumerate() {
        c.offsets.apply(group_id, tp, None, base + i as i64);
    }
    if drop_group && c.groups.get(group_id).is_some_and(|g| g.is_empty()) {
        c.groups.remove(group_id);
        tracing::info!(group = group_id, "group deleted");
    }
    Ok(())
}
