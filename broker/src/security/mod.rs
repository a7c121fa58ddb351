//! Who is at the other end of a connection and how they proved it: the listeners with
//! their security protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, as Kafka names
//! them), TLS with server and client certificates, SASL (PLAIN, SCRAM-SHA-256/512,
//! OAUTHBEARER, with KIP-368 re-authentication), with mechanisms and OAUTHBEARER
//! settings per listener (`config::listener_sasl`) and a JWKS over HTTPS refreshed off the
//! shards ([`jwks_endpoint`]), and the [`context::RequestContext`] every handler receives.
//!
//! All of it runs on the connection's own shard: a TLS handshake or a SASL exchange is
//! per-connection work that needs nothing from other shards but the credentials,
//! which every shard reads from its own copy of the cluster metadata. The
//! [`authorizer::Authorizer`] (Kafka's ACLs, kept in that metadata too) is asked by
//! each handler on the connection's shard before any scatter to owner shards.

pub mod acl;
pub mod authorizer;
pub mod context;
pub mod jwks_endpoint;
pub mod oauth;
pub mod principal;
pub mod scram;
pub mod tls;

use std::cell::Cell;
use std::time::{Duration, Instant};

pub use crate::config::listeners::SecurityProtocol;

/// What security reads of the cluster metadata (which holds the ACLs and SCRAM
/// credentials that clients create): implemented by the metadata, above this layer.
pub trait SecurityRecords {
    fn acls(&self) -> &[acl::AclBinding];
    /// A user's SCRAM credential for `mechanism`, if the metadata holds one.
    fn scram_credential(&self, user: &str, mechanism: scram::Mechanism) -> Option<&scram::Credential>;
}

impl<T: SecurityRecords> SecurityRecords for std::rc::Rc<T> {
    fn acls(&self) -> &[acl::AclBinding] {
        (**self).acls()
    }

    fn scram_credential(&self, user: &str, mechanism: scram::Mechanism) -> Option<&scram::Credential> {
        (**self).scram_credential(user, mechanism)
    }
}
use crate::config::{listener_sasl, listeners};

/// Authentication failures are logged at most this often per shard; the ones in
/// between are counted and reported with the next line.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// A shard's security counters, for `/metrics`.
#[derive(Default)]
pub struct SecurityStats {
    pub authentication_failures: Cell<u64>,
    pub tls_handshake_failures: Cell<u64>,
    /// Successful KIP-368 re-authentications.
    pub reauthentications: Cell<u64>,
    /// Connections closed because their SASL session expired.
    pub expired_sessions_closed: Cell<u64>,
    unlogged_failures: Cell<u64>,
    last_logged: Cell<Option<Instant>>,
}

impl SecurityStats {
    /// Counts a failed login and logs it, rate limited: a client trying passwords in
    /// a loop must not fill the log.
    pub fn authentication_failed(&self, peer: &str, mechanism: &str, user: &str, reason: &str) {
        self.authentication_failures.set(self.authentication_failures.get() + 1);
        let now = Instant::now();
        if self.last_logged.get().is_some_and(|t| now.duration_since(t) < FAILURE_LOG_INTERVAL) {
            self.unlogged_failures.set(self.unlogged_failures.get() + 1);
            return;
        }
        let suppressed = self.unlogged_failures.replace(0);
        self.last_logged.set(Some(now));
        tracing::warn!(%peer, mechanism, user, reason, suppressed, "authentication failed");
    }
}

/// A shard's security state: its listeners, TLS configurations, the users the
/// configuration declares, and counters. Built once per shard from the configuration.
pub struct ShardSecurity {
    pub listeners: Vec<std::rc::Rc<listeners::Listener>>,
    pub tls: Option<tls::TlsSource>,
    /// How a client certificate's subject becomes a principal name.
    pub principal_rules: principal::MappingRules,
    pub stats: SecurityStats,
    pub authorizer: authorizer::Authorizer,
    /// Client quota sensors of the connections this shard serves.
    pub quotas: crate::quota::rate::Sensors,
    /// How OAUTHBEARER tokens are validated, by SASL listener name.
    oauth: std::collections::BTreeMap<String, oauth::OAuthSettings>,
    /// SASL/PLAIN users and passwords (`plain_users`).
    plain_users: std::collections::HashMap<String, String>,
    /// SCRAM users of the configuration (`scram_users`), used when the cluster
    /// metadata has no credential of that user and mechanism.
    bootstrap_scram: std::collections::BTreeMap<(String, scram::Mechanism), scram::Credential>,
    /// SASL mechanisms by SASL listener name.
    mechanisms: std::collections::BTreeMap<String, Vec<String>>,
    next_session: Cell<u64>,
}

/// The `https:` JWKS endpoints the configuration names (broker-wide and per listener),
/// for `jwks_endpoint::start`.
pub fn jwks_endpoints(config: &crate::config::BrokerConfig) -> Result<Vec<jwks_endpoint::EndpointSpec>, String> {
    let listeners = config.listeners()?;
    let by_listener = listener_sasl::oauthbearer_by_listener(config, &listeners)?;
    Ok(by_listener.values().filter_map(jwks_endpoint::EndpointSpec::of).collect())
}

impl ShardSecurity {
    /// A shard's security state; `jwks_feeds` are its copies of the JWKS endpoints
    /// (none for the check made before the shards start).
    pub fn new(
        config: &crate::config::BrokerConfig,
        jwks_feeds: Vec<jwks_endpoint::ShardFeed>,
    ) -> Result<ShardSecurity, String> {
        let resolved = config.listeners()?;
        let mechanisms = listener_sasl::mechanisms_by_listener(config, &resolved)?;
        let endpoints = jwks_feeds.into_iter().map(|f| (f.url.clone(), f.attach())).collect();
        let oauth = listener_sasl::oauthbearer_by_listener(config, &resolved)?
            .into_iter()
            .map(|(name, c)| {
                let settings =
                    oauth::OAuthSettings::new(&c, &endpoints).map_err(|e| format!("listener {name}: {e}"))?;
                Ok((name, settings))
            })
            .collect::<Result<_, String>>()?;
        let listeners: Vec<_> = resolved.into_iter().map(std::rc::Rc::new).collect();
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(tls::TlsSource::new(tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: config.tls_ca.clone(),
            })?),
            (None, None) if config.tls_ca.is_none() => None,
            _ => return Err("TLS needs both tls_cert and tls_key".into()),
        };
        if tls.is_none() {
            if let Some(l) = listeners.iter().find(|l| l.protocol.uses_tls()) {
                return Err(format!("listener {} needs tls_cert and tls_key", l.name));
            }
        }
        let mut plain_users = std::collections::HashMap::new();
        for spec in &config.plain_users {
            let (user, password) =
                spec.split_once(':').ok_or_else(|| format!("plain user {spec:?}: expected NAME:PASSWORD"))?;
            plain_users.insert(user.to_string(), password.to_string());
        }
        let mut bootstrap_scram = std::collections::BTreeMap::new();
        for spec in &config.scram_users {
            let mut parts = spec.splitn(3, ':');
            let (Some(user), Some(mechanism), Some(password)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("SCRAM user {spec:?}: expected NAME:MECHANISM:PASSWORD"));
            };
            let mechanism = scram::Mechanism::parse(mechanism)
                .ok_or_else(|| format!("SCRAM user {user}: unknown mechanism {mechanism:?}"))?;
            let credential = scram::Credential::from_password(mechanism, password, scram::ITERATIONS_MIN);
            bootstrap_scram.insert((user.to_string(), mechanism), credential);
        }
        let principal_rules = match &config.ssl_principal_mapping_rules {
            Some(spec) => {
                principal::MappingRules::parse(spec).map_err(|e| format!("ssl_principal_mapping_rules: {e}"))?
            }
            None => principal::MappingRules::default(),
        };
        Ok(ShardSecurity {
            listeners,
            tls,
            principal_rules,
            stats: SecurityStats::default(),
            authorizer: authorizer::Authorizer::new(config)?,
            quotas: Default::default(),
            oauth,
            plain_users,
            bootstrap_scram,
            mechanisms,
            next_session: Cell::new(1),
        })
    }

    /// The SASL mechanisms listener `listener` offers (none on a listener without SASL).
    pub fn enabled_mechanisms(&self, listener: &str) -> &[String] {
        self.mechanisms.get(listener).map_or(&[], Vec::as_slice)
    }

    /// How listener `listener` validates OAUTHBEARER tokens.
    pub fn oauth(&self, listener: &str) -> Option<&oauth::OAuthSettings> {
        self.oauth.get(listener)
    }

    pub fn next_session_id(&self) -> u64 {
        let id = self.next_session.get();
        self.next_session.set(id + 1);
        id
    }

    pub fn plain_password_matches(&self, user: &str, password: &str) -> bool {
        // Compared in constant time; an unknown user is compared with itself so that
        // timing does not tell users apart.
        match self.plain_users.get(user) {
            Some(p) => scram::constant_time_eq(p.as_bytes(), password.as_bytes()),
            None => {
                let _ = scram::constant_time_eq(password.as_bytes(), password.as_bytes());
                false
            }
        }
    }

    /// A user's SCRAM credential: the cluster metadata's (AlterUserScramCredentials),
    /// else the configuration's.
    pub fn scram_credential(
        &self,
        meta: &impl SecurityRecords,
        user: &str,
        mechanism: scram::Mechanism,
    ) -> Option<scram::Credential> {
        meta.scram_credential(user, mechanism)
            .or_else(|| self.bootstrap_scram.get(&(user.to_string(), mechanism)))
            .cloned()
    }

    /// The configuration's SCRAM users, for DescribeUserScramCredentials.
    pub fn bootstrap_scram_users(&self) -> impl Iterator<Item = (&str, scram::Mechanism, i32)> {
        self.bootstrap_scram.iter().map(|((u, m), c)| (u.as_str(), *m, c.iterations))
    }

    /// The listener of this name.
    pub fn listener(&self, name: &str) -> Option<&std::rc::Rc<listeners::Listener>> {
        self.listeners.iter().find(|l| l.name == name)
    }
}
