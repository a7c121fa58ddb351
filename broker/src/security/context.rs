//! The request context: what a handler knows of who sent a request and how. A
//! [`Session`] is created once per connection (shard, session id, listener, peer,
//! principal); each request's [`RequestContext`] adds its client id by reference
//! counting, so the plain path copies nothing.
//!
//! The principal is set when TLS or SASL authenticates the connection (a KIP-368
//! re-authentication must keep it), before
//! any request but ApiVersions and the SASL ones can run (`net::conn` holds the
//! pipeline until then), so a handler always sees the final principal.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::protocol::StrBytes;

use super::principal::Principal;
use crate::config::listeners::Listener;
use crate::config::listeners::SecurityProtocol;

/// One connection's identity.
pub struct Session {
    pub shard: usize,
    /// Unique on the shard; with the shard id, unique on the node.
    pub id: u64,
    pub listener: Rc<Listener>,
    pub peer: String,
    principal: RefCell<Principal>,
    /// Work the broker starts itself: the authorizer lets it do anything.
    pub trusted: bool,
    /// Until when the connection is muted for a quota (no request of it is started).
    throttled_until: Cell<Option<Instant>>,
}

impl Session {
    pub fn new(shard: usize, id: u64, listener: Rc<Listener>, peer: String, principal: Principal) -> Session {
        Session {
            shard,
            id,
            listener,
            peer,
            principal: RefCell::new(principal),
            trusted: false,
            throttled_until: Cell::new(None),
        }
    }

    pub fn principal(&self) -> Principal {
        self.principal.borrow().clone()
    }

    /// Called by the connection when authentication succeeds, and again with the same
    /// principal at each KIP-368 re-authentication.
    pub fn authenticated(&self, principal: Principal) {
        *self.principal.borrow_mut() = principal;
    }

    /// Mutes the connection for `d` from now (a later end wins over an earlier one).
    pub fn throttle(&self, d: Duration) {
        let until = Instant::now() + d;
        if self.throttled_until.get().is_none_or(|t| t < until) {
            self.throttled_until.set(Some(until));
        }
    }

    /// The end of the connection's mute, while it lasts.
    pub fn throttled_until(&self) -> Option<Instant> {
        self.throttled_until.get().filter(|t| *t > Instant::now())
    }

    pub fn protocol(&self) -> SecurityProtocol {
        self.listener.protocol
    }
}

/// What every handler receives with its request.
#[derive(Clone)]
pub struct RequestContext {
    pub session: Rc<Session>,
    pub client_id: Option<StrBytes>,
}

impl RequestContext {
    pub fn principal(&self) -> Principal {
        self.session.principal()
    }

    pub fn listener_name(&self) -> &str {
        &self.session.listener.name
    }

    /// A context for work the broker starts itself (tests, internal calls).
    pub fn internal(shard: usize, listener: Rc<Listener>) -> RequestContext {
        let mut session = Session::new(shard, 0, listener, String::new(), Principal::anonymous());
        session.trusted = true;
        RequestContext { session: Rc::new(session), client_id: None }
    }
}
