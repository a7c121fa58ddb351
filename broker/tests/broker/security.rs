//! Listeners, TLS and SASL on the wire: real sockets against the `keel` binary, with
//! certificates made by `compat/security/certs.sh` (openssl) for each run. Every bad
//! exchange must close only its own connection while an authenticated client on the
//! same broker keeps being served.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::sasl::{
    assert_closed, authenticate, certs, handshake, metadata, scram_login, ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
};
use crate::common::{free_port, Broker, Conn};
use bytes::Bytes;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey, ApiVersionsRequest,
    ApiVersionsResponse, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, MetadataRequest,
    MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use keel_broker::security::scram::Mechanism;

const RESOURCE_NOT_FOUND: i16 = 91;

struct Ports {
    plain: u16,
    sasl: u16,
    ssl: u16,
    sasl_ssl: u16,
}

/// A broker with all four listeners, a SCRAM user alice (both mechanisms) and a PLAIN
/// user bob.
fn start(certs: &Path) -> (Broker, Ports) {
    start_with(certs, &[])
}

/// `start`'s broker with more flags.
fn start_with(certs: &Path, extra: &[&str]) -> (Broker, Ports) {
    let p = Ports { plain: free_port(), sasl: free_port(), ssl: free_port(), sasl_ssl: free_port() };
    let listeners = format!(
        "PLAINTEXT://127.0.0.1:{},SASL_PLAINTEXT://127.0.0.1:{},SSL://127.0.0.1:{},SASL_SSL://127.0.0.1:{}",
        p.plain, p.sasl, p.ssl, p.sasl_ssl
    );
    let file = |name: &str| certs.join(name).display().to_string();
    let (cert, key, ca) = (file("server.crt"), file("server.key"), file("ca.pem"));
    let mut args = vec![
        "--listeners",
        &listeners,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-ca",
        &ca,
        "--scram-user",
        "alice:SCRAM-SHA-256:alice-secret",
        "--scram-user",
        "alice:SCRAM-SHA-512:alice-secret",
        "--plain-user",
        "bob:bob-secret",
    ];
    args.extend_from_slice(extra);
    let b = Broker::start_on_port_with(p.plain, 1, &args, "tls_handshake_timeout_ms: 1000\n");
    (b, p)
}

#[test]
fn sasl_logs_in_with_scram_and_plain_and_refuses_everything_out_of_order() {
    let certs = certs();
    let (b, p) = start(&certs);

    // An authenticated client that must be served throughout.
    let mut good = Broker::connect_port(p.sasl);
    let ok = scram_login(&mut good, Mechanism::Sha512, "alice", "alice-secret").expect("an answer");
    assert_eq!(ok.error_code, 0, "{:?}", ok.error_message);
    assert!(ok.auth_bytes.starts_with(b"v="), "the server's final message proves the server knew the key");
    // Metadata names the endpoints of the listener the request came in on.
    let m = metadata(&mut good).expect("metadata after login");
    assert_eq!(m.brokers[0].port, p.sasl as i32);
    let m = metadata(&mut Broker::connect_port(p.plain)).unwrap();
    assert_eq!(m.brokers[0].port, p.plain as i32);

    // ApiVersions before the handshake is answered and advertises the SASL APIs.
    let mut c = Broker::connect_port(p.sasl);
    let v: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    for key in [ApiKey::SaslHandshake, ApiKey::SaslAuthenticate, ApiKey::DescribeUserScramCredentials] {
        assert!(v.api_keys.iter().any(|k| k.api_key == key as i16), "{key:?} advertised");
    }
    // SCRAM-SHA-256 and PLAIN work too.
    assert_eq!(scram_login(&mut c, Mechanism::Sha256, "alice", "alice-secret").unwrap().error_code, 0);
    let mut c = Broker::connect_port(p.sasl);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    assert_eq!(authenticate(&mut c, b"\0bob\0bob-secret").unwrap().error_code, 0);
    assert!(metadata(&mut c).is_some());

    // Wrong passwords: SASL_AUTHENTICATION_FAILED with Kafka's message, then closed.
    let mut c = Broker::connect_port(p.sasl);
    let refused = scram_login(&mut c, Mechanism::Sha512, "alice", "wrong").expect("a refusal");
    assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    assert_eq!(
        refused.error_message.as_deref(),
        Some(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        )
    );
    assert_closed(&mut c);
    let mut c = Broker::connect_port(p.sasl);
    assert_eq!(scram_login(&mut c, Mechanism::Sha256, "nobody", "x").unwrap().error_code, SASL_AUTHENTICATION_FAILED);
    assert_closed(&mut c);
    let mut c = Broker::connect_port(p.sasl);
    handshake(&mut c, "PLAIN");
    let refused = authenticate(&mut c, b"\0bob\0wrong").unwrap();
    assert_eq!(refused.error_code, SASL_AUTHENTICATION_FAILED);
    assert_eq!(refused.error_message.as_deref(), Some("Authentication failed: Invalid username or password"));
    assert_closed(&mut c);

    // Out of order: SaslAuthenticate before SaslHandshake, Metadata (or anything else)
    // before authentication, a second handshake: closed without an answer.
    let mut c = Broker::connect_port(p.sasl);
    assert!(authenticate(&mut c, b"\0bob\0bob-secret").is_none());
    let mut c = Broker::connect_port(p.sasl);
    assert!(metadata(&mut c).is_none());
    let mut c = Broker::connect_port(p.sasl);
    handshake(&mut c, "PLAIN");
    assert!(metadata(&mut c).is_none(), "nothing but SaslAuthenticate after the handshake");
    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut c = Broker::connect_port(p.sasl);
    let h = handshake(&mut c, "GSSAPI");
    assert_eq!(h.error_code, UNSUPPORTED_SASL_MECHANISM);
    assert!(h.mechanisms.iter().any(|m| m.as_str() == "SCRAM-SHA-512"));
    assert_closed(&mut c);
    // An oversized token (over sasl.server.max.receive.size, 512 KiB): closed.
    let mut c = Broker::connect_port(p.sasl);
    handshake(&mut c, "PLAIN");
    let (_, frame) = c.frame(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(vec![b'a'; 600 << 10])),
    );
    let _ = c.stream.write_all(&frame);
    assert_closed(&mut c);
    // SASL requests on a listener without SASL: ILLEGAL_SASL_STATE, as Kafka answers.
    let mut c = Broker::connect_port(p.plain);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, ILLEGAL_SASL_STATE);
    assert!(metadata(&mut c).is_some());

    // Pipelined: the handshake, the login and a Metadata request in one write; the
    // Metadata request waits for the login and is answered after it.
    let mut c = Broker::connect_port(p.sasl);
    let (_, f1) = c.frame(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    let (_, f2) = c.frame(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0bob\0bob-secret")),
    );
    let (corr3, f3) = c.frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    c.send_raw(&[f1, f2, f3].concat());
    c.read_frame().expect("handshake answer");
    c.read_frame().expect("authenticate answer");
    let third = c.read_frame().expect("metadata answer");
    assert_eq!(i32::from_be_bytes(third[..4].try_into().unwrap()), corr3);

    assert!(metadata(&mut good).is_some(), "the authenticated client is still served");
    assert!(b.metric_sum("keel_authentication_failures_total") >= 4);
    let _ = std::fs::remove_dir_all(certs);
}

#[test]
fn scram_users_are_managed_with_kip_554_and_persist() {
    let certs = certs();
    let (mut b, p) = start(&certs);
    let mut admin = Broker::connect_port(p.plain);
    // carol: created with a salted password, as kafka-configs sends it.
    let salt = b"carol-salt-bytes";
    let salted = Mechanism::Sha512.salted_password(b"carol-secret", salt, 8192);
    let upsert = kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_static_str("carol"))
        .with_mechanism(2)
        .with_iterations(8192)
        .with_salt(Bytes::copy_from_slice(salt))
        .with_salted_password(Bytes::from(salted));
    let r: AlterUserScramCredentialsResponse = admin.call(
        ApiKey::AlterUserScramCredentials,
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsert.clone()]),
    );
    assert_eq!(r.results[0].error_code, 0, "{:?}", r.results[0].error_message);
    // Too few iterations is refused.
    let weak = upsert.clone().with_name(StrBytes::from_static_str("dave")).with_iterations(100);
    let r: AlterUserScramCredentialsResponse = admin.call(
        ApiKey::AlterUserScramCredentials,
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![weak]),
    );
    assert_eq!(r.results[0].error_code, 93);

    let d: DescribeUserScramCredentialsResponse =
        admin.call(ApiKey::DescribeUserScramCredentials, 0, &DescribeUserScramCredentialsRequest::default());
    let users: Vec<&str> = d.results.iter().map(|r| r.user.as_str()).collect();
    assert_eq!(users, ["alice", "carol"]);
    let carol = &d.results[1];
    assert_eq!((carol.credential_infos[0].mechanism, carol.credential_infos[0].iterations), (2, 8192));

    let mut c = Broker::connect_port(p.sasl);
    assert_eq!(scram_login(&mut c, Mechanism::Sha512, "carol", "carol-secret").unwrap().error_code, 0);

    // Credentials are in the durable metadata: a restart keeps them.
    b.stop();
    b.spawn();
    let mut c = Broker::connect_port(p.sasl);
    assert_eq!(scram_login(&mut c, Mechanism::Sha512, "carol", "carol-secret").unwrap().error_code, 0);

    // Deleted: the login fails, a second delete is RESOURCE_NOT_FOUND.
    let mut admin = Broker::connect_port(p.plain);
    let delete = kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion::default()
        .with_name(StrBytes::from_static_str("carol"))
        .with_mechanism(2);
    for expected in [0, RESOURCE_NOT_FOUND] {
        let r: AlterUserScramCredentialsResponse = admin.call(
            ApiKey::AlterUserScramCredentials,
            0,
            &AlterUserScramCredentialsRequest::default().with_deletions(vec![delete.clone()]),
        );
        assert_eq!(r.results[0].error_code, expected);
    }
    let mut c = Broker::connect_port(p.sasl);
    assert_eq!(
        scram_login(&mut c, Mechanism::Sha512, "carol", "carol-secret").unwrap().error_code,
        SASL_AUTHENTICATION_FAILED
    );
    let _ = std::fs::remove_dir_all(certs);
}

#[test]
fn ten_thousand_failed_logins_leave_other_clients_served() {
    let certs = certs();
    let (b, p) = start(&certs);
    let mut good = Broker::connect_port(p.sasl);
    assert_eq!(scram_login(&mut good, Mechanism::Sha256, "alice", "alice-secret").unwrap().error_code, 0);
    let attempts = 10_000;
    let started = Instant::now();
    for i in 0..attempts {
        let mut c = Broker::connect_port(p.sasl);
        let (_, f1) = c.frame(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        let (_, f2) = c.frame(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0bob\0guess")),
        );
        c.send_raw(&[f1, f2].concat());
        c.read_frame().expect("handshake answer");
        let refusal = c.read_frame().expect("a refusal");
        let mut body = refusal.slice(5..);
        let r = <SaslAuthenticateResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 2).unwrap();
        assert_eq!(r.error_code, SASL_AUTHENTICATION_FAILED);
        assert_closed(&mut c);
        if i % 500 == 0 {
            assert!(metadata(&mut good).is_some(), "the authenticated client is served after {i} failed logins");
        }
    }
    eprintln!("{attempts} failed logins in {:?}", started.elapsed());
    assert!(metadata(&mut good).is_some());
    assert_eq!(b.metric_sum("keel_authentication_failures_total"), attempts);
    let log = b.log();
    let lines = log.lines().filter(|l| l.contains("authentication failed")).count();
    assert!(lines < 1000, "failures are logged rate limited, {lines} lines");
    let _ = std::fs::remove_dir_all(certs);
}

fn tls_client(certs: &Path, with_client_cert: bool) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(certs.join("ca.pem")).unwrap();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = if with_client_cert {
        let pem = std::fs::read(certs.join("client.crt")).unwrap();
        let chain: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice()).map(|c| c.unwrap()).collect();
        let key = rustls_pemfile::private_key(&mut std::fs::read(certs.join("client.key")).unwrap().as_slice())
            .unwrap()
            .unwrap();
        builder.with_client_auth_cert(chain, key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    Arc::new(config)
}

/// An ApiVersions v0 request frame (header v1, empty body).
fn api_versions_frame() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(ApiKey::ApiVersions as i16).to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes());
    [(body.len() as i32).to_be_bytes().to_vec(), body].concat()
}

/// ApiVersions over TLS; `None` if the broker refuses or closes.
fn tls_api_versions(port: u16, config: Arc<rustls::ClientConfig>) -> Option<Vec<u8>> {
    tls_request(port, config, &api_versions_frame())
}

/// One request frame over TLS, and its response frame (without the size); `None` if
/// the broker refuses or closes.
fn tls_request(port: u16, config: Arc<rustls::ClientConfig>, frame: &[u8]) -> Option<Vec<u8>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(frame).ok()?;
    let mut len = [0u8; 4];
    tls.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    tls.read_exact(&mut body).ok()?;
    Some(body)
}

/// On a TLS listener a bad client gets at most a TLS alert record, then the end of
/// the connection: never a Kafka response.
fn assert_refused_by_tls(c: &mut Conn) {
    let mut answer = Vec::new();
    let _ = c.stream.read_to_end(&mut answer);
    assert!(answer.is_empty() || answer[0] == 0x15, "a TLS alert or nothing, got {answer:02x?}");
}

#[test]
fn tls_serves_good_clients_and_refuses_garbage_and_truncated_handshakes() {
    let certs = certs();
    let (b, p) = start(&certs);
    let mut good = Broker::connect_port(p.plain);

    // mTLS on the SSL listener: a client certificate is required.
    assert!(tls_api_versions(p.ssl, tls_client(&certs, true)).is_some());
    assert!(tls_api_versions(p.ssl, tls_client(&certs, false)).is_none(), "no client certificate, no connection");
    // SASL_SSL asks for none.
    assert!(tls_api_versions(p.sasl_ssl, tls_client(&certs, false)).is_some());

    // Garbage instead of a ClientHello: closed.
    let mut c = Broker::connect_port(p.ssl);
    c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_refused_by_tls(&mut c);
    // A Kafka request in clear text on a TLS listener: closed.
    let mut c = Broker::connect_port(p.sasl_ssl);
    let (_, frame) = c.frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    c.send_raw(&frame);
    assert_refused_by_tls(&mut c);
    // A truncated handshake (a record header announcing 512 bytes, then 5 of them):
    // closed after tls_handshake_timeout_ms, not held forever.
    let mut c = Broker::connect_port(p.ssl);
    let started = Instant::now();
    c.send_raw(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03]);
    assert_refused_by_tls(&mut c);
    assert!(started.elapsed() < Duration::from_secs(15));

    assert!(metadata(&mut good).is_some(), "the plain client is still served");
    assert!(b.metric_sum("keel_tls_handshake_failures_total") >= 4);
    let _ = std::fs::remove_dir_all(certs);
}

#[test]
fn ssl_principal_mapping_rules_name_the_certificate_principal_as_kafka() {
    use kafka_protocol::protocol::Decodable;
    let certs = certs();
    let (plain, ssl) = (free_port(), free_port());
    let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}");
    let file = |name: &str| certs.join(name).display().to_string();
    let (cert, key, ca) = (file("server.crt"), file("server.key"), file("ca.pem"));
    // The client certificate's subject is CN=client,OU=test,O=Keel: the rule makes it
    // CLIENT, the one superuser; there is no DEFAULT, so another subject is refused.
    let rules = "RULE:^CN=([a-z]+),OU=test,O=Keel$/$1/U";
    let args = [
        "--listeners",
        &listeners,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-ca",
        &ca,
        "--authorizer",
        "standard",
        "--superusers",
        "User:ANONYMOUS,User:CLIENT",
        "--ssl-principal-mapping-rules",
        rules,
    ];
    let _b = Broker::start_on_port_with(plain, 1, &args, "");
    let describe = DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    let (_, frame) = Broker::connect_port(plain).frame(ApiKey::DescribeAcls, 3, &describe);
    let answer = tls_request(ssl, tls_client(&certs, true), &frame).expect("the mapped client is served");
    // Response header v1: correlation id and an empty tagged-field section.
    let r = DescribeAclsResponse::decode(&mut Bytes::from(answer).split_off(5), 3).unwrap();
    assert_eq!(r.error_code, 0, "User:CLIENT is a superuser: {:?}", r.error_message);

    // A subject no rule maps is refused, as Kafka refuses it.
    let other = "RULE:^CN=nobody$/$0/";
    let (plain2, ssl2) = (free_port(), free_port());
    let listeners2 = format!("PLAINTEXT://127.0.0.1:{plain2},SSL://127.0.0.1:{ssl2}");
    let args2 = [
        "--listeners",
        &listeners2,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-ca",
        &ca,
        "--ssl-principal-mapping-rules",
        other,
    ];
    let b2 = Broker::start_on_port_with(plain2, 1, &args2, "");
    assert!(tls_api_versions(ssl2, tls_client(&certs, true)).is_none(), "no rule applies: refused");
    assert!(b2.metric_sum("keel_tls_handshake_failures_total") >= 1);
    let _ = std::fs::remove_dir_all(certs);
}

#[test]
fn tls_certificates_reload_without_a_restart() {
    let certs = certs();
    let (_b, p) = start(&certs);
    let config = tls_client(&certs, true);
    assert!(tls_api_versions(p.ssl, config.clone()).is_some());
    // A new CA and server certificate replace the files: the old client trust fails,
    // a client trusting the new CA succeeds, without a restart.
    let fresh = std::env::temp_dir().join(format!("keel-security-test-certs-new-{}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../compat/security/certs.sh");
    assert!(std::process::Command::new("bash").arg(script).arg(&fresh).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(20));
    for f in ["server.key", "server.crt", "ca.pem"] {
        std::fs::copy(fresh.join(f), certs.join(f)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if tls_api_versions(p.ssl, tls_client(&fresh, true)).is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate is served");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(tls_api_versions(p.ssl, config).is_none(), "the old CA no longer verifies the server");
    let _ = std::fs::remove_dir_all(certs);
    let _ = std::fs::remove_dir_all(fresh);
}

// ACLs: CreateAcls, DescribeAcls and DeleteAcls on the wire, with the standard
// authorizer; a PLAIN listener for the principals (admin is a superuser).

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const MATCH: i8 = 2;
const ANY: i8 = 1;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const ALLOW: i8 = 3;
const DENY: i8 = 2;
const INVALID_REQUEST: i16 = 42;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// A broker with the standard authorizer, superuser admin, and PLAIN users admin and
/// alice; the ports of its PLAINTEXT and SASL_PLAINTEXT listeners.
fn start_with_authorizer() -> (Broker, u16, u16) {
    let (plain, sasl) = (free_port(), free_port());
    let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let args = [
        "--listeners",
        &listeners,
        "--authorizer",
        "standard",
        "--superusers",
        "User:admin",
        "--plain-user",
        "admin:admin-secret",
        "--plain-user",
        "alice:alice-secret",
    ];
    (Broker::start_on_port_with(plain, 1, &args, ""), plain, sasl)
}

fn plain_login(port: u16, user: &str, password: &str) -> Conn {
    let mut c = Broker::connect_port(port);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    let r = authenticate(&mut c, format!("\0{user}\0{password}").as_bytes()).expect("an answer");
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    c
}

fn creation(rt: i8, name: &str, pt: i8, principal: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(StrBytes::from_string(name.into()))
        .with_resource_pattern_type(pt)
        .with_principal(StrBytes::from_string(principal.into()))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

fn create_acls(c: &mut Conn, creations: Vec<AclCreation>) -> Vec<(i16, Option<String>)> {
    let r: CreateAclsResponse = c.call(ApiKey::CreateAcls, 3, &CreateAclsRequest::default().with_creations(creations));
    r.results.into_iter().map(|r| (r.error_code, r.error_message.map(|m| m.to_string()))).collect()
}

fn describe_filter(rt: i8, name: Option<&str>, pt: i8) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(rt)
        .with_resource_name_filter(name.map(|n| StrBytes::from_string(n.into())))
        .with_pattern_type_filter(pt)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

/// (resource name, pattern type, principal, operation, permission) of an ACL found.
type FoundAcl = (String, i8, String, i8, i8);

/// The error code and every ACL found.
fn describe_acls(c: &mut Conn, filter: &DescribeAclsRequest) -> (i16, Vec<FoundAcl>) {
    let r: DescribeAclsResponse = c.call(ApiKey::DescribeAcls, 3, filter);
    let mut found = Vec::new();
    for res in r.resources {
        for a in res.acls {
            found.push((
                res.resource_name.to_string(),
                res.pattern_type,
                a.principal.to_string(),
                a.operation,
                a.permission_type,
            ));
        }
    }
    found.sort();
    (r.error_code, found)
}

fn metadata_of(c: &mut Conn, topics: Option<&[&str]>) -> MetadataResponse {
    let topics = topics.map(|ts| {
        ts.iter()
            .map(|t| {
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(kafka_protocol::messages::TopicName(StrBytes::from_string(t.to_string()))))
            })
            .collect()
    });
    c.call(ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false))
}

#[test]
fn acls_are_created_described_matched_deleted_and_kept_across_a_restart() {
    let (mut b, _, sasl) = start_with_authorizer();
    let mut admin = plain_login(sasl, "admin", "admin-secret");
    let results = create_acls(
        &mut admin,
        vec![
            creation(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW),
            creation(TOPIC, "orders-", PREFIXED, "User:alice", WRITE, ALLOW),
            creation(TOPIC, "*", LITERAL, "User:*", DESCRIBE, ALLOW),
            creation(GROUP, "g", LITERAL, "User:alice", READ, DENY),
            // The same ACL twice: both succeed, one is kept.
            creation(GROUP, "g", LITERAL, "User:alice", READ, DENY),
        ],
    );
    assert!(results.iter().all(|(code, _)| *code == 0), "{results:?}");

    let (code, all) = describe_acls(&mut admin, &describe_filter(ANY, None, ANY));
    assert_eq!(code, 0);
    assert_eq!(all.len(), 4, "{all:?}");
    // LITERAL finds only literal patterns, PREFIXED only prefixed ones.
    let (_, literal) = describe_acls(&mut admin, &describe_filter(TOPIC, None, LITERAL));
    assert_eq!(literal.len(), 2);
    let (_, prefixed) = describe_acls(&mut admin, &describe_filter(TOPIC, None, PREFIXED));
    assert_eq!(prefixed, [("orders-".into(), PREFIXED, "User:alice".into(), WRITE, ALLOW)]);
    // MATCH finds every pattern that covers a name: literal, wildcard and prefixes.
    let (_, matched) = describe_acls(&mut admin, &describe_filter(TOPIC, Some("orders-eu"), MATCH));
    let names: Vec<&str> = matched.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(names, ["*", "orders-"]);
    // ANY with a name matches that exact name only.
    let (_, exact) = describe_acls(&mut admin, &describe_filter(TOPIC, Some("orders-eu"), ANY));
    assert!(exact.is_empty());

    // Kept in the durable metadata.
    b.stop();
    b.spawn();
    let mut admin = plain_login(sasl, "admin", "admin-secret");
    assert_eq!(describe_acls(&mut admin, &describe_filter(ANY, None, ANY)).1.len(), 4);

    // DeleteAcls returns what each filter removed.
    let filter = DeleteAclsFilter::default()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY);
    let r: DeleteAclsResponse =
        admin.call(ApiKey::DeleteAcls, 3, &DeleteAclsRequest::default().with_filters(vec![filter.clone()]));
    assert_eq!(r.filter_results[0].error_code, 0);
    assert_eq!(r.filter_results[0].matching_acls.len(), 2);
    let r: DeleteAclsResponse =
        admin.call(ApiKey::DeleteAcls, 3, &DeleteAclsRequest::default().with_filters(vec![filter]));
    assert!(r.filter_results[0].matching_acls.is_empty());
    assert_eq!(describe_acls(&mut admin, &describe_filter(ANY, None, ANY)).1.len(), 2);
}

#[test]
fn acl_requests_are_refused_as_kafka_refuses_them() {
    let (_b, _, sasl) = start_with_authorizer();
    let mut admin = plain_login(sasl, "admin", "admin-secret");
    // Each refused alone with Kafka 4.4's message (probed against it), the valid one
    // created.
    let results = create_acls(
        &mut admin,
        vec![
            creation(CLUSTER, "c", LITERAL, "User:alice", READ, ALLOW),
            creation(TOPIC, "", LITERAL, "User:alice", READ, ALLOW),
            creation(42, "t", LITERAL, "User:alice", READ, ALLOW),
            creation(TOPIC, "t", 9, "User:alice", READ, ALLOW),
            creation(TOPIC, "t", LITERAL, "User:alice", 99, ALLOW),
            creation(TOPIC, "t", LITERAL, "alice", READ, ALLOW),
            creation(TOPIC, "t", LITERAL, "User:alice", READ, ALLOW),
        ],
    );
    let codes: Vec<i16> = results.iter().map(|r| r.0).collect();
    assert_eq!(
        codes,
        [INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST, 0]
    );
    let messages: Vec<&str> = results.iter().map(|r| r.1.as_deref().unwrap_or_default()).collect();
    assert_eq!(
        messages[..6],
        [
            "The only valid name for the CLUSTER resource is kafka-cluster",
            "Invalid empty resource name",
            "Invalid resourceType UNKNOWN",
            "Invalid patternType UNKNOWN",
            "Invalid operation UNKNOWN",
            "Could not parse principal from `alice` (no colon is present separating the principal type from the principal name)",
        ]
    );
    // A filter's code (ANY, MATCH) in a creation: Kafka answers every creation of the
    // request UNKNOWN_SERVER_ERROR, without a message.
    for bad in [
        creation(TOPIC, "t", MATCH, "User:alice", READ, ALLOW),
        creation(ANY, "t", LITERAL, "User:alice", READ, ALLOW),
        creation(TOPIC, "t", LITERAL, "User:alice", ANY, ALLOW),
        creation(TOPIC, "t", LITERAL, "User:alice", READ, ANY),
    ] {
        let results = create_acls(&mut admin, vec![creation(TOPIC, "u", LITERAL, "User:alice", READ, ALLOW), bad]);
        assert_eq!(results, [(-1, None), (-1, None)]);
    }
    // DeleteAcls refuses a filter with codes Kafka does not know, alone.
    let filter = |rt: i8, pt: i8, op: i8| {
        DeleteAclsFilter::default()
            .with_resource_type_filter(rt)
            .with_resource_name_filter(Some(StrBytes::from_static_str("nothing")))
            .with_pattern_type_filter(pt)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(op)
            .with_permission_type(ANY)
    };
    let r: DeleteAclsResponse = admin.call(
        ApiKey::DeleteAcls,
        3,
        &DeleteAclsRequest::default().with_filters(vec![
            filter(42, ANY, ANY),
            filter(TOPIC, ANY, 99),
            filter(TOPIC, MATCH, ANY),
        ]),
    );
    let got: Vec<(i16, Option<String>)> =
        r.filter_results.iter().map(|f| (f.error_code, f.error_message.as_ref().map(|m| m.to_string()))).collect();
    assert_eq!(
        got,
        [
            (INVALID_REQUEST, Some("Unknown patternFilter.".to_string())),
            (INVALID_REQUEST, Some("Unknown entryFilter.".to_string())),
            (0, None)
        ]
    );
    // DescribeAcls with such codes matches nothing.
    assert!(describe_acls(&mut admin, &describe_filter(42, None, ANY)).1.is_empty());

    // A non-superuser without ALTER on the cluster may not change ACLs, nor list
    // them without DESCRIBE.
    let mut alice = plain_login(sasl, "alice", "alice-secret");
    let r = create_acls(&mut alice, vec![creation(TOPIC, "t", LITERAL, "User:alice", WRITE, ALLOW)]);
    assert_eq!(r[0].0, CLUSTER_AUTHORIZATION_FAILED);
    assert_eq!(describe_acls(&mut alice, &describe_filter(ANY, None, ANY)).0, CLUSTER_AUTHORIZATION_FAILED);

    // The UNKNOWN code (0), which Kafka's request parsing refuses, closes the
    // connection, as Kafka's does; other clients go on.
    let mut c = plain_login(sasl, "admin", "admin-secret");
    let (_, frame) = c.frame(
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(vec![creation(0, "t", LITERAL, "User:a", READ, ALLOW)]),
    );
    c.send_raw(&frame);
    assert_closed(&mut c);
    let mut c = plain_login(sasl, "admin", "admin-secret");
    let (_, frame) = c.frame(ApiKey::DescribeAcls, 3, &describe_filter(TOPIC, None, 0));
    c.send_raw(&frame);
    assert_closed(&mut c);
    let mut c = plain_login(sasl, "admin", "admin-secret");
    let bad = DeleteAclsFilter::default()
        .with_resource_type_filter(TOPIC)
        .with_pattern_type_filter(ANY)
        .with_operation(0)
        .with_permission_type(ANY);
    let (_, frame) = c.frame(ApiKey::DeleteAcls, 3, &DeleteAclsRequest::default().with_filters(vec![bad]));
    c.send_raw(&frame);
    assert_closed(&mut c);
    assert_eq!(describe_acls(&mut admin, &describe_filter(ANY, None, ANY)).1.len(), 1);

    // Without an authorizer Kafka answers SECURITY_DISABLED.
    let plain = Broker::start(1);
    let mut c = plain.connect();
    let (code, _) = describe_acls(&mut c, &describe_filter(ANY, None, ANY));
    assert_eq!(code, 54);
    let r = create_acls(&mut c, vec![creation(TOPIC, "t", LITERAL, "User:a", READ, ALLOW)]);
    assert_eq!(r[0].0, 54);
}

/// Creates `topic` with one partition; returns its id.
fn create_one_partition_topic(c: &mut Conn, topic: &'static str) -> uuid::Uuid {
    let topics = vec![kafka_protocol::messages::create_topics_request::CreatableTopic::default()
        .with_name(kafka_protocol::messages::TopicName(StrBytes::from_static_str(topic)))
        .with_num_partitions(1)
        .with_replication_factor(1)];
    let r: kafka_protocol::messages::CreateTopicsResponse = c.call(
        ApiKey::CreateTopics,
        7,
        &kafka_protocol::messages::CreateTopicsRequest::default().with_topics(topics).with_timeout_ms(5000),
    );
    assert_eq!(r.topics[0].error_code, 0);
    r.topics[0].topic_id
}

#[test]
fn prefixed_acls_deny_and_superusers_decide_what_metadata_shows() {
    let (b, _, sasl) = start_with_authorizer();
    let mut admin = plain_login(sasl, "admin", "admin-secret");
    for topic in ["orders-eu", "orders-us", "payments"] {
        create_one_partition_topic(&mut admin, topic);
    }
    let mut alice = plain_login(sasl, "alice", "alice-secret");
    // No ACL: nothing is listed, a named topic is refused.
    assert!(metadata_of(&mut alice, None).topics.is_empty());
    assert_eq!(metadata_of(&mut alice, Some(&["payments"])).topics[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    // A prefixed READ implies DESCRIBE on every topic it covers; a DENY wins.
    create_acls(
        &mut admin,
        vec![
            creation(TOPIC, "orders-", PREFIXED, "User:alice", READ, ALLOW),
            creation(TOPIC, "orders-us", LITERAL, "User:alice", DESCRIBE, DENY),
        ],
    );
    let listed: Vec<String> =
        metadata_of(&mut alice, None).topics.iter().map(|t| t.name.as_ref().unwrap().0.to_string()).collect();
    assert_eq!(listed, ["orders-eu"]);
    let m = metadata_of(&mut alice, Some(&["orders-eu", "orders-us"]));
    assert_eq!((m.topics[0].error_code, m.topics[1].error_code), (0, TOPIC_AUTHORIZATION_FAILED));
    // Auto-creation needs CREATE on the cluster or the topic.
    let auto = |c: &mut Conn| -> i16 {
        let topics = vec![kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(kafka_protocol::messages::TopicName(StrBytes::from_static_str("orders-new"))))];
        let req = MetadataRequest::default().with_topics(Some(topics)).with_allow_auto_topic_creation(true);
        let m: MetadataResponse = c.call(ApiKey::Metadata, 12, &req);
        m.topics[0].error_code
    };
    assert_eq!(auto(&mut alice), TOPIC_AUTHORIZATION_FAILED);
    create_acls(&mut admin, vec![creation(TOPIC, "orders-", PREFIXED, "User:alice", 5, ALLOW)]);
    assert_eq!(auto(&mut alice), 0);
    // The superuser sees everything.
    assert_eq!(metadata_of(&mut admin, None).topics.len(), 4);
    assert!(b.metric_sum("keel_authorization_denials_total") >= 2);
}

#[test]
fn allow_everyone_if_no_acl_found_opens_only_resources_no_acl_names() {
    // The authorizer and the setting from the YAML file this time.
    let (plain, sasl) = (free_port(), free_port());
    let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let args = ["--listeners", &listeners, "--plain-user", "admin:admin-secret", "--plain-user", "alice:alice-secret"];
    let yaml = "authorizer: standard\nallow_everyone_if_no_acl_found: true\nsuperusers: [\"User:admin\"]\n";
    let _b = Broker::start_on_port_with(plain, 1, &args, yaml);
    let mut admin = plain_login(sasl, "admin", "admin-secret");
    create_one_partition_topic(&mut admin, "open");
    let mut alice = plain_login(sasl, "alice", "alice-secret");
    assert_eq!(metadata_of(&mut alice, Some(&["open"])).topics[0].error_code, 0);
    // An ACL on the topic for someone else: it is no longer "no ACL found".
    create_acls(&mut admin, vec![creation(TOPIC, "open", LITERAL, "User:bob", READ, ALLOW)]);
    assert_eq!(metadata_of(&mut alice, Some(&["open"])).topics[0].error_code, TOPIC_AUTHORIZATION_FAILED);
}

/// SaslHandshake over TLS (SASL_SSL); `None` if the broker closes without an answer.
/// `framer` only numbers and encodes the frame.
fn tls_handshake(port: u16, certs: &Path, framer: &mut Conn, mechanism: &str) -> Option<SaslHandshakeResponse> {
    use kafka_protocol::protocol::Decodable;
    let request = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
    let (_, frame) = framer.frame(ApiKey::SaslHandshake, 1, &request);
    let answer = tls_request(port, tls_client(certs, false), &frame)?;
    // Response header v0: the correlation id, then the body.
    Some(SaslHandshakeResponse::decode(&mut Bytes::copy_from_slice(&answer[4..]), 1).unwrap())
}

fn names(h: &SaslHandshakeResponse) -> Vec<&str> {
    h.mechanisms.iter().map(|m| m.as_str()).collect()
}

#[test]
fn each_sasl_listener_offers_its_own_mechanisms_as_kafka() {
    let certs = certs();
    let (_b, p) = start_with(&certs, &["--listener-sasl-mechanisms", "SASL_SSL=SCRAM-SHA-256,SCRAM-SHA-512"]);
    // SASL_PLAINTEXT keeps the broker-wide list (in the order Kafka lists it).
    let default = ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"];
    let mut c = Broker::connect_port(p.sasl);
    let h = handshake(&mut c, "PLAIN");
    assert_eq!((h.error_code, names(&h)), (0, default.to_vec()));
    let mut c = Broker::connect_port(p.sasl);
    let h = handshake(&mut c, "OAUTHBEARER");
    assert_eq!((h.error_code, names(&h)), (UNSUPPORTED_SASL_MECHANISM, default.to_vec()));
    assert_closed(&mut c);
    // SASL_SSL offers only its own, in the refusal too (Kafka sends the listener's list
    // with UNSUPPORTED_SASL_MECHANISM, then closes).
    let mut framer = Broker::connect_port(p.plain);
    let h = tls_handshake(p.sasl_ssl, &certs, &mut framer, "PLAIN").expect("an answer");
    let own = vec!["SCRAM-SHA-512", "SCRAM-SHA-256"];
    assert_eq!((h.error_code, names(&h)), (UNSUPPORTED_SASL_MECHANISM, own.clone()));
    let h = tls_handshake(p.sasl_ssl, &certs, &mut framer, "SCRAM-SHA-512").expect("an answer");
    assert_eq!((h.error_code, names(&h)), (0, own));
    // PLAIN still logs in where it is offered.
    let mut c = Broker::connect_port(p.sasl);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    assert_eq!(authenticate(&mut c, b"\0bob\0bob-secret").unwrap().error_code, 0);
    assert!(metadata(&mut c).is_some());
    let _ = std::fs::remove_dir_all(certs);
}

/// As Kafka, a KIP-848 regex matches only the topics the member's principal may
/// DESCRIBE: alice's `orders-.*` is assigned orders-eu, not orders-us (DESCRIBE denied),
/// whose id she must not learn from her assignment; the superuser's is assigned both.
#[test]
fn a_regex_subscription_is_assigned_only_topics_its_member_may_describe() {
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId};
    let (_b, _, sasl) = start_with_authorizer();
    let mut admin = plain_login(sasl, "admin", "admin-secret");
    let eu = create_one_partition_topic(&mut admin, "orders-eu");
    let us = create_one_partition_topic(&mut admin, "orders-us");
    create_acls(
        &mut admin,
        vec![
            creation(TOPIC, "orders-", PREFIXED, "User:alice", READ, ALLOW),
            creation(TOPIC, "orders-us", LITERAL, "User:alice", DESCRIBE, DENY),
            creation(GROUP, "regex-", PREFIXED, "User:alice", READ, ALLOW),
        ],
    );
    let mut alice = plain_login(sasl, "alice", "alice-secret");
    let join = |c: &mut Conn, group: &'static str| -> Vec<uuid::Uuid> {
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str(group)))
            .with_member_id(StrBytes::from_string(uuid::Uuid::new_v4().to_string()))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(60_000)
            .with_subscribed_topic_regex(Some(StrBytes::from_static_str("orders-.*")))
            .with_topic_partitions(Some(Vec::new()));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r: ConsumerGroupHeartbeatResponse = c.call(ApiKey::ConsumerGroupHeartbeat, 1, &req);
            // The coordinator may still be loading.
            if r.error_code == 14 || r.error_code == 15 {
                assert!(Instant::now() < deadline, "no coordinator");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            let mut ids: Vec<uuid::Uuid> =
                r.assignment.expect("an assignment").topic_partitions.iter().map(|t| t.topic_id).collect();
            ids.sort();
            return ids;
        }
    };
    assert_eq!(join(&mut alice, "regex-alice"), vec![eu]);
    let mut both = vec![eu, us];
    both.sort();
    assert_eq!(join(&mut admin, "regex-admin"), both);
}
