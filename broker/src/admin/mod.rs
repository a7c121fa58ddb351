//! Operations: metrics and the admin HTTP API.
//!
//! - Shards record on their data path into their own handles ([`recorder`]); the
//!   figures they keep in plain cells and the percentiles of their distributions are
//!   gathered over the mesh at each scrape ([`stats`]) and published into the global
//!   `metrics` recorder ([`publish`]), which `metrics-exporter-prometheus` renders.
//! - The admin API runs on a thread of its own, off the reactors ([`server`]), and
//!   asks shard 0 for what needs the shards ([`api`]).

pub mod api;
pub mod distribution;
pub mod log_level;
pub mod names;
pub mod publish;
pub mod recorder;
pub mod requests;
pub mod server;
pub mod stats;
