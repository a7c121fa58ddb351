//! The controller and the cluster: shard 0 of a node alone changes the metadata
//! (`crate::metadata`), persists it, then pushes the new version to every shard, each
//! of which holds its own copy.
//!
//! [`nodes`] is a node's place in the cluster (the metadata group, registration, the
//! leaderships every shard shares); [`routing`] finds the coordinators of the internal
//! topics. [`balance`] keeps leaderships on their preferred replicas (Kafka's preferred
//! leaders) and carries out the moves ElectLeaders and the admin API ask for.
//! [`reassign`] changes a group's members; [`rebuild`] uses it to replace a damaged
//! replica by an empty one that its leader fills again.

pub mod balance;
pub mod controller;
pub mod node_requests;
pub mod nodes;
pub mod reassign;
pub mod rebuild;
pub mod requests;
pub mod routing;
