//! The `keel` command line: `keel serve` runs the broker; `keel topic`, `keel group`
//! and `keel cluster` are clients that speak only the Kafka protocol (see `client`);
//! `keel config print` reads the configuration as `keel serve` would, contacting nothing.

pub mod client;
pub mod cluster;
pub mod config;
pub mod consume;
pub mod group;
pub mod output;
pub mod produce;
pub mod topic;
pub mod tune;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::sources as config_sources;
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
    /// The effective broker configuration and where each value comes from.
    Config(config::ConfigArgs),
    /// Check (and with --apply set) the host for Keel; `tune disk` measures the data disk.
    Tune(tune::TuneArgs),
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

/// `keel serve`'s flags. Each names a setting of `BrokerConfig` by its YAML name, so
/// the flags given serialize as the top layer of `config_sources::resolve`.
#[derive(Args, Debug, Default, serde::Serialize)]
pub struct ServeArgs {
    /// YAML config file. Precedence: flags, then KEEL_* environment variables (e.g.
    /// KEEL_SMP=2), then this file, then defaults (`keel config print` shows each
    /// value's source).
    #[arg(long, short)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Data directory; give it once per drive (shards are spread over them).
    #[arg(long)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_dir: Vec<PathBuf>,
    /// Kafka listener, HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_addr: Option<String>,
    /// Address given to clients in metadata, HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertised_kafka_addr: Option<String>,
    /// Admin HTTP API, HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<String>,
    /// Listeners, NAME://HOST:PORT,... with NAME one of PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL (replaces --kafka-addr).
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<String>,
    /// Addresses clients are told per listener, NAME://HOST:PORT,...
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub advertised_listeners: Vec<String>,
    /// PEM certificate chain of the TLS listeners.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS listeners.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates of client certificates: the SSL listener requires one.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// How a client certificate's subject becomes a principal, as Kafka's
    /// ssl.principal.mapping.rules: RULE:pattern/replacement/[LU],...,DEFAULT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_principal_mapping_rules: Option<String>,
    /// Superusers, User:NAME,...
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub superusers: Vec<String>,
    /// Authorizer: none (default) or standard (Kafka's ACLs).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorizer: Option<String>,
    /// With an authorizer, allow everyone on resources no ACL names (default false).
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// SASL mechanisms offered, e.g. SCRAM-SHA-512,PLAIN.
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sasl_enabled_mechanisms: Vec<String>,
    /// SASL mechanisms of one listener, LISTENER=MECHANISM,... (repeatable), e.g.
    /// SASL_SSL=SCRAM-SHA-512,OAUTHBEARER; other SASL listeners offer --sasl-enabled-mechanisms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listener_sasl_mechanisms: Vec<String>,
    /// An OAUTHBEARER setting of one listener, LISTENER:SETTING=VALUE (repeatable), SETTING
    /// a --sasl-oauthbearer-* flag's name without that prefix, e.g.
    /// SASL_SSL:jwks_endpoint_url=https://idp/jwks.
    #[arg(long)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listener_sasl_oauthbearer: Vec<String>,
    /// A SASL/PLAIN user, NAME:PASSWORD (repeatable; replaces the YAML list).
    #[arg(long)]
    #[serde(rename = "plain_users", skip_serializing_if = "Vec::is_empty")]
    pub plain_user: Vec<String>,
    /// A SCRAM user known from the start, NAME:MECHANISM:PASSWORD (repeatable), e.g.
    /// admin:SCRAM-SHA-512:secret (replaces the YAML list).
    #[arg(long)]
    #[serde(rename = "scram_users", skip_serializing_if = "Vec::is_empty")]
    pub scram_user: Vec<String>,
    /// OAUTHBEARER: JWKS file whose keys check signed tokens.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_jwks_file: Option<PathBuf>,
    /// OAUTHBEARER: JWKS URL, https://... (fetched at start, refreshed) or file:/path.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// OAUTHBEARER: how often the JWKS endpoint is fetched again, in ms (default 3600000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_jwks_endpoint_refresh_ms: Option<u64>,
    /// OAUTHBEARER: PEM CA file of the JWKS endpoint's certificate (default: webpki roots).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_jwks_endpoint_ca_file: Option<PathBuf>,
    /// OAUTHBEARER: accept unsecured tokens (alg none); default only without a JWKS.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_allow_unsecured: Option<bool>,
    /// OAUTHBEARER: issuer (iss) signed tokens must name.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// OAUTHBEARER: audiences (aud), one of which signed tokens must name.
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sasl_oauthbearer_expected_audience: Vec<String>,
    /// OAUTHBEARER: claim holding the principal name (default sub).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_sub_claim_name: Option<String>,
    /// OAUTHBEARER: claim holding the token's scopes (default scope).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_scope_claim_name: Option<String>,
    /// OAUTHBEARER: scopes every token must hold, e.g. kafka,write.
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sasl_oauthbearer_required_scopes: Vec<String>,
    /// OAUTHBEARER: allowed clock skew in ms (default 0 unsecured, 30000 with a JWKS).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_oauthbearer_clock_skew_ms: Option<u64>,
    /// KIP-368: longest SASL session before the client must re-authenticate (0: off).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_max_reauth_ms: Option<u64>,
    /// New connections a second the broker accepts (Kafka's max.connection.creation.rate; default no limit).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connection_creation_rate: Option<u32>,
    /// Bearer token the admin API requires (all endpoints but health and readiness).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
    /// Per-request metrics recording: on (default) or off.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<bool>,
    /// Shards: one pinned executor per core.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smp: Option<usize>,
    /// Cores to pin shards to, e.g. 2-3 (default: the first --smp cores allowed).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpuset: Option<String>,
    /// Memory for all shards, split evenly (e.g. 2G).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<i32>,
    /// Node-to-node listener of a cluster, HOST:PORT (shard s listens on PORT + s).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_addr: Option<String>,
    /// PEM certificate chain of this node on the node-to-node port; with
    /// --rpc-tls-key and --rpc-tls-ca every node-to-node connection is mutual TLS, and
    /// a node's certificate names it keel-node-ID (common name or DNS name).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_tls_cert: Option<PathBuf>,
    /// PEM private key of --rpc-tls-cert.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_tls_key: Option<PathBuf>,
    /// PEM CA certificates that sign every node's certificate.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_tls_ca: Option<PathBuf>,
    /// The cluster's voters, ID@HOST:RPCPORT,... (this node among them). Without it
    /// Keel runs as a single node.
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Wait of a rebalance of an empty consumer group for more members (Kafka's
    /// group.initial.rebalance.delay.ms); tests pass 0.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_initial_rebalance_delay_ms: Option<i32>,
    /// io-properties.yaml written by `keel tune disk`: sizes the unflushed-bytes cap
    /// from the disk's write bandwidth.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_properties: Option<PathBuf>,
}

impl ServeArgs {
    pub fn into_config(self) -> Result<BrokerConfig, String> {
        Ok(self.resolve(&config_sources::process_env())?.config)
    }

    /// The effective configuration with each setting's source, `env` standing for the
    /// process environment; the same checks as `keel serve` makes before starting.
    pub fn resolve(
        &self,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<config_sources::Resolved, String> {
        let flags = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => unreachable!("ServeArgs serializes as a map"),
        };
        let mut resolved = config_sources::resolve(self.config.as_deref(), env, flags)?;
        resolved.config.load_io_properties()?;
        let c = &resolved.config;
        c.cluster_peers()?;
        let listeners = c.listeners()?;
        for addr in listeners.iter().map(|l| &l.addr).chain([&c.admin_addr]) {
            if std::net::ToSocketAddrs::to_socket_addrs(addr.as_str()).map(|mut a| a.next().is_none()).unwrap_or(true) {
                return Err(format!("invalid address {addr:?}: expected HOST:PORT"));
            }
        }
        c.memory_bytes()?;
        c.check_limits()?;
        crate::metadata::configs::normalize_topic_defaults(&c.topic_defaults)?;
        Ok(resolved)
    }
}
