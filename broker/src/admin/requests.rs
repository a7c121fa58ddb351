//! The admin API's cross-shard requests: what it reads of each shard.

use std::rc::Rc;

use serde_json::Value;

use super::api::{self, GroupSummary};
use super::stats::{self, ShardStats};
use crate::shard::dispatch::{mesh_requests, Serve};
use crate::shard::Shard;

// A read of a shard's state for the admin API.
mesh_requests! {
    // Boxed: far larger than any other reply.
    GatherStats => Box<ShardStats>,
    PartitionLog => Option<Value>,
    GroupViews => (usize, Vec<GroupSummary>),
}

/// The target shard's statistics, for the admin API on shard `admin_shard`.
#[derive(Clone)]
pub struct GatherStats {
    pub admin_shard: usize,
}

impl Serve for GatherStats {
    async fn serve(self, shard: Rc<Shard>) -> Box<ShardStats> {
        Box::new(stats::of_shard(&shard, self.admin_shard))
    }
}

/// The log of a partition the target shard owns, if it holds it.
pub struct PartitionLog {
    pub topic: String,
    pub index: i32,
}

impl Serve for PartitionLog {
    async fn serve(self, shard: Rc<Shard>) -> Option<Value> {
        api::partition_log(&shard, &self.topic, self.index)
    }
}

/// The groups of the target shard's coordinator: all, or only group `only`.
#[derive(Clone)]
pub struct GroupViews {
    pub only: Option<String>,
}

impl Serve for GroupViews {
    async fn serve(self, shard: Rc<Shard>) -> (usize, Vec<GroupSummary>) {
        api::groups_of_shard(&shard, self.only.as_deref())
    }
}
