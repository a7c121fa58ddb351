//! Mutual TLS on the node-to-node port (`--rpc-tls-cert`, `--rpc-tls-key`,
//! `--rpc-tls-ca`). Every connection, Raft's and control messages' alike, is TLS with
//! a certificate on both sides signed by the CA, and each names the node it speaks
//! for: `keel-node-<id>` as its subject's common name or as a DNS subject alternative
//! name. A node connecting to node 3 accepts only a certificate naming node 3; a node
//! accepting a connection takes its frames only while they come from the node its
//! peer's certificate names (`Identity`), so a certificate for node 2 cannot speak as
//! node 3. Certificates are read again when their files change, as the Kafka
//! listeners' are; a connection keeps the ones it started with.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use futures_rustls::{client, server, TlsAcceptor, TlsConnector};
use glommio::net::TcpStream;
use keel_raft::NodeId;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme};

use crate::security::principal::subject_of_certificate;
use crate::security::tls::{provider, read_certs, read_key, read_roots, Reloading, TlsFiles};

/// How long a TLS handshake on the node-to-node port may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The name a node's certificate gives it.
pub fn node_name(node: NodeId) -> String {
    format!("keel-node-{node}")
}

/// A shard's TLS for the node-to-node port.
pub struct RpcTls(Reloading<Configs>);

impl std::fmt::Debug for RpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RpcTls({})", self.0.files().cert.display())
    }
}

struct Configs {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl RpcTls {
    /// Reads the files; an error stops the broker at start.
    pub fn new(cert: std::path::PathBuf, key: std::path::PathBuf, ca: std::path::PathBuf) -> Result<RpcTls, String> {
        Ok(RpcTls(Reloading::new(TlsFiles { cert, key, ca: Some(ca) }, build)?))
    }

    /// The server side of an accepted connection: the handshake, then the peer's
    /// certificate (one signed by the CA is required).
    pub async fn accept(&self, stream: TcpStream) -> Result<(server::TlsStream<TcpStream>, Identity), String> {
        let acceptor = TlsAcceptor::from(self.0.current().server.clone());
        let tls = within(acceptor.accept(stream)).await?;
        let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).cloned();
        let cert = cert.ok_or("the peer sent no certificate")?.into_owned();
        Ok((tls, Identity { cert, node: Cell::new(None) }))
    }

    /// The client side of a connection to node `to`, whose certificate must name it.
    pub async fn connect(&self, stream: TcpStream, to: NodeId) -> Result<client::TlsStream<TcpStream>, String> {
        let connector = TlsConnector::from(self.0.current().client.clone());
        let name = ServerName::try_from(node_name(to)).map_err(|e| e.to_string())?;
        within(connector.connect(name, stream)).await
    }
}

async fn within<T>(handshake: impl std::future::Future<Output = std::io::Result<T>>) -> Result<T, String> {
    let timed_out = async {
        glommio::timer::sleep(HANDSHAKE_TIMEOUT).await;
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"))
    };
    futures_lite::future::or(handshake, timed_out).await.map_err(|e| format!("TLS handshake: {e}"))
}

/// Who an accepted connection's certificate speaks for: the node its first frame
/// claims, if the certificate names that node, and then only that node.
pub struct Identity {
    cert: CertificateDer<'static>,
    node: Cell<Option<NodeId>>,
}

impl Identity {
    /// Whether a frame from `node` may be taken on this connection.
    pub fn admits(&self, node: NodeId) -> bool {
        match self.node.get() {
            Some(known) => known == node,
            None if names_node(&self.cert, node) => {
                self.node.set(Some(node));
                true
            }
            None => false,
        }
    }
}

/// Whether `cert` names `node`, by its common name or a DNS alternative name.
pub fn names_node(cert: &CertificateDer<'_>, node: NodeId) -> bool {
    let name = node_name(node);
    common_name_is(cert, &name) || dns_name_is(cert, &name)
}

fn common_name_is(cert: &CertificateDer<'_>, name: &str) -> bool {
    // RFC 2253, most specific part first; a node name holds no character to escape.
    subject_of_certificate(cert.as_ref())
        .is_some_and(|s| s.split(',').any(|part| part.strip_prefix("CN=") == Some(name)))
}

fn dns_name_is(cert: &CertificateDer<'_>, name: &str) -> bool {
    let (Ok(cert), Ok(name)) = (webpki::EndEntityCert::try_from(cert), ServerName::try_from(name)) else {
        return false;
    };
    cert.verify_is_valid_for_subject_name(&name).is_ok()
}

fn build(files: &TlsFiles) -> Result<Configs, String> {
    let ca = files.ca.as_ref().expect("the node-to-node port's TLS always has a CA");
    let roots = Arc::new(read_roots(ca)?);
    let (certs, key) = (read_certs(&files.cert)?, read_key(&files.key)?);
    let client_verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| format!("{}: {e}", ca.display()))?;
    let server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| format!("{}: {e}", files.cert.display()))?;
    let chain = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("{}: {e}", ca.display()))?;
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NodeVerifier { chain }))
        .with_client_auth_cert(certs, key)
        .map_err(|e| format!("{}: {e}", files.cert.display()))?;
    Ok(Configs { server: Arc::new(server), client: Arc::new(client) })
}

/// Checks a node's certificate as WebPKI checks a server's (signed by the CA, in its
/// validity period, for server use), and that it names the node asked for, as a DNS
/// alternative name or, failing that, as its common name.
#[derive(Debug)]
struct NodeVerifier {
    chain: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            // WebPKI checks the name only once the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => match server_name {
                ServerName::DnsName(name) if common_name_is(end_entity, name.as_ref()) => {
                    Ok(ServerCertVerified::assertion())
                }
                _ => Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)),
            },
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}
