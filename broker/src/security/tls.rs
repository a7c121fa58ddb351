//! TLS for the SSL and SASL_SSL listeners, with rustls: the server certificate and key
//! (`tls_cert`, `tls_key`) and, for mutual TLS, the CA that signs client certificates
//! (`tls_ca`; the SSL listener then requires a client certificate, whose subject is
//! the principal; SASL_SSL takes its principal from SASL and asks for none).
//!
//! Certificates are reloaded without a restart: each new handshake looks at the
//! files' modification times (three `stat`s) and reads them again if any changed. A
//! reload that fails (a half-written file) keeps the previous configuration and logs
//! why; connections already open keep the certificate they started with.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
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

/// A shard's TLS configurations, read again when the files change.
pub struct TlsSource {
    files: TlsFiles,
    loaded: RefCell<Loaded>,
}

struct Loaded {
    stamp: Vec<Option<SystemTime>>,
    /// For SASL_SSL (and SSL without a CA): no client certificate.
    server_only: Arc<ServerConfig>,
    /// For SSL with a CA: a client certificate signed by it is required.
    mutual: Option<Arc<ServerConfig>>,
}

impl TlsSource {
    /// Reads the files once; an error stops the broker at start.
    pub fn new(files: TlsFiles) -> Result<TlsSource, String> {
        let loaded = load(&files)?;
        Ok(TlsSource { files, loaded: RefCell::new(loaded) })
    }

    /// The configuration for a new handshake, reloaded first if a file changed.
    pub fn config(&self, mutual: bool) -> Arc<ServerConfig> {
        let stamp = stamp(&self.files);
        if stamp != self.loaded.borrow().stamp {
            match load(&self.files) {
                Ok(fresh) => {
                    tracing::info!(cert = %self.files.cert.display(), "TLS certificates reloaded");
                    *self.loaded.borrow_mut() = fresh;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TLS certificates changed but cannot be read; keeping the previous ones");
                    // Do not try again until the files change once more.
                    self.loaded.borrow_mut().stamp = stamp;
                }
            }
        }
        let loaded = self.loaded.borrow();
        match (&loaded.mutual, mutual) {
            (Some(m), true) => m.clone(),
            _ => loaded.server_only.clone(),
        }
    }

    pub fn mutual_available(&self) -> bool {
        self.files.ca.is_some()
    }
}

fn stamp(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    let paths = [Some(&files.cert), Some(&files.key), files.ca.as_ref()];
    paths.iter().map(|p| p.and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())).collect()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load(files: &TlsFiles) -> Result<Loaded, String> {
    let stamp = stamp(files);
    let certs = read_certs(&files.cert)?;
    let key = {
        let pem = std::fs::read(&files.key).map_err(|e| format!("reading {}: {e}", files.key.display()))?;
        rustls_pemfile::private_key(&mut pem.as_slice())
            .map_err(|e| format!("reading {}: {e}", files.key.display()))?
            .ok_or_else(|| format!("{} holds no private key", files.key.display()))?
    };
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
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots.add(cert).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            let config = builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)
                .map_err(|e| format!("{}: {e}", files.cert.display()))?;
            Some(Arc::new(config))
        }
    };
    Ok(Loaded { stamp, server_only: Arc::new(server_only), mutual })
}

fn read_certs(path: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", path.display()));
    }
    Ok(certs)
}
