//! Shards: one pinned glommio executor per core, each owning a disjoint set of
//! partitions, its own memory budget, its own log writer and flush loop. Shards share
//! nothing; they reach each other only through [`mesh`] calls.

pub mod budget;
pub mod dirs;
pub mod dispatch;
pub mod fanout;
pub mod housekeeping;
pub mod log_move;
pub mod mesh;
pub mod partition;
pub mod partition_dir;
pub mod produce_outcome;
pub mod producer_state;
pub mod producer_turns;
pub mod scrub;
pub mod shutdown;
pub mod txn_log;
pub mod txn_store;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use glommio::channels::channel_mesh::MeshBuilder;
use keel_storage::cache::ShardCache;
use keel_storage::flush::FlushQueue;
use keel_storage::journal::Journal;
use keel_storage::kv::ShardKv;
use keel_storage::LogConfig;

use crate::config::BrokerConfig;
use crate::metadata::live::Controller;
use crate::metadata::{Metadata, TopicMeta};
use mesh::{Mesh, MeshMsg};
use partition::Partition;

/// Key of a partition in a shard's table.
pub type TopicPartition = (String, i32);

pub struct Shard {
    pub id: usize,
    pub count: usize,
    pub config: Rc<BrokerConfig>,
    pub mesh: Mesh,
    pub metadata: RefCell<Rc<Metadata>>,
    /// Held while a metadata change is applied (`apply_metadata`).
    metadata_turn: glommio::sync::Semaphore,
    pub partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    pub flush: Rc<FlushQueue>,
    /// The batch-cache budget of all this shard's partitions.
    pub cache: Rc<ShardCache>,
    /// Small state of this shard's partitions, written by `flush` with their data.
    pub kv: Rc<ShardKv>,
    pub log_config: LogConfig,
    /// The data directories as this shard sees them (which of them failed).
    pub dirs: dirs::DataDirs,
    /// Partitions of any shard taken offline by a failed data directory (each shard
    /// tells every other one), for Metadata.
    pub offline_partitions: RefCell<std::collections::HashSet<TopicPartition>>,
    /// This shard itself, for work started from places holding only `&Shard`.
    me: std::rc::Weak<Shard>,
    /// Controller state; only shard 0 has it.
    pub controller: Option<Controller>,
    pub connections: Cell<usize>,
    /// The longest a 5 ms timer on this shard fired late: the longest reactor stall.
    pub reactor_lag_max_us: Cell<u64>,
    /// The longest that timer fired late for the shard's own reasons (lateness less
    /// the thread's run-queue wait): the longest reactor stall.
    pub reactor_stall_max_us: Cell<u64>,
    /// Times that timer fired more than 10 ms late for the shard's own reasons.
    pub reactor_stalls_over_10ms: Cell<u64>,
    /// Times it fired more than 10 ms late only because the thread waited for a CPU.
    pub reactor_preemptions_over_10ms: Cell<u64>,
    /// Request bytes read and not yet answered on all this shard's connections
    /// (`request_bytes_in_flight_max_per_shard`).
    pub request_budget: budget::RequestBudget,
    /// Produce waits while the shard holds more unflushed bytes than this
    /// (`unflushed_bytes_max_per_shard`).
    pub unflushed_bytes_max: usize,
    /// Idempotent producer states of all this shard's partitions, with their caps.
    pub producers: Rc<producer_state::ShardProducers>,
    /// Groups and offsets of the `__consumer_offsets` partitions this shard owns.
    pub coordinator: RefCell<crate::groups::Coordinator>,
    /// Transactional ids of the `__transaction_state` partitions this shard owns.
    pub txn: RefCell<crate::transactions::TxnCoordinator>,
    /// The Raft shell of this shard, in a cluster (`peers` set).
    pub replication: Option<Rc<crate::replication::shell::Replication>>,
    /// Leader node and epoch of every replicated partition as the owner shards last
    /// told (each shard tells every other one), for Metadata.
    pub leaders: RefCell<HashMap<keel_raft::GroupId, crate::metadata::live::Leadership>>,
    /// A peer (re)started: tell it the leadership of every group here at once.
    pub leaders_refresh_due: Cell<bool>,
    /// Listeners, TLS, SASL users and authentication counters of this shard.
    pub security: crate::security::ShardSecurity,
    /// This shard's metric handles and distributions.
    pub metrics: Rc<crate::telemetry::recorder::ShardMetrics>,
    /// What a partition asks of the services above the shard.
    pub upcalls: Upcalls,
}

/// What a partition asks of the services above the shard runtime, given to
/// [`open`] by the server that starts both.
pub struct Upcalls {
    /// Asks a transactional id's coordinator whether a transactional write may go on
    /// (KIP-890): the producer's epoch is current and the partition is in its
    /// transaction, or with `add` joins it. Boxed: the coordinator's own writes come
    /// back through the partition's produce.
    pub verify_transaction: for<'a> fn(
        shard: &'a Rc<Shard>,
        txn_id: &'a str,
        producer_id: i64,
        epoch: i16,
        partition: (String, i32),
        add: bool,
    ) -> Pin<Box<dyn Future<Output = Result<(), i16>> + 'a>>,
    /// Asks the controller to rebuild a damaged replica from its leader, until it is.
    pub ask_rebuild: fn(shard: std::rc::Weak<Shard>, topic: String, index: i32, group: keel_raft::GroupId),
}

impl Shard {
    /// Serves `request` on shard `target` and returns its reply. Local calls skip the
    /// mesh. If the caller stops waiting, the request still runs to its end on `target`.
    pub async fn call<R: dispatch::Serve>(self: &Rc<Self>, target: usize, request: R) -> R::Reply {
        self.call_on(target, request, false).await
    }

    /// As `call`, but if the caller stops waiting (drops this future), the request is
    /// cancelled on `target` too. For work that may stop at any await: waits.
    pub async fn call_cancellable<R: dispatch::Serve>(self: &Rc<Self>, target: usize, request: R) -> R::Reply {
        self.call_on(target, request, true).await
    }

    async fn call_on<R: dispatch::Serve>(self: &Rc<Self>, target: usize, request: R, cancel_on_drop: bool) -> R::Reply {
        assert!(target < self.count, "shard {target} does not exist ({} shards)", self.count);
        if target == self.id {
            // Boxed: a request served here may call this shard again.
            Box::pin(request.serve(self.clone())).await
        } else {
            self.mesh.call(target, request, cancel_on_drop).await
        }
    }

    /// Serves `request` on every shard concurrently; replies in shard order.
    pub async fn call_all<R: dispatch::Serve + Clone>(self: &Rc<Self>, request: R) -> Vec<R::Reply> {
        let calls = (0..self.count).map(|s| self.call(s, request.clone())).collect();
        keel_storage::join::join_all(calls).await
    }

    pub fn meta(&self) -> Rc<Metadata> {
        self.metadata.borrow().clone()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(&(topic.to_string(), index)).cloned()
    }

    /// Installs a metadata version: opens partitions newly placed here and removes the
    /// ones whose topic is gone (or was re-created with a new id).
    pub async fn apply_metadata(self: &Rc<Self>, meta: Metadata) {
        // One change at a time: two applies interleaving at an await (start-up's and
        // one that arrives from the cluster meanwhile) would both find a partition
        // not yet open and open it twice.
        let _turn = self.metadata_turn.acquire_permit(1).await.expect("the metadata turn is never closed");
        if meta.version < self.metadata.borrow().version {
            return;
        }
        let meta = Rc::new(meta);
        *self.metadata.borrow_mut() = meta.clone();
        self.learn_peers(&meta);
        let node = self.config.node_id;
        // A replica of this node that a rebuild took out of its group and that was not
        // reset for it yet (`cluster::rebuild`).
        let to_reset = |t: &TopicMeta, index: i32| {
            let replication = self.replication.as_ref()?;
            let id = t.rebuild_on(index, node)?;
            (replication.reset_for(partition::group_id(t.id, index)) != id).then_some(id)
        };
        let stale: Vec<TopicPartition> = self
            .partitions
            .borrow()
            .iter()
            .filter(|((topic, index), p)| {
                // Gone, re-created with a new id, moved off this node by a reassignment,
                // or to be reset for a rebuild (opened again below).
                meta.topics
                    .get(topic)
                    .is_none_or(|t| t.id != p.topic_id || !t.hosted_on(*index, node) || to_reset(t, *index).is_some())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            let p = self.partitions.borrow_mut().remove(&key);
            if let Some(p) = p {
                if let (Some(r), Some(replication)) = (&p.replica, &self.replication) {
                    let rebuilt =
                        meta.topics.get(&key.0).is_some_and(|t| t.id == p.topic_id && t.hosted_on(key.1, node));
                    if rebuilt {
                        replication.stop_group(r.group);
                    } else {
                        replication.remove_group(r.group).await;
                    }
                }
                p.remove(self).await;
            }
        }
        let mut to_open = Vec::new();
        for (name, topic) in &meta.topics {
            for (index, &owner) in topic.partitions.iter().enumerate() {
                let key = (name.clone(), index as i32);
                // In a cluster a partition lives on the replicas its topic names, on
                // the same shard of each.
                let hosted = topic.hosted_on(index as i32, node);
                if owner % self.count != self.id || !hosted {
                    continue;
                }
                let existing = self.partitions.borrow().get(&key).cloned();
                if let (None, Some(id), Some(replication)) =
                    (&existing, to_reset(topic, index as i32), &self.replication)
                {
                    tracing::warn!(topic = %name, partition = index, "deleting this replica to rebuild it from its leader");
                    if let Err(e) = replication.reset_for_rebuild(partition::group_id(topic.id, index as i32), id).await
                    {
                        tracing::error!(topic = %name, partition = index, error = %e, "cannot reset a replica to rebuild it");
                        continue;
                    }
                }
                match existing {
                    Some(p) => p.update_settings(&topic.configs, &meta.broker_configs),
                    None => to_open.push((key, topic)),
                }
            }
        }
        // Several at a time: an open waits on the disk and on the blocking pool a few
        // times, and a restart opens every partition of the shard.
        let mut opened_replicas = Vec::new();
        for chunk in to_open.chunks(OPEN_CONCURRENCY) {
            let opens =
                chunk.iter().map(|((name, index), topic)| Partition::open(self, name, topic, *index, &meta)).collect();
            for (((name, index), _), opened) in chunk.iter().zip(keel_storage::join::join_all(opens).await) {
                match opened {
                    Ok(p) => {
                        let p = Rc::new(p);
                        if p.replica.is_some() {
                            opened_replicas.push(p.clone());
                        }
                        self.partitions.borrow_mut().insert((name.clone(), *index), p);
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, partition = index, error = %e, "cannot open partition")
                    }
                }
            }
        }
        scrub::spawn(self, opened_replicas);
        partition_dir::remove_leftover_partitions(self, &meta).await;
    }
}

/// Partitions a metadata change opens at once.
const OPEN_CONCURRENCY: usize = 16;

impl Shard {
    /// Brokers that joined the cluster after this node started become its Raft peers
    /// (their node-to-node address comes with their registration); every node then
    /// tells them all the leaders it knows.
    fn learn_peers(&self, meta: &Metadata) {
        let Some(replication) = &self.replication else { return };
        let known = replication.transport().peers();
        let me = self.config.node_id;
        for (id, broker) in &meta.brokers {
            let Some(addr) =
                broker.rpc.as_deref().and_then(|a| std::net::ToSocketAddrs::to_socket_addrs(a).ok()?.next())
            else {
                continue;
            };
            let Ok(node) = u64::try_from(*id) else { continue };
            if *id != me && !known.contains(&node) {
                tracing::info!(node, %addr, "a new peer joined the cluster");
                replication.transport().add_peer(node, addr);
                self.leaders_refresh_due.set(true);
            }
        }
    }
}

impl Shard {
    /// Takes data directory `dir` offline if `e` says it failed: an I/O error other
    /// than a full disk (which clients retry until space returns), or any failed
    /// fdatasync (after which nothing written there can be trusted). Every partition
    /// of this shard in that directory goes offline (all of them when it is this
    /// shard's home, which holds its journal), and every shard is told, for Metadata.
    pub fn storage_error(&self, dir: usize, e: &keel_storage::StorageError) {
        let failed = matches!(e, keel_storage::StorageError::Io { op, .. } if *op == "fdatasync")
            || matches!(e, keel_storage::StorageError::Io { .. }) && !e.is_disk_full();
        if !failed || !self.dirs.fail(dir, &e.to_string()) {
            return;
        }
        if self.dirs.all().iter().all(|d| d.offline().is_some()) {
            // As Kafka, which stops when its last log directory fails.
            eprintln!("keel: fatal: every data directory failed (last: {e}); stopping");
            std::process::exit(70);
        }
        let why = e.to_string();
        let whole_shard = dir == self.dirs.home_index();
        let mut offline = Vec::new();
        for (key, p) in self.partitions.borrow().iter() {
            if whole_shard || p.dir_index.get() == dir {
                offline.push(key.clone());
                self.flush.forget(&p.log);
                let Ok(mut l) = p.log.try_borrow_mut() else {
                    continue;
                };
                l.flush_error = Some(format!("data directory failed: {why}"));
                l.changed.notify();
            }
        }
        tracing::error!(shard = self.id, dir = %self.dirs.get(dir).path.display(), partitions = offline.len(),
            whole_shard, "data directory failed: its partitions are offline");
        let Some(me) = self.me.upgrade() else {
            return;
        };
        glommio::spawn_local(async move {
            me.call_all(dirs::TakeOffline { partitions: offline }).await;
        })
        .detach();
    }

    /// Drops state kept for topics deleted while this shard was down (their
    /// directories went when the first partition of a same-named topic opened).
    pub async fn forget_deleted_topics_state(&self) {
        let live: std::collections::HashSet<String> = self.meta().topics.values().map(|t| t.id.to_string()).collect();
        for key in self.kv.keys_with_prefix(partition::STATE_PREFIX) {
            let topic_id = key[partition::STATE_PREFIX.len()..].split('/').next().unwrap_or_default();
            if !live.contains(topic_id) {
                if let Err(e) = self.kv.delete(&key).await {
                    tracing::warn!(%key, error = %e, "cannot drop the state of a deleted topic");
                }
            }
        }
    }
}

/// Feeds the flush loop's passes and the journal's fdatasyncs to the shard's metrics,
/// and starts a new percentile window every [`crate::telemetry::distribution::WINDOW`].
fn watch_storage(shard: &Rc<Shard>) {
    if !shard.metrics.enabled() {
        return;
    }
    let metrics = shard.metrics.clone();
    shard.flush.on_pass(Box::new(move |report| metrics.flush_pass(report)));
    if let Some(journal) = shard.flush.journal() {
        let metrics = shard.metrics.clone();
        journal.on_sync(Box::new(move |took| metrics.fsync(took)));
    }
    let metrics = shard.metrics.clone();
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(crate::telemetry::distribution::WINDOW).await;
            metrics.rotate();
        }
    })
    .detach();
}

/// How often idle producers are looked for (an in-memory check of the oldest ones;
/// Kafka's `producer.id.expiration.check.interval.ms` is ten minutes).
const PRODUCER_EXPIRY_CHECK_INTERVAL_MS: u64 = 1000;

fn spawn_producer_expiry(shard: &Rc<Shard>) {
    let producers = shard.producers.clone();
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(std::time::Duration::from_millis(PRODUCER_EXPIRY_CHECK_INTERVAL_MS)).await;
            producers.expire();
        }
    })
    .detach();
}

/// Measures reactor stalls: a timer on the shard's default queue that should fire
/// every 5 ms records how late it fires. Lateness has two causes, counted apart: the
/// shard's own thread running or blocking without returning to the reactor (a long
/// task, a blocking file-system call: a stall), and the thread waiting on the CPU run
/// queue while other processes had the cores (preemption, which on a busy 2-core host
/// is common and says nothing about the shard's code). The kernel's per-thread
/// `schedstat` tells the run-queue wait; the rest of the lateness is the shard's own.
async fn probe_reactor_lag(shard: Rc<Shard>) {
    const PERIOD: std::time::Duration = std::time::Duration::from_millis(5);
    const STALL_US: u64 = 10_000;
    let schedstat = std::fs::File::open("/proc/thread-self/schedstat").ok();
    loop {
        let started = std::time::Instant::now();
        let waited_before = schedstat.as_ref().and_then(run_queue_wait_ns);
        glommio::timer::sleep(PERIOD).await;
        let late = started.elapsed().saturating_sub(PERIOD).as_micros() as u64;
        let preempted = match (waited_before, schedstat.as_ref().and_then(run_queue_wait_ns)) {
            (Some(before), Some(after)) => after.saturating_sub(before) / 1000,
            _ => 0,
        };
        let own = late.saturating_sub(preempted);
        if own > STALL_US {
            shard.reactor_stalls_over_10ms.set(shard.reactor_stalls_over_10ms.get() + 1);
            tracing::warn!(shard = shard.id, late_us = late, run_queue_us = preempted, "reactor stall");
        } else if late > STALL_US {
            shard.reactor_preemptions_over_10ms.set(shard.reactor_preemptions_over_10ms.get() + 1);
        }
        shard.reactor_lag_max_us.set(shard.reactor_lag_max_us.get().max(late));
        shard.reactor_stall_max_us.set(shard.reactor_stall_max_us.get().max(own));
    }
}

/// The calling thread's total time spent runnable but waiting for a CPU, from
/// `/proc/thread-self/schedstat` ("run_ns wait_ns slices"), read with one pread.
fn run_queue_wait_ns(file: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.split_whitespace().nth(1)?.parse().ok()
}

/// Opens this executor's shard: joins the mesh, probes the data directories, opens
/// its journal, state store and (in a cluster) Raft shell, and serves the mesh. Its
/// partitions open when metadata is applied; services start on it afterwards
/// (`crate::server`).
pub async fn open(
    config: BrokerConfig,
    metadata: &Metadata,
    peers: &std::collections::BTreeMap<u64, std::net::SocketAddr>,
    mesh: MeshBuilder<MeshMsg, glommio::channels::channel_mesh::Full>,
    memory: u64,
    jwks_feeds: Vec<crate::security::jwks_endpoint::ShardFeed>,
    upcalls: Upcalls,
) -> Result<Rc<Shard>, String> {
    let dirs = dirs::DataDirs::probe(&config.data_dirs).await;
    // A failed fdatasync takes its directory's partitions offline instead of
    // stopping the process (see `dirs`).
    keel_storage::fsync::survive_sync_failures();
    let (senders, receivers) = mesh.join().await.map_err(|_| "joining the shard mesh failed".to_string())?;
    let id = senders.peer_id();
    let count = senders.nr_consumers();
    let mesh = Mesh::new(senders, config.mesh_calls_in_flight_max_per_peer);
    let controller = (id == 0).then(|| Controller::new(config.data_dir(), metadata));
    let dirs = dirs.with_home(config.home_dir_index(id));
    if let Some(e) = dirs.home().offline() {
        return Err(format!("shard {id}: its data directory {} failed: {e}", dirs.home().path.display()));
    }
    let home = dirs.home().path.clone();
    // An eighth of the shard's memory goes to the batch caches of all its partitions;
    // any one partition may use all of it while the others are quiet.
    let cache = ShardCache::new((memory / 8) as usize);
    let log_config = LogConfig { cache_bytes_max: cache.limit(), ..LogConfig::default() };
    let journal_dir = home.join(".journal").join(format!("shard-{id}"));
    let journal =
        Journal::open(&journal_dir, config.journal_config()).await.map_err(|e| format!("opening the journal: {e}"))?;
    let flush = FlushQueue::with_journal(Some(cache.clone()), journal);
    glommio::spawn_local(flush.clone().run()).detach();
    let kv_dir = home.join(".kv").join(format!("shard-{id}"));
    let kv = ShardKv::open(&kv_dir, flush.clone()).await.map_err(|e| format!("opening the state store: {e}"))?;
    let request_budget = budget::RequestBudget::new(config.request_budget_bytes(memory));
    let unflushed_bytes_max = config.unflushed_bytes_max(memory);
    if config.request_bytes_max > request_budget.frame_bytes_max() {
        tracing::warn!(
            shard = id,
            request_bytes_max = config.request_bytes_max,
            frame_bytes_max = request_budget.frame_bytes_max(),
            "requests larger than the shard's request budget can hold will be refused"
        );
    }
    let producers = producer_state::ShardProducers::new(
        producer_state::ProducerLimits {
            per_partition_max: config.producer_states_per_partition_max,
            per_shard_max: config.producer_states_per_shard_max,
            expiration_ms: config.producer_id_expiration_ms,
        },
        Box::new(partition::now_ms),
    );
    let security = crate::security::ShardSecurity::new(&config, jwks_feeds)?;
    let replication = if peers.is_empty() {
        None
    } else {
        let settings = crate::replication::shell::RaftSettings {
            tick: std::time::Duration::from_millis(config.raft_tick_ms.max(1)),
            election_ticks: config.raft_election_ticks,
            heartbeat_ticks: config.raft_heartbeat_ticks,
            log_memory_bytes: config.raft_log_memory_bytes,
            replica_lag: std::time::Duration::from_millis(config.replica_lag_time_max_ms),
        };
        let rpc = config.rpc_socket_addr()?;
        let node = config.node_id as u64;
        let tls = match config.rpc_tls_files()? {
            Some((cert, key, ca)) => Some(Rc::new(crate::replication::rpc_tls::RpcTls::new(cert, key, ca)?)),
            None => None,
        };
        Some(
            crate::replication::shell::Replication::start(
                node,
                id as u16,
                rpc,
                peers,
                settings,
                kv.clone(),
                flush.clone(),
                tls,
            )
            .await?,
        )
    };
    let metrics = Rc::new(crate::telemetry::recorder::ShardMetrics::new(id, config.metrics));
    let shard = Rc::new_cyclic(|me| Shard {
        id,
        security,
        me: me.clone(),
        offline_partitions: RefCell::new(Default::default()),
        count,
        config: Rc::new(config),
        mesh,
        metadata: RefCell::new(Rc::new(Metadata::default())),
        metadata_turn: glommio::sync::Semaphore::new(1),
        partitions: RefCell::new(HashMap::new()),
        flush,
        cache,
        kv,
        log_config,
        dirs,
        controller,
        connections: Cell::new(0),
        reactor_lag_max_us: Cell::new(0),
        reactor_stall_max_us: Cell::new(0),
        reactor_stalls_over_10ms: Cell::new(0),
        reactor_preemptions_over_10ms: Cell::new(0),
        request_budget,
        unflushed_bytes_max,
        producers,
        coordinator: RefCell::new(crate::groups::Coordinator::default()),
        txn: RefCell::new(crate::transactions::TxnCoordinator::default()),
        replication,
        leaders: RefCell::new(HashMap::new()),
        leaders_refresh_due: Cell::new(false),
        metrics,
        upcalls,
    });
    watch_storage(&shard);
    let weak = Rc::downgrade(&shard);
    shard.flush.on_io_error(Box::new(move |log, e| {
        if let Some(shard) = weak.upgrade() {
            let dir = match log {
                None => Some(shard.dirs.home_index()),
                Some(l) => shard.dirs.index_of_file(l.borrow().dir()),
            };
            if let Some(dir) = dir {
                shard.storage_error(dir, e);
            }
        }
    }));
    mesh::serve(&shard, receivers);
    Ok(shard)
}

/// Starts the shard's upkeep: housekeeping (retention, compaction), the reactor-lag
/// probe and idle producers' expiry.
pub fn spawn_upkeep(shard: &Rc<Shard>) {
    housekeeping::spawn(shard);
    glommio::spawn_local(probe_reactor_lag(shard.clone())).detach();
    spawn_producer_expiry(shard);
}
