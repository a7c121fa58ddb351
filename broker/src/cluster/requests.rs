//! The controller's cross-shard requests: metadata changes, decided on shard 0 (the
//! controller's shard), and the installing of a committed metadata version on every
//! shard.

use std::rc::Rc;

use uuid::Uuid;

use super::controller::{self, ConfigChange, Failure, QuotaAlteration, Reassignment, ScramChange, TopicSpec};
use crate::metadata::{Metadata, TopicMeta};
use crate::security::acl::{AclBinding, AclFilter};
use crate::shard::dispatch::{mesh_requests, Serve};
use crate::shard::Shard;
use crate::throttle::{self, Mutated, MutationQuota};

// A metadata change, on shard 0; or the install of a version, on any shard.
mesh_requests! {
    CreateTopics => Mutated<TopicMeta>,
    CreatePartitions => Mutated<()>,
    DeleteTopics => Mutated<Uuid>,
    CreateAcls => Result<(), Failure>,
    DeleteAcls => Result<Vec<Vec<AclBinding>>, Failure>,
    AlterConfigs => Vec<Result<(), Failure>>,
    AlterScramCredentials => Vec<Result<(), Failure>>,
    AlterClientQuotas => Result<(), Failure>,
    AllocateProducerId => Result<i64, Failure>,
    Reassign => Vec<Result<(), Failure>>,
    ApplyMetadata => (),
}

/// Creates topics, taking their partitions from `quota` if one applies.
pub struct CreateTopics {
    pub specs: Vec<TopicSpec>,
    pub validate_only: bool,
    pub quota: Option<MutationQuota>,
}

impl Serve for CreateTopics {
    async fn serve(self, shard: Rc<Shard>) -> Mutated<TopicMeta> {
        let created =
            controller::create_topics(shard.clone(), self.specs, self.validate_only, self.quota.as_ref()).await;
        throttle::mutated(&shard, self.quota, created)
    }
}

/// Adds partitions to topics (name, new count).
pub struct CreatePartitions {
    pub changes: Vec<(String, i32)>,
    pub validate_only: bool,
    pub quota: Option<MutationQuota>,
}

impl Serve for CreatePartitions {
    async fn serve(self, shard: Rc<Shard>) -> Mutated<()> {
        let created =
            controller::create_partitions(shard.clone(), self.changes, self.validate_only, self.quota.as_ref()).await;
        throttle::mutated(&shard, self.quota, created)
    }
}

/// Deletes topics by name.
pub struct DeleteTopics {
    pub names: Vec<String>,
    pub quota: Option<MutationQuota>,
}

impl Serve for DeleteTopics {
    async fn serve(self, shard: Rc<Shard>) -> Mutated<Uuid> {
        let deleted = controller::delete_topics(shard.clone(), self.names, self.quota.as_ref()).await;
        throttle::mutated(&shard, self.quota, deleted)
    }
}

/// Adds ACL bindings.
pub struct CreateAcls {
    pub acls: Vec<AclBinding>,
}

impl Serve for CreateAcls {
    async fn serve(self, shard: Rc<Shard>) -> Result<(), Failure> {
        controller::create_acls(shard, self.acls).await
    }
}

/// Deletes the ACL bindings matching each filter: those deleted, per filter.
pub struct DeleteAcls {
    pub filters: Vec<AclFilter>,
}

impl Serve for DeleteAcls {
    async fn serve(self, shard: Rc<Shard>) -> Result<Vec<Vec<AclBinding>>, Failure> {
        controller::delete_acls(shard, self.filters).await
    }
}

/// Changes topic or broker configs.
pub struct AlterConfigs {
    pub changes: Vec<ConfigChange>,
    pub validate_only: bool,
}

impl Serve for AlterConfigs {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Result<(), Failure>> {
        controller::alter_configs(shard, self.changes, self.validate_only).await
    }
}

/// Upserts or deletes SCRAM credentials.
pub struct AlterScramCredentials {
    pub changes: Vec<ScramChange>,
}

impl Serve for AlterScramCredentials {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Result<(), Failure>> {
        controller::alter_scram_credentials(shard, self.changes).await
    }
}

/// Changes client quotas.
pub struct AlterClientQuotas {
    pub alterations: Vec<QuotaAlteration>,
}

impl Serve for AlterClientQuotas {
    async fn serve(self, shard: Rc<Shard>) -> Result<(), Failure> {
        controller::alter_client_quotas(shard, self.alterations).await
    }
}

/// A fresh producer id.
pub struct AllocateProducerId;

impl Serve for AllocateProducerId {
    async fn serve(self, shard: Rc<Shard>) -> Result<i64, Failure> {
        controller::allocate_producer_id(shard).await
    }
}

/// Moves partitions' replicas (or cancels their moves).
pub struct Reassign {
    pub wanted: Vec<Reassignment>,
}

impl Serve for Reassign {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Result<(), Failure>> {
        controller::reassign(shard, self.wanted).await
    }
}

/// Installs a metadata version on the target shard (`Shard::apply_metadata`).
#[derive(Clone)]
pub struct ApplyMetadata(pub Metadata);

impl Serve for ApplyMetadata {
    async fn serve(self, shard: Rc<Shard>) {
        shard.apply_metadata(self.0).await
    }
}

/// A fresh producer id from the controller.
pub async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<i64, i16> {
    shard.call(0, AllocateProducerId).await.map_err(|(code, _)| code)
}
