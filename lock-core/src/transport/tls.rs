//! TLS settings for `rediss://` URLs (feature `tls`): which CA to trust,
//! the client certificate for mutual TLS, and the loudly named switch that
//! turns certificate checks off.
//!
//! With the `tls` feature, connections use rustls with the `ring` crypto
//! provider, which is installed as the process's default provider when the
//! application has not installed one (an application that installed its own
//! keeps it). Server certificates are checked against the platform's root
//! certificates (`/etc/ssl/certs`, or the files `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` name), or against the CA given with
//! [`ClientBuilder::tls_ca_file`](crate::ClientBuilder::tls_ca_file) /
//! [`tls_ca_pem`](crate::ClientBuilder::tls_ca_pem), which then replaces the
//! platform's roots.

#[cfg(feature = "tls")]
use crate::config::PemSource;
use crate::config::TlsConfig;
use crate::error::{Error, Result};

/// The redis-rs client for `info`, with the TLS settings applied.
#[cfg(feature = "tls")]
pub(crate) fn redis_client(
    mut info: redis::ConnectionInfo,
    tls: &TlsConfig,
) -> Result<redis::Client> {
    use redis::ConnectionAddr;

    let redis::ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone() else {
        return redis::Client::open(info).map_err(invalid_url);
    };
    install_crypto_provider();
    if tls.danger_accept_invalid_certificates {
        tracing::warn!(host = %host, port, "TLS certificate checks are OFF (danger_accept_invalid_certificates): anyone on the path can read and change lock traffic");
        info = info.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: true,
            tls_params: None,
        });
    }
    match certificates(tls)? {
        None => redis::Client::open(info).map_err(invalid_url),
        Some(certs) => redis::Client::build_with_tls(info, certs)
            .map_err(|e| Error::InvalidArgument(format!("TLS settings: {e}"))),
    }
}

/// The CA and client certificate the builder was given (files read and
/// checked here), or `None` for the platform's roots and no client
/// certificate.
#[cfg(feature = "tls")]
pub(crate) fn certificates(tls: &TlsConfig) -> Result<Option<redis::TlsCertificates>> {
    if tls.ca.is_none() && tls.client_cert.is_none() {
        return Ok(None);
    }
    let root_cert = match &tls.ca {
        Some(ca) => {
            let pem = read(ca, "tls_ca")?;
            check_certificates(&pem).map_err(|why| bad_pem("tls_ca", ca, &why))?;
            Some(pem)
        }
        None => None,
    };
    let client_tls = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let cert_pem = read(cert, "tls_client_cert")?;
            check_certificates(&cert_pem).map_err(|why| bad_pem("tls_client_cert", cert, &why))?;
            let key_pem = read(key, "tls_client_key")?;
            check_key(&key_pem).map_err(|why| bad_pem("tls_client_key", key, &why))?;
            Some(redis::ClientTlsConfig {
                client_cert: cert_pem,
                client_key: key_pem,
            })
        }
        _ => None,
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// Without the `tls` feature: plain connections only (`rediss://` was
/// refused when the configuration was validated).
#[cfg(not(feature = "tls"))]
pub(crate) fn redis_client(info: redis::ConnectionInfo, _tls: &TlsConfig) -> Result<redis::Client> {
    redis::Client::open(info).map_err(invalid_url)
}

fn invalid_url(e: redis::RedisError) -> Error {
    Error::InvalidArgument(format!("redis url: {e}"))
}

#[cfg(feature = "tls")]
fn read(source: &PemSource, what: &str) -> Result<Vec<u8>> {
    match source {
        PemSource::Bytes(b) => Ok(b.clone()),
        PemSource::File(path) => std::fs::read(path)
            .map_err(|e| Error::InvalidArgument(format!("{what} file `{}`: {e}", path.display()))),
    }
}

/// At least one certificate, and every PEM block well-formed.
#[cfg(feature = "tls")]
fn check_certificates(pem: &[u8]) -> std::result::Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    let mut count = 0;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| e.to_string())?;
        count += 1;
    }
    if count == 0 {
        return Err("no CERTIFICATE block found".into());
    }
    Ok(())
}

/// One private key (PKCS#8, PKCS#1 or SEC1). The error says what is wrong
/// with the PEM, never what the key holds.
#[cfg(feature = "tls")]
fn check_key(pem: &[u8]) -> std::result::Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::PrivateKeyDer::from_pem_slice(pem)
        .map(|_| ())
        .map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no PRIVATE KEY block found".into(),
            other => other.to_string(),
        })
}

#[cfg(feature = "tls")]
fn bad_pem(what: &str, source: &PemSource, why: &str) -> Error {
    let whence = match source {
        PemSource::Bytes(_) => String::from("PEM"),
        PemSource::File(path) => format!("file `{}`", path.display()),
    };
    Error::InvalidArgument(format!("{what} {whence}: {why}"))
}

/// Makes rustls usable: installs the `ring` provider as the process's
/// default unless one is installed already (by the application, or by an
/// earlier client). Never panics.
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A failed TLS connect made readable: the rustls cause (`invalid peer
/// certificate: UnknownIssuer`, …) with what usually fixes it. Other errors
/// pass unchanged.
///
/// The result is a configuration error, not an I/O error: a certificate
/// the client does not trust stays untrusted, so retrying (as lock-core
/// does for a dropped connection) would only turn the cause into a
/// time-out.
#[cfg(feature = "tls")]
pub(crate) fn explain(err: redis::RedisError) -> redis::RedisError {
    let Some(cause) = rustls_cause(&err) else {
        return err;
    };
    let hint = hint(cause);
    let text = if hint.is_empty() {
        cause.to_string()
    } else {
        format!("{cause} ({hint})")
    };
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "TLS handshake failed",
        text,
    ))
}

/// Without the `tls` feature there is no TLS error to explain.
#[cfg(not(feature = "tls"))]
pub(crate) fn explain(err: redis::RedisError) -> redis::RedisError {
    err
}

/// The rustls error inside `err` (directly, or inside an I/O error).
#[cfg(feature = "tls")]
fn rustls_cause(err: &redis::RedisError) -> Option<&rustls::Error> {
    use std::error::Error as StdError;
    type Shared = std::sync::Arc<dyn StdError + Send + Sync>;
    // redis-rs keeps the I/O error in an `Arc` (the source is the `Arc`),
    // and `io::Error::source()` skips the error it wraps: look inside both.
    let mut next: Option<&(dyn StdError + 'static)> = err.source();
    while let Some(mut e) = next {
        if let Some(shared) = e.downcast_ref::<Shared>() {
            e = &**shared;
        }
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(r) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(r);
        }
        next = e.source();
    }
    None
}

#[cfg(feature = "tls")]
fn hint(cause: &rustls::Error) -> &'static str {
    use rustls::{AlertDescription, CertificateError};
    match cause {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the server's certificate is not signed by a CA this client trusts: give the client \
             the CA with ClientBuilder::tls_ca_file / tls_ca_pem, or add it to the platform's \
             roots (SSL_CERT_FILE)"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the server's certificate does not name the host of the URL: connect by a name the certificate holds",
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired",
        rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure,
        ) => "does the server require a client certificate? see ClientBuilder::tls_client_cert_files",
        rustls::Error::AlertReceived(
            AlertDescription::UnknownCA | AlertDescription::BadCertificate,
        ) => "the server does not accept this client certificate",
        _ => "",
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    #[test]
    fn a_ca_without_certificates_is_refused_when_built() {
        use redis::IntoConnectionInfo;
        let info = "rediss://127.0.0.1:1"
            .into_connection_info()
            .expect("static url");
        let tls = TlsConfig {
            ca: Some(PemSource::Bytes(b"not pem".to_vec())),
            ..TlsConfig::default()
        };
        let err = redis_client(info.clone(), &tls).expect_err("no certificate");
        assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
        let tls = TlsConfig {
            ca: Some(PemSource::File("/no/such/ca.pem".into())),
            ..TlsConfig::default()
        };
        let err = redis_client(info, &tls).expect_err("no file");
        assert!(err.to_string().contains("/no/such/ca.pem"), "{err}");
    }
}
