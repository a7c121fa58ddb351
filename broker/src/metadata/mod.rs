//! The cluster metadata every shard holds a copy of (topics, their partitions'
//! placement, configs, ACLs, SCRAM credentials, client quotas) and its file on disk.
//! The controller (`crate::cluster`) alone changes it.

pub mod configs;
pub mod live;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicMeta {
    pub id: Uuid,
    /// Owning shard of each partition, by partition index.
    pub partitions: Vec<usize>,
    /// Topic configs set explicitly (not the broker defaults).
    pub configs: BTreeMap<String, String>,
    /// Replica node ids of each partition, preferred leader first; empty for a
    /// topic of a single-node broker (its one replica is that node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Vec<i32>>,
    /// Partitions being reassigned, by index: the replicas each moves to (Kafka's
    /// target replicas), until its leader has made them its group's members.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reassigning: BTreeMap<i32, Vec<i32>>,
    /// Partitions whose damaged replica is being rebuilt, by index
    /// (`cluster::rebuild`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rebuilding: BTreeMap<i32, Rebuild>,
}

/// One partition's replica being rebuilt: first taken out of the group by a
/// reassignment to the other replicas, then added back empty by one to `replicas`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rebuild {
    pub node: i32,
    /// The replicas to restore, in their order.
    pub replicas: Vec<i32>,
    /// Tells this rebuild from the partition's earlier ones (the metadata version it
    /// started at).
    pub id: u64,
}

impl Rebuild {
    /// The replicas to add back once a reassignment to `target` completes: only after
    /// the rebuild's own first step. Any other target ends the rebuild: the replica is
    /// back (in the rebuild's order, or in one an operator asked for meanwhile), or an
    /// operator's reassignment replaced the rebuild.
    pub fn add_back_after(&self, target: &[i32]) -> Option<Vec<i32>> {
        let taken_out = self.replicas.iter().filter(|n| **n != self.node);
        taken_out.eq(target.iter()).then(|| self.replicas.clone())
    }
}

impl TopicMeta {
    /// Replica node ids of `partition`, or `None` when the topic is not replicated.
    pub fn replicas_of(&self, partition: i32) -> Option<&[i32]> {
        usize::try_from(partition).ok().and_then(|p| self.replicas.get(p)).map(|r| r.as_slice())
    }

    /// The replicas `partition` is being moved to, while a reassignment is under way.
    pub fn target_of(&self, partition: i32) -> Option<&[i32]> {
        self.reassigning.get(&partition).map(|r| r.as_slice())
    }

    /// Whether `node` keeps a replica of `partition`: one of its replicas, or of the
    /// replicas it is being moved to (every node, for a topic that is not replicated).
    pub fn hosted_on(&self, partition: i32, node: i32) -> bool {
        let Some(replicas) = self.replicas_of(partition) else { return true };
        replicas.contains(&node) || self.target_of(partition).is_some_and(|t| t.contains(&node))
    }

    /// The rebuild whose replica `node` must now hold empty: taken out of
    /// `partition`'s group, and not yet one of its replicas again.
    pub fn rebuild_on(&self, partition: i32, node: i32) -> Option<u64> {
        let rebuild = self.rebuilding.get(&partition).filter(|r| r.node == node)?;
        let replicas = self.replicas_of(partition)?;
        (!replicas.contains(&node)).then_some(rebuild.id)
    }

    /// Every replica of `partition` while it moves (Kafka's "replicas" during a
    /// reassignment): the current ones, then those being added.
    pub fn all_replicas_of(&self, partition: i32) -> Option<Vec<i32>> {
        let mut all = self.replicas_of(partition)?.to_vec();
        for node in self.target_of(partition).unwrap_or_default() {
            if !all.contains(node) {
                all.push(*node);
            }
        }
        Some(all)
    }
}

/// A broker of the cluster, as it registered itself.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrokerMeta {
    pub host: String,
    pub port: i32,
    /// The node-to-node listener (`--rpc-addr`), so every node can reach a broker
    /// that joined after it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<String>,
    /// Advertised host and port of each of its listeners, by listener name; `host`
    /// and `port` are its inter-broker listener's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub listeners: BTreeMap<String, (String, i32)>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Metadata {
    /// Increases with every change; shards ignore older versions.
    pub version: u64,
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Dynamic broker configs (AlterConfigs on the broker resource).
    pub broker_configs: BTreeMap<String, String>,
    /// The names in `broker_configs` the controller recorded as cluster-level defaults
    /// (KIP-966, `configs::add_cluster_defaults`) and nobody altered since: described
    /// as DYNAMIC_DEFAULT_BROKER_CONFIG, the others as DYNAMIC_BROKER_CONFIG.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub cluster_defaults: BTreeSet<String>,
    /// Producer ids below this may have been handed out.
    pub producer_id_block_end: i64,
    /// In a cluster: the start of the producer-id block each node was granted last.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub producer_id_blocks: BTreeMap<i32, i64>,
    /// Brokers of a cluster by node id (empty for a single node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub brokers: BTreeMap<i32, BrokerMeta>,
    /// Registered brokers the controller has not heard from within the session
    /// timeout (KRaft's fenced brokers).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub fenced: std::collections::BTreeSet<i32>,
    /// SCRAM credentials by user and mechanism name (AlterUserScramCredentials), as
    /// KRaft keeps its UserScramCredentialRecords.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scram_users: BTreeMap<String, BTreeMap<String, crate::security::scram::Credential>>,
    /// ACL bindings (CreateAcls, DeleteAcls), sorted and without duplicates, as KRaft
    /// keeps its AccessControlEntryRecords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<crate::security::acl::AclBinding>,
    /// Client quotas by entity, sorted by entity (AlterClientQuotas), as KRaft keeps
    /// its QuotaRecords; an entity with no quota left is removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_quotas: Vec<(crate::quota::Entity, crate::quota::Values)>,
    #[serde(skip)]
    by_id: HashMap<Uuid, String>,
}

impl Metadata {
    pub fn new_cluster() -> Metadata {
        let mut m = Metadata { cluster_id: short_id(Uuid::new_v4()), ..Default::default() };
        m.reindex();
        m
    }

    pub fn reindex(&mut self) {
        self.by_id = self.topics.iter().map(|(n, t)| (t.id, n.clone())).collect();
    }

    /// Registered brokers that are not fenced: the ones clients are told of and new
    /// replicas are placed on.
    pub fn live_brokers(&self) -> Vec<i32> {
        self.brokers.keys().filter(|id| !self.fenced.contains(id)).copied().collect()
    }

    pub fn topic_name(&self, id: &Uuid) -> Option<&str> {
        self.by_id.get(id).map(|s| s.as_str())
    }

    pub fn owner(&self, topic: &str, partition: i32) -> Option<usize> {
        let t = self.topics.get(topic)?;
        usize::try_from(partition).ok().and_then(|p| t.partitions.get(p).copied())
    }

    /// Partitions per shard, for least-loaded placement.
    pub fn shard_load(&self, shards: usize) -> Vec<usize> {
        let mut load = vec![0; shards];
        for t in self.topics.values() {
            for &s in &t.partitions {
                if s < shards {
                    load[s] += 1;
                }
            }
        }
        load
    }

    /// Places `count` new partitions, each on the currently least-loaded shard.
    pub fn place(&self, count: usize, shards: usize) -> Vec<usize> {
        let mut load = self.shard_load(shards);
        (0..count)
            .map(|_| {
                let (s, _) = load.iter().enumerate().min_by_key(|(i, l)| (**l, *i)).expect("at least one shard");
                load[s] += 1;
                s
            })
            .collect()
    }
}

/// Kafka prints cluster ids as 22-character URL-safe base64 of 16 bytes.
pub fn short_id(id: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= (*b as u32) << (16 - 8 * i);
        }
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

pub struct MetadataStore {
    path: PathBuf,
}

impl MetadataStore {
    pub fn new(data_dir: &Path) -> MetadataStore {
        MetadataStore { path: data_dir.join("cluster").join("metadata.json") }
    }

    pub fn load_or_create(&self) -> Result<Metadata, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                let mut m: Metadata =
                    serde_json::from_slice(&bytes).map_err(|e| format!("{} is damaged: {e}", self.path.display()))?;
                m.reindex();
                Ok(m)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let m = Metadata::new_cluster();
                self.save(&m)?;
                Ok(m)
            }
            Err(e) => Err(format!("reading {}: {e}", self.path.display())),
        }
    }

    /// Writes atomically: temp file, fsync, rename, fsync of the directory. Blocks:
    /// for start-up, before any shard runs; shards use [`MetadataStore::save_async`].
    pub fn save(&self, m: &Metadata) -> Result<(), String> {
        write_atomically(&self.path, &serde_json::to_vec_pretty(m).expect("metadata serializes"))
    }

    /// `save` on glommio's blocking thread, so the fsyncs and the rename (milliseconds
    /// to seconds on a busy disk) never stall the calling shard's reactor.
    pub async fn save_async(&self, m: &Metadata) -> Result<(), String> {
        let path = self.path.clone();
        let m = m.clone();
        glommio::executor()
            .spawn_blocking(move || {
                let bytes = serde_json::to_vec_pretty(&m).expect("metadata serializes");
                write_atomically(&path, &bytes)
            })
            .await
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().expect("metadata path has a parent");
    let fail = |e: std::io::Error| format!("saving {}: {e}", path.display());
    keel_storage::disk::create_dir_durably(dir).map_err(fail)?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(fail)?;
    f.write_all(bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(fail)?;
    Ok(())
}

impl crate::security::SecurityRecords for Metadata {
    fn acls(&self) -> &[crate::security::acl::AclBinding] {
        &self.acls
    }

    fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::Mechanism,
    ) -> Option<&crate::security::scram::Credential> {
        self.scram_users.get(user).and_then(|m| m.get(mechanism.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_adds_its_replica_back_only_after_its_own_first_step() {
        let r = Rebuild { node: 2, replicas: vec![1, 2, 3], id: 7 };
        assert_eq!(r.add_back_after(&[1, 3]), Some(vec![1, 2, 3]));
        // Added back, by the rebuild or by an operator's reassignment in another order.
        assert_eq!(r.add_back_after(&[1, 2, 3]), None);
        assert_eq!(r.add_back_after(&[2, 1, 3]), None);
        // An operator's reassignment replaced the rebuild.
        assert_eq!(r.add_back_after(&[3, 1]), None);
        assert_eq!(r.add_back_after(&[1, 3, 4]), None);
    }

    #[test]
    fn places_on_least_loaded_shard() {
        let mut m = Metadata::new_cluster();
        assert_eq!(m.place(5, 2), vec![0, 1, 0, 1, 0]);
        m.topics.insert(
            "a".into(),
            TopicMeta {
                id: Uuid::new_v4(),
                partitions: vec![0, 0, 0],
                configs: Default::default(),
                replicas: Vec::new(),
                reassigning: Default::default(),
                rebuilding: Default::default(),
            },
        );
        assert_eq!(m.place(3, 2), vec![1, 1, 1]);
    }

    #[test]
    fn cluster_id_is_22_chars() {
        assert_eq!(short_id(Uuid::new_v4()).len(), 22);
    }
}
