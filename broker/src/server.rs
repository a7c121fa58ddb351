//! The broker process: starts one shard per core on its own pinned executor, starts
//! the services on each (cluster membership, group and transaction coordinators, the
//! admin API on shard 0) and then its Kafka listeners, and joins the shards when
//! they stop. The top of the broker's layers: it names the shard runtime, the
//! services and the listeners, and none of them names it.

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};

use crate::config::BrokerConfig;
use crate::metadata::{Metadata, MetadataStore};
use crate::shard::mesh::{self, MeshMsg};
use crate::shard::shutdown;

/// Registered io_uring buffer memory per shard when the memlock limit allows it.
const IO_MEMORY_MAX: usize = 8 << 20;

/// What shards wait for from each other while they start (start-up only: never
/// touched on the data path).
#[derive(Default)]
struct Startup {
    /// Shards whose partitions are open.
    recovered: std::sync::atomic::AtomicUsize,
}

impl Startup {
    /// Shards open their partitions concurrently; none takes clients until all have,
    /// as Kafka opens its listeners only after log recovery. Otherwise a client
    /// reaching a ready shard early is told NOT_LEADER_OR_FOLLOWER for partitions
    /// another shard is still opening.
    async fn wait_for_every_shard(&self, count: usize) {
        use std::sync::atomic::Ordering;
        self.recovered.fetch_add(1, Ordering::AcqRel);
        while self.recovered.load(Ordering::Acquire) < count {
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// Listeners bound with SO_REUSEPORT would silently share a port with another running
/// broker; refuses to start if something already accepts connections at `addr`.
/// (A plain bind test would also trip over TIME_WAIT sockets after a crash.)
fn refuse_taken_port(addr_text: &str) -> Result<(), String> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr_text)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("invalid Kafka address {addr_text}"))?;
    // After a crash the kernel tears a dead process's io_uring down asynchronously, and
    // its listening sockets keep accepting for a moment: only a port that keeps
    // accepting for a few seconds belongs to a live broker.
    let accepting = (0..15).all(|_| {
        let open = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300)).is_ok();
        if open {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        open
    });
    if accepting {
        return Err(format!("cannot listen on {addr_text}: another process is accepting connections there"));
    }
    Ok(())
}

/// Starts `config.smp` shards and blocks until they stop.
pub fn run(config: BrokerConfig) -> Result<(), String> {
    crate::metadata::configs::set_static_topic_defaults(&config)?;
    for dir in &config.data_dirs {
        keel_storage::disk::create_dir_durably(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    // Listeners bound with SO_REUSEPORT would silently share the port with another
    // running broker; refuse to start if something already accepts connections there.
    // (A plain bind test would also trip over TIME_WAIT sockets after a crash.)
    for listener in config.listeners()? {
        refuse_taken_port(&listener.addr)?;
    }
    // Certificates and users are checked once here, so a bad file stops the start
    // with one clear message instead of one per shard.
    crate::security::ShardSecurity::new(&config, Vec::new())?;
    let mut metadata = MetadataStore::new(config.data_dir()).load_or_create()?;
    let peers = config.cluster_peers()?;
    if let Some((cert, key, ca)) = config.rpc_tls_files()? {
        // A bad certificate file stops the start here, with one message.
        crate::replication::rpc_tls::RpcTls::new(cert, key, ca)?;
    } else if !peers.is_empty() && config.rpc_socket_addr().is_ok_and(|a| !a.ip().is_loopback()) {
        tracing::warn!(
            rpc_addr = ?config.rpc_addr,
            "the node-to-node port listens beyond loopback without TLS: anyone who reaches it can speak as a \
             node of this cluster (set --rpc-tls-cert, --rpc-tls-key and --rpc-tls-ca)"
        );
    }
    if !peers.is_empty() && metadata.version == 0 {
        // Until the metadata log tells it more, every node of a cluster reports the id
        // its voters give.
        metadata.cluster_id = crate::cluster::nodes::cluster_id(&peers);
    }
    // A single node is its own controller: it records the cluster-level defaults at
    // its first start, as a cluster's controller does when it takes over.
    if peers.is_empty() && crate::metadata::configs::add_cluster_defaults(&mut metadata) {
        metadata.version += 1;
        MetadataStore::new(config.data_dir()).save(&metadata)?;
    }
    let cpus = keel_tuning::pick_cpus(config.smp, config.cpuset.as_deref())?;
    // JWKS endpoints are fetched here, before any shard: one that cannot be fetched
    // stops the start, as Kafka's broker does not start then either.
    let endpoints = crate::security::jwks_endpoints(&config)?;
    let mut jwks_feeds = crate::security::jwks_endpoint::start(&endpoints, cpus.len())?.into_iter();
    let memory = config.memory_bytes()?;
    // Each executor registers its io_memory in three io_uring rings; it must fit the
    // memlock limit or glommio silently falls back to unregistered buffers.
    let memlock = keel_tuning::raise_memlock((IO_MEMORY_MAX as u64 * 3 + (4 << 20)) * config.smp as u64 + (64 << 20));
    let io_memory = keel_tuning::io_memory_per_shard(memlock, config.smp, IO_MEMORY_MAX);
    if !keel_protocol::alloc::avoid_reactor_stalls() {
        tracing::warn!("could not turn transparent huge pages off: a shard's first touch of a huge page may stall it");
    }
    shutdown::install();
    // Before any shard registers a metric: the recorder is installed here.
    let admin = crate::admin::server::start(&config)?;
    let mesh = MeshBuilder::<MeshMsg, _>::full(cpus.len(), mesh::MESH_CHANNEL_CAPACITY);
    let per_shard_memory = memory / cpus.len() as u64;
    tracing::info!(shards = cpus.len(), ?cpus, per_shard_memory, io_memory, "starting keel");
    let startup = std::sync::Arc::new(Startup::default());
    let mut handles = Vec::new();
    for (i, cpu) in cpus.iter().enumerate() {
        let (config, metadata, mesh, startup) = (config.clone(), metadata.clone(), mesh.clone(), startup.clone());
        let admin = admin.clone();
        let jwks_feeds = jwks_feeds.next().unwrap_or_default();
        // glommio's stall detector logs a backtrace of a shard that ran 10 ms past its
        // task quota without yielding; it is signal-based, so only on request.
        let stall_backtraces = std::env::var_os("KEEL_STALL_BACKTRACES").is_some();
        let handle =
            LocalExecutorBuilder::new(Placement::Fixed(*cpu))
                .name(&format!("keel-shard-{i}"))
                .io_memory(io_memory)
                .detect_stalls(stall_backtraces.then(|| {
                    Box::new(glommio::DefaultStallDetectionHandler {}) as Box<dyn glommio::StallDetectionHandler>
                }))
                .spawn(move || async move {
                    shard_main(config, metadata, mesh, per_shard_memory, startup, admin, jwks_feeds).await
                })
                .map_err(|e| format!("starting shard on cpu {cpu}: {e}"))?;
        handles.push(handle);
    }
    for h in handles {
        h.join().map_err(|e| format!("shard stopped: {e}"))??;
    }
    Ok(())
}

/// One executor's life: opens its shard, starts the services on it, waits until
/// every shard has opened its partitions, then serves Kafka clients until it stops.
async fn shard_main(
    config: BrokerConfig,
    metadata: Metadata,
    mesh: MeshBuilder<MeshMsg, glommio::channels::channel_mesh::Full>,
    memory: u64,
    startup: std::sync::Arc<Startup>,
    admin: crate::admin::server::AdminLink,
    jwks_feeds: Vec<crate::security::jwks_endpoint::ShardFeed>,
) -> Result<(), String> {
    let peers = config.cluster_peers()?;
    let upcalls = crate::shard::Upcalls {
        verify_transaction: |shard, txn_id, producer_id, epoch, partition, add| {
            Box::pin(crate::txn::shell::verify(shard, txn_id, producer_id, epoch, partition, add))
        },
        ask_rebuild: crate::cluster::rebuild::ask,
    };
    let shard = crate::shard::open(config, &metadata, &peers, mesh, memory, jwks_feeds, upcalls).await?;
    let (id, count) = (shard.id, shard.count);
    crate::cluster::nodes::start(&shard, &peers).await?;
    crate::shard::spawn_upkeep(&shard);
    shard.apply_metadata(metadata).await;
    shard.flush.journal().expect("a shard's flush loop has a journal").finish_recovery();
    shard.forget_deleted_topics_state().await;
    crate::coordinator::shell::start(&shard).await;
    crate::txn::shell::start(&shard).await;
    tracing::info!(shard = id, partitions = shard.partitions.borrow().len(), "shard ready");
    startup.wait_for_every_shard(count).await;
    if id == 0 {
        crate::admin::api::serve(&shard, admin.calls.clone());
        admin.ready.store(true, std::sync::atomic::Ordering::Release);
        glommio::spawn_local(shutdown::watch(shard.clone())).detach();
    }
    crate::net::listener::serve(shard).await
}
