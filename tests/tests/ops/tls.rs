//! `rediss://` end to end (lock-core's `tls` feature, which lock-tests
//! enables): a redis-server with a TLS listener and certificates made here
//! by a private CA. A CA given to the builder is trusted; a server signed by
//! another CA, or whose certificate names another host, is refused at once
//! with an error that says which; `#insecure` needs the danger option; the
//! platform's roots honour `SSL_CERT_FILE`; mutual TLS works with a client
//! certificate and says what is missing without one. No TLS connect panics
//! (the crypto provider is installed by lock-core).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{self, failing_acquire, within};
use lock_core::{LockClient, Result};
use lock_tests::RedisServer;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

/// A private CA and the files made with it, in a temp dir.
struct Pki {
    dir: TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let ca = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-pki-")
            .tempdir()
            .expect("temp dir");
        let pki = Pki { dir, ca };
        pki.write("ca.crt", &pki.ca.pem());
        pki
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn ca_path(&self) -> PathBuf {
        self.path("ca.crt")
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let path = self.path(file);
        std::fs::write(&path, text).expect("write pem");
        path
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this
    /// CA; writes `<stem>.crt` and `<stem>.key` and returns their paths.
    fn issue(&self, stem: &str, names: &[&str], client: bool) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, stem);
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.ca).expect("sign");
        (
            self.write(&format!("{stem}.crt"), &cert.pem()),
            self.write(&format!("{stem}.key"), &key.serialize_pem()),
        )
    }
}

/// A redis-server with a TLS listener whose certificate `pki` signed for
/// `names`; `auth_clients` is `--tls-auth-clients`.
fn tls_server(pki: &Pki, names: &[&str], auth_clients: &str) -> RedisServer {
    let (cert, key) = pki.issue("server", names, false);
    RedisServer::builder()
        .tls(cert, key, pki.ca_path())
        .tls_auth_clients(auth_clients)
        .start()
        .unwrap_or_else(|e| panic!("cannot start a TLS redis-server: {e}"))
}

fn tls_url(server: &RedisServer, host: &str) -> String {
    let port = server.tls_port().expect("a TLS listener");
    format!("rediss://{host}:{port}")
}

/// Connects, takes a lock, releases it; returns how long it took.
async fn round_trip(client: &LockClient) -> Result<Duration> {
    let started = Instant::now();
    client.ping().await?;
    let guard = client.lock("tls")?.acquire().await?;
    guard.release().await?;
    Ok(started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_given_to_the_builder_is_trusted() {
    let pki = Pki::new("private");
    let server = tls_server(&pki, &["localhost", "127.0.0.1"], "no");
    let client = LockClient::builder(tls_url(&server, "localhost"))
        .tls_ca_file(pki.ca_path())
        .build()
        .expect("client");
    let took = round_trip(&client).await.expect("TLS round trip");
    eprintln!("TLS connect + acquire + release: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");

    // The CA as PEM bytes, by IP address; a waiter woken over the TLS
    // pub/sub connection.
    let pem = std::fs::read(pki.ca_path()).expect("ca pem");
    let other = LockClient::builder(tls_url(&server, "127.0.0.1"))
        .tls_ca_pem(pem)
        .build()
        .expect("client");
    let held = client
        .lock("shared")
        .expect("name")
        .acquire()
        .await
        .expect("hold");
    let lock = other.lock("shared").expect("name");
    let waiter = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(5), "waiter", waiter)
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    let woke = released.elapsed();
    eprintln!("waiter woken over TLS pub/sub after {woke:?}");
    assert!(woke < Duration::from_millis(500), "{woke:?}");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_server_signed_by_another_ca_is_refused_at_once_and_says_so() {
    let pki = Pki::new("server's");
    let stranger = Pki::new("stranger");
    let server = tls_server(&pki, &["localhost", "127.0.0.1"], "no");
    // With the wrong CA given...
    let (err, took) = failing_acquire(
        LockClient::builder(tls_url(&server, "localhost")).tls_ca_file(stranger.ca_path()),
    )
    .await;
    eprintln!("wrong CA: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let text = err.to_string();
    assert!(
        text.contains("invalid peer certificate: UnknownIssuer"),
        "{text}"
    );
    assert!(text.contains("tls_ca_file"), "the fix is named: {text}");
    assert!(!err.is_invalid_input() && err.is_redis(), "{err:?}");

    // ...and with the platform's roots, which do not hold the private CA.
    let (err, took) = failing_acquire(LockClient::builder(tls_url(&server, "localhost"))).await;
    eprintln!("platform roots: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused_at_once_and_says_so() {
    let pki = Pki::new("private");
    let server = tls_server(&pki, &["redis.internal.example"], "no");
    let (err, took) = failing_acquire(
        LockClient::builder(tls_url(&server, "127.0.0.1")).tls_ca_file(pki.ca_path()),
    )
    .await;
    eprintln!("wrong host name: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let text = err.to_string();
    assert!(
        text.contains("certificate not valid for name \"127.0.0.1\""),
        "{text}"
    );
    assert!(text.contains("redis.internal.example"), "{text}");
    assert!(!text.contains("UnknownIssuer"), "a distinct error: {text}");
}

#[tokio::test]
async fn the_insecure_fragment_is_refused_without_the_danger_option() {
    let pki = Pki::new("unknown");
    let server = tls_server(&pki, &["redis.internal.example"], "no");
    let url = format!("{}/#insecure", tls_url(&server, "127.0.0.1"));
    let err = LockClient::builder(url.clone())
        .build()
        .expect_err("refused");
    eprintln!("#insecure: {err}");
    assert!(err.is_invalid_input(), "{err:?}");
    assert!(
        err.to_string()
            .contains("danger_accept_invalid_certificates(true)"),
        "{err}"
    );
    // With the option, the fragment is accepted, and so is any certificate.
    let client = LockClient::builder(url)
        .danger_accept_invalid_certificates(true)
        .build()
        .expect("client");
    round_trip(&client).await.expect("insecure round trip");
    // The option alone turns the checks off too.
    let client = LockClient::builder(tls_url(&server, "127.0.0.1"))
        .danger_accept_invalid_certificates(true)
        .build()
        .expect("client");
    round_trip(&client).await.expect("insecure round trip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_works_with_a_client_certificate_and_says_what_is_missing_without() {
    let pki = Pki::new("private");
    let server = tls_server(&pki, &["localhost"], "yes");
    let (cert, key) = pki.issue("client", &["lock-client"], true);
    let url = tls_url(&server, "localhost");
    let client = LockClient::builder(url.clone())
        .tls_ca_file(pki.ca_path())
        .tls_client_cert_files(&cert, &key)
        .build()
        .expect("client");
    let took = round_trip(&client).await.expect("mutual TLS round trip");
    eprintln!("mutual TLS round trip: {took:?}");

    let key_pem = std::fs::read_to_string(&key).expect("key");
    let with_pem = LockClient::builder(url.clone())
        .tls_ca_file(pki.ca_path())
        .tls_client_cert_pem(std::fs::read(&cert).expect("cert"), key_pem.clone())
        .build()
        .expect("client");
    round_trip(&with_pem)
        .await
        .expect("mutual TLS with PEM bytes");
    // The key is in no Debug output.
    let secret = key_pem
        .lines()
        .nth(1)
        .expect("a base64 line of the key")
        .to_string();
    for debug in [format!("{with_pem:?}"), format!("{:?}", with_pem.config())] {
        assert!(!debug.contains(&secret), "{debug}");
    }

    let (err, took) = failing_acquire(LockClient::builder(url).tls_ca_file(pki.ca_path())).await;
    eprintln!("no client certificate: {err} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let text = err.to_string();
    assert!(text.contains("TLS handshake failed"), "{text}");
    assert!(text.contains("client certificate"), "{text}");
}

#[tokio::test]
async fn bad_certificate_files_are_refused_when_the_client_is_built() {
    let pki = Pki::new("private");
    let url = "rediss://localhost:6380";
    let missing = pki.path("missing.crt");
    let err = LockClient::builder(url)
        .tls_ca_file(&missing)
        .build()
        .expect_err("no file");
    assert!(err.is_invalid_input(), "{err:?}");
    assert!(err.to_string().contains("missing.crt"), "{err}");
    let not_pem = pki.write("not.pem", "hello");
    let err = LockClient::builder(url)
        .tls_ca_file(&not_pem)
        .build()
        .expect_err("no certificate");
    assert!(err.to_string().contains("no CERTIFICATE block"), "{err}");
    let (cert, _) = pki.issue("client", &["c"], true);
    let err = LockClient::builder(url)
        .tls_client_cert_files(&cert, &cert)
        .build()
        .expect_err("a certificate is no key");
    assert!(err.to_string().contains("no PRIVATE KEY block"), "{err}");
    // TLS settings on a plain URL are a mistake, not silently ignored.
    let err = LockClient::builder("redis://localhost:6379")
        .tls_ca_file(pki.ca_path())
        .build()
        .expect_err("plain url");
    assert!(err.to_string().contains("rediss://"), "{err}");
}

#[test]
fn the_platform_roots_honour_ssl_cert_file() {
    let pki = Pki::new("platform");
    let server = tls_server(&pki, &["localhost"], "no");
    let run = |ssl_cert_file: Option<&Path>| {
        let mut envs = vec![("LOCK_TESTS_TLS_URL", tls_url(&server, "localhost"))];
        if let Some(path) = ssl_cert_file {
            envs.push(("SSL_CERT_FILE", path.display().to_string()));
        }
        let child = support::spawn_child(module_path!(), &envs, Stdio::null());
        let out = child.wait_with_output().expect("child");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let trusted = run(Some(&pki.ca_path()));
    assert!(trusted.contains("child: connected"), "{trusted}");
    let untrusted = run(None);
    assert!(
        untrusted.contains("child: error") && untrusted.contains("UnknownIssuer"),
        "{untrusted}"
    );
}

/// Entry point of the child process of `the_platform_roots_honour_ssl_cert_file`:
/// a fresh process (no crypto provider installed yet) that connects to
/// `$LOCK_TESTS_TLS_URL` with the platform's roots.
#[test]
#[ignore = "run as a child process by the_platform_roots_honour_ssl_cert_file"]
fn child_process() {
    let Ok(url) = std::env::var("LOCK_TESTS_TLS_URL") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let outcome = runtime.block_on(async {
        let client = LockClient::builder(url)
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        round_trip(&client).await
    });
    match outcome {
        Ok(_) => println!("child: connected"),
        Err(e) => println!("child: error: {e}"),
    }
}
