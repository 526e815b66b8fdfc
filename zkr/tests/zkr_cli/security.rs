//! `zkr` over TLS, mutual TLS and SASL (issue 42): `--tls-ca`, `--tls-cert`, `--tls-key` (and
//! `$ZK_TLS_*`), `--sasl-digest-file`, with `--acl creator` naming the certificate's or the
//! login's identity; bad files refused before connecting (exit 2), a bad server certificate
//! failing within `--connect-timeout` (exit 69). Real binary, real secured servers; each test
//! starts its own server.

use zookeeper_recipes_rigs::fixtures as common;

use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use common::zkr::{EventsOn, Zkr, zkr};
use common::{BOUND, zookeeper};
use nix::sys::signal::Signal;
use zookeeper_recipes::{Session, TlsConfig};
use zookeeper_recipes_testing::{
    self as testing, ClientAuth, ServerCertificate, TestingServer, TestingServerBuilder,
};

use crate::auth::write_file;

/// `zkr ARGS` with `env`, to completion: (status, stdout, stderr, how long it took).
async fn run(
    connect: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (ExitStatus, String, String, Duration) {
    let mut c = zkr(connect);
    c.envs(env.iter().copied()).args(args);
    let started = Instant::now();
    let out = tokio::time::timeout(BOUND, c.output())
        .await
        .unwrap_or_else(|_| panic!("zkr {args:?} did not finish within {BOUND:?}"))
        .expect("zkr ran");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

async fn server(builder: TestingServerBuilder) -> TestingServer {
    tokio::time::timeout(BOUND, builder.start())
        .await
        .unwrap_or_else(|_| panic!("no secured server within {BOUND:?}"))
        .expect("the secured server starts")
}

/// A session of the library that reads ACLs as `tls` lets it.
async fn reader(
    connect: &str,
    builder: impl FnOnce(zookeeper_recipes::SessionBuilder) -> zookeeper_recipes::SessionBuilder,
) -> Session {
    tokio::time::timeout(BOUND, builder(Session::builder(connect)).connect())
        .await
        .unwrap_or_else(|_| panic!("no session with {connect} within {BOUND:?}"))
        .expect("a session to read the ACL")
}

/// The ACL of `path`, as `(scheme, id)` pairs.
async fn acl_of(session: &Session, path: &str) -> Vec<(String, String)> {
    let (acl, _) = session
        .client()
        .unwrap()
        .get_acl(path)
        .await
        .unwrap_or_else(|e| panic!("getAcl {path}: {e}"));
    acl.iter()
        .map(|a| (a.scheme().to_owned(), a.id().to_owned()))
        .collect()
}

/// `zkr SECURITY... --acl creator latch PATH --id a`, running.
fn latch_with(connect: &str, security: &[&str], path: &str) -> Zkr {
    let mut c = zkr(connect);
    c.args(security)
        .args(["--acl", "creator", "latch", path, "--id", "a"]);
    Zkr::spawn("a", c, EventsOn::Stdout)
}

/// A copy of `key` with `mode`.
fn key_with_mode(dir: &Path, key: &Path, mode: u32) -> String {
    write_file(
        dir,
        &format!("key-{mode:o}.pem"),
        &std::fs::read_to_string(key).unwrap(),
        mode,
    )
}

#[tokio::test]
async fn zkr_over_mtls_with_acl_creator_gives_the_certificate_its_nodes_and_reads_env_files() {
    if !zookeeper() {
        return;
    }
    let server = server(
        TestingServer::builder()
            .tls(ClientAuth::Need)
            .x509_auth(true),
    )
    .await;
    let tls = server.tls().unwrap();
    let me = tls.client_cert("svc-zkr").unwrap();
    let ca = tls.ca_path().to_str().unwrap();
    let (cert, key) = (
        me.cert_path().to_str().unwrap(),
        me.key_path().to_str().unwrap(),
    );
    let path = testing::unique_path("zkr-mtls");
    let mut latch = latch_with(
        server.connect_string(),
        &["--tls-ca", ca, "--tls-cert", cert, "--tls-key", key],
        &path,
    );
    latch
        .wait_for("leader", BOUND, "zkr latch over mTLS never led")
        .await;
    let owner = reader(server.connect_string(), |b| {
        b.tls(TlsConfig::ca_file(ca).identity_files(cert, key))
    })
    .await;
    assert_eq!(
        acl_of(&owner, &path).await,
        [("x509".to_owned(), "CN=svc-zkr".to_owned())],
        "--acl creator over mTLS must give the election path to the certificate alone"
    );
    latch.signal(Signal::SIGTERM);
    let status = latch.exit(BOUND, "zkr latch after SIGTERM").await;
    assert!(status.success(), "zkr latch over mTLS: {status}");
    // The same from the environment, with a host written without a scheme.
    let bare = format!("127.0.0.1:{}", server.port());
    let (status, out, err, _) = run(
        &bare,
        &[
            ("ZK_TLS_CA", ca),
            ("ZK_TLS_CERT", cert),
            ("ZK_TLS_KEY", key),
        ],
        &["participants", &path],
    )
    .await;
    assert!(
        status.success(),
        "zkr participants with $ZK_TLS_*: {status}\n{err}"
    );
    assert_eq!(out.trim(), "[]", "{out}");
    owner.close().await.unwrap();
}

#[tokio::test]
async fn zkr_refuses_bad_tls_and_sasl_files_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let ca = testing::TestCa::new(dir.path(), "zkr-bad").unwrap();
    let me = ca.client_cert("svc").unwrap();
    let other = ca.client_cert("other").unwrap();
    let other_key = other.key_path().to_str().unwrap();
    let ca_path = ca.ca_path().to_str().unwrap();
    let cert = me.cert_path().to_str().unwrap();
    let open_key = key_with_mode(dir.path(), me.key_path(), 0o644);
    let not_pem = write_file(dir.path(), "not.pem", "hello\n", 0o644);
    let open_sasl = write_file(dir.path(), "sasl-644", "alice:pw\n", 0o644);
    let bad_sasl = write_file(dir.path(), "sasl-bad", "alice\n", 0o600);
    let key = me.key_path().to_str().unwrap();
    let cases: [(&str, Vec<&str>, &str); 8] = [
        (
            "a key file readable by group and others",
            vec![
                "--tls-ca",
                ca_path,
                "--tls-cert",
                cert,
                "--tls-key",
                &open_key,
            ],
            "group or others",
        ),
        (
            "a CA file that is not PEM",
            vec!["--tls-ca", &not_pem],
            "no CERTIFICATE",
        ),
        (
            "a client certificate file that is not PEM",
            vec![
                "--tls-ca",
                ca_path,
                "--tls-cert",
                &not_pem,
                "--tls-key",
                key,
            ],
            "no CERTIFICATE",
        ),
        (
            "a key that does not match its certificate",
            vec![
                "--tls-ca",
                ca_path,
                "--tls-cert",
                cert,
                "--tls-key",
                other_key,
            ],
            "does not match",
        ),
        (
            "a certificate without its key",
            vec!["--tls-ca", ca_path, "--tls-cert", cert],
            "needs --tls-key",
        ),
        (
            "a certificate and key without a CA",
            vec!["--tls-cert", cert, "--tls-key", key],
            "need --tls-ca",
        ),
        (
            "a SASL file readable by group and others",
            vec!["--sasl-digest-file", &open_sasl],
            "group or others",
        ),
        (
            "a SASL file that is not USER:PASSWORD",
            vec!["--sasl-digest-file", &bad_sasl],
            "USER:PASSWORD",
        ),
    ];
    for (what, mut args, cause) in cases {
        args.extend(["--connect-timeout", "3s", "participants", "/x"]);
        let (status, _, err, took) = run("tcp+tls://127.0.0.1:1", &[], &args).await;
        eprintln!(
            "{what}: exit {:?} after {} ms: {}",
            status.code(),
            took.as_millis(),
            err.trim()
        );
        assert_eq!(status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(cause), "{what}: {err}");
        assert!(
            took < Duration::from_secs(3),
            "{what}: took {took:?} with --connect-timeout 3s"
        );
        assert!(
            !err.contains("pw"),
            "{what}: the message echoes the password: {err}"
        );
    }
}

/// Each failed handshake: exit 69 within `--connect-timeout`, the message naming the cause.
#[tokio::test]
async fn zkr_exits_within_its_connect_timeout_on_a_failed_handshake_saying_why() {
    if !zookeeper() {
        return;
    }
    let cases = [
        (
            "an unknown CA",
            ServerCertificate::UnknownCa,
            ClientAuth::None,
            "not signed by a CA",
        ),
        (
            "an expired server certificate",
            ServerCertificate::Expired,
            ClientAuth::None,
            "expired",
        ),
        (
            "a server certificate for another host",
            ServerCertificate::WrongHost,
            ClientAuth::None,
            "not valid for 127.0.0.1",
        ),
        (
            "no client certificate for a server that needs one",
            ServerCertificate::Valid,
            ClientAuth::Need,
            "client certificate",
        ),
    ];
    for (what, certificate, client_auth, cause) in cases {
        let server = server(
            TestingServer::builder()
                .tls(client_auth)
                .tls_server_certificate(certificate),
        )
        .await;
        let ca = server.tls().unwrap().ca_path().to_str().unwrap().to_owned();
        let (status, _, err, took) = run(
            server.connect_string(),
            &[],
            &[
                "--connect-timeout",
                "3s",
                "--tls-ca",
                &ca,
                "participants",
                "/x",
            ],
        )
        .await;
        eprintln!(
            "{what}: exit {:?} after {} ms: {}",
            status.code(),
            took.as_millis(),
            err.trim()
        );
        assert_eq!(status.code(), Some(69), "{what}: {err}");
        assert!(err.contains("TLS handshake failed"), "{what}: {err}");
        assert!(err.contains(cause), "{what}: {err}");
        assert!(
            took < Duration::from_secs(5),
            "{what}: took {took:?} with --connect-timeout 3s"
        );
    }
}

#[tokio::test]
async fn zkr_with_a_sasl_digest_file_and_acl_creator_gives_the_login_its_nodes() {
    if !zookeeper() {
        return;
    }
    let server = server(TestingServer::builder().sasl_user("alice", "alice-secret")).await;
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "alice.sasl", "alice:alice-secret\n", 0o600);
    let path = testing::unique_path("zkr-sasl");
    let mut latch = latch_with(
        server.connect_string(),
        &["--sasl-digest-file", &file],
        &path,
    );
    latch
        .wait_for("leader", BOUND, "zkr latch with SASL never led")
        .await;
    let alice = reader(server.connect_string(), |b| {
        b.sasl_digest("alice", "alice-secret")
    })
    .await;
    assert_eq!(
        acl_of(&alice, &path).await,
        [("sasl".to_owned(), "alice".to_owned())]
    );
    latch.signal(Signal::SIGTERM);
    let status = latch.exit(BOUND, "zkr latch after SIGTERM").await;
    assert!(status.success(), "zkr latch with SASL: {status}");
    let wrong = write_file(dir.path(), "wrong.sasl", "alice:nope\n", 0o600);
    let (status, _, err, took) = run(
        server.connect_string(),
        &[],
        &[
            "--connect-timeout",
            "3s",
            "--sasl-digest-file",
            &wrong,
            "participants",
            &path,
        ],
    )
    .await;
    eprintln!(
        "wrong SASL password: exit {:?} after {} ms: {}",
        status.code(),
        took.as_millis(),
        err.trim()
    );
    assert_eq!(status.code(), Some(77), "{err}");
    assert!(
        !err.contains("nope"),
        "the message echoes the password: {err}"
    );
    alice.close().await.unwrap();
}
