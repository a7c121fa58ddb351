//! The classic protocol's operations as they run on the coordinator shard: find or
//! create the group, feed it the event, park the response if the machine says wait,
//! and carry out its actions.

use std::rc::Rc;

use super::shell;
use crate::cluster::routing;
use crate::errors;
use crate::groups::classic::{
    ClassicGroup, JoinOutcome, JoinRequest, JoinResult, SyncOutcome, SyncRequest, SyncResult,
};
use crate::groups::limits;
use crate::groups::Group;
use crate::shard::partition::now_ms;
use crate::shard::Shard;

/// A classic group for `group_id`, created when `create` (a new member joins); an empty
/// consumer-protocol group is converted. Errors when a non-empty group of the other
/// protocol holds the id, or when the group is unknown and may not be created.
fn classic_group<'a>(
    groups: &'a mut std::collections::HashMap<String, Group>,
    group_id: &str,
    create: bool,
    shard: &Shard,
) -> Result<&'a mut ClassicGroup, i16> {
    let convert = match groups.get(group_id) {
        None if !create => return Err(errors::UNKNOWN_MEMBER_ID),
        None => true,
        Some(Group::Consumer(g)) if g.member_count() == 0 && create => true,
        Some(Group::Consumer(_)) => {
            return Err(if create { errors::INCONSISTENT_GROUP_PROTOCOL } else { errors::UNKNOWN_MEMBER_ID })
        }
        Some(Group::Classic(_)) => false,
    };
    if convert {
        groups
            .insert(group_id.to_string(), Group::Classic(ClassicGroup::new(group_id, limits(&shard.config), now_ms())));
    }
    match groups.get_mut(group_id) {
        Some(Group::Classic(g)) => {
            g.set_limits(limits(&shard.config));
            Ok(g)
        }
        _ => unreachable!("a classic group was just ensured"),
    }
}

pub async fn join(shard: Rc<Shard>, partition: i32, group_id: String, req: JoinRequest) -> JoinResult {
    if let Err(code) = routing::check_coordinator(&shard, partition) {
        return JoinResult::error(code, &req.member_id);
    }
    if group_id.is_empty() {
        return JoinResult::error(errors::INVALID_GROUP_ID, &req.member_id);
    }
    let mut out = Vec::new();
    let member_id = req.member_id.clone();
    let parked = {
        let mut c = shard.coordinator.borrow_mut();
        let group = match classic_group(&mut c.groups, &group_id, req.member_id.is_empty(), &shard) {
            Ok(g) => g,
            Err(code) => return JoinResult::error(code, &member_id),
        };
        match group.join(req, now_ms(), &mut out) {
            JoinOutcome::Done(result) => Err(result),
            JoinOutcome::Wait { member_id } => Ok(c.park_join(&group_id, &member_id)),
        }
    };
    shell::dispatch(&shard, &group_id, partition, out);
    match parked {
        Err(result) => result,
        Ok(rx) => rx.recv().await.unwrap_or_else(|| JoinResult::error(errors::REBALANCE_IN_PROGRESS, &member_id)),
    }
}

pub async fn sync(shard: Rc<Shard>, partition: i32, group_id: String, req: SyncRequest) -> SyncResult {
    if let Err(code) = routing::check_coordinator(&shard, partition) {
        return SyncResult::error(code);
    }
    let mut out = Vec::new();
    let parked = {
        let mut c = shard.coordinator.borrow_mut();
        let group = match classic_group(&mut c.groups, &group_id, false, &shard) {
            Ok(g) => g,
            Err(code) => return SyncResult::error(code),
        };
        match group.sync_group(req, now_ms(), &mut out) {
            SyncOutcome::Done(result) => Err(result),
            SyncOutcome::Wait { member_id } => Ok(c.park_sync(&group_id, &member_id)),
        }
    };
    shell::dispatch(&shard, &group_id, partition, out);
    match parked {
        Err(result) => result,
        Ok(rx) => rx.recv().await.unwrap_or_else(|| SyncResult::error(errors::REBALANCE_IN_PROGRESS)),
    }
}

pub async fn heartbeat(
    shard: Rc<Shard>,
    partition: i32,
    group_id: String,
    member_id: String,
    instance_id: Option<String>,
    generation: i32,
) -> i16 {
    if let Err(code) = routing::check_coordinator(&shard, partition) {
        return code;
    }
    let mut c = shard.coordinator.borrow_mut();
    match classic_group(&mut c.groups, &group_id, false, &shard) {
        Ok(g) => g.heartbeat(&member_id, instance_id.as_deref(), generation, now_ms()),
        Err(code) => code,
    }
}

/// LeaveGroup: per-member codes, or one code for the request.
pub async fn leave(
    shard: Rc<Shard>,
    partition: i32,
    group_id: String,
    members: Vec<(String, Option<String>)>,
) -> Result<Vec<i16>, i16> {
    routing::check_coordinator(&shard, partition)?;
    let mut out = Vec::new();
    let codes = {
        let mut c = shard.coordinator.borrow_mut();
        match classic_group(&mut c.groups, &group_id, false, &shard) {
            Ok(g) => g.leave(&members, now_ms(), &mut out)?,
            Err(_) => members.iter().map(|_| errors::UNKNOWN_MEMBER_ID).collect(),
        }
    };
    shell::dispatch(&shard, &group_id, partition, out);
    Ok(codes)
}
