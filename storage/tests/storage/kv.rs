//! The shard state store: durable puts and deletes across restarts, snapshots that
//! bound its log, and recovery of a torn tail by the log's own CRC scan.

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use keel_storage::kv::ShardKv;

use crate::common;
use common::run;

async fn open(dir: &Path) -> Rc<ShardKv> {
    keel_storage::prime_dma_probe(dir.parent().unwrap()).await.unwrap();
    ShardKv::open_standalone(dir).await.unwrap()
}

fn value(s: &str) -> Option<Bytes> {
    Some(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn puts_and_deletes_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kv");
    run(move || async move {
        let kv = open(&dir).await;
        kv.put("a/1", Bytes::from_static(b"one")).await.unwrap();
        kv.put("a/2", Bytes::from_static(b"two")).await.unwrap();
        kv.put("b/1", Bytes::from_static(b"three")).await.unwrap();
        kv.put("a/1", Bytes::from_static(b"uno")).await.unwrap();
        kv.delete("a/2").await.unwrap();
        kv.delete("missing").await.unwrap();
        kv.keys("a/").remove_all().await.unwrap();
        kv.put("a/3", Bytes::from_static(b"")).await.unwrap();
        drop(kv);

        let kv = open(&dir).await;
        assert_eq!(kv.get("a/1"), None);
        assert_eq!(kv.get("a/2"), None);
        assert_eq!(kv.get("a/3"), Some(Bytes::new()), "an empty value is not a tombstone");
        assert_eq!(kv.get("b/1"), value("three"));
        assert_eq!(kv.keys_with_prefix("a/"), vec!["a/3".to_string()]);
    });
}

#[test]
fn snapshots_bound_the_log_and_keep_every_live_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kv");
    run(move || async move {
        let kv = open(&dir).await;
        for k in 0..50 {
            kv.put(&format!("keep/{k}"), Bytes::from(format!("v{k}"))).await.unwrap();
        }
        kv.put("gone", Bytes::from_static(b"x")).await.unwrap();
        kv.delete("gone").await.unwrap();
        // Overwrite one key until the log is far past its live size.
        let big = Bytes::from(vec![7u8; 64 << 10]);
        let mut peak = 0;
        for _ in 0..200 {
            kv.put("hot", big.clone()).await.unwrap();
            peak = peak.max(kv.log_bytes());
        }
        assert!(peak >= 3 << 20, "the log grew to {peak} bytes");
        assert!(kv.log_bytes() < 2 << 20, "a snapshot shrank the log to {} bytes", kv.log_bytes());
        drop(kv);

        let kv = open(&dir).await;
        assert_eq!(kv.get("hot"), Some(big));
        assert_eq!(kv.get("gone"), None, "a key deleted before the snapshot stays deleted");
        for k in 0..50 {
            assert_eq!(kv.get(&format!("keep/{k}")), Some(Bytes::from(format!("v{k}"))));
        }
    });
}

#[test]
fn a_torn_last_write_loses_only_that_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kv");
    let dir2 = dir.clone();
    run(move || async move {
        let kv = open(&dir).await;
        kv.put("first", Bytes::from_static(b"1")).await.unwrap();
        kv.put("second", Bytes::from(vec![9u8; 3000])).await.unwrap();
    });
    // Cut the second batch in half, as a crash in the middle of its write would.
    let segment = std::fs::read_dir(&dir2)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    let end = bytes.iter().rposition(|b| *b == 9).unwrap();
    std::fs::write(&segment, &bytes[..end - 1500]).unwrap();
    run(move || async move {
        let kv = open(&dir2).await;
        assert_eq!(kv.get("first"), value("1"));
        assert_eq!(kv.get("second"), None);
        kv.put("third", Bytes::from_static(b"3")).await.unwrap();
        drop(kv);
        let kv = open(&dir2).await;
        assert_eq!((kv.get("first"), kv.get("third")), (value("1"), value("3")));
    });
}
