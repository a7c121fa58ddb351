//! SASL on the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's
//! `SaslServerAuthenticator` runs it: until the connection is authenticated it may send
//! only ApiVersions, SaslHandshake, then SaslAuthenticate (or, after a v0 handshake,
//! raw SASL tokens); anything else closes it. A failed authentication is answered
//! SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection is closed.
//!
//! The [`Authenticator`] runs on the connection's reader task, between reading a frame
//! and starting its handler: requests pipelined behind a SASL exchange are not read
//! before the exchange is over, so none of them runs unauthenticated.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::{Encodable, StrBytes};
use keel_protocol::frame;

use super::principal::Principal;
use super::scram::{Mechanism, ScramServer, Step};
use crate::errors;
use crate::handlers::Request;
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
    Done,
}

enum Server {
    Plain,
    Scram(Box<ScramServer>),
}

impl Server {
    fn mechanism_name(&self) -> &'static str {
        match self {
            Server::Plain => PLAIN,
            Server::Scram(s) => s.mechanism().name(),
        }
    }
}

/// Outcome of one token.
enum Token {
    Challenge(Vec<u8>),
    Authenticated(Principal, Vec<u8>),
    /// The client's message (Kafka's), and the log's reason.
    Failed(String),
}

pub struct Authenticator {
    state: State,
}

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator { state: State::Handshake }
    }
}

impl Authenticator {
    pub fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    pub fn wants_raw_token(&self) -> bool {
        matches!(self.state, State::RawTokens(_))
    }

    /// Decides what happens to a request that arrived before authentication ended.
    pub fn gate(&mut self, shard: &Shard, session: &super::context::Session, req: &Request) -> Gate {
        let corr = req.header.correlation_id;
        match (&mut self.state, &req.body) {
            (State::Handshake, RequestKind::ApiVersions(_)) => Gate::Run,
            (State::Handshake, RequestKind::SaslHandshake(h)) => {
                let enabled = shard.security.enabled_mechanisms();
                let wanted = h.mechanism.as_str();
                let server = match (enabled.iter().any(|m| m == wanted), Mechanism::parse(wanted)) {
                    (true, Some(m)) => Some(Server::Scram(Box::new(ScramServer::new(m)))),
                    (true, None) if wanted == PLAIN => Some(Server::Plain),
                    _ => None,
                };
                let mut resp = SaslHandshakeResponse::default()
                    .with_mechanisms(enabled.iter().map(|m| StrBytes::from_string(m.clone())).collect());
                match server {
                    Some(server) => {
                        self.state =
                            if req.version == 0 { State::RawTokens(server) } else { State::Authenticate(server) };
                        respond(ApiKey::SaslHandshake, req.version, corr, &resp, false)
                    }
                    None => {
                        resp.error_code = errors::UNSUPPORTED_SASL_MECHANISM;
                        shard.security.stats.authentication_failed(&session.peer, wanted, "", "unsupported mechanism");
                        respond(ApiKey::SaslHandshake, req.version, corr, &resp, true)
                    }
                }
            }
            (State::Authenticate(server), RequestKind::SaslAuthenticate(a)) => {
                let mechanism = server.mechanism_name();
                match step(shard, &session.peer, server, &a.auth_bytes) {
                    Token::Challenge(bytes) => {
                        let resp = SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes));
                        respond(ApiKey::SaslAuthenticate, req.version, corr, &resp, false)
                    }
                    Token::Authenticated(principal, bytes) => {
                        tracing::debug!(peer = %session.peer, %principal, mechanism, "authenticated");
                        session.authenticated(principal);
                        self.state = State::Done;
                        let resp = SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes));
                        respond(ApiKey::SaslAuthenticate, req.version, corr, &resp, false)
                    }
                    Token::Failed(message) => {
                        let resp = failure(&message);
                        respond(ApiKey::SaslAuthenticate, req.version, corr, &resp, true)
                    }
                }
            }
            (State::Done, _) => Gate::Run,
            (State::Handshake, _) => {
                Gate::Close(format!("unexpected {:?} request during the SASL handshake", req.api_key))
            }
            (_, _) => Gate::Close(format!("unexpected {:?} request during SASL authentication", req.api_key)),
        }
    }

    /// Takes a raw token (after a v0 handshake) and returns the raw answer (a 4-byte
    /// length and the token), or `None` if the connection must be closed.
    pub fn raw_token(&mut self, shard: &Shard, session: &super::context::Session, token: &[u8]) -> Option<Bytes> {
        let State::RawTokens(server) = &mut self.state else { return None };
        let answer = match step(shard, &session.peer, server, token) {
            Token::Challenge(bytes) => bytes,
            Token::Authenticated(principal, bytes) => {
                session.authenticated(principal);
                self.state = State::Done;
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

fn failure(message: &str) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(errors::SASL_AUTHENTICATION_FAILED)
        .with_error_message(Some(StrBytes::from_string(message.to_string())))
}

fn step(shard: &Shard, peer: &str, server: &mut Server, token: &[u8]) -> Token {
    let stats = &shard.security.stats;
    match server {
        Server::Plain => match plain(shard, token) {
            Ok(user) => Token::Authenticated(Principal::user(&user), Vec::new()),
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
                Step::Done { user, server_final } => Token::Authenticated(Principal::user(&user), server_final),
                Step::Failed { user, reason } => {
                    stats.authentication_failed(peer, mechanism.name(), &user, &reason);
                    Token::Failed(format!(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                        mechanism.name()
                    ))
                }
            }
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
