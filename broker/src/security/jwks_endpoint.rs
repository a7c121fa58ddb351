//! A JWKS over HTTPS (Kafka's `sasl.oauthbearer.jwks.endpoint.url` with an `https:` URL,
//! its `RefreshingHttpsJwks`): fetched once at start, then again every
//! `sasl_oauthbearer_jwks_endpoint_refresh_ms`, and sooner when a token names a key id
//! (`kid`) the set lacks, which is how an identity provider's key rotation reaches the
//! broker.
//!
//! Where the work runs: every fetch is blocking network I/O, so it never runs on a
//! shard. Each distinct endpoint has one refresher thread of its own (`keel-jwks`),
//! started by `server::run` before the shards. The key set is immutable; the thread
//! sends each new one, as an `Arc<Jwks>`, to every shard over a bounded channel, and a
//! task on the shard swaps it into the shard's [`SharedJwks`]. Validating a token
//! reads that shard-local copy: no lock and no wait on the request path. A shard that
//! meets an unknown `kid` only `try_send`s the kid to the thread and refuses the token
//! at once, as Kafka's resolver does (`maybeExpediteRefresh`, then an unresolvable
//! key): the client's next attempt after the refresh is accepted.
//!
//! Why a thread per endpoint rather than glommio's blocking pool: the refresher
//! sleeps most of its life between scheduled refreshes, and one thread serving all
//! shards fetches each endpoint once for the whole broker instead of once per shard.
//!
//! Limits, as Kafka's: an unknown kid asks for at most one expedited refresh a minute
//! (`MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`), 16 such kids are remembered, kids over 1,000
//! characters ask for none; and, Keel's own floor, expedited refreshes of one endpoint
//! are at least a second apart, so a client inventing kids cannot make the broker
//! hammer its identity provider. A failed scheduled refresh keeps the keys it had and
//! tries again after `RETRY_BACKOFF_MAX` (or the refresh interval, if shorter).
//!
//! A failed first fetch stops the broker at start, as Kafka's `RefreshingHttpsJwks`
//! throws "Could not refresh JWKS" from its `configure` and the broker does not start.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::oauth::Jwks;

/// The largest JWKS document read (identity providers serve a few KiB).
pub const JWKS_BYTES_MAX: u64 = 1 << 20;
/// One fetch (connect, TLS, response) takes at most this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// An unknown kid asks for another refresh at most this often (Kafka's
/// `MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`).
const MISSING_KID_INTERVAL: Duration = Duration::from_secs(60);
/// Unknown kids remembered (Kafka's `MISSING_KEY_ID_CACHE_MAX_ENTRIES`).
const MISSING_KIDS_MAX: usize = 16;
/// Longer kids are taken as malformed and ask for no refresh (Kafka's
/// `MISSING_KEY_ID_MAX_KEY_LENGTH`).
const KID_CHARS_MAX: usize = 1000;
/// Expedited refreshes of one endpoint are at least this far apart.
const EXPEDITED_INTERVAL_MIN: Duration = Duration::from_secs(1);
/// A failed scheduled refresh is tried again after this long at most (Kafka's
/// `sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms`).
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Key sets waiting for one shard; the refresher waits up to `SHARD_SEND_TIMEOUT` for room.
const SHARD_QUEUE_MAX: usize = 4;
const SHARD_SEND_TIMEOUT: Duration = Duration::from_secs(1);
/// Unknown kids waiting for the refresher; past it a shard's request is dropped.
const KID_QUEUE_MAX: usize = 16;

/// One JWKS endpoint as the configuration names it.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSpec {
    pub url: String,
    pub refresh: Duration,
    pub ca_file: Option<PathBuf>,
}

impl EndpointSpec {
    /// The endpoint a (listener's) configuration names, if it names an `https:` one.
    pub fn of(config: &crate::config::BrokerConfig) -> Option<EndpointSpec> {
        let url = config.sasl_oauthbearer_jwks_endpoint_url.as_ref().filter(|u| is_https(u))?;
        Some(EndpointSpec {
            url: url.clone(),
            refresh: Duration::from_millis(config.sasl_oauthbearer_jwks_endpoint_refresh_ms.max(1)),
            ca_file: config.sasl_oauthbearer_jwks_endpoint_ca_file.clone(),
        })
    }
}

pub fn is_https(url: &str) -> bool {
    url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// A shard's key set: fixed (a file), or the latest an endpoint's refresher sent.
#[derive(Debug)]
pub struct SharedJwks {
    keys: RefCell<Arc<Jwks>>,
    /// The refresher's inbox of unknown kids; `None` for a file.
    refresh: Option<flume::Sender<String>>,
}

impl SharedJwks {
    pub fn fixed(jwks: Jwks) -> Rc<SharedJwks> {
        Rc::new(SharedJwks { keys: RefCell::new(Arc::new(jwks)), refresh: None })
    }

    pub fn keys(&self) -> Arc<Jwks> {
        self.keys.borrow().clone()
    }

    /// A token named `kid`, which the set lacks: asks the refresher for an expedited
    /// refresh, without waiting (a full inbox drops the request).
    pub fn missing_kid(&self, kid: &str) {
        if let Some(refresh) = &self.refresh {
            let _ = refresh.try_send(kid.to_string());
        }
    }
}

/// What one shard receives for one endpoint.
pub struct ShardFeed {
    pub url: String,
    initial: Arc<Jwks>,
    updates: flume::Receiver<Arc<Jwks>>,
    refresh: flume::Sender<String>,
}

impl ShardFeed {
    /// The shard's copy of the endpoint's keys; a task on the calling shard swaps in
    /// each new set the refresher sends. Call on the shard's executor.
    pub fn attach(self) -> Rc<SharedJwks> {
        let shared = Rc::new(SharedJwks { keys: RefCell::new(self.initial), refresh: Some(self.refresh) });
        let target = Rc::downgrade(&shared);
        let updates = self.updates;
        glommio::spawn_local(async move {
            while let Ok(keys) = updates.recv_async().await {
                let Some(target) = target.upgrade() else { return };
                *target.keys.borrow_mut() = keys;
            }
        })
        .detach();
        shared
    }
}

/// Fetches each endpoint once (an error stops the start) and starts its refresher
/// thread; returns, for each of `shards` shards, its feeds.
pub fn start(specs: &[EndpointSpec], shards: usize) -> Result<Vec<Vec<ShardFeed>>, String> {
    let mut feeds: Vec<Vec<ShardFeed>> = (0..shards).map(|_| Vec::new()).collect();
    // Listeners naming the same URL share its refresher (the first one's interval and CA).
    let mut seen = std::collections::BTreeSet::new();
    for spec in specs {
        if !seen.insert(spec.url.as_str()) {
            continue;
        }
        let fetcher = Fetcher::new(spec)?;
        let initial = Arc::new(fetcher.fetch().map_err(|e| format!("Could not refresh JWKS {}: {e}", spec.url))?);
        tracing::info!(url = %spec.url, refresh_ms = spec.refresh.as_millis() as u64, "JWKS fetched");
        let (refresh, kids) = flume::bounded(KID_QUEUE_MAX);
        let mut senders = Vec::new();
        for feed in feeds.iter_mut() {
            let (tx, rx) = flume::bounded(SHARD_QUEUE_MAX);
            senders.push(tx);
            feed.push(ShardFeed {
                url: spec.url.clone(),
                initial: initial.clone(),
                updates: rx,
                refresh: refresh.clone(),
            });
        }
        let refresher = Refresher { fetcher, refresh: spec.refresh, keys: initial, shards: senders, kids };
        std::thread::Builder::new()
            .name("keel-jwks".into())
            .spawn(move || refresher.run())
            .map_err(|e| format!("starting the JWKS refresher of {}: {e}", spec.url))?;
    }
    Ok(feeds)
}

/// HTTPS GETs of one endpoint.
struct Fetcher {
    url: String,
    agent: ureq::Agent,
}

impl Fetcher {
    fn new(spec: &EndpointSpec) -> Result<Fetcher, String> {
        let mut builder = ureq::AgentBuilder::new().timeout(FETCH_TIMEOUT).https_only(true);
        if let Some(ca) = &spec.ca_file {
            builder = builder.tls_config(Arc::new(client_config(ca)?));
        }
        Ok(Fetcher { url: spec.url.clone(), agent: builder.build() })
    }

    fn fetch(&self) -> Result<Jwks, String> {
        let response = self.agent.get(&self.url).call().map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        response
            .into_reader()
            .take(JWKS_BYTES_MAX + 1)
            .read_to_end(&mut body)
            .map_err(|e| format!("reading the response: {e}"))?;
        if body.len() as u64 > JWKS_BYTES_MAX {
            return Err(format!("the JWKS is larger than {JWKS_BYTES_MAX} bytes"));
        }
        Jwks::parse(&body)
    }
}

/// A TLS client trusting only the CA certificates of `ca`.
fn client_config(ca: &std::path::Path) -> Result<rustls::ClientConfig, String> {
    let what = |e: &dyn std::fmt::Display| format!("sasl_oauthbearer_jwks_endpoint_ca_file {}: {e}", ca.display());
    let pem = std::fs::read(ca).map_err(|e| what(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &pem[..]) {
        roots.add(cert.map_err(|e| what(&e))?).map_err(|e| what(&e))?;
    }
    if roots.is_empty() {
        return Err(what(&"no certificate in it"));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| what(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The refresher thread of one endpoint.
struct Refresher {
    fetcher: Fetcher,
    refresh: Duration,
    keys: Arc<Jwks>,
    shards: Vec<flume::Sender<Arc<Jwks>>>,
    kids: flume::Receiver<String>,
}

impl Refresher {
    fn run(mut self) {
        let mut next = Instant::now() + self.refresh;
        let mut missing = MissingKids::default();
        let mut last_expedited: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let expedited = match self.kids.recv_timeout(next.saturating_duration_since(now)) {
                Ok(kid) => {
                    let too_soon = last_expedited.is_some_and(|t| now.duration_since(t) < EXPEDITED_INTERVAL_MIN);
                    if self.keys.has_kid(&kid) || too_soon || !missing.admit(kid, now) {
                        continue;
                    }
                    last_expedited = Some(now);
                    true
                }
                Err(flume::RecvTimeoutError::Timeout) => false,
                // Every shard is gone: the broker is stopping.
                Err(flume::RecvTimeoutError::Disconnected) => return,
            };
            match self.fetcher.fetch() {
                Ok(keys) => {
                    tracing::info!(url = %self.fetcher.url, expedited, "JWKS refreshed");
                    self.keys = Arc::new(keys);
                    // A shard too busy to take it within the timeout gets the next set;
                    // only a shard that is gone is forgotten.
                    self.shards.retain(|s| {
                        !matches!(
                            s.send_timeout(self.keys.clone(), SHARD_SEND_TIMEOUT),
                            Err(flume::SendTimeoutError::Disconnected(_))
                        )
                    });
                    if !expedited {
                        next = Instant::now() + self.refresh;
                    }
                }
                Err(e) => {
                    tracing::warn!(url = %self.fetcher.url, error = %e, "JWKS refresh failed; keeping the keys we have");
                    if !expedited {
                        next = Instant::now() + self.refresh.min(RETRY_BACKOFF_MAX);
                    }
                }
            }
        }
    }
}

/// Unknown kids and when each may ask for a refresh again (Kafka's `missingKeyIds`).
#[derive(Default)]
struct MissingKids {
    next_allowed: BTreeMap<String, Instant>,
}

impl MissingKids {
    /// Whether `kid` may ask for a refresh now; if so, it may not again for a minute.
    fn admit(&mut self, kid: String, now: Instant) -> bool {
        if kid.chars().count() > KID_CHARS_MAX {
            tracing::warn!(kid = %kid.chars().take(64).collect::<String>(), "JWT key id too long to look up");
            return false;
        }
        if self.next_allowed.get(&kid).is_some_and(|t| *t > now) {
            return false;
        }
        if self.next_allowed.len() >= MISSING_KIDS_MAX {
            // Forget the one that may ask soonest.
            if let Some(oldest) = self.next_allowed.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone()) {
                self.next_allowed.remove(&oldest);
            }
        }
        self.next_allowed.insert(kid, now + MISSING_KID_INTERVAL);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_kid_asks_for_a_refresh_once_a_minute() {
        let mut m = MissingKids::default();
        let t = Instant::now();
        assert!(m.admit("k2".into(), t));
        assert!(!m.admit("k2".into(), t + Duration::from_secs(59)));
        assert!(m.admit("k2".into(), t + Duration::from_secs(61)));
        assert!(!m.admit("x".repeat(KID_CHARS_MAX + 1), t));
        for i in 0..40 {
            assert!(m.admit(format!("k{i}x"), t));
        }
        assert!(m.next_allowed.len() <= MISSING_KIDS_MAX);
    }

    #[test]
    fn only_https_urls_are_endpoints() {
        let config = |url: &str| crate::config::BrokerConfig {
            sasl_oauthbearer_jwks_endpoint_url: Some(url.into()),
            ..Default::default()
        };
        let spec = EndpointSpec::of(&config("HTTPS://idp/jwks")).unwrap();
        assert_eq!(spec.refresh, Duration::from_millis(3_600_000));
        assert!(EndpointSpec::of(&config("file:/etc/jwks.json")).is_none());
        assert!(EndpointSpec::of(&config("http://idp/jwks")).is_none());
    }
}
