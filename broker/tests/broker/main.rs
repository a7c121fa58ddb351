//! The broker's integration tests, one module per subject, in one test binary: one
//! link instead of one per file (each pulls in the whole broker). They start the real
//! `keel` binary on free ports. Run one subject with its module path, e.g.
//! `cargo test --release -p keel-broker --test broker quotas::`.

mod common;

mod admin_api;
mod bad_input;
mod cli;
mod cluster;
mod crash;
mod data_dirs;
mod diff_regressions;
mod disk_full;
mod failed_dir;
mod follower_disk_full;
mod group_failover;
mod hostile_clients;
mod idempotence;
mod isr;
mod leaders;
mod metrics;
mod multi_shard;
mod oauth;
mod offsets_restart;
mod ordering;
mod quotas;
mod reassign;
mod rpc_tls;
mod security;
mod storage;
mod transactions;
mod transport;
mod tune_config;
mod txn_race;
