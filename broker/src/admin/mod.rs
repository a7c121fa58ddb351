//! Operations: metrics and the admin HTTP API.
//!
//! - Shards record on their data path into their own handles (`crate::telemetry`); the
//!   figures they keep in plain cells and the percentiles of their distributions are
//!   gathered over the mesh at each scrape ([`stats`]) and published into the global
//!   `metrics` recorder ([`publish`]), which `metrics-exporter-prometheus` renders.
//! - The admin API runs on a thread of its own, off the reactors ([`server`]), and
//!   asks shard 0 for what needs the shards ([`api`]).

pub mod api;
pub mod log_level;
pub mod publish;
pub mod requests;
pub mod server;
pub mod stats;
