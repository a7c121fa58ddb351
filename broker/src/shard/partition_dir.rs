//! Where a partition's directory lives and which topic owns it. Both are recorded in
//! the shard's state store, written durably: a missing, empty or unreadable record is
//! a crash or an older layout, never a reason to remove data, and a directory is
//! removed only when a record names another topic id (a deleted topic of the same
//! name), a partition the metadata no longer places on this node although it did when
//! the record was written (a deletion or a reassignment a crash or a restart came
//! between), or an AlterReplicaLogDirs move a crash interrupted left it behind.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use keel_storage::StorageError;
use uuid::Uuid;

use super::Shard;

/// The state-store key naming the topic that owns a partition directory, and the data
/// directory it lives in.
pub(crate) fn dir_owner_key(name: &str) -> String {
    format!("{DIR_OWNER_PREFIX}{name}")
}

const DIR_OWNER_PREFIX: &str = "dir-owner/";

/// Suffix of a partition directory being copied into another data directory by
/// AlterReplicaLogDirs (Kafka's `-future` replica).
pub const FUTURE_SUFFIX: &str = ".future";

/// What the state store says about a partition directory: `<topic id>@<metadata
/// version>@<cluster id> <data dir>`, or the older forms `<topic id> <data dir>` and
/// `<topic id>`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct DirOwner {
    pub topic_id: Option<Uuid>,
    pub data_dir: Option<PathBuf>,
    /// A metadata version that holds the topic (the one the partition was opened
    /// under), and the cluster whose metadata it is.
    pub held_at: Option<(u64, String)>,
}

impl DirOwner {
    pub(crate) fn parse(value: &[u8]) -> DirOwner {
        let text = std::str::from_utf8(value).unwrap_or_default();
        let (owner, dir) = match text.split_once(' ') {
            Some((owner, dir)) => (owner, Some(PathBuf::from(dir))),
            None => (text, None),
        };
        let mut parts = owner.splitn(3, '@');
        let id = parts.next().unwrap_or_default();
        let held_at = match (parts.next().and_then(|v| v.parse().ok()), parts.next()) {
            (Some(version), Some(cluster)) => Some((version, cluster.to_string())),
            _ => None,
        };
        DirOwner { topic_id: id.trim().parse().ok(), data_dir: dir, held_at }
    }

    pub(crate) fn encode(topic_id: Uuid, data_dir: &std::path::Path, held_at: (u64, &str)) -> Bytes {
        Bytes::from(format!("{topic_id}@{}@{} {}", held_at.0, held_at.1, data_dir.display()))
    }
}

pub(super) async fn exists(path: PathBuf) -> bool {
    glommio::executor().spawn_blocking(move || path.is_dir()).await
}

/// Removes a directory tree on glommio's blocking thread; a missing one is fine.
pub(crate) async fn remove_dir(path: PathBuf) -> Result<(), StorageError> {
    let target = path.clone();
    glommio::executor()
        .spawn_blocking(move || match std::fs::remove_dir_all(&target) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await
        .map_err(|e| StorageError::io("remove dir", &path, e))
}

/// Chooses the data directory of partition directory `name`. The state store's record
/// wins; a record naming a directory that is not configured is followed to the one
/// configured directory that holds the partition (the directories were moved while
/// the broker was down), and is an error otherwise (the data is left alone). Without a
/// record (a crash before it reached the store, or the older layout) the directories
/// are searched, home first, and a new partition goes home. Leftovers of an
/// AlterReplicaLogDirs move a crash interrupted are settled: a finished copy the
/// record already names is renamed into place (roll forward), an unfinished copy is
/// removed, and a source the record no longer names is removed. Data is never removed
/// because a record is missing.
pub(super) async fn choose_dir(shard: &Shard, name: &str, recorded: &DirOwner) -> Result<usize, StorageError> {
    let dirs = &shard.dirs;
    let mut order: Vec<usize> = vec![dirs.home_index()];
    order.extend((0..dirs.all().len()).filter(|i| *i != dirs.home_index()));
    let recorded_index = match &recorded.data_dir {
        Some(path) => match dirs.index_of(path) {
            Some(i) => Some(i),
            None => Some(moved_dir(shard, name, path, &order).await?),
        },
        None => None,
    };
    let chosen = match recorded_index {
        Some(i) => {
            let base = &dirs.get(i).path;
            let (dir, future) = (base.join(name), base.join(format!("{name}{FUTURE_SUFFIX}")));
            if !exists(dir.clone()).await && exists(future.clone()).await {
                tracing::info!(dir = %dir.display(), "finishing a partition move a crash interrupted");
                let (from, to) = (future.clone(), dir.clone());
                glommio::executor()
                    .spawn_blocking(move || std::fs::rename(&from, &to))
                    .await
                    .map_err(|e| StorageError::io("rename moved partition", &future, e))?;
                keel_storage::disk::sync_dir(base).await?;
            }
            i
        }
        None => dirs_holding(shard, name, &order).await.first().copied().unwrap_or(dirs.home_index()),
    };
    for &i in &order {
        if i == chosen || dirs.get(i).offline().is_some() {
            continue;
        }
        let base = &dirs.get(i).path;
        let future = base.join(format!("{name}{FUTURE_SUFFIX}"));
        if exists(future.clone()).await {
            tracing::warn!(dir = %future.display(), "removing an unfinished partition move");
            remove_dir(future).await?;
        }
        let other = base.join(name);
        if recorded_index.is_some() && exists(other.clone()).await {
            tracing::warn!(dir = %other.display(), "removing the source of a finished partition move");
            remove_dir(other).await?;
        } else if exists(other.clone()).await {
            tracing::warn!(dir = %other.display(), chosen = %dirs.get(chosen).path.display(),
                "partition directory found in two data directories; using the first, leaving the other");
        }
    }
    Ok(chosen)
}

/// The data directory holding partition directory `name` when its record names a
/// directory not configured: the data directories were moved or renamed while the
/// broker was down. Only a partition found in exactly one configured directory is
/// taken (its record is then rewritten); otherwise it is an error and nothing is
/// touched, since a directory left out of the configuration may hold its only copy.
async fn moved_dir(shard: &Shard, name: &str, recorded: &Path, order: &[usize]) -> Result<usize, StorageError> {
    let found = dirs_holding(shard, name, order).await;
    match found[..] {
        [i] => {
            tracing::info!(partition = name, recorded = %recorded.display(), now = %shard.dirs.get(i).path.display(),
                "partition recorded in a data directory no longer configured; found where it now is");
            Ok(i)
        }
        _ => Err(StorageError::io(
            "find data directory",
            recorded,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{name} is recorded in a directory not configured, and found in {} configured ones",
                    found.len()
                ),
            ),
        )),
    }
}

/// The online directories of `order` that hold partition directory `name`, in order.
async fn dirs_holding(shard: &Shard, name: &str, order: &[usize]) -> Vec<usize> {
    let mut found = Vec::new();
    for &i in order {
        if shard.dirs.get(i).offline().is_none() && exists(shard.dirs.get(i).path.join(name)).await {
            found.push(i);
        }
    }
    found
}

/// Makes `dir` this topic's. Which topic owns a directory is kept in the shard's
/// state store, written durably: a directory another topic id owns was left by a
/// deleted topic of the same name and is removed. Data is never removed because an
/// owner record is missing or unreadable: that is a crash or an older layout (whose
/// `topic-id` file is then consulted only when it names a different, valid id).
pub(super) async fn claim_dir(
    shard: &Shard,
    dir: &std::path::Path,
    data_dir: &std::path::Path,
    recorded: &DirOwner,
    topic_id: Uuid,
    held_at: (u64, &str),
) -> Result<(), StorageError> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let key = dir_owner_key(&name);
    let owner = match recorded.topic_id {
        Some(id) => Some(id),
        None => {
            let id_file = dir.join("topic-id");
            let read = glommio::executor().spawn_blocking(move || std::fs::read_to_string(id_file)).await;
            read.ok().and_then(|s| s.trim().parse::<Uuid>().ok())
        }
    };
    if owner.is_some_and(|id| id != topic_id) {
        tracing::warn!(dir = %dir.display(), "removing data of a deleted topic");
        remove_dir(dir.to_path_buf()).await?;
    }
    let outdated = recorded.topic_id != Some(topic_id) || recorded.held_at.is_none();
    if outdated || recorded.data_dir.as_deref() != Some(data_dir) {
        // Not awaited: opening a thousand partitions does not wait for a thousand passes
        // one after another. The record reaches the store on the next scheduler turn,
        // long before a removal of the partition could follow it.
        let kv = shard.kv.clone();
        let held_at = match &recorded.held_at {
            Some((version, cluster)) if !outdated => (*version, cluster.as_str()),
            _ => held_at,
        };
        let owner = DirOwner::encode(topic_id, data_dir, held_at);
        glommio::spawn_local(async move {
            if let Err(e) = kv.put(&key, owner).await {
                tracing::warn!(%key, error = %e, "cannot record a partition directory's owner");
            }
        })
        .detach();
    }
    Ok(())
}

pub fn partition_dir(data_dir: &std::path::Path, topic: &str, index: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{index}"))
}

/// Removes the partitions this shard keeps on disk that `meta` no longer places on
/// this node and that were never removed: a crash between installing the metadata
/// that deleted their topic or moved their replica off this node (a reassignment)
/// and removing them, or a node that learned of the change from a later metadata
/// version than it had (a restart, a snapshot) and so never had them open. A partition
/// goes only when its owner record was written under a metadata version no later than
/// `meta`'s: that version placed it here, so it was deleted or moved away in between
/// (topic ids are never reused). An older metadata copy (one whose save failed, in a
/// cluster) removes nothing; neither does another cluster's metadata (a lost metadata
/// file replaced by a new cluster's), a record without a version, or one naming a data
/// directory not configured. With the directory go the partition's Raft record and
/// state, then its owner record, last: a crash in between leaves the record, and the
/// next sweep starts again from it. A replica that later moves back here starts empty
/// and copies the log from its leader, as a new replica does.
pub(super) async fn remove_leftover_partitions(shard: &Shard, meta: &crate::metadata::Metadata) {
    let node = shard.config.node_id;
    for key in shard.kv.keys_with_prefix(DIR_OWNER_PREFIX) {
        let name = &key[DIR_OWNER_PREFIX.len()..];
        let Some((topic, index)) = name.rsplit_once('-').and_then(|(t, i)| Some((t, i.parse::<i32>().ok()?))) else {
            continue;
        };
        // Placed here (nearly every record, checked before parsing one): its
        // partition's opening settles the directory.
        let current = meta.topics.get(topic);
        if current.is_some_and(|t| t.hosted_on(index, node)) {
            continue;
        }
        let Some(owner) = shard.kv.get(&key).map(|v| DirOwner::parse(&v)) else { continue };
        let (Some(id), Some((version, cluster)), Some(data_dir)) = (owner.topic_id, owner.held_at, owner.data_dir)
        else {
            continue;
        };
        let Some(dir_index) = shard.dirs.index_of(&data_dir) else { continue };
        let earlier = version <= meta.version && cluster == meta.cluster_id;
        if !earlier || shard.dirs.get(dir_index).offline().is_some() {
            continue;
        }
        let dir = data_dir.join(name);
        // (A log busy right now is taken for this one: never remove what may be open.)
        if shard.partitions.borrow().values().any(|p| p.log.try_borrow().map_or(true, |l| l.dir() == dir)) {
            continue;
        }
        let why = if current.is_some_and(|t| t.id == id) {
            "its replica moved off this node"
        } else {
            "its topic was deleted"
        };
        tracing::warn!(dir = %dir.display(), "removing a partition left behind by a crash or a restart: {why}");
        // The directory's removal is durable before any record goes.
        let removed = match remove_dir(dir.clone()).await {
            Ok(()) => keel_storage::disk::sync_dir(&data_dir).await,
            Err(e) => Err(e),
        };
        if let Err(e) = removed {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a partition left behind");
            continue;
        }
        if let Some(replication) = &shard.replication {
            replication.remove_group(super::partition::group_id(id, index)).await;
        }
        if let Err(e) = shard.kv.keys(&super::partition::state_prefix(id, index)).remove_all().await {
            tracing::warn!(%key, error = %e, "cannot drop the state of a partition left behind");
            continue;
        }
        if let Err(e) = shard.kv.delete(&key).await {
            tracing::warn!(%key, error = %e, "cannot drop the directory owner of a partition left behind");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_records_of_every_form_parse() {
        let id = Uuid::new_v4();
        let dir = Path::new("/data/with space");
        let owner = DirOwner::parse(&DirOwner::encode(id, dir, (42, "cluster-Id_x")));
        assert_eq!(owner.topic_id, Some(id));
        assert_eq!(owner.data_dir.as_deref(), Some(dir));
        assert_eq!(owner.held_at, Some((42, "cluster-Id_x".to_string())));
        // Written before the metadata version was recorded: never a reason to remove.
        let older = DirOwner::parse(format!("{id} /data/with space").as_bytes());
        assert_eq!((older.topic_id, older.data_dir.as_deref(), older.held_at), (Some(id), Some(dir), None));
        let oldest = DirOwner::parse(id.to_string().as_bytes());
        assert_eq!((oldest.topic_id, oldest.data_dir, oldest.held_at), (Some(id), None, None));
        assert_eq!(DirOwner::parse(b""), DirOwner::default());
    }
}
