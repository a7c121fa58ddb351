//! The group coordinator's cross-shard requests. Each but `ListGroups` runs on the
//! coordinator shard of its group, with the group's `__consumer_offsets` partition
//! (`routing::on_coordinator` finds both); `ListGroups` runs on every shard.

use std::rc::Rc;

use super::admin_ops::{self, DescribedGroup, ListedGroup};
use super::classic_ops;
use super::consumer_ops::{self, Failure};
use super::offset_ops::{self, CommitRequest, FetchRequest, FetchedOffset};
use crate::groups::classic::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use crate::groups::consumer::{DescribedConsumerGroup, HeartbeatRequest, HeartbeatResponse};
use crate::shard::dispatch::{mesh_requests, Serve};
use crate::shard::Shard;

// A group operation, on its coordinator shard.
mesh_requests! {
    JoinGroup => JoinResult,
    SyncGroup => SyncResult,
    Heartbeat => i16,
    LeaveGroup => Result<Vec<i16>, i16>,
    ConsumerHeartbeat => Result<HeartbeatResponse, Failure>,
    ConsumerDescribe => Result<DescribedConsumerGroup, Failure>,
    DescribeGroup => Result<Option<DescribedGroup>, i16>,
    DeleteGroup => i16,
    ListGroups => Result<Vec<ListedGroup>, i16>,
    CommitOffsets => Vec<i16>,
    FetchOffsets => Result<Vec<FetchedOffset>, i16>,
    DeleteOffsets => Result<Vec<i16>, i16>,
}

/// JoinGroup.
pub struct JoinGroup {
    pub partition: i32,
    pub group_id: String,
    pub join: JoinRequest,
}

impl Serve for JoinGroup {
    async fn serve(self, shard: Rc<Shard>) -> JoinResult {
        classic_ops::join(shard, self.partition, self.group_id, self.join).await
    }
}

/// SyncGroup.
pub struct SyncGroup {
    pub partition: i32,
    pub group_id: String,
    pub sync: SyncRequest,
}

impl Serve for SyncGroup {
    async fn serve(self, shard: Rc<Shard>) -> SyncResult {
        classic_ops::sync(shard, self.partition, self.group_id, self.sync).await
    }
}

/// A classic group's Heartbeat.
pub struct Heartbeat {
    pub partition: i32,
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub generation: i32,
}

impl Serve for Heartbeat {
    async fn serve(self, shard: Rc<Shard>) -> i16 {
        let Heartbeat { partition, group_id, member_id, instance_id, generation } = self;
        classic_ops::heartbeat(shard, partition, group_id, member_id, instance_id, generation).await
    }
}

/// LeaveGroup of some members.
pub struct LeaveGroup {
    pub partition: i32,
    pub group_id: String,
    pub members: Vec<(String, Option<String>)>,
}

impl Serve for LeaveGroup {
    async fn serve(self, shard: Rc<Shard>) -> Result<Vec<i16>, i16> {
        classic_ops::leave(shard, self.partition, self.group_id, self.members).await
    }
}

/// ConsumerGroupHeartbeat; `requester` names the member's principal.
pub struct ConsumerHeartbeat {
    pub partition: i32,
    pub group_id: String,
    pub heartbeat: HeartbeatRequest,
    pub requester: Option<(String, String)>,
}

impl Serve for ConsumerHeartbeat {
    async fn serve(self, shard: Rc<Shard>) -> Result<HeartbeatResponse, Failure> {
        consumer_ops::heartbeat(shard, self.partition, self.group_id, self.heartbeat, self.requester).await
    }
}

/// ConsumerGroupDescribe of one group.
pub struct ConsumerDescribe {
    pub partition: i32,
    pub group_id: String,
}

impl Serve for ConsumerDescribe {
    async fn serve(self, shard: Rc<Shard>) -> Result<DescribedConsumerGroup, Failure> {
        consumer_ops::describe(&shard, self.partition, &self.group_id)
    }
}

/// DescribeGroups of one group.
pub struct DescribeGroup {
    pub partition: i32,
    pub group_id: String,
}

impl Serve for DescribeGroup {
    async fn serve(self, shard: Rc<Shard>) -> Result<Option<DescribedGroup>, i16> {
        admin_ops::describe(&shard, self.partition, &self.group_id)
    }
}

/// DeleteGroups of one group.
pub struct DeleteGroup {
    pub partition: i32,
    pub group_id: String,
}

impl Serve for DeleteGroup {
    async fn serve(self, shard: Rc<Shard>) -> i16 {
        admin_ops::delete_group(shard, self.partition, self.group_id).await
    }
}

/// ListGroups: the groups of the target shard's coordinator.
#[derive(Clone)]
pub struct ListGroups;

impl Serve for ListGroups {
    async fn serve(self, shard: Rc<Shard>) -> Result<Vec<ListedGroup>, i16> {
        admin_ops::list(&shard)
    }
}

/// OffsetCommit (and TxnOffsetCommit).
pub struct CommitOffsets {
    pub partition: i32,
    pub commit: CommitRequest,
}

impl Serve for CommitOffsets {
    async fn serve(self, shard: Rc<Shard>) -> Vec<i16> {
        offset_ops::commit(shard, self.partition, self.commit).await
    }
}

/// OffsetFetch of one group.
pub struct FetchOffsets {
    pub partition: i32,
    pub fetch: FetchRequest,
}

impl Serve for FetchOffsets {
    async fn serve(self, shard: Rc<Shard>) -> Result<Vec<FetchedOffset>, i16> {
        offset_ops::fetch(shard, self.partition, self.fetch).await
    }
}

/// OffsetDelete.
pub struct DeleteOffsets {
    pub partition: i32,
    pub group_id: String,
    pub partitions: Vec<(String, i32)>,
}

impl Serve for DeleteOffsets {
    async fn serve(self, shard: Rc<Shard>) -> Result<Vec<i16>, i16> {
        offset_ops::delete(shard, self.partition, self.group_id, self.partitions).await
    }
}
