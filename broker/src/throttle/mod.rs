//! Client quotas enforced (the quotas themselves: `crate::quota`). Each measured
//! identity has one sensor in the broker, on the shard its name hashes to
//! ([`owner`]): a connection's shard asks that shard to record its traffic (one
//! cross-shard call per request, only for clients a quota applies to), so clients of
//! one quota entity on several shards share its quota, as on Kafka. Past the quota the
//! answer carries Kafka's `throttle_time_ms` and the connection is muted for that long
//! (KIP-219).
//!
//! Enforced: `producer_byte_rate` and `consumer_byte_rate` ([`charge`]),
//! `controller_mutation_rate` ([`MutationQuota`], KIP-599), an IP address's
//! `connection_creation_rate` and the broker's `max.connection.creation.rate`
//! ([`admit_connection`], KIP-612), and `request_percentage` ([`RequestQuota`]).

pub mod requests;

use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::quota::rate;
use crate::quota::{
    resolve, Entity, Kind, Name, Values, CONNECTION_CREATION_RATE, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
};
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::Shard;
use requests::{Record, Unrecord};

/// The shard that keeps the sensor of `identity` for `kind`.
fn owner(shard: &Shard, kind: Kind, identity: &(String, String)) -> usize {
    // SipHash with fixed keys: every shard picks the same owner.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (kind, identity).hash(&mut h);
    (h.finish() % shard.count as u64) as usize
}

/// Records a value on the shard that keeps its sensor: the throttle.
async fn record(shard: &Rc<Shard>, request: Record) -> Duration {
    shard.call(owner(shard, request.kind, &request.identity), request).await
}

/// Takes a value back on the shard that keeps its sensor.
async fn unrecord(shard: &Rc<Shard>, request: Unrecord) {
    shard.call(owner(shard, request.kind, &request.identity), request).await
}

/// Records `bytes` of a request's traffic against its client's quota, if one applies
/// (none for work the broker starts itself), and returns the throttle (zero within
/// the quota). A throttled client is muted for the throttle, as Kafka mutes a
/// throttled channel (KIP-219); a client of a version before KIP-219
/// (`throttles_itself` false) is not: its handler delays the response instead, as
/// Kafka delays it. With `refused_if_throttled` a throttled answer is not sent (an
/// empty fetch instead) and its bytes are not counted, as Kafka takes them back.
pub async fn charge(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    kind: Kind,
    bytes: usize,
    throttles_itself: bool,
    refused_if_throttled: bool,
) -> Option<Duration> {
    let (bound, identity) = quota_of(shard, ctx, kind)?;
    let value = bytes as f64;
    let throttle =
        record(shard, Record { kind, identity, bound, value, take_back_if_throttled: refused_if_throttled }).await;
    if throttles_itself && !throttle.is_zero() {
        ctx.session.throttle(throttle);
    }
    Some(throttle)
}

/// The quota of a request's client for `key` and the identity it is measured under.
fn client_quota(shard: &Shard, ctx: &RequestContext, key: &str) -> Option<(f64, (String, String))> {
    let meta = shard.meta();
    if meta.client_quotas.is_empty() || ctx.session.trusted {
        return None;
    }
    let user = ctx.principal().name;
    resolve(&meta.client_quotas, key, &user, ctx.client_id.as_deref().unwrap_or(""))
}

/// The byte-rate or request-time quota of a request's client for `kind`.
fn quota_of(shard: &Shard, ctx: &RequestContext, kind: Kind) -> Option<(f64, (String, String))> {
    let key = match kind {
        Kind::Produce => PRODUCER_BYTE_RATE,
        Kind::Fetch => CONSUMER_BYTE_RATE,
        Kind::Request => REQUEST_PERCENTAGE,
        Kind::BrokerConnections | Kind::IpConnections | Kind::ControllerMutations => return None,
    };
    client_quota(shard, ctx, key)
}

/// A client's `request_percentage`: the share of one core its requests may take, as
/// Kafka's share of one request-handler thread. What is measured is the reactor time
/// spent polling a request's handler on its connection's shard (`net::conn`); work it
/// asks of other shards runs in their own tasks and is not counted, as Kafka does not
/// count time a request waits in purgatory.
pub struct RequestQuota {
    bound: f64,
    identity: (String, String),
}

/// The request-time quota of a request's client, if one applies.
pub fn request_quota(shard: &Shard, ctx: &RequestContext) -> Option<RequestQuota> {
    let (bound, identity) = quota_of(shard, ctx, Kind::Request)?;
    Some(RequestQuota { bound, identity })
}

impl RequestQuota {
    /// Records `busy` (the request's reactor time) and returns the throttle, at most
    /// one second as Kafka caps it; a throttled client is muted for it.
    pub async fn charge(self, shard: &Rc<Shard>, ctx: &RequestContext, busy: Duration) -> Duration {
        let (bound, kind) = (self.bound, Kind::Request);
        // Kafka's unit: percent of one thread, per second.
        let percent = busy.as_secs_f64() * 100.0;
        let identity = self.identity;
        let throttle =
            record(shard, Record { kind, identity, bound, value: percent, take_back_if_throttled: false }).await;
        if !throttle.is_zero() {
            ctx.session.throttle(throttle);
        }
        throttle
    }
}

/// The most a fetch of this client may return: what its quota allows in the ten
/// seconds the rate is at least taken over, as Kafka caps it, so that one answer
/// alone never exceeds the quota (it would be throttled, and so never sent, again and
/// again).
pub fn fetch_bytes_max(shard: &Shard, ctx: &RequestContext) -> Option<usize> {
    let (bound, _) = quota_of(shard, ctx, Kind::Fetch)?;
    Some((bound * (rate::WINDOW * (rate::SAMPLES - 1)).as_secs_f64()) as usize)
}

/// A client's `controller_mutation_rate` (KIP-599), for the partitions a
/// CreateTopics, CreatePartitions or DeleteTopics request creates or deletes. Its
/// bucket is kept on shard 0, where the controller decides those requests, as Kafka
/// keeps it on its controller.
#[derive(Clone)]
pub struct MutationQuota {
    bound: f64,
    identity: (String, String),
    /// Refuse topics once the bucket is empty (the versions Kafka makes strict), or
    /// take them all and throttle.
    strict: bool,
}

/// The controller mutation quota of a request's client, if one applies.
fn mutation_quota(shard: &Shard, ctx: &RequestContext, strict: bool) -> Option<MutationQuota> {
    let (bound, identity) = client_quota(shard, ctx, CONTROLLER_MUTATION_RATE)?;
    Some(MutationQuota { bound, identity, strict })
}

/// THROTTLING_QUOTA_EXCEEDED with Kafka's message.
fn mutation_refused() -> (i16, String) {
    (crate::errors::THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.".to_string())
}

/// Whether a topic's outcome is a controller mutation quota's refusal.
fn refused<T>(outcome: &Result<T, (i16, String)>) -> bool {
    matches!(outcome, Err((code, _)) if *code == crate::errors::THROTTLING_QUOTA_EXCEEDED)
}

impl MutationQuota {
    /// Takes a topic's partitions, once it is otherwise valid, on the controller's
    /// shard; a strict quota's empty bucket refuses it.
    pub fn take(&self, shard: &Shard, partitions: usize) -> Result<(), (i16, String)> {
        debug_assert_eq!(shard.id, 0, "controller mutation quotas are kept on shard 0");
        let taken =
            shard.security.quotas.take_mutations(&self.identity, self.bound, partitions, self.strict, Instant::now());
        if taken {
            Ok(())
        } else {
            Err(mutation_refused())
        }
    }

    /// The throttle of the request once its topics are taken, on the controller's
    /// shard: a strict quota throttles only a request it refused a topic of.
    pub fn throttle(&self, shard: &Shard, refused_any: bool) -> Duration {
        if self.strict && !refused_any {
            return Duration::ZERO;
        }
        shard.security.quotas.mutation_throttle(&self.identity, self.bound, Instant::now())
    }
}

/// The outcomes of a CreateTopics, CreatePartitions or DeleteTopics decision and the
/// throttle of the client's controller mutation quota for them.
pub type Mutated<T> = (Vec<Result<T, (i16, String)>>, Duration);

/// On the controller's shard, once a decision took `outcomes` from `quota` (if one
/// applies): the outcomes with the client's throttle.
pub fn mutated<T>(shard: &Shard, quota: Option<MutationQuota>, outcomes: Vec<Result<T, (i16, String)>>) -> Mutated<T> {
    let throttle = quota.map_or(Duration::ZERO, |q| q.throttle(shard, outcomes.iter().any(refused)));
    (outcomes, throttle)
}

/// Runs a CreateTopics, CreatePartitions or DeleteTopics decision on the controller's
/// shard (the request `decide` makes, given the client's controller mutation quota if
/// one applies; its reply is [`mutated`]), then throttles the client for what it took:
/// mutes its connection or, for a version before KIP-219 (`throttles_itself` false),
/// delays its response. Returns the outcomes and the throttle for the response.
pub async fn mutate<T, R>(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    strict: bool,
    throttles_itself: bool,
    decide: impl FnOnce(Option<MutationQuota>) -> R,
) -> Mutated<T>
where
    R: Serve<Reply = Mutated<T>>,
{
    let quota = mutation_quota(shard, ctx, strict);
    let (outcomes, throttle) = shard.call(0, decide(quota)).await;
    if !throttle.is_zero() {
        if throttles_itself {
            ctx.session.throttle(throttle);
        } else {
            glommio::timer::sleep(throttle).await;
        }
    }
    (outcomes, throttle)
}

/// The `connection_creation_rate` of an IP address: its own, else the default IP's.
fn ip_quota(quotas: &[(Entity, Values)], ip: IpAddr) -> Option<f64> {
    [Name::Named(ip.to_string()), Name::Default].into_iter().find_map(|name| {
        let entity = Entity { user: None, client_id: None, ip: Some(name) };
        let i = quotas.binary_search_by(|(e, _)| e.cmp(&entity)).ok()?;
        quotas[i].1.get(CONNECTION_CREATION_RATE).copied()
    })
}

/// What becomes of a new connection under the connection creation rates (KIP-612).
pub enum Admission {
    /// Serve it, after waiting this long for the broker's rate (the accept loop
    /// waits with it, as Kafka's acceptor blocks).
    Serve(Duration),
    /// Its IP address is over its rate: close it after this long without serving it,
    /// as Kafka closes a throttled connection late, so the client backs off.
    Close(Duration),
}

/// Records a new connection from `ip` against the broker's `max.connection.creation.rate`
/// and the IP address's `connection_creation_rate`. A refused connection is taken
/// back from both, as Kafka takes it back.
pub async fn admit_connection(shard: &Rc<Shard>, ip: IpAddr) -> Admission {
    let broker_rate = shard.config.max_connection_creation_rate;
    let broker = || (String::new(), String::new());
    let mut wait = Duration::ZERO;
    if let Some(bound) = broker_rate.map(f64::from) {
        let kind = Kind::BrokerConnections;
        wait =
            record(shard, Record { kind, identity: broker(), bound, value: 1.0, take_back_if_throttled: false }).await;
    }
    let Some(bound) = ip_quota(&shard.meta().client_quotas, ip) else {
        return Admission::Serve(wait);
    };
    let kind = Kind::IpConnections;
    let id = (ip.to_string(), String::new());
    let refused = record(shard, Record { kind, identity: id, bound, value: 1.0, take_back_if_throttled: true }).await;
    if refused.is_zero() {
        return Admission::Serve(wait);
    }
    if broker_rate.is_some() {
        let kind = Kind::BrokerConnections;
        unrecord(shard, Unrecord { kind, identity: broker(), value: 1.0 }).await;
    }
    Admission::Close(refused)
}
