//! The broker's metrics as each shard records them: handles registered once per shard
//! ([`recorder`]), windowed latency distributions ([`distribution`]), and the names
//! and help text of every metric ([`names`]). Published at scrape time by the admin
//! API (`crate::admin::publish`).

pub mod distribution;
pub mod names;
pub mod recorder;
