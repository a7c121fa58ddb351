//! TLS for the SSL and SASL_SSL listeners, with rustls: the server certificate and key
//! (`tls_cert`, `tls_key`) and, for mutual TLS, the CA that signs client certificates
//! (`tls_ca`; the SSL listener then requires a client certificate, whose subject is
//! the principal; SASL_SSL takes its principal from SASL and asks for none).
//!
//! Certificates are reloaded without a restart ([`Reloading`], also used by the
//! node-to-node transport): each new handshake looks at the files' modification times
//! (three `stat`s) and reads them again if any changed. A
//! reload that fails (a half-written file) keeps the previous configuration and logs
//! why; connections already open keep the certificate they started with.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

/// Where the certificate files are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
}

/// Configurations built from certificate files, built again at the first use after
/// a file changed.
pub struct Reloading<T> {
    files: TlsFiles,
    build: fn(&TlsFiles) -> Result<T, String>,
    loaded: RefCell<(Vec<Option<SystemTime>>, Rc<T>)>,
}

impl<T> Reloading<T> {
    /// Builds once; an error stops the broker at start.
    pub fn new(files: TlsFiles, build: fn(&TlsFiles) -> Result<T, String>) -> Result<Reloading<T>, String> {
        let loaded = (stamp(&files), Rc::new(build(&files)?));
        Ok(Reloading { files, build, loaded: RefCell::new(loaded) })
    }

    /// The configurations for a new handshake, built again first if a file changed.
    pub fn current(&self) -> Rc<T> {
        let stamp = stamp(&self.files);
        if stamp != self.loaded.borrow().0 {
            match (self.build)(&self.files) {
                Ok(fresh) => {
                    tracing::info!(cert = %self.files.cert.display(), "TLS certificates reloaded");
                    *self.loaded.borrow_mut() = (stamp, Rc::new(fresh));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TLS certificates changed but cannot be read; keeping the previous ones");
                    // Do not try again until the files change once more.
                    self.loaded.borrow_mut().0 = stamp;
                }
            }
        }
        self.loaded.borrow().1.clone()
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }
}

/// A shard's TLS configurations for the Kafka listeners, read again when the files
/// change.
pub struct TlsSource(Reloading<Loaded>);

struct Loaded {
    /// For SASL_SSL (and SSL without a CA): no client certificate.
    server_only: Arc<ServerConfig>,
    /// For SSL with a CA: a client certificate signed by it is required.
    mutual: Option<Arc<ServerConfig>>,
}

impl TlsSource {
    /// Reads the files once; an error stops the broker at start.
    pub fn new(files: TlsFiles) -> Result<TlsSource, String> {
        Ok(TlsSource(Reloading::new(files, load)?))
    }

    /// The configuration for a new handshake, reloaded first if a file changed.
    pub fn config(&self, mutual: bool) -> Arc<ServerConfig> {
        let loaded = self.0.current();
        match (&loaded.mutual, mutual) {
            (Some(m), true) => m.clone(),
            _ => loaded.server_only.clone(),
        }
    }

    pub fn mutual_available(&self) -> bool {
        self.0.files().ca.is_some()
    }
}

fn stamp(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    let paths = [Some(&files.cert), Some(&files.key), files.ca.as_ref()];
    paths.iter().map(|p| p.and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())).collect()
}

/// The crypto provider of every TLS configuration: ring.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The private key in a PEM file.
pub fn read_key(path: &Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| format!("reading {}: {e}", path.display()))?
        .ok_or_else(|| format!("{} holds no private key", path.display()))
}

/// The certificates of a PEM file as a root store (a CA file).
pub fn read_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(roots)
}

fn load(files: &TlsFiles) -> Result<Loaded, String> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let server_only = builder
        .clone()
        .with_no_client_auth()
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| format!("{}: {e}", files.cert.display()))?;
    let mutual = match &files.ca {
        None => None,
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(read_roots(ca)?), provider())
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            let config = builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)
                .map_err(|e| format!("{}: {e}", files.cert.display()))?;
            Some(Arc::new(config))
        }
    };
    Ok(Loaded { server_only: Arc::new(server_only), mutual })
}

/// The certificates in a PEM file.
pub fn read_certs(path: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", path.display()));
    }
    Ok(certs)
}
