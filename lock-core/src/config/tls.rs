//! TLS settings of a client, as data: which CA to trust, the client
//! certificate for mutual TLS, and the loudly named switch that turns
//! certificate checks off. The transport layer's `tls.rs` turns them into
//! rustls settings (feature `tls`).

use std::path::PathBuf;

use crate::error::{Error, Result};

/// PEM text given to the builder: bytes, or a file read when the client is
/// built. Its `Debug` output shows a file's path but never the bytes.
///
/// ```
/// let pem = lock_core::PemSource::File("/etc/redis/ca.pem".into());
/// assert_eq!(format!("{pem:?}"), "File(\"/etc/redis/ca.pem\")");
/// let pem = lock_core::PemSource::Bytes(b"-----BEGIN PRIVATE KEY-----...".to_vec());
/// assert_eq!(format!("{pem:?}"), "Bytes(<30 bytes>)");
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PemSource {
    /// PEM text in memory.
    Bytes(Vec<u8>),
    /// A PEM file, read by [`ClientBuilder::build`](crate::ClientBuilder::build).
    File(PathBuf),
}

impl std::fmt::Debug for PemSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PemSource::Bytes(b) => write!(f, "Bytes(<{} bytes>)", b.len()),
            PemSource::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// TLS settings of a client; they apply to `rediss://` URLs only (feature
/// `tls`). The default trusts the platform's root certificates, sends no
/// client certificate and checks the server's certificate and host name.
///
/// ```
/// let tls = lock_core::TlsConfig::default();
/// assert!(tls.ca.is_none() && tls.client_cert.is_none());
/// assert!(!tls.danger_accept_invalid_certificates);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// CA certificates (PEM, one or more) that the server's certificate must
    /// chain to, instead of the platform's roots. Default none: the
    /// platform's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` honoured).
    pub ca: Option<PemSource>,
    /// Client certificate chain (PEM) for servers that require mutual TLS
    /// (`tls-auth-clients yes`); needs [`client_key`](Self::client_key).
    /// Default none.
    pub client_cert: Option<PemSource>,
    /// The client certificate's private key (PEM). Never shown by `Debug`.
    /// Default none.
    pub client_key: Option<PemSource>,
    /// Accept any server certificate, for any host name: no protection
    /// against a man in the middle. Default false; while false, a URL with
    /// redis-rs's `#insecure` fragment is refused.
    pub danger_accept_invalid_certificates: bool,
}

impl TlsConfig {
    /// Whether any setting differs from the default.
    pub(crate) fn is_set(&self) -> bool {
        *self != TlsConfig::default()
    }

    /// Checks what can be checked without reading files.
    pub(crate) fn validate(&self, url_is_tls: bool) -> Result<()> {
        if self.is_set() && !url_is_tls {
            return Err(Error::InvalidArgument(
                "TLS settings (tls_ca_*, tls_client_cert_*, danger_accept_invalid_certificates) \
                 apply to rediss:// URLs only"
                    .into(),
            ));
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err(Error::InvalidArgument(
                "a TLS client certificate needs its key, and a key its certificate".into(),
            ));
        }
        Ok(())
    }
}

/// The message for a `rediss://` URL in a build without the `tls` feature.
pub(crate) const FEATURE_MISSING: &str = "rediss:// URLs need lock-core's `tls` feature \
     (lock-core = { version = \"0.1\", features = [\"tls\"] } in Cargo.toml)";

/// The message for redis-rs's `#insecure` fragment without the builder's consent.
pub(crate) const INSECURE_REFUSED: &str = "the `#insecure` URL fragment turns off every check of \
     the server's certificate; lock-core refuses it unless \
     ClientBuilder::danger_accept_invalid_certificates(true) is set";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_pem_bytes() {
        let tls = TlsConfig {
            ca: Some(PemSource::File("/etc/ca.pem".into())),
            client_cert: Some(PemSource::Bytes(b"CERT-BYTES".to_vec())),
            client_key: Some(PemSource::Bytes(b"SECRET-KEY-BYTES".to_vec())),
            danger_accept_invalid_certificates: false,
        };
        let debug = format!("{tls:?}");
        assert!(!debug.contains("SECRET-KEY-BYTES"), "{debug}");
        assert!(!debug.contains("CERT-BYTES"), "{debug}");
        assert!(debug.contains("/etc/ca.pem"), "{debug}");
    }

    #[test]
    fn settings_need_a_tls_url_and_come_in_pairs() {
        assert!(TlsConfig::default().validate(false).is_ok());
        let ca = TlsConfig {
            ca: Some(PemSource::Bytes(Vec::new())),
            ..TlsConfig::default()
        };
        assert!(ca.validate(true).is_ok());
        let err = ca.validate(false).expect_err("plain url");
        assert!(err.to_string().contains("rediss://"), "{err}");
        let half = TlsConfig {
            client_cert: Some(PemSource::Bytes(Vec::new())),
            ..TlsConfig::default()
        };
        assert!(half.validate(true).is_err());
    }
}
