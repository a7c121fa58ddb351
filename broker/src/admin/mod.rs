//! The admin HTTP API (health, status, Prometheus metrics), served by shard 0.

pub mod http;
