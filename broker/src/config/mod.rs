//! Broker configuration: defaults, the YAML file, then command-line flags on top.
//! Settings per listener (`listener_sasl_*`) are maps keyed by listener name, read by
//! [`listener_sasl`], which also takes their flag form (`LISTENER=...` specs).

pub mod listener_sasl;
pub mod listeners;
pub mod sources;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use listeners::{Listener, SecurityProtocol};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// Data directories, one per drive: `data_dir: /a` or `data_dir: [/a, /b]`. Shard
    /// `i` keeps its journal, its state store and its new partitions in directory
    /// `i % n`; cluster metadata stays in the first.
    #[serde(rename = "data_dir", alias = "data_dirs", deserialize_with = "one_or_many")]
    pub data_dirs: Vec<PathBuf>,
    pub kafka_addr: String,
    /// Address clients are told to connect to; defaults to `kafka_addr`.
    pub advertised_kafka_addr: Option<String>,
    pub admin_addr: String,
    /// Listeners in Kafka's form, `PLAINTEXT://HOST:PORT`, `SSL://...`,
    /// `SASL_PLAINTEXT://...`, `SASL_SSL://...`; empty: one PLAINTEXT listener on
    /// `kafka_addr`. The first PLAINTEXT listener (else the first) is the one other
    /// brokers of a cluster use.
    pub listeners: Vec<String>,
    /// What clients of each listener are told to connect to, `NAME://HOST:PORT` (by
    /// default the listener's own address).
    pub advertised_listeners: Vec<String>,
    /// PEM server certificate chain and private key of the SSL and SASL_SSL listeners.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: the SSL listener then requires client certificates signed
    /// by them (mutual TLS), and the certificate's subject is the principal.
    pub tls_ca: Option<PathBuf>,
    /// Kafka's `ssl.principal.mapping.rules`: how a client certificate's subject
    /// becomes a principal name (`RULE:pattern/replacement/[LU]`, `DEFAULT`; the
    /// default is the whole subject).
    pub ssl_principal_mapping_rules: Option<String>,
    /// A TLS handshake not finished in this time closes the connection.
    pub tls_handshake_timeout_ms: u64,
    /// Principals allowed everything once an authorizer exists (`User:admin`).
    pub superusers: Vec<String>,
    /// `none` (every request allowed, as Kafka without `authorizer.class.name`) or
    /// `standard` (Kafka's StandardAuthorizer: ACLs kept in the cluster metadata).
    pub authorizer: String,
    /// With the standard authorizer: whether a resource no ACL names is open to
    /// everyone (Kafka's `allow.everyone.if.no.acl.found`).
    pub allow_everyone_if_no_acl_found: bool,
    /// SASL mechanisms offered on the SASL listeners (each may override them in
    /// `listener_sasl_mechanisms`).
    pub sasl_enabled_mechanisms: Vec<String>,
    /// SASL mechanisms of one listener, by listener name, in place of
    /// `sasl_enabled_mechanisms` (Kafka's `listener.name.<listener>.sasl.enabled.mechanisms`):
    /// `{SASL_SSL: [SCRAM-SHA-512, OAUTHBEARER]}`, or `SASL_SSL=SCRAM-SHA-512,OAUTHBEARER`
    /// specs (`--listener-sasl-mechanisms`).
    #[serde(deserialize_with = "listener_sasl::deserialize_mechanisms")]
    pub listener_sasl_mechanisms: BTreeMap<String, Vec<String>>,
    /// OAUTHBEARER settings of one listener, by listener name, in place of the
    /// `sasl_oauthbearer_*` ones (Kafka's `listener.name.<listener>.oauthbearer.sasl.oauthbearer.*`):
    /// `{SASL_SSL: {expected_issuer: https://idp}}` (each key a `sasl_oauthbearer_*`
    /// setting without the prefix), or `SASL_SSL:expected_issuer=https://idp` specs
    /// (`--listener-sasl-oauthbearer`).
    #[serde(deserialize_with = "listener_sasl::deserialize_oauthbearer")]
    pub listener_sasl_oauthbearer: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    /// SASL/PLAIN users, `NAME:PASSWORD` each.
    pub plain_users: Vec<String>,
    /// SCRAM users known from the start, `NAME:MECHANISM:PASSWORD` each (as Kafka's
    /// `kafka-storage format --add-scram`); users created with
    /// AlterUserScramCredentials are kept in the cluster metadata and take precedence.
    pub scram_users: Vec<String>,
    /// OAUTHBEARER: a JWKS file whose keys check signed tokens (Kafka's
    /// `sasl.oauthbearer.jwks.endpoint.url` with a `file:` URL); read at startup.
    pub sasl_oauthbearer_jwks_file: Option<PathBuf>,
    /// OAUTHBEARER: where the JWKS is (Kafka's `sasl.oauthbearer.jwks.endpoint.url`):
    /// `https://...`, fetched at start (the broker does not start if it cannot be, as
    /// Kafka's) and refreshed every `sasl_oauthbearer_jwks_endpoint_refresh_ms` and when
    /// a token names a key id not in it; or `file:/path`, as `sasl_oauthbearer_jwks_file`.
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// OAUTHBEARER: how often the JWKS endpoint is fetched again (Kafka's
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms`).
    pub sasl_oauthbearer_jwks_endpoint_refresh_ms: u64,
    /// OAUTHBEARER: PEM CA certificates the JWKS endpoint's certificate must chain to;
    /// `None`: the webpki roots (Mozilla's).
    pub sasl_oauthbearer_jwks_endpoint_ca_file: Option<PathBuf>,
    /// OAUTHBEARER: whether unsecured tokens (`{"alg":"none"}`) are accepted. `None`:
    /// only when no JWKS is configured, as Kafka's default validator is the unsecured one.
    pub sasl_oauthbearer_allow_unsecured: Option<bool>,
    /// OAUTHBEARER: the issuer (`iss`) a signed token must name.
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// OAUTHBEARER: audiences (`aud`), one of which a signed token must name.
    pub sasl_oauthbearer_expected_audience: Vec<String>,
    /// OAUTHBEARER: the claim holding the principal name.
    pub sasl_oauthbearer_sub_claim_name: String,
    /// OAUTHBEARER: the claim holding the token's scopes.
    pub sasl_oauthbearer_scope_claim_name: String,
    /// OAUTHBEARER: scopes every token must hold (`unsecuredValidatorRequiredScope`).
    pub sasl_oauthbearer_required_scopes: Vec<String>,
    /// OAUTHBEARER: clock difference allowed with the issuer. `None`: Kafka's defaults,
    /// 0 for unsecured tokens and 30 s with a JWKS.
    pub sasl_oauthbearer_clock_skew_ms: Option<u64>,
    /// KIP-368: a SASL session lasts at most this long (and no longer than its
    /// credential, e.g. a token's `exp`); the client must re-authenticate on the
    /// connection before it ends. 0: sessions of PLAIN and SCRAM never end (Kafka's
    /// default).
    pub connections_max_reauth_ms: u64,
    /// Bearer token the admin API asks for (`Authorization: Bearer ...`) on every
    /// endpoint but `/v1/health` and `/v1/status/ready`; `None`: no token.
    pub admin_token: Option<String>,
    /// Record per-request metrics (`--metrics off` turns recording off, to measure
    /// its cost; scrape-time gauges stay).
    pub metrics: bool,
    /// Number of shards (one pinned executor per core).
    pub smp: usize,
    /// Cores the shards are pinned to, e.g. "2-3": several brokers on one host each
    /// take their own. `None`: the first `smp` cores this process may use.
    pub cpuset: Option<String>,
    /// Memory for all shards, split evenly, e.g. "2G".
    pub memory: String,
    pub auto_create_topics: bool,
    pub num_partitions: i32,
    pub request_bytes_max: usize,
    pub connections_max: usize,
    /// New connections a second the broker accepts, all listeners together (Kafka's
    /// `max.connection.creation.rate`); past it the accept loops wait. `None`: no limit.
    pub max_connection_creation_rate: Option<u32>,
    /// Requests read ahead of their responses on one connection.
    pub in_flight_requests_max: usize,
    pub fetch_wait_ms_max: u64,
    /// Record bytes one fetch response may carry, whatever the client asks (Kafka's
    /// `fetch.max.bytes`); a shard reads no more than this for one fetch.
    pub fetch_max_bytes: usize,
    /// Request bytes read and not yet answered, all connections of a shard together.
    /// `None`: a quarter of the shard's share of `memory`. A frame is read only once
    /// its size fits; a frame larger than the whole budget is refused as one larger
    /// than `request_bytes_max` is.
    pub request_bytes_in_flight_max_per_shard: Option<usize>,
    /// Bytes appended to a shard's partitions and not yet written to their segment
    /// files; past it, produce waits for the shard's writes. `None`: a quarter of the
    /// shard's share of `memory`.
    pub unflushed_bytes_max_per_shard: Option<usize>,
    /// Kernel receive buffer of each Kafka connection (SO_RCVBUF; Kafka's
    /// `socket.receive.buffer.bytes`); 0 leaves it to the kernel's autotuning.
    pub socket_receive_buffer_bytes: usize,
    /// Cross-shard calls one shard may have waiting on one other shard.
    pub mesh_calls_in_flight_max_per_peer: usize,
    /// Idempotent producers remembered per partition and per shard; past either, the
    /// least recently used is forgotten.
    pub producer_states_per_partition_max: usize,
    pub producer_states_per_shard_max: usize,
    /// A producer idle this long is forgotten (Kafka's `producer.id.expiration.ms`).
    pub producer_id_expiration_ms: i64,
    /// Broker-wide defaults for topic configs, by Kafka's broker name or the topic
    /// config's (`log.retention.ms: 60000` or `retention.ms: 60000`); DescribeConfigs
    /// reports them as STATIC_BROKER_CONFIG.
    #[serde(deserialize_with = "scalar_map")]
    pub topic_defaults: BTreeMap<String, String>,
    /// How long a rebalance of an empty classic group waits for more members to join
    /// (Kafka's `group.initial.rebalance.delay.ms`).
    pub group_initial_rebalance_delay_ms: i32,
    /// Bounds on the session timeout classic members may ask for.
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    /// Session timeout and heartbeat interval of KIP-848 consumer group members.
    pub group_consumer_session_timeout_ms: i32,
    pub group_consumer_heartbeat_interval_ms: i32,
    /// Committed offsets of a group that stayed empty this long are deleted.
    pub offsets_retention_ms: i64,
    /// Partitions of `__consumer_offsets` when it is created.
    pub offsets_topic_partitions: i32,
    /// Partitions of `__transaction_state` when it is created
    /// (`transaction.state.log.num.partitions`).
    pub transaction_topic_partitions: i32,
    /// The longest transaction timeout a producer may ask for
    /// (`transaction.max.timeout.ms`).
    pub transaction_max_timeout_ms: i32,
    /// The `transaction.version` feature finalized in ApiVersions: 2 (KIP-890 part 2:
    /// partitions join by being written, the epoch moves at every end, so a late
    /// write of an ended transaction is fenced; the default, as in Kafka 4) or 1
    /// (clients add partitions with AddPartitionsToTxn first).
    pub transaction_version: i16,
    /// A shard journal checkpoint starts once the journal took this many bytes.
    pub journal_file_bytes: u64,
    /// A shard journal checkpoint starts at least this often while data is unsynced.
    pub journal_checkpoint_interval_ms: u64,
    /// Node-to-node listener of a cluster (`--rpc-addr`); shard `s` listens on its
    /// port + `s`. Without `peers` Keel is a single node and this is unused.
    pub rpc_addr: Option<String>,
    /// Mutual TLS on the node-to-node port: this node's certificate chain and key,
    /// and the CA that signs every node's (all three or none;
    /// `replication::rpc_tls`).
    pub rpc_tls_cert: Option<PathBuf>,
    pub rpc_tls_key: Option<PathBuf>,
    pub rpc_tls_ca: Option<PathBuf>,
    /// The cluster's voters, `id@host:rpcport` each, this node among them. Empty: a
    /// single node, as before replication.
    pub peers: Vec<String>,
    /// Period of the Raft tick; the election timeout is `raft_election_ticks` to
    /// twice that many ticks, the heartbeat every `raft_heartbeat_ticks`.
    pub raft_tick_ms: u64,
    pub raft_election_ticks: usize,
    pub raft_heartbeat_ticks: usize,
    /// Bytes of applied entries each Raft group keeps in memory for appends to slow
    /// replicas; older ones are read back from the partition log.
    pub raft_log_memory_bytes: u64,
    /// A replica that has not caught up with its leader for this long leaves the
    /// partition's in-sync replicas (Kafka's `replica.lag.time.max.ms`); a replica the
    /// leader has not heard from for two election timeouts leaves at once.
    pub replica_lag_time_max_ms: u64,
    /// Each partition's leader hands its leadership back to the preferred replica (the
    /// first of its replicas) once that one is in sync and caught up (Kafka's
    /// `auto.leader.rebalance.enable`).
    pub auto_leader_rebalance_enable: bool,
    /// How often each shard looks for partitions it leads that have a preferred
    /// replica ready to take them back (Kafka's `leader.imbalance.check.interval.seconds`,
    /// 300 s there).
    pub leader_imbalance_check_interval_ms: u64,
    /// A broker the controller has not heard from for this long is fenced: left out
    /// of Metadata and of new replica placements until it is heard again (Kafka's
    /// `broker.session.timeout.ms`).
    pub broker_session_timeout_ms: u64,

    // --- Disk properties (`keel tune disk`) ---
    /// The `io-properties.yaml` `keel tune disk` wrote for the data disk. With it, a
    /// shard's unflushed-bytes cap (when not set) is what the disk writes in
    /// `UNFLUSHED_DRAIN_MS`, shared by the shards, rather than a share of `memory`.
    pub io_properties: Option<PathBuf>,
    /// The data disk's sequential write bandwidth, read from `io_properties` at start.
    #[serde(skip)]
    pub disk_write_bytes_per_second: Option<u64>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            data_dirs: vec![PathBuf::from("./keel-data")],
            kafka_addr: "127.0.0.1:9092".into(),
            advertised_kafka_addr: None,
            admin_addr: "127.0.0.1:9644".into(),
            listeners: Vec::new(),
            advertised_listeners: Vec::new(),
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            ssl_principal_mapping_rules: None,
            tls_handshake_timeout_ms: 10_000,
            superusers: Vec::new(),
            authorizer: "none".into(),
            allow_everyone_if_no_acl_found: false,
            sasl_enabled_mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-256".into(), "SCRAM-SHA-512".into()],
            listener_sasl_mechanisms: BTreeMap::new(),
            listener_sasl_oauthbearer: BTreeMap::new(),
            plain_users: Vec::new(),
            scram_users: Vec::new(),
            sasl_oauthbearer_jwks_file: None,
            sasl_oauthbearer_jwks_endpoint_url: None,
            sasl_oauthbearer_jwks_endpoint_refresh_ms: 3_600_000,
            sasl_oauthbearer_jwks_endpoint_ca_file: None,
            sasl_oauthbearer_allow_unsecured: None,
            sasl_oauthbearer_expected_issuer: None,
            sasl_oauthbearer_expected_audience: Vec::new(),
            sasl_oauthbearer_sub_claim_name: "sub".into(),
            sasl_oauthbearer_scope_claim_name: "scope".into(),
            sasl_oauthbearer_required_scopes: Vec::new(),
            sasl_oauthbearer_clock_skew_ms: None,
            connections_max_reauth_ms: 0,
            admin_token: None,
            metrics: true,
            smp: 1,
            cpuset: None,
            memory: "1G".into(),
            auto_create_topics: true,
            num_partitions: 1,
            request_bytes_max: 100 << 20,
            connections_max: 10_000,
            max_connection_creation_rate: None,
            in_flight_requests_max: 64,
            fetch_wait_ms_max: 30_000,
            fetch_max_bytes: 55 << 20,
            request_bytes_in_flight_max_per_shard: None,
            unflushed_bytes_max_per_shard: None,
            socket_receive_buffer_bytes: 256 << 10,
            mesh_calls_in_flight_max_per_peer: 1024,
            producer_states_per_partition_max: 10_000,
            producer_states_per_shard_max: 100_000,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            topic_defaults: BTreeMap::new(),
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5000,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            offsets_topic_partitions: 50,
            transaction_topic_partitions: 50,
            transaction_max_timeout_ms: 900_000,
            transaction_version: 2,
            journal_file_bytes: 64 << 20,
            journal_checkpoint_interval_ms: 60_000,
            rpc_addr: None,
            rpc_tls_cert: None,
            rpc_tls_key: None,
            rpc_tls_ca: None,
            peers: Vec::new(),
            raft_tick_ms: 50,
            raft_election_ticks: 10,
            raft_heartbeat_ticks: 2,
            raft_log_memory_bytes: 1 << 20,
            replica_lag_time_max_ms: 30_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 30_000,
            broker_session_timeout_ms: 9_000,
            io_properties: None,
            disk_write_bytes_per_second: None,
        }
    }
}

/// Accepts a single path or a list of paths.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(p) => vec![p],
        OneOrMany::Many(v) => v,
    })
}

/// A map of config names to scalars, numbers and booleans taken as their text (YAML
/// `log.retention.ms: 60000` needs no quotes).
fn scalar_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Int(i64),
        Float(f64),
        Bool(bool),
    }
    let map = BTreeMap::<String, Scalar>::deserialize(d)?;
    Ok(map
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                Scalar::Text(s) => s,
                Scalar::Int(n) => n.to_string(),
                Scalar::Float(f) => f.to_string(),
                Scalar::Bool(b) => b.to_string(),
            };
            (k, text)
        })
        .collect())
}

impl BrokerConfig {
    /// The first data directory: cluster metadata lives there.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dirs[0]
    }

    /// The data directory shard `shard` keeps its journal, state store and new
    /// partitions in.
    pub fn home_dir_index(&self, shard: usize) -> usize {
        shard % self.data_dirs.len()
    }

    pub fn load_yaml(path: &std::path::Path) -> Result<BrokerConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        serde_yaml::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
    }

    /// The listeners with their advertised addresses: `listeners`, or one PLAINTEXT
    /// listener on `kafka_addr` (advertised as `advertised_kafka_addr`).
    pub fn listeners(&self) -> Result<Vec<Listener>, String> {
        if self.listeners.is_empty() {
            let mut advertised = self.advertised_listeners.clone();
            if let Some(a) = &self.advertised_kafka_addr {
                advertised.push(format!("PLAINTEXT://{a}"));
            }
            return listeners::resolve(&[format!("PLAINTEXT://{}", self.kafka_addr)], &advertised);
        }
        listeners::resolve(&self.listeners, &self.advertised_listeners)
    }

    /// The listener other brokers (and Keel's own node-to-node Kafka calls) use: the
    /// first PLAINTEXT one, else the first.
    pub fn inter_broker_listener(&self) -> Result<Listener, String> {
        let all = self.listeners()?;
        let first = all.iter().find(|l| l.protocol == SecurityProtocol::Plaintext).unwrap_or(&all[0]);
        Ok(first.clone())
    }

    /// The inter-broker listener's advertised host and port.
    pub fn advertised(&self) -> (String, i32) {
        match self.inter_broker_listener() {
            Ok(l) => (l.advertised_host, l.advertised_port),
            Err(_) => ("127.0.0.1".into(), 9092),
        }
    }

    /// Every listener's advertised host and port, by listener name.
    pub fn advertised_endpoints(&self) -> BTreeMap<String, (String, i32)> {
        self.listeners()
            .unwrap_or_default()
            .into_iter()
            .map(|l| (l.name, (l.advertised_host, l.advertised_port)))
            .collect()
    }

    /// The cluster's voters by node id with their node-to-node address; empty for a
    /// single node. Checked at start: this node must be among them, ids unique.
    pub fn cluster_peers(&self) -> Result<std::collections::BTreeMap<u64, std::net::SocketAddr>, String> {
        let mut peers = std::collections::BTreeMap::new();
        for spec in &self.peers {
            let (id, addr) = spec.split_once('@').ok_or_else(|| format!("peer {spec:?}: expected ID@HOST:PORT"))?;
            let id: u64 = id.parse().ok().filter(|id| *id > 0).ok_or_else(|| format!("peer {spec:?}: bad node id"))?;
            let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("peer {spec:?}: bad address"))?;
            if peers.insert(id, addr).is_some() {
                return Err(format!("peer id {id} given twice"));
            }
        }
        if !peers.is_empty() {
            // A node not among the peers joins their cluster as a broker that does
            // not vote on metadata (KRaft's brokers beside its controllers).
            if self.rpc_addr.is_none() {
                return Err("a cluster node needs --rpc-addr".into());
            }
        }
        self.rpc_tls_files()?;
        Ok(peers)
    }

    /// The node-to-node port's certificate, key and CA, when TLS is on.
    pub fn rpc_tls_files(&self) -> Result<Option<(PathBuf, PathBuf, PathBuf)>, String> {
        match (&self.rpc_tls_cert, &self.rpc_tls_key, &self.rpc_tls_ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some((cert.clone(), key.clone(), ca.clone()))),
            _ => Err("--rpc-tls-cert, --rpc-tls-key and --rpc-tls-ca go together".into()),
        }
    }

    /// This node's node-to-node listener address.
    pub fn rpc_socket_addr(&self) -> Result<std::net::SocketAddr, String> {
        let addr = self.rpc_addr.as_deref().ok_or("no rpc address")?;
        std::net::ToSocketAddrs::to_socket_addrs(addr)
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("invalid rpc address {addr:?}: expected HOST:PORT"))
    }

    pub fn journal_config(&self) -> keel_storage::journal::JournalConfig {
        keel_storage::journal::JournalConfig {
            file_bytes: self.journal_file_bytes.max(1 << 20),
            checkpoint_interval: std::time::Duration::from_millis(self.journal_checkpoint_interval_ms.max(100)),
            ..Default::default()
        }
    }

    pub fn memory_bytes(&self) -> Result<u64, String> {
        keel_tuning::parse_size(&self.memory)
    }

    /// The request byte budget of one shard whose share of `memory` is `shard_memory`.
    pub fn request_budget_bytes(&self, shard_memory: u64) -> usize {
        self.request_bytes_in_flight_max_per_shard.unwrap_or((shard_memory / 4) as usize).max(1)
    }

    /// The unflushed-bytes cap of one shard whose share of `memory` is `shard_memory`.
    pub fn unflushed_bytes_max(&self, shard_memory: u64) -> usize {
        self.unflushed_bytes_max_per_shard.unwrap_or_else(|| self.unflushed_bytes_default(shard_memory)).max(1)
    }

    /// Refuses limits that would make the broker unable to serve anything.
    pub fn check_limits(&self) -> Result<(), String> {
        let positive = [
            ("request_bytes_max", self.request_bytes_max),
            ("fetch_max_bytes", self.fetch_max_bytes),
            ("in_flight_requests_max", self.in_flight_requests_max),
            ("mesh_calls_in_flight_max_per_peer", self.mesh_calls_in_flight_max_per_peer),
            ("producer_states_per_partition_max", self.producer_states_per_partition_max),
            ("producer_states_per_shard_max", self.producer_states_per_shard_max),
            ("request_bytes_in_flight_max_per_shard", self.request_bytes_in_flight_max_per_shard.unwrap_or(1)),
            ("unflushed_bytes_max_per_shard", self.unflushed_bytes_max_per_shard.unwrap_or(1)),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.data_dirs.is_empty() {
            return Err("data_dir needs at least one directory".into());
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self.data_dirs.iter().find(|d| !seen.insert(d.components().collect::<PathBuf>())) {
            return Err(format!("data directory {} is given twice", dup.display()));
        }
        self.listeners()?;
        if let Some(s) = self.superusers.iter().find(|s| !s.starts_with("User:")) {
            return Err(format!("superuser {s:?}: expected User:NAME"));
        }
        if !matches!(self.authorizer.as_str(), "none" | "standard") {
            return Err(format!("authorizer {:?}: expected none or standard", self.authorizer));
        }
        if self.producer_id_expiration_ms <= 0 {
            return Err("producer_id_expiration_ms must be positive".into());
        }
        Ok(())
    }
}

/// With measured disk properties, the unflushed bytes of all shards together are what
/// the disk writes in this long: an acks=1 burst never queues more segment writes than
/// the disk drains in a quarter second, and the memory beyond goes to the batch cache.
/// The internal topic of consumer groups' offsets and states.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The internal topic of transactional ids' states.
pub const TRANSACTION_TOPIC: &str = "__transaction_state";

pub const UNFLUSHED_DRAIN_MS: u64 = 250;
/// The least unflushed-bytes cap the disk properties may give a shard.
pub const UNFLUSHED_BYTES_MIN_PER_SHARD: u64 = 4 << 20;

impl BrokerConfig {
    /// A quarter of the shard's memory, or less when `io_properties` says the disk
    /// drains less in `UNFLUSHED_DRAIN_MS`.
    pub fn unflushed_bytes_default(&self, shard_memory: u64) -> usize {
        let share = shard_memory / 4;
        let drained = self.disk_write_bytes_per_second.map(|bw| {
            (bw.saturating_mul(UNFLUSHED_DRAIN_MS) / 1000 / self.smp.max(1) as u64).max(UNFLUSHED_BYTES_MIN_PER_SHARD)
        });
        drained.map_or(share, |d| d.min(share)) as usize
    }

    /// Reads `io_properties` (when set) into `disk_write_bytes_per_second`.
    pub fn load_io_properties(&mut self) -> Result<(), String> {
        if let Some(path) = &self.io_properties {
            let props = keel_tuning::disk::IoProperties::load(path)?;
            self.disk_write_bytes_per_second = Some(props.for_dir(self.data_dir()).write_bandwidth);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_dir_takes_one_path_or_a_list() {
        let one: BrokerConfig = serde_yaml::from_str("data_dir: /a").unwrap();
        assert_eq!(one.data_dirs, vec![PathBuf::from("/a")]);
        let many: BrokerConfig = serde_yaml::from_str("data_dir: [/a, /b]").unwrap();
        assert_eq!(many.data_dirs, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(many.home_dir_index(3), 1);
        let dup = BrokerConfig { data_dirs: vec!["/a".into(), "/a/".into()], ..BrokerConfig::default() };
        assert!(dup.check_limits().is_err());
    }

    #[test]
    fn disk_bandwidth_bounds_the_unflushed_default() {
        let mut c = BrokerConfig { smp: 2, ..BrokerConfig::default() };
        assert_eq!(c.unflushed_bytes_max(1 << 30), 256 << 20);
        // 400 MB/s over 2 shards: 50 MB each in 250 ms.
        c.disk_write_bytes_per_second = Some(400_000_000);
        assert_eq!(c.unflushed_bytes_max(1 << 30), 50_000_000);
        c.disk_write_bytes_per_second = Some(1000);
        assert_eq!(c.unflushed_bytes_max(1 << 30), UNFLUSHED_BYTES_MIN_PER_SHARD as usize);
        c.unflushed_bytes_max_per_shard = Some(7);
        assert_eq!(c.unflushed_bytes_max(1 << 30), 7);
    }
}
