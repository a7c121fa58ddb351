//! SASL on the wire for the security and OAUTHBEARER tests: certificates from
//! `compat/security/certs.sh`, SaslHandshake and SaslAuthenticate calls, a SCRAM login
//! and OAUTHBEARER tokens.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use keel_broker::security::scram::{client_final_message, Mechanism};

use super::{free_port, Conn};

pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in a directory
/// of their own (tests run in parallel in one process).
pub fn certs() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("keel-security-test-certs-{}-{n}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../compat/security/certs.sh");
    let out = std::process::Command::new("bash").arg(script).arg(&dir).output().expect("certs.sh runs");
    assert!(out.status.success(), "certs.sh: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

pub fn handshake(c: &mut Conn, mechanism: &str) -> SaslHandshakeResponse {
    c.call(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
}

pub fn authenticate(c: &mut Conn, token: &[u8]) -> Option<SaslAuthenticateResponse> {
    c.try_call(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
    )
}

/// A full SCRAM login; the final answer.
pub fn scram_login(c: &mut Conn, mechanism: Mechanism, user: &str, password: &str) -> Option<SaslAuthenticateResponse> {
    assert_eq!(handshake(c, mechanism.name()).error_code, 0);
    let bare = format!("n={user},r=testnonce{}", free_port());
    let first = authenticate(c, format!("n,,{bare}").as_bytes())?;
    if first.error_code != 0 {
        return Some(first);
    }
    let server_first = String::from_utf8(first.auth_bytes.to_vec()).unwrap();
    let last = client_final_message(mechanism, password, &bare, &server_first).expect("a server-first message");
    authenticate(c, last.as_bytes())
}

pub fn metadata(c: &mut Conn) -> Option<MetadataResponse> {
    c.try_call(ApiKey::Metadata, 12, &MetadataRequest::default())
}

pub fn assert_closed(c: &mut Conn) {
    assert!(c.read_frame().is_none(), "the connection should have been closed");
}

/// An unsecured JWS (`{"alg":"none"}`, no signature) as franz-go's TestOAuthAuth and
/// Kafka's unsecured login module make them.
pub fn unsecured_token(sub: &str, exp_from_now_s: i64) -> String {
    use base64::Engine;
    let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    format!("{}.{}.", enc(r#"{"alg":"none"}"#), enc(&format!(r#"{{"sub":"{sub}","exp":{}}}"#, now + exp_from_now_s)))
}

/// The OAUTHBEARER client's first message carrying `token`.
pub fn oauth_first(token: &str) -> Vec<u8> {
    format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
}
