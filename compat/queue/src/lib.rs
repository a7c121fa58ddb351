//! Checks the queue histories of the ledger's `-queue` workload: Jepsen's Kafka
//! queue checks (`queue`) and, with the history read as list-append, the adya
//! crate's Elle-style anomaly search (`elle`).

pub mod elle;
pub mod history;
pub mod queue;

#[cfg(test)]
mod tests;
