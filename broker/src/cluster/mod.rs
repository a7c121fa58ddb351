//! Cluster metadata: topics, their partitions' placement on shards, topic configs.
//! Shard 0 is the controller: it alone changes metadata, persists it, then pushes the
//! new version to every shard, each of which holds its own copy.

pub mod configs;
pub mod controller;
pub mod metadata;
pub mod requests;
