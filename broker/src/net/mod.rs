//! Kafka listeners and connections. Every shard binds the Kafka port (SO_REUSEPORT)
//! and serves the connections it accepts from start to end.

pub mod conn;
pub mod listener;
pub mod order;
pub mod sasl;
pub mod split;
