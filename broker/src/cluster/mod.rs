//! The controller and the cluster: shard 0 of a node alone changes the metadata
//! (`crate::metadata`), persists it, then pushes the new version to every shard, each
//! of which holds its own copy.

pub mod controller;
pub mod requests;
