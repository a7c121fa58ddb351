//! The authorizer a handler asks before it does anything for a client: Kafka's
//! StandardAuthorizer over the ACLs of the cluster metadata (every shard holds a copy,
//! so a check never leaves the connection's shard), with superusers and
//! `allow_everyone_if_no_acl_found`. With `authorizer: none` every check passes, as a
//! Kafka broker without `authorizer.class.name` allows everything.
//!
//! Denials are counted and logged at most once a second per shard, as failed logins
//! are: a client retrying a forbidden request in a loop must not fill the log.

use std::cell::Cell;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::acl::{self, Action, Requester};
use super::context::RequestContext;
use super::SecurityRecords;

const DENIAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The authorized-operations value Kafka sends when the client did not ask for them.
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

pub struct Authorizer {
    enabled: bool,
    superusers: HashSet<String>,
    allow_if_no_acl: bool,
    pub denials: Cell<u64>,
    unlogged: Cell<u64>,
    last_logged: Cell<Option<Instant>>,
}

impl Authorizer {
    pub fn new(config: &crate::config::BrokerConfig) -> Result<Authorizer, String> {
        let enabled = match config.authorizer.as_str() {
            "none" => false,
            "standard" => true,
            other => return Err(format!("authorizer {other:?}: expected none or standard")),
        };
        Ok(Authorizer {
            enabled,
            superusers: config.superusers.iter().cloned().collect(),
            allow_if_no_acl: config.allow_everyone_if_no_acl_found,
            denials: Cell::new(0),
            unlogged: Cell::new(0),
            last_logged: Cell::new(None),
        })
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the request's principal may do `operation` on the resource, without
    /// counting or logging a denial: for filtering lists and for authorized-operations
    /// bitfields, as Kafka asks with `logIfDenied = false`.
    pub fn allows(
        &self,
        meta: &impl SecurityRecords,
        ctx: &RequestContext,
        operation: i8,
        resource_type: i8,
        name: &str,
    ) -> bool {
        let Some(principal) = self.principal_to_check(ctx) else { return true };
        let who = Requester { principal: &principal, host: host_of(&ctx.session.peer) };
        self.decide(meta, who, operation, resource_type, name)
    }

    /// The request's principal, when the ACLs decide its checks; `None` when every
    /// check passes for it (no authorizer, a trusted session, a superuser).
    fn principal_to_check(&self, ctx: &RequestContext) -> Option<String> {
        if !self.enabled || ctx.session.trusted {
            return None;
        }
        let principal = ctx.principal().to_string();
        (!self.superusers.contains(&principal)).then_some(principal)
    }

    fn decide(
        &self,
        meta: &impl SecurityRecords,
        who: Requester,
        operation: i8,
        resource_type: i8,
        name: &str,
    ) -> bool {
        acl::decide(meta.acls(), who, Action { operation, resource_type, resource_name: name }, self.allow_if_no_acl)
    }

    /// The request's principal and host, for checks made later or on another shard
    /// ([`Authorizer::allows_requester`]); `None` when every check passes for it.
    pub fn requester_of(&self, ctx: &RequestContext) -> Option<(String, String)> {
        self.principal_to_check(ctx).map(|principal| (principal, host_of(&ctx.session.peer).to_string()))
    }

    /// As [`Authorizer::allows`], for a requester [`Authorizer::requester_of`] named.
    pub fn allows_requester(
        &self,
        meta: &impl SecurityRecords,
        (principal, host): &(String, String),
        operation: i8,
        resource_type: i8,
        name: &str,
    ) -> bool {
        self.decide(meta, Requester { principal, host }, operation, resource_type, name)
    }

    /// Whether the principal may do `operation` on some resource of `resource_type`
    /// (Kafka's `authorizeByResourceType`): an ALLOW that no DENY covers.
    pub fn allows_some(
        &self,
        meta: &impl SecurityRecords,
        ctx: &RequestContext,
        operation: i8,
        resource_type: i8,
    ) -> bool {
        let Some(principal) = self.principal_to_check(ctx) else { return true };
        let who = Requester { principal: &principal, host: host_of(&ctx.session.peer) };
        acl::decide_some(meta.acls(), who, operation, resource_type)
    }

    /// As [`Authorizer::allows`], and a denial is counted and logged (rate limited).
    pub fn authorize(
        &self,
        meta: &impl SecurityRecords,
        ctx: &RequestContext,
        operation: i8,
        resource_type: i8,
        name: &str,
    ) -> bool {
        if self.allows(meta, ctx, operation, resource_type, name) {
            return true;
        }
        self.denied(ctx, operation, resource_type, name);
        false
    }

    /// The operations of `resource_type` the principal may do on `name`, as the
    /// bitfield of Kafka's `*_authorized_operations` (bit `1 << code` per operation).
    pub fn operations(&self, meta: &impl SecurityRecords, ctx: &RequestContext, resource_type: i8, name: &str) -> i32 {
        acl::operation::of_resource(resource_type)
            .iter()
            .filter(|op| self.allows(meta, ctx, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << *op))
    }

    fn denied(&self, ctx: &RequestContext, operation: i8, resource_type: i8, name: &str) {
        self.denials.set(self.denials.get() + 1);
        let now = Instant::now();
        if self.last_logged.get().is_some_and(|t| now.duration_since(t) < DENIAL_LOG_INTERVAL) {
            self.unlogged.set(self.unlogged.get() + 1);
            return;
        }
        let suppressed = self.unlogged.replace(0);
        self.last_logged.set(Some(now));
        tracing::warn!(
            principal = %ctx.principal(),
            peer = %ctx.session.peer,
            operation = acl::operation::name(operation),
            resource_type = acl::resource::name(resource_type),
            resource = name,
            suppressed,
            "authorization denied"
        );
    }
}

/// The address part of a peer `HOST:PORT` (`[v6]:PORT` too), as ACL hosts name it.
fn host_of(peer: &str) -> &str {
    let host = peer.rsplit_once(':').map_or(peer, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_of_peer() {
        assert_eq!(super::host_of("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(super::host_of("[::1]:5000"), "::1");
        assert_eq!(super::host_of(""), "");
    }
}
