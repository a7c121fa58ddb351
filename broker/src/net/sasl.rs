//! SASL on the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's
//! `SaslServerAuthenticator` runs it: until the connection is authenticated it may send
//! only ApiVersions, SaslHandshake, then SaslAuthenticate (or, after a v0 handshake,
//! raw SASL tokens); anything else closes it. A failed authentication is answered
//! SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection is closed.
//!
//! The [`Authenticator`] runs on the connection's reader task, between reading a frame
//! and starting its handler: requests pipelined behind a SASL exchange are not read
//! before the exchange is over, so none of them runs unauthenticated.
//!
//! What a connection is offered is its listener's: the mechanism list SaslHandshake
//! answers (also with UNSUPPORTED_SASL_MECHANISM) and the OAUTHBEARER validator are
//! looked up by the session's listener name (`listener_sasl`). A token refused for a
//! key id its JWKS lacks asks the JWKS's refresher for a refresh without waiting.
//!
//! KIP-368 re-authentication: a session lasts `connections_max_reauth_ms` at most, and
//! no longer than its credential (an OAUTHBEARER token's `exp`); SaslAuthenticate v1+
//! tells the client (`session_lifetime_ms`). A client that said v1+ may send
//! SaslHandshake and SaslAuthenticate again on the authenticated connection, with the
//! same mechanism and principal (requests sent before keep running and are answered
//! in order); once the session has expired, the next request that is not a
//! re-authentication closes the connection unanswered, as Kafka's `Processor` does with
//! `serverAuthenticationSessionExpired`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::{Encodable, StrBytes};
use keel_protocol::frame;

use crate::errors;
use crate::handlers::Request;
use crate::security::oauth::{self, OAUTHBEARER};
use crate::security::principal::Principal;
use crate::security::scram::{Mechanism, ScramServer, Step};
use crate::shard::Shard;

/// The largest frame an unauthenticated client may send (Kafka's
/// `sasl.server.max.receive.size`): a SASL token is small, and a client that has not
/// logged in must not make the broker hold large buffers.
pub const UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 512 << 10;

pub const PLAIN: &str = "PLAIN";

/// What the connection does with a request while the authenticator holds it.
pub enum Gate {
    /// Run it as usual (ApiVersions, or anything once authenticated).
    Run,
    /// Answer with this response frame.
    Respond(Bytes),
    /// Answer, then close the connection.
    RespondAndClose(Bytes),
    /// Close the connection without an answer.
    Close(String),
}

enum State {
    /// Waiting for SaslHandshake (ApiVersions allowed).
    Handshake,
    /// After a v1 handshake: SaslAuthenticate requests carry the tokens.
    Authenticate(Server),
    /// After a v0 handshake: the next frames are raw tokens.
    RawTokens(Server),
    /// A re-authentication asked for another mechanism than the session's: the next
    /// SaslAuthenticate closes the connection, unanswered, for this reason (Kafka's
    /// REAUTH_BAD_MECHANISM).
    BadMechanism(String),
    Done(Established),
}

/// An authenticated session.
#[derive(Clone)]
struct Established {
    mechanism: &'static str,
    principal: Principal,
    /// When the session ends (KIP-368); `None`: never.
    expires: Option<Instant>,
}

enum Server {
    Plain,
    Scram(Box<ScramServer>),
    OAuthBearer(OAuthServer),
}

impl Server {
    fn mechanism_name(&self) -> &'static str {
        match self {
            Server::Plain => PLAIN,
            Server::Scram(s) => s.mechanism().name(),
            Server::OAuthBearer(_) => OAUTHBEARER,
        }
    }
}

/// OAUTHBEARER's server side: after a refused token it holds the error challenge
/// sent, which becomes the failure's message when the client answers `\x01`.
#[derive(Default)]
struct OAuthServer {
    error: Option<String>,
}

/// Outcome of one token.
enum Token {
    Challenge(Vec<u8>),
    /// The principal, the last server message, and when the credential expires
    /// (milliseconds since the epoch), if it does.
    Authenticated(Principal, Vec<u8>, Option<i64>),
    /// The client's message (Kafka's), and the log's reason.
    Failed(String),
}

pub struct Authenticator {
    state: State,
    /// The session being re-authenticated (KIP-368), while it is.
    previous: Option<Established>,
    /// The client sent SaslAuthenticate v1+, so it knows session lifetimes and may
    /// re-authenticate.
    supports_reauthentication: bool,
    /// When the last re-authentication began: Kafka starts at most one a second
    /// (`KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS`); a SaslHandshake sooner
    /// reaches its handler and is refused ILLEGAL_SASL_STATE.
    last_reauthentication: Option<Instant>,
}

/// Kafka's shortest interval between two re-authentications of a connection.
const REAUTHENTICATION_INTERVAL_MIN: Duration = Duration::from_secs(1);

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator {
            state: State::Handshake,
            previous: None,
            supports_reauthentication: false,
            last_reauthentication: None,
        }
    }
}

impl Authenticator {
    /// Authenticated, and not re-authenticating.
    pub fn done(&self) -> bool {
        matches!(self.state, State::Done(_))
    }

    pub fn wants_raw_token(&self) -> bool {
        matches!(self.state, State::RawTokens(_))
    }

    /// Decides what happens to a request on a SASL connection: one that arrived before
    /// authentication ended, a re-authentication, or any request once the session
    /// has expired.
    pub fn gate(&mut self, shard: &Shard, session: &crate::security::context::Session, req: &Request) -> Gate {
        let corr = req.header.correlation_id;
        if let State::Done(established) = &self.state {
            // As Kafka's `Processor`: a re-authentication may begin even once the session
            // has expired; any other request then closes the connection.
            let now = Instant::now();
            let too_soon = self.last_reauthentication.is_some_and(|t| now - t < REAUTHENTICATION_INTERVAL_MIN);
            let reauthentication = matches!(req.body, RequestKind::SaslHandshake(_));
            if reauthentication && self.supports_reauthentication && !too_soon {
                self.last_reauthentication = Some(now);
                self.previous = Some(established.clone());
                self.state = State::Handshake;
            } else if established.expires.is_some_and(|t| now >= t) {
                let stats = &shard.security.stats;
                stats.expired_sessions_closed.set(stats.expired_sessions_closed.get() + 1);
                return Gate::Close(format!("the SASL session of {} expired", established.principal));
            } else {
                return Gate::Run;
            }
        }
        let reauthenticating = self.previous.is_some();
        match (&mut self.state, &req.body) {
            (State::Handshake, RequestKind::ApiVersions(_)) => Gate::Run,
            (State::Handshake, RequestKind::SaslHandshake(h)) => {
                // The listener's own list, in the answer too (Kafka's
                // `listener.name.<listener>.sasl.enabled.mechanisms`).
                let enabled = shard.security.enabled_mechanisms(&session.listener.name);
                let wanted = h.mechanism.as_str();
                let server = match (enabled.iter().any(|m| m == wanted), Mechanism::parse(wanted)) {
                    (true, Some(m)) => Some(Server::Scram(Box::new(ScramServer::new(m)))),
                    (true, None) if wanted == PLAIN => Some(Server::Plain),
                    (true, None) if wanted == OAUTHBEARER => Some(Server::OAuthBearer(OAuthServer::default())),
                    _ => None,
                };
                let mut resp = SaslHandshakeResponse::default()
                    .with_mechanisms(enabled.iter().map(|m| StrBytes::from_string(m.clone())).collect());
                match server {
                    Some(server) => {
                        self.state = match &self.previous {
                            Some(p) if p.mechanism != server.mechanism_name() => State::BadMechanism(format!(
                                "SASL mechanism '{wanted}' requested by client is not supported for \
                                 re-authentication of mechanism '{}'",
                                p.mechanism
                            )),
                            _ if req.version == 0 => State::RawTokens(server),
                            _ => State::Authenticate(server),
                        };
                        respond(ApiKey::SaslHandshake, req.version, corr, &resp, false)
                    }
                    None => {
                        resp.error_code = errors::UNSUPPORTED_SASL_MECHANISM;
                        shard.security.stats.authentication_failed(&session.peer, wanted, "", "unsupported mechanism");
                        respond(ApiKey::SaslHandshake, req.version, corr, &resp, true)
                    }
                }
            }
            (State::BadMechanism(message), RequestKind::SaslAuthenticate(_)) => {
                // Kafka closes the connection without an answer here.
                let message = std::mem::take(message);
                shard.security.stats.authentication_failed(&session.peer, "", "", &message);
                Gate::Close(message)
            }
            (State::Authenticate(server), RequestKind::SaslAuthenticate(a)) => {
                self.supports_reauthentication |= req.version > 0;
                let mechanism = server.mechanism_name();
                match step(shard, session, server, &a.auth_bytes, reauthenticating) {
                    Token::Challenge(bytes) => {
                        let resp = SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes));
                        respond(ApiKey::SaslAuthenticate, req.version, corr, &resp, false)
                    }
                    Token::Authenticated(principal, bytes, credential_expires_at_ms) => {
                        match self.establish(shard, session, mechanism, principal, credential_expires_at_ms) {
                            Ok(lifetime_ms) => {
                                let resp = SaslAuthenticateResponse::default()
                                    .with_auth_bytes(Bytes::from(bytes))
                                    // v0 has no field for it (and refuses to encode one).
                                    .with_session_lifetime_ms(if req.version >= 1 { lifetime_ms } else { 0 });
                                respond(ApiKey::SaslAuthenticate, req.version, corr, &resp, false)
                            }
                            Err(message) => {
                                respond(ApiKey::SaslAuthenticate, req.version, corr, &failure(&message), true)
                            }
                        }
                    }
                    Token::Failed(message) => {
                        let resp = failure(&message);
                        respond(ApiKey::SaslAuthenticate, req.version, corr, &resp, true)
                    }
                }
            }
            (State::Handshake, _) => {
                Gate::Close(format!("unexpected {:?} request during the SASL handshake", req.api_key))
            }
            (_, _) => Gate::Close(format!("unexpected {:?} request during SASL authentication", req.api_key)),
        }
    }

    /// Ends a successful exchange: checks that a re-authentication keeps the
    /// principal, sets the session's end, and returns its lifetime for the client.
    fn establish(
        &mut self,
        shard: &Shard,
        session: &crate::security::context::Session,
        mechanism: &'static str,
        principal: Principal,
        credential_expires_at_ms: Option<i64>,
    ) -> Result<i64, String> {
        let stats = &shard.security.stats;
        if let Some(previous) = self.previous.take() {
            if previous.principal != principal {
                let message = format!(
                    "Cannot change principals during re-authentication from User.{}: User.{}",
                    previous.principal.name, principal.name
                );
                stats.authentication_failed(&session.peer, mechanism, &principal.to_string(), &message);
                return Err(message);
            }
            stats.reauthentications.set(stats.reauthentications.get() + 1);
            tracing::debug!(peer = %session.peer, %principal, mechanism, "re-authenticated");
        } else {
            tracing::debug!(peer = %session.peer, %principal, mechanism, "authenticated");
        }
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let lifetime_ms = session_lifetime_ms(shard.config.connections_max_reauth_ms, credential_expires_at_ms, now_ms);
        let expires = lifetime_ms.map(|ms| Instant::now() + Duration::from_millis(ms as u64));
        session.authenticated(principal.clone());
        self.state = State::Done(Established { mechanism, principal, expires });
        Ok(lifetime_ms.unwrap_or(0))
    }

    /// Takes a raw token (after a v0 handshake) and returns the raw answer (a 4-byte
    /// length and the token), or `None` if the connection must be closed.
    pub fn raw_token(
        &mut self,
        shard: &Shard,
        session: &crate::security::context::Session,
        token: &[u8],
    ) -> Option<Bytes> {
        let State::RawTokens(server) = &mut self.state else { return None };
        let mechanism = server.mechanism_name();
        let answer = match step(shard, session, server, token, self.previous.is_some()) {
            Token::Challenge(bytes) => bytes,
            Token::Authenticated(principal, bytes, expires_at_ms) => {
                self.establish(shard, session, mechanism, principal, expires_at_ms).ok()?;
                bytes
            }
            Token::Failed(_) => return None,
        };
        let mut out = Vec::with_capacity(4 + answer.len());
        out.extend_from_slice(&(answer.len() as u32).to_be_bytes());
        out.extend_from_slice(&answer);
        Some(Bytes::from(out))
    }
}

/// A session's lifetime as Kafka's `SaslServerAuthenticator` computes it: the shorter
/// of `connections_max_reauth_ms` (if not 0) and what is left of the credential (if it
/// expires); `None` when neither bounds it.
pub fn session_lifetime_ms(reauth_ms_max: u64, credential_expires_at_ms: Option<i64>, now_ms: i64) -> Option<i64> {
    let reauth = (reauth_ms_max > 0).then_some(reauth_ms_max.min(i64::MAX as u64) as i64);
    let credential = credential_expires_at_ms.map(|at| at.saturating_sub(now_ms));
    match (reauth, credential) {
        (None, None) => None,
        (Some(r), None) => Some(r),
        (None, Some(c)) => Some(c.max(0)),
        (Some(r), Some(c)) => Some(r.min(c).max(0)),
    }
}

fn failure(message: &str) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(errors::SASL_AUTHENTICATION_FAILED)
        .with_error_message(Some(StrBytes::from_string(message.to_string())))
}

fn step(
    shard: &Shard,
    session: &crate::security::context::Session,
    server: &mut Server,
    token: &[u8],
    reauthenticating: bool,
) -> Token {
    let stats = &shard.security.stats;
    let peer = session.peer.as_str();
    let during = if reauthenticating { "re-authentication" } else { "authentication" };
    match server {
        Server::Plain => match plain(shard, token) {
            Ok(user) => Token::Authenticated(Principal::user(&user), Vec::new(), None),
            Err((user, message)) => {
                stats.authentication_failed(peer, PLAIN, &user, &message);
                Token::Failed(message)
            }
        },
        Server::Scram(scram) => {
            let mechanism = scram.mechanism();
            let meta = shard.meta();
            match scram.step(token, |user| shard.security.scram_credential(&meta, user, mechanism)) {
                Step::Continue(challenge) => Token::Challenge(challenge),
                Step::Done { user, server_final } => Token::Authenticated(Principal::user(&user), server_final, None),
                Step::Failed { user, reason } => {
                    stats.authentication_failed(peer, mechanism.name(), &user, &reason);
                    Token::Failed(format!(
                        "Authentication failed during {during} due to invalid credentials with SASL mechanism {}",
                        mechanism.name()
                    ))
                }
            }
        }
        Server::OAuthBearer(server) => oauth_bearer(shard, session, server, token, during),
    }
}

/// One OAUTHBEARER message, as Kafka's `OAuthBearerSaslServer.evaluateResponse`.
fn oauth_bearer(
    shard: &Shard,
    session: &crate::security::context::Session,
    server: &mut OAuthServer,
    token: &[u8],
    during: &str,
) -> Token {
    let stats = &shard.security.stats;
    let peer = session.peer.as_str();
    // Only a SASL listener offers OAUTHBEARER, and each has settings.
    let Some(settings) = shard.security.oauth(&session.listener.name) else {
        return Token::Failed(format!("listener {} has no OAUTHBEARER settings", session.listener.name));
    };
    if token == [0x01] {
        if let Some(error) = server.error.take() {
            // The client acknowledged the error challenge: the failure's message is it.
            return Token::Failed(error);
        }
    }
    server.error = None;
    let first = match oauth::parse_client_first(token) {
        Ok(first) => first,
        Err(reason) => {
            stats.authentication_failed(peer, OAUTHBEARER, "", &reason);
            return Token::Failed(format!(
                "Authentication failed during {during} due to invalid credentials with SASL mechanism {OAUTHBEARER}"
            ));
        }
    };
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    match oauth::validate(settings, &first.token, now_ms) {
        Ok(valid) if !first.authzid.is_empty() && first.authzid != valid.principal => {
            let message = format!(
                "Authentication failed: Client requested an authorization id ({}) that is different from the \
                 token's principal name ({})",
                first.authzid, valid.principal
            );
            stats.authentication_failed(peer, OAUTHBEARER, &valid.principal, &message);
            Token::Failed(message)
        }
        Ok(valid) => Token::Authenticated(Principal::user(&valid.principal), Vec::new(), Some(valid.expires_at_ms)),
        Err(rejection) => {
            if let (Some(kid), Some(jwks)) = (&rejection.unknown_kid, &settings.jwks) {
                // Refused now; the refresher may bring the key for the client's next try.
                jwks.missing_kid(kid);
            }
            stats.authentication_failed(peer, OAUTHBEARER, "", &rejection.reason);
            let challenge = rejection.challenge();
            server.error = Some(challenge.clone());
            Token::Challenge(challenge.into_bytes())
        }
    }
}

/// SASL/PLAIN (RFC 4616): `authzid NUL user NUL password`, with Kafka's messages.
fn plain(shard: &Shard, token: &[u8]) -> Result<String, (String, String)> {
    let text = String::from_utf8_lossy(token);
    let parts: Vec<&str> = text.split('\0').collect();
    if parts.len() != 3 {
        return Err((String::new(), format!("Invalid SASL/PLAIN response: expected 3 tokens, got {}", parts.len())));
    }
    let (authzid, user, password) = (parts[0], parts[1], parts[2]);
    if user.is_empty() {
        return Err((String::new(), "Authentication failed: username not specified".into()));
    }
    if password.is_empty() {
        return Err((user.into(), "Authentication failed: password not specified".into()));
    }
    if !authzid.is_empty() && authzid != user {
        return Err((
            user.into(),
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    if !shard.security.plain_password_matches(user, password) {
        return Err((user.into(), "Authentication failed: Invalid username or password".into()));
    }
    Ok(user.to_string())
}

fn respond<R: Encodable>(key: ApiKey, version: i16, corr: i32, body: &R, close: bool) -> Gate {
    match frame::encode_response(key, version, corr, body) {
        Ok(b) if close => Gate::RespondAndClose(b),
        Ok(b) => Gate::Respond(b),
        Err(e) => Gate::Close(format!("encoding a {key:?} response: {e}")),
    }
}
