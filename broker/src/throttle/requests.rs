//! The quota sensors' cross-shard requests, each on the shard that keeps the sensor it
//! changes (`super::owner`), which reads the time when it serves it.

use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::quota::Kind;
use crate::shard::dispatch::{mesh_requests, Serve};
use crate::shard::Shard;

// A change of a quota sensor, on the shard that keeps it.
mesh_requests! {
    Record => Duration,
    Unrecord => (),
}

/// Records `value` by `identity` against a quota of `bound` per second: the throttle
/// (`rate::Sensors::record`).
pub struct Record {
    pub kind: Kind,
    pub identity: (String, String),
    pub bound: f64,
    pub value: f64,
    pub take_back_if_throttled: bool,
}

impl Serve for Record {
    async fn serve(self, shard: Rc<Shard>) -> Duration {
        let Record { kind, identity, bound, value, take_back_if_throttled } = self;
        shard.security.quotas.record(kind, identity, bound, value, take_back_if_throttled, Instant::now())
    }
}

/// Takes back a value recorded for a refused connection (`rate::Sensors::unrecord`).
pub struct Unrecord {
    pub kind: Kind,
    pub identity: (String, String),
    pub value: f64,
}

impl Serve for Unrecord {
    async fn serve(self, shard: Rc<Shard>) {
        shard.security.quotas.unrecord(self.kind, self.identity, self.value, Instant::now())
    }
}
