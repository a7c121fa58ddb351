//! The Keel broker: glommio shards (one pinned executor per core), Kafka listeners,
//! request routing across shards, one handler per Kafka API, cluster metadata and its
//! controller, and the admin HTTP API.
//!
//! Every shard runs the same code on its own partitions and state. Nothing on the data
//! path is shared between shards or locked: a request touching another shard's
//! partitions is split and sent over the channel mesh (`shard::mesh`), and the answers
//! are gathered in request order.

pub mod admin;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod errors;
pub mod groups;
pub mod handlers;
pub mod metadata;
pub mod net;
pub mod outbound;
pub mod quota;
pub mod replication;
pub mod security;
pub mod server;
pub mod shard;
pub mod telemetry;
pub mod throttle;
pub mod transactions;
pub mod txn;
pub mod util;
