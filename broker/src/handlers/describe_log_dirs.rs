//! DescribeLogDirs: the data directory, its partitions' sizes (from their owner shards)
//! and the file system's total and usable bytes.

use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::{scatter, str_bytes};
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (1, 4);

pub async fn handle(shard: &Rc<Shard>, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let meta = shard.meta();
    let mut wanted: Vec<(String, i32)> = Vec::new();
    match &req.topics {
        None => {
            for (name, t) in &meta.topics {
                wanted.extend((0..t.partitions.len() as i32).map(|p| (name.clone(), p)));
            }
        }
        Some(topics) => {
            for t in topics {
                for &p in &t.partitions {
                    if meta.owner(&t.topic.0, p).is_some() {
                        wanted.push((t.topic.0.to_string(), p));
                    }
                }
            }
        }
    }
    let work = wanted.iter().map(|(t, p)| (meta.owner(t, *p).expect("filtered above"), (t.clone(), *p))).collect();
    let sizes = scatter(shard, work, |s, items: Vec<(String, i32)>| async move {
        items
            .into_iter()
            .map(|(t, p)| s.partition(&t, p).map(|p| p.log.borrow().size_bytes() as i64).unwrap_or(0))
            .collect::<Vec<i64>>()
    })
    .await;
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for ((topic, partition), size) in wanted.into_iter().zip(sizes) {
        let part = DescribeLogDirsPartition::default().with_partition_index(partition).with_partition_size(size);
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(part),
            _ => topics.push(
                DescribeLogDirsTopic::default().with_name(TopicName(str_bytes(&topic))).with_partitions(vec![part]),
            ),
        }
    }
    let dir = std::fs::canonicalize(&shard.config.data_dir).unwrap_or_else(|_| shard.config.data_dir.clone());
    let (total, usable) = disk_space(&dir);
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(total)
        .with_usable_bytes(usable);
    DescribeLogDirsResponse::default().with_results(vec![result])
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
