//! OAUTHBEARER and KIP-368 re-authentication on the wire, against the `keel` binary:
//! unsecured tokens, signed (RS256) tokens checked against a JWKS served over HTTPS by a
//! local rustls server (a CA made by `compat/security/certs.sh` in a temporary
//! directory), the JWKS's key rotation reaching the broker through the refresh an
//! unknown key id asks for, and the start refused when the JWKS cannot be fetched.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::sasl::{
    assert_closed, authenticate, certs, handshake, metadata, oauth_first, scram_login, unsecured_token,
    ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
};
use crate::common::{free_port, Broker, Conn};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use kafka_protocol::messages::SaslAuthenticateResponse;
use keel_broker::security::scram::Mechanism;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};

/// A broker with PLAINTEXT and SASL_PLAINTEXT listeners offering SCRAM and OAUTHBEARER;
/// SCRAM users alice and bob.
fn start_oauth(extra: &[&str]) -> (Broker, u16) {
    let (plain, sasl) = (free_port(), free_port());
    let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let mut args = vec![
        "--listeners",
        &listeners,
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-256,OAUTHBEARER",
        "--scram-user",
        "alice:SCRAM-SHA-256:alice-secret",
        "--scram-user",
        "bob:SCRAM-SHA-256:bob-secret",
    ];
    args.extend_from_slice(extra);
    (Broker::start_on_port_with(plain, 1, &args, ""), sasl)
}

#[test]
fn oauthbearer_accepts_unsecured_tokens_and_refuses_bad_ones_as_kafka() {
    let (b, sasl) = start_oauth(&[]);
    let mut c = Broker::connect_port(sasl);
    let h = handshake(&mut c, "OAUTHBEARER");
    assert_eq!(h.error_code, 0);
    assert!(h.mechanisms.iter().any(|m| m.as_str() == "OAUTHBEARER"));
    let ok = authenticate(&mut c, &oauth_first(&unsecured_token("alice", 3600))).unwrap();
    assert_eq!(ok.error_code, 0, "{:?}", ok.error_message);
    // Without re-authentication configured the session still ends with the token.
    assert!((3_590_000..=3_600_000).contains(&ok.session_lifetime_ms), "{}", ok.session_lifetime_ms);
    assert!(metadata(&mut c).is_some());

    // An expired token: the error challenge, the client's \x01, then the failure.
    let mut c = Broker::connect_port(sasl);
    assert_eq!(handshake(&mut c, "OAUTHBEARER").error_code, 0);
    let challenge = authenticate(&mut c, &oauth_first(&unsecured_token("alice", -60))).unwrap();
    assert_eq!(challenge.error_code, 0);
    assert_eq!(&challenge.auth_bytes[..], br#"{"status":"invalid_token"}"#);
    let refused = authenticate(&mut c, b"\x01").unwrap();
    assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    assert_eq!(refused.error_message.as_deref(), Some(r#"{"status":"invalid_token"}"#));
    assert_closed(&mut c);

    // Garbage and a bad first message fail at once with Kafka's message.
    for token in [&b"n,,\x01auth=Bearer %%%\x01\x01"[..], b"not oauth", b"n,,\x01auth=Bearer x.y.z\x01"] {
        let mut c = Broker::connect_port(sasl);
        assert_eq!(handshake(&mut c, "OAUTHBEARER").error_code, 0);
        let refused = authenticate(&mut c, token).unwrap();
        assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
        assert_eq!(
            refused.error_message.as_deref(),
            Some("Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER")
        );
        assert_closed(&mut c);
    }
    // A garbage token (not a JWS) is an invalid_token challenge.
    let mut c = Broker::connect_port(sasl);
    assert_eq!(handshake(&mut c, "OAUTHBEARER").error_code, 0);
    let challenge = authenticate(&mut c, &oauth_first("abc.def.")).unwrap();
    assert_eq!(&challenge.auth_bytes[..], br#"{"status":"invalid_token"}"#);
    // An authorization id other than the token's principal.
    let mut c = Broker::connect_port(sasl);
    assert_eq!(handshake(&mut c, "OAUTHBEARER").error_code, 0);
    let first = format!("n,a=bob,\x01auth=Bearer {}\x01\x01", unsecured_token("alice", 60));
    let refused = authenticate(&mut c, first.as_bytes()).unwrap();
    assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    assert!(refused.error_message.unwrap().contains("different from the token's principal name (alice)"));
    assert_eq!(b.metric_sum("keel_authentication_failures_total"), 6);
}

#[test]
fn oauthbearer_without_the_mechanism_enabled_is_unsupported() {
    // Offered broker-wide, but not on this listener.
    let (_b, sasl) = start_oauth(&["--listener-sasl-mechanisms", "SASL_PLAINTEXT=SCRAM-SHA-256"]);
    let mut c = Broker::connect_port(sasl);
    let h = handshake(&mut c, "OAUTHBEARER");
    assert_eq!(h.error_code, UNSUPPORTED_SASL_MECHANISM);
    assert_eq!(h.mechanisms.iter().map(|m| m.as_str()).collect::<Vec<_>>(), ["SCRAM-SHA-256"]);
    assert_closed(&mut c);
}

/// SaslHandshake + a full SCRAM-SHA-256 exchange; the final answer.
fn scram_256(c: &mut Conn, user: &str, password: &str) -> SaslAuthenticateResponse {
    scram_login(c, Mechanism::Sha256, user, password).expect("an answer")
}

#[test]
fn kip_368_reauthentication_keeps_the_principal_and_expired_sessions_are_closed() {
    let (b, sasl) = start_oauth(&["--connections-max-reauth-ms", "1500"]);
    // Re-authenticating before the session ends keeps the connection served.
    let mut c = Broker::connect_port(sasl);
    let ok = scram_256(&mut c, "alice", "alice-secret");
    assert_eq!((ok.error_code, ok.session_lifetime_ms), (0, 1500));
    for _ in 0..3 {
        // Kafka starts at most one re-authentication a second.
        std::thread::sleep(Duration::from_millis(1100));
        assert!(metadata(&mut c).is_some());
        let again = scram_256(&mut c, "alice", "alice-secret");
        assert_eq!((again.error_code, again.session_lifetime_ms), (0, 1500), "{:?}", again.error_message);
    }
    assert!(metadata(&mut c).is_some());
    assert_eq!(b.metric_sum("keel_sasl_reauthentications_total"), 3);
    // Another one within a second of the last is refused as Kafka refuses it.
    assert_eq!(handshake(&mut c, "SCRAM-SHA-256").error_code, ILLEGAL_SASL_STATE);
    assert!(metadata(&mut c).is_some());

    // A token that ends before connections_max_reauth_ms bounds the session.
    let mut t = Broker::connect_port(sasl);
    assert_eq!(handshake(&mut t, "OAUTHBEARER").error_code, 0);
    let ok = authenticate(&mut t, &oauth_first(&unsecured_token("alice", 1))).unwrap();
    assert!(ok.session_lifetime_ms <= 1000, "{}", ok.session_lifetime_ms);

    // A client that does not re-authenticate is disconnected at its next request.
    // A re-authentication that begins after the session expired is still served, as
    // Kafka begins one before it looks at expiry.
    let mut idle = Broker::connect_port(sasl);
    assert_eq!(scram_256(&mut idle, "alice", "alice-secret").error_code, 0);
    let mut late = Broker::connect_port(sasl);
    assert_eq!(scram_256(&mut late, "alice", "alice-secret").error_code, 0);
    std::thread::sleep(Duration::from_millis(1700));
    assert!(metadata(&mut idle).is_none(), "an expired session is closed");
    assert_eq!(scram_256(&mut late, "alice", "alice-secret").error_code, 0);
    assert!(metadata(&mut late).is_some());
    assert!(b.metric_sum("keel_sasl_expired_sessions_closed_total") >= 1);

    // Re-authenticating as another user is refused and closes the connection.
    let mut c = Broker::connect_port(sasl);
    assert_eq!(scram_256(&mut c, "alice", "alice-secret").error_code, 0);
    let refused = scram_256(&mut c, "bob", "bob-secret");
    assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    assert_eq!(
        refused.error_message.as_deref(),
        Some("Cannot change principals during re-authentication from User.alice: User.bob")
    );
    assert_closed(&mut c);

    // So is another mechanism.
    let mut c = Broker::connect_port(sasl);
    assert_eq!(scram_256(&mut c, "alice", "alice-secret").error_code, 0);
    assert_eq!(handshake(&mut c, "OAUTHBEARER").error_code, 0);
    // Kafka closes the connection without an answer.
    assert!(authenticate(&mut c, &oauth_first(&unsecured_token("alice", 60))).is_none());

    // Without re-authentication configured, a SCRAM session does not end.
    drop(b);
    let (_b, sasl) = start_oauth(&[]);
    let mut c = Broker::connect_port(sasl);
    assert_eq!(scram_256(&mut c, "alice", "alice-secret").session_lifetime_ms, 0);
}

/// An RSA key made by openssl, with its key id.
struct SigningKey {
    kid: String,
    pair: RsaKeyPair,
}

impl SigningKey {
    fn new(dir: &Path, kid: &str) -> SigningKey {
        let pem = dir.join(format!("{kid}.pem"));
        let der = dir.join(format!("{kid}.pk8"));
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let (pem_s, der_s) = (pem.display().to_string(), der.display().to_string());
        run(&["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", &pem_s]);
        run(&["pkcs8", "-topk8", "-nocrypt", "-in", &pem_s, "-outform", "DER", "-out", &der_s]);
        let pair = RsaKeyPair::from_pkcs8(&std::fs::read(&der).unwrap()).expect("a PKCS#8 RSA key");
        SigningKey { kid: kid.to_string(), pair }
    }

    /// The public key as a JWK.
    fn jwk(&self) -> String {
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(self.pair.public());
        format!(
            r#"{{"kty":"RSA","alg":"RS256","use":"sig","kid":"{}","n":"{}","e":"{}"}}"#,
            self.kid,
            URL_SAFE_NO_PAD.encode(&public.n),
            URL_SAFE_NO_PAD.encode(&public.e)
        )
    }

    /// An RS256 token for `sub` from issuer `iss`, naming key id `kid`, good for an hour.
    fn token(&self, kid: &str, sub: &str, iss: &str) -> String {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let header = format!(r#"{{"alg":"RS256","typ":"JWT","kid":"{kid}"}}"#);
        let claims = format!(r#"{{"sub":"{sub}","iss":"{iss}","iat":{now},"exp":{}}}"#, now + 3600);
        let signed = format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(claims));
        let mut sig = vec![0; self.pair.public().modulus_len()];
        let rng = ring::rand::SystemRandom::new();
        self.pair.sign(&RSA_PKCS1_SHA256, &rng, signed.as_bytes(), &mut sig).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(&sig))
    }
}

fn jwks_of(keys: &[&SigningKey]) -> String {
    format!(r#"{{"keys":[{}]}}"#, keys.iter().map(|k| k.jwk()).collect::<Vec<_>>().join(","))
}

/// A JWKS served over HTTPS (the server certificate of `certs`) at `/jwks`; `served`
/// is the document, which a test may change; `requests` counts GETs.
struct JwksServer {
    port: u16,
    served: Arc<Mutex<String>>,
    requests: Arc<AtomicUsize>,
}

impl JwksServer {
    fn start(certs: &Path, jwks: String) -> JwksServer {
        let read = |name: &str| std::fs::read(certs.join(name)).unwrap();
        let chain: Vec<_> = rustls_pemfile::certs(&mut read("server.crt").as_slice()).map(|c| c.unwrap()).collect();
        let key = rustls_pemfile::private_key(&mut read("server.key").as_slice()).unwrap().unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(Mutex::new(jwks));
        let requests = Arc::new(AtomicUsize::new(0));
        let (doc, count) = (served.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(tcp) = stream else { continue };
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(conn) = rustls::ServerConnection::new(config.clone()) else { continue };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(n) if n > 0 => request.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                if !request.starts_with(b"GET /jwks ") {
                    let _ = tls.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    continue;
                }
                count.fetch_add(1, Ordering::SeqCst);
                let body = doc.lock().unwrap().clone();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).and_then(|_| tls.write_all(body.as_bytes()));
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        JwksServer { port, served, requests }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/jwks", self.port)
    }
}

/// Handshake and one OAUTHBEARER token on a new connection; the final answer (a refused
/// token's error challenge is acknowledged, so the answer is the failure).
fn oauth_login(sasl: u16, token: &str) -> (Conn, SaslAuthenticateResponse) {
    let mut c = Broker::connect_port(sasl);
    assert_eq!(handshake(&mut c, "OAUTHBEARER").error_code, 0);
    let mut answer = authenticate(&mut c, &oauth_first(token)).expect("an answer");
    if answer.error_code == 0 && !answer.auth_bytes.is_empty() {
        answer = authenticate(&mut c, b"\x01").expect("the failure");
    }
    (c, answer)
}

#[test]
fn a_jwks_over_https_checks_rs256_tokens_and_follows_a_key_rotation() {
    let certs = certs();
    let first = SigningKey::new(&certs, "k1");
    let second = SigningKey::new(&certs, "k2");
    let server = JwksServer::start(&certs, jwks_of(&[&first]));
    let (url, ca) = (server.url(), certs.join("ca.pem").display().to_string());
    // The endpoint broker-wide; the issuer only for this listener (its override).
    let (b, sasl) = start_oauth(&[
        "--sasl-oauthbearer-jwks-endpoint-url",
        &url,
        "--sasl-oauthbearer-jwks-endpoint-ca-file",
        &ca,
        "--listener-sasl-oauthbearer",
        "SASL_PLAINTEXT:expected_issuer=https://idp.test",
    ]);
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "fetched once at start");

    let (mut c, ok) = oauth_login(sasl, &first.token("k1", "carol", "https://idp.test"));
    assert_eq!(ok.error_code, 0, "{:?}", ok.error_message);
    assert!(metadata(&mut c).is_some());
    // Signed with another key under the same kid; another issuer; an unsecured token.
    for token in [
        second.token("k1", "carol", "https://idp.test"),
        first.token("k1", "carol", "https://other.test"),
        unsecured_token("carol", 60),
    ] {
        let (mut c, refused) = oauth_login(sasl, &token);
        assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
        assert_eq!(refused.error_message.as_deref(), Some(r#"{"status":"invalid_token"}"#));
        assert_closed(&mut c);
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "a known kid asks for no refresh");

    // The identity provider rotates to the second key: the first token naming k2 is
    // refused (not in the set yet) and asks for a refresh; a later one is accepted.
    *server.served.lock().unwrap() = jwks_of(&[&second]);
    let rotated = second.token("k2", "carol", "https://idp.test");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut tries = 0;
    loop {
        tries += 1;
        let (_, answer) = oauth_login(sasl, &rotated);
        if answer.error_code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the token of the new key is still refused after {tries} tries");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(tries > 1, "the first try cannot know the new key");
    assert_eq!(server.requests.load(Ordering::SeqCst), 2, "one expedited refresh");
    // The old key left the set.
    let (_, refused) = oauth_login(sasl, &first.token("k1", "carol", "https://idp.test"));
    assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    // An unknown kid asks for at most one refresh a minute, however often it comes
    // (k1, now unknown, asked for at most one more).
    for _ in 0..5 {
        let (_, refused) = oauth_login(sasl, &second.token("k9", "carol", "https://idp.test"));
        assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.requests.load(Ordering::SeqCst) <= 4, "{}", server.requests.load(Ordering::SeqCst));
    drop(b);
    let _ = std::fs::remove_dir_all(certs);
}

/// `keel serve` with `args`, expected to refuse to start: its exit code and stderr.
fn refused_start(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (plain, sasl, admin) = (free_port(), free_port(), free_port());
    let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let admin = format!("127.0.0.1:{admin}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("serve")
        .args(["--data-dir", &dir.path().display().to_string(), "--listeners", &listeners, "--admin-addr", &admin])
        .args(args)
        .output()
        .expect("keel runs");
    assert!(!out.status.success(), "keel {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_start_is_refused_when_the_jwks_cannot_be_fetched_or_an_override_is_wrong() {
    // As Kafka: "Could not refresh JWKS" at start, and no broker.
    let closed = format!("https://127.0.0.1:{}/jwks", free_port());
    let e = refused_start(&["--sasl-oauthbearer-jwks-endpoint-url", &closed]);
    assert!(e.contains("Could not refresh JWKS"), "{e}");
    // A CA that did not sign the endpoint's certificate.
    let certs = certs();
    let other = crate::common::sasl::certs();
    let server = JwksServer::start(&certs, r#"{"keys":[]}"#.into());
    let wrong_ca = other.join("ca.pem").display().to_string();
    let e = refused_start(&[
        "--sasl-oauthbearer-jwks-endpoint-url",
        &server.url(),
        "--sasl-oauthbearer-jwks-endpoint-ca-file",
        &wrong_ca,
    ]);
    assert!(e.contains("Could not refresh JWKS"), "{e}");
    let e = refused_start(&["--sasl-oauthbearer-jwks-endpoint-url", "http://127.0.0.1:1/jwks"]);
    assert!(e.contains("expected an https: or a file: URL"), "{e}");
    let e = refused_start(&["--listener-sasl-mechanisms", "SASL_SSL=PLAIN"]);
    assert!(
        e.contains("listener_sasl_mechanisms: no listener is named SASL_SSL (listeners: PLAINTEXT, SASL_PLAINTEXT)"),
        "{e}"
    );
    let e = refused_start(&["--listener-sasl-mechanisms", "SASL_PLAINTEXT=PLAIN,GSSAPI"]);
    assert!(e.contains("SASL mechanism GSSAPI is not supported"), "{e}");
    let e = refused_start(&["--listener-sasl-oauthbearer", "PLAINTEXT:expected_issuer=x"]);
    assert!(e.contains("listener PLAINTEXT does not use SASL"), "{e}");
    let _ = std::fs::remove_dir_all(certs);
    let _ = std::fs::remove_dir_all(other);
}
