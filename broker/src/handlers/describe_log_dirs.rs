//! DescribeLogDirs: every data directory with its own partitions and their sizes (from
//! their owner shards), the file system's total and usable bytes, and
//! KAFKA_STORAGE_ERROR for a directory that failed. A partition being moved by
//! AlterReplicaLogDirs is also listed in its target directory as a future replica
//! (`is_future_key`), as Kafka lists one.

use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (1, 4);

/// One partition replica as its owner shard reports it.
struct Replica {
    dir: usize,
    topic: String,
    partition: i32,
    size: i64,
    future: bool,
}

/// The directories of a shard that failed (by index), and each of its replicas: its
/// directory, topic, partition, size, and whether it is a move's future replica.
pub type Replicas = (Vec<bool>, Vec<(usize, String, i32, i64, bool)>);

/// On every shard: its failed directories and its replicas (of the wanted partitions,
/// or all).
#[derive(Clone)]
pub struct ShardReplicas {
    wanted: Option<Vec<(String, i32)>>,
}

impl Serve for ShardReplicas {
    async fn serve(self, s: Rc<Shard>) -> Replicas {
        let wanted = self.wanted;
        let failed: Vec<bool> = s.dirs.all().iter().map(|d| d.offline().is_some()).collect();
        let mut replicas = Vec::new();
        for ((topic, partition), p) in s.partitions.borrow().iter() {
            if wanted.as_ref().is_some_and(|w| !w.iter().any(|(t, i)| t == topic && i == partition)) {
                continue;
            }
            let size = p.log.borrow().size_bytes() as i64;
            replicas.push((p.dir_index.get(), topic.clone(), *partition, size, false));
            if let Some((target, copied)) = p.move_progress() {
                replicas.push((target, topic.clone(), *partition, copied as i64, true));
            }
        }
        (failed, replicas)
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    // As Kafka: DESCRIBE on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::DESCRIBE) {
        return DescribeLogDirsResponse::default().with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
    }
    let wanted: Option<Vec<(String, i32)>> = req
        .topics
        .as_ref()
        .map(|topics| topics.iter().flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p))).collect());
    let per_shard = shard.call_all(ShardReplicas { wanted }).await;
    let mut failed = vec![false; shard.dirs.all().len()];
    let mut replicas: Vec<Replica> = Vec::new();
    for (f, r) in per_shard {
        for (i, down) in f.into_iter().enumerate() {
            failed[i] |= down;
        }
        replicas.extend(r.into_iter().map(|(dir, topic, partition, size, future)| Replica {
            dir,
            topic,
            partition,
            size,
            future,
        }));
    }
    replicas.sort_by(|a, b| (a.dir, &a.topic, a.partition, a.future).cmp(&(b.dir, &b.topic, b.partition, b.future)));
    // statvfs can block on a sick device: on glommio's blocking thread.
    let paths: Vec<std::path::PathBuf> = shard.dirs.all().iter().map(|d| d.canonical.clone()).collect();
    let spaces =
        glommio::executor().spawn_blocking(move || paths.iter().map(|p| disk_space(p)).collect::<Vec<_>>()).await;
    let results = shard
        .dirs
        .all()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let result = DescribeLogDirsResult::default().with_log_dir(str_bytes(&d.canonical.display().to_string()));
            if failed[i] {
                // As Kafka: a failed directory is listed with its error and nothing else.
                return result.with_error_code(errors::KAFKA_STORAGE_ERROR).with_total_bytes(-1).with_usable_bytes(-1);
            }
            let (total, usable) = spaces[i];
            let topics = group_by_topic(replicas.iter().filter(|r| r.dir == i));
            result.with_topics(topics).with_total_bytes(total).with_usable_bytes(usable)
        })
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

fn group_by_topic<'a>(replicas: impl Iterator<Item = &'a Replica>) -> Vec<DescribeLogDirsTopic> {
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for r in replicas {
        let part = DescribeLogDirsPartition::default()
            .with_partition_index(r.partition)
            .with_partition_size(r.size)
            .with_is_future_key(r.future);
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == r.topic => t.partitions.push(part),
            _ => topics.push(
                DescribeLogDirsTopic::default().with_name(TopicName(str_bytes(&r.topic))).with_partitions(vec![part]),
            ),
        }
    }
    topics
}

fn disk_space(dir: &std::path::Path) -> (i64, i64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return (-1, -1);
    };
    // SAFETY: `path` is a valid NUL-terminated string and `stat` is a plain struct
    // that statvfs fills in.
    unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stat) != 0 {
            return (-1, -1);
        }
        ((stat.f_blocks * stat.f_frsize) as i64, (stat.f_bavail * stat.f_frsize) as i64)
    }
}
