//! Orderly stop on SIGTERM or SIGINT: every shard flushes every partition it owns
//! (all appended data reaches the disk, the high watermark meets the log end), then
//! the process exits. A `kill -9` skips this and relies on recovery instead. A node of
//! a cluster first hands the leaderships it holds to other voters (controlled
//! shutdown), so clients move to the new leaders before it goes.
//!
//! Signals are blocked in every thread and taken by one plain thread with `sigwait`;
//! it only sets a flag that shard 0 checks on a timer, so no signal handler ever runs
//! inside an executor.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::dispatch::{mesh_requests, Serve};
use super::Shard;

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a stop waits for flushes before exiting anyway.
const STOP_FLUSH_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long a cluster node's stop waits for its leaderships to move.
const HAND_OVER_WAIT_MAX: Duration = Duration::from_secs(5);

fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset only write into the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM/SIGINT in this thread (and the threads it spawns afterwards) and
/// starts the thread that waits for them. Call before starting the executors.
pub fn install() {
    let set = stop_signals();
    // SAFETY: pthread_sigmask reads `set` and changes only this thread's mask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    std::thread::Builder::new()
        .name("keel-signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: sigwait reads `set` and writes the signal number into `sig`.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                tracing::info!(signal = sig, "stopping: flushing every partition");
                STOP_REQUESTED.store(true, Ordering::SeqCst);
            }
        })
        .expect("starting the signal thread");
}

/// Runs on shard 0: waits for a stop request, flushes every shard, exits.
pub async fn watch(shard: Rc<Shard>) {
    while !STOP_REQUESTED.load(Ordering::SeqCst) {
        glommio::timer::sleep(STOP_POLL_INTERVAL).await;
    }
    let flushed = futures_lite::future::or(
        async {
            // In a cluster, leaderships move to other nodes first, then replication
            // stops writing, then the logs close.
            shard.call_all(HandOver).await;
            shard.call_all(Flush).await;
            true
        },
        async {
            glommio::timer::sleep(STOP_FLUSH_WAIT_MAX).await;
            false
        },
    )
    .await;
    if flushed {
        tracing::info!("every partition flushed; exiting");
        std::process::exit(0);
    }
    eprintln!(
        "keel: partitions not flushed within {STOP_FLUSH_WAIT_MAX:?}; exiting, recovery will run at the next start"
    );
    std::process::exit(1);
}

/// Flushes every partition of this shard and writes its clean-shutdown checkpoint, so
/// the next start opens it without scanning. `close` takes the log's I/O lock, so it
/// never runs at the same time as the flush loop's pass on that log.
async fn flush_all(shard: &Shard) {
    let partitions: Vec<_> = shard.partitions.borrow().values().cloned().collect();
    for p in partitions {
        if let Err(e) = p.close().await {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing a partition failed; it will be recovered by a scan");
        }
    }
}

// The steps of an orderly stop, on every shard.
mesh_requests! {
    HandOver => (),
    Flush => (),
}

/// In a cluster: moves the target shard's leaderships to other voters, then stops
/// its replication writing.
#[derive(Clone)]
pub struct HandOver;

impl Serve for HandOver {
    async fn serve(self, shard: Rc<Shard>) {
        if let Some(r) = &shard.replication {
            r.hand_over(HAND_OVER_WAIT_MAX).await;
            r.stop();
        }
    }
}

/// Flushes and closes every partition of the target shard.
#[derive(Clone)]
pub struct Flush;

impl Serve for Flush {
    async fn serve(self, shard: Rc<Shard>) {
        flush_all(&shard).await
    }
}
