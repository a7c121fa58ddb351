//! The storage integration tests, one module per subject, in one test binary: one
//! link instead of one per file (each pulls in glommio and the whole storage crate).
//! Run one subject with its module path, e.g.
//! `cargo test --release -p keel-storage --test storage simulation::`.

mod common;

mod cache;
mod corruption;
mod journal;
mod kv;
mod log_recovery;
mod model;
mod preallocation;
mod read_ahead;
mod restart_time;
mod retention_latency;
mod simulation;
mod snapshot_restart;
mod truncate;
