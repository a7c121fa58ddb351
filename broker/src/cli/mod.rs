//! The `keel` command line: `keel serve` runs the broker; `keel topic`, `keel group`
//! and `keel cluster` are clients that speak only the Kafka protocol (see `client`).

pub mod client;
pub mod cluster;
pub mod consume;
pub mod group;
pub mod output;
pub mod produce;
pub mod topic;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::BrokerConfig;

#[derive(Parser, Debug)]
#[command(name = "keel", version, about = "Keel: a Kafka-compatible streaming broker, thread-per-core on io_uring")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the broker (the default when no subcommand is given).
    Serve(ServeArgs),
    /// Topics: create, list, describe, alter-config, delete, add-partitions, produce, consume.
    Topic(topic::TopicArgs),
    /// Consumer groups: list, describe, delete, seek.
    Group(group::GroupArgs),
    /// The cluster's brokers and controller.
    Cluster(cluster::ClusterArgs),
}

/// Options of every client subcommand.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Brokers to bootstrap from, HOST:PORT[,...] (default: env KEEL_BROKERS, else
    /// 127.0.0.1:9092).
    #[arg(long, global = true)]
    pub brokers: Option<String>,
    /// Output: aligned tables or JSON.
    #[arg(long = "format", global = true, value_enum, default_value = "table")]
    pub format: output::Format,
}

impl ClientArgs {
    pub fn brokers(&self) -> String {
        client::bootstrap_list(self.brokers.as_deref())
    }
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// YAML config file; flags override its values.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Data directory; give it once per drive (shards are spread over them).
    #[arg(long)]
    pub data_dir: Vec<PathBuf>,
    /// Kafka listener, HOST:PORT.
    #[arg(long)]
    pub kafka_addr: Option<String>,
    /// Address given to clients in metadata, HOST:PORT.
    #[arg(long)]
    pub advertised_kafka_addr: Option<String>,
    /// Admin HTTP API, HOST:PORT.
    #[arg(long)]
    pub admin_addr: Option<String>,
    /// Listeners, NAME://HOST:PORT,... with NAME one of PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL (replaces --kafka-addr).
    #[arg(long, value_delimiter = ',')]
    pub listeners: Vec<String>,
    /// Addresses clients are told per listener, NAME://HOST:PORT,...
    #[arg(long, value_delimiter = ',')]
    pub advertised_listeners: Vec<String>,
    /// PEM certificate chain of the TLS listeners.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS listeners.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates of client certificates: the SSL listener requires one.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Superusers, User:NAME,...
    #[arg(long, value_delimiter = ',')]
    pub superusers: Vec<String>,
    /// SASL mechanisms offered, e.g. SCRAM-SHA-512,PLAIN.
    #[arg(long, value_delimiter = ',')]
    pub sasl_enabled_mechanisms: Vec<String>,
    /// A SASL/PLAIN user, NAME:PASSWORD (repeatable).
    #[arg(long)]
    pub plain_user: Vec<String>,
    /// A SCRAM user known from the start, NAME:MECHANISM:PASSWORD (repeatable), e.g.
    /// admin:SCRAM-SHA-512:secret.
    #[arg(long)]
    pub scram_user: Vec<String>,
    /// Bearer token the admin API requires (all endpoints but health and readiness).
    #[arg(long)]
    pub admin_token: Option<String>,
    /// Per-request metrics recording: on (default) or off.
    #[arg(long, value_parser = ["on", "off"])]
    pub metrics: Option<String>,
    /// Shards: one pinned executor per core.
    #[arg(long)]
    pub smp: Option<usize>,
    /// Cores to pin shards to, e.g. 2-3 (default: the first --smp cores allowed).
    #[arg(long)]
    pub cpuset: Option<String>,
    /// Memory for all shards, split evenly (e.g. 2G).
    #[arg(long)]
    pub memory: Option<String>,
    #[arg(long)]
    pub node_id: Option<i32>,
    /// Node-to-node listener of a cluster, HOST:PORT (shard s listens on PORT + s).
    #[arg(long)]
    pub rpc_addr: Option<String>,
    /// The cluster's voters, ID@HOST:RPCPORT,... (this node among them). Without it
    /// Keel runs as a single node.
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Wait of a rebalance of an empty consumer group for more members (Kafka's
    /// group.initial.rebalance.delay.ms); tests pass 0.
    #[arg(long)]
    pub group_initial_rebalance_delay_ms: Option<i32>,
}

impl ServeArgs {
    pub fn into_config(self) -> Result<BrokerConfig, String> {
        let mut c = match &self.config {
            Some(path) => BrokerConfig::load_yaml(path)?,
            None => BrokerConfig::default(),
        };
        if !self.data_dir.is_empty() {
            c.data_dirs = self.data_dir;
        }
        if let Some(v) = self.kafka_addr {
            c.kafka_addr = v;
        }
        if let Some(v) = self.advertised_kafka_addr {
            c.advertised_kafka_addr = Some(v);
        }
        if let Some(v) = self.admin_addr {
            c.admin_addr = v;
        }
        if !self.listeners.is_empty() {
            c.listeners = self.listeners;
        }
        if !self.advertised_listeners.is_empty() {
            c.advertised_listeners = self.advertised_listeners;
        }
        if let Some(v) = self.tls_cert {
            c.tls_cert = Some(v);
        }
        if let Some(v) = self.tls_key {
            c.tls_key = Some(v);
        }
        if let Some(v) = self.tls_ca {
            c.tls_ca = Some(v);
        }
        if !self.superusers.is_empty() {
            c.superusers = self.superusers;
        }
        if !self.sasl_enabled_mechanisms.is_empty() {
            c.sasl_enabled_mechanisms = self.sasl_enabled_mechanisms;
        }
        c.plain_users.extend(self.plain_user);
        c.scram_users.extend(self.scram_user);
        if let Some(v) = self.admin_token {
            c.admin_token = Some(v);
        }
        if let Some(v) = self.metrics {
            c.metrics = v == "on";
        }
        if let Some(v) = self.smp {
            c.smp = v;
        }
        if let Some(v) = self.cpuset {
            c.cpuset = Some(v);
        }
        if let Some(v) = self.memory {
            c.memory = v;
        }
        if let Some(v) = self.node_id {
            c.node_id = v;
        }
        if let Some(v) = self.rpc_addr {
            c.rpc_addr = Some(v);
        }
        if !self.peers.is_empty() {
            c.peers = self.peers;
        }
        c.cluster_peers()?;
        if let Some(v) = self.group_initial_rebalance_delay_ms {
            c.group_initial_rebalance_delay_ms = v;
        }
        let listeners = c.listeners()?;
        for addr in listeners.iter().map(|l| &l.addr).chain([&c.admin_addr]) {
            if std::net::ToSocketAddrs::to_socket_addrs(addr.as_str()).map(|mut a| a.next().is_none()).unwrap_or(true) {
                return Err(format!("invalid address {addr:?}: expected HOST:PORT"));
            }
        }
        c.memory_bytes()?;
        c.check_limits()?;
        Ok(c)
    }
}
