//! The harness's secured servers, each mode proved with a real client: zookeeper-client 0.11
//! with its `tls` and `sasl-digest-md5` features against real ZooKeeper processes.
//!
//! Each test starts its own server (the modes differ), so they run in parallel; every wait is
//! bounded and says what did not happen.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use zookeeper_client::{
    Acl, Acls, AuthId, Client, CreateMode, Error as ZkError, Permission, SaslOptions, TlsOptions,
};
use zookeeper_recipes_testing::{
    self as testing, ClientAuth, FaultProxy, ServerCertificate, TestingCluster, TestingServer,
};

/// How long a client that should get in may take.
const CONNECT: Duration = Duration::from_secs(10);
/// The session timeout a refused client asks for: zookeeper-client gives up on a connect
/// after about this long when no server takes it.
const REFUSED_SESSION: Duration = Duration::from_secs(2);
/// A bound on a connect that must fail: its session timeout and a margin.
const REFUSED_BOUND: Duration = Duration::from_secs(10);

fn zookeeper_here() -> bool {
    testing::require_zookeeper().expect("ZooKeeper is required under CI=true")
}

/// zookeeper-client's `tls` feature turns on rustls's default provider (aws-lc-rs) while the
/// harness's rustls has `ring`: with two providers compiled in, rustls has no process default
/// and `ClientConfig::builder()` (which zookeeper-client calls) panics. A process that links
/// both must install one first; the library will have to say so or do it.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn trusting(server: &TestingServer) -> TlsOptions {
    let tls = server.tls().expect("a TLS server");
    TlsOptions::new()
        .with_pem_ca(tls.ca_pem())
        .expect("the harness's CA is valid PEM")
}

async fn connect(connector: zookeeper_client::Connector, to: &str, what: &str) -> Client {
    match tokio::time::timeout(CONNECT, connector.connect(to)).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!("{what}: no session with {to}: {e}"),
        Err(_) => panic!("{what}: no session with {to} within {CONNECT:?}"),
    }
}

/// Connects and expects no session; returns the error and how long it took.
async fn refused(
    connector: zookeeper_client::Connector,
    to: &str,
    what: &str,
) -> (ZkError, Duration) {
    let started = Instant::now();
    let connector = connector
        .with_session_timeout(REFUSED_SESSION)
        .with_connection_timeout(Duration::from_secs(1))
        .with_fail_eagerly();
    match tokio::time::timeout(REFUSED_BOUND, connector.connect(to)).await {
        Ok(Ok(_)) => panic!("{what}: a session with {to} was established, and must not be"),
        Ok(Err(e)) => (e, started.elapsed()),
        Err(_) => panic!(
            "{what}: the connect to {to} neither failed nor succeeded within {REFUSED_BOUND:?}"
        ),
    }
}

async fn create_root(client: &Client, root: &str) {
    client
        .create(
            "/zkr-test",
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .map(drop)
        .or_else(|e| match e {
            ZkError::NodeExists => Ok(()),
            e => Err(e),
        })
        .expect("/zkr-test exists");
    client
        .create(
            root,
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .expect("the test's root is created");
}

#[tokio::test]
async fn a_tls_server_serves_a_client_that_trusts_its_ca_directly_and_through_a_proxy() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let server = TestingServer::builder()
        .tls(ClientAuth::None)
        .start()
        .await
        .expect("a TLS server starts");
    let connect_string = server.connect_string().to_owned();
    assert_eq!(
        connect_string,
        format!("tcp+tls://127.0.0.1:{}", server.port())
    );
    let srvr = server
        .four_letter_word("srvr")
        .await
        .expect("srvr over TLS");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    let config = std::fs::read_to_string(
        server
            .log_path()
            .expect("a process server")
            .with_file_name("zoo.cfg"),
    )
    .expect("zoo.cfg");
    assert!(
        !config.lines().any(|l| l.starts_with("clientPort=")),
        "no plaintext port: {config}"
    );

    let client = connect(
        Client::connector().with_tls(trusting(&server)),
        &connect_string,
        "a TLS client",
    )
    .await;
    let root = testing::unique_path("tls");
    create_root(&client, &root).await;

    let proxy = FaultProxy::start(std::slice::from_ref(&connect_string))
        .await
        .expect("a proxy");
    assert!(proxy.connect_string().starts_with("tcp+tls://127.0.0.1:"));
    let through = connect(
        Client::connector().with_tls(trusting(&server)),
        &proxy.connect_string(),
        "a TLS client through the proxy",
    )
    .await;
    let (_, stat) = through
        .get_data(&root)
        .await
        .expect("read through the proxy");
    assert_eq!(
        stat.czxid,
        client.get_data(&root).await.expect("read").1.czxid
    );
    assert_eq!(proxy.connection_count(), 1);
}

#[tokio::test]
async fn a_tls_only_server_refuses_a_plaintext_client() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let server = TestingServer::builder()
        .tls(ClientAuth::None)
        .start()
        .await
        .expect("a TLS server starts");
    let plain = server.address().to_string();
    let (err, took) = refused(Client::connector(), &plain, "a plaintext client").await;
    eprintln!("plaintext client on a TLS port: {err} after {took:?}");
    // Nor does the port answer a plaintext four-letter word.
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(&plain).await?;
        s.write_all(b"srvr").await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.map(|_| out)
    })
    .await;
    if let Ok(Ok(out)) = answer {
        assert!(
            !String::from_utf8_lossy(&out).contains("Mode:"),
            "a plaintext srvr was answered: {}",
            String::from_utf8_lossy(&out)
        );
    }
}

#[tokio::test]
async fn mtls_with_x509_names_the_client_certificate_in_acls() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let server = TestingServer::builder()
        .tls(ClientAuth::Need)
        .x509_auth(true)
        .start()
        .await
        .expect("an mTLS server starts");
    let tls = server.tls().expect("a TLS server");
    let me = tls.client_cert("svc-client").expect("a client certificate");
    let client = connect(
        Client::connector().with_tls(
            trusting(&server)
                .with_pem_identity(me.cert_pem(), me.key_pem())
                .expect("the harness's client PEM loads"),
        ),
        server.connect_string(),
        "an mTLS client",
    )
    .await;
    let root = testing::unique_path("mtls");
    create_root(&client, &root).await;
    let node = format!("{root}/owned");
    let mine = [Acl::new(
        Permission::ALL,
        AuthId::new("x509", "CN=svc-client"),
    )];
    client
        .create(
            &node,
            b"x",
            &CreateMode::Persistent.with_acls(Acls::new(&mine)),
        )
        .await
        .expect("a node only x509:CN=svc-client may use");
    let (acl, _) = client.get_acl(&node).await.expect("getAcl");
    assert_eq!(acl.len(), 1, "{acl:?}");
    assert_eq!((acl[0].scheme(), acl[0].id()), ("x509", "CN=svc-client"));
    assert_eq!(acl[0].permission(), Permission::ALL);
    let users = client.list_auth_users().await.expect("whoami");
    assert!(
        users
            .iter()
            .any(|u| u.scheme() == "x509" && u.user() == "CN=svc-client"),
        "{users:?}"
    );
    assert_eq!(
        client.get_data(&node).await.expect("the owner reads").0,
        b"x"
    );

    let other = tls
        .client_cert("someone-else")
        .expect("a second certificate");
    let stranger = connect(
        Client::connector().with_tls(
            trusting(&server)
                .with_pem_identity(other.cert_pem(), other.key_pem())
                .expect("PEM"),
        ),
        server.connect_string(),
        "a second mTLS client",
    )
    .await;
    assert!(
        matches!(stranger.get_data(&node).await, Err(ZkError::NoAuth)),
        "x509:CN=someone-else must not read x509:CN=svc-client's node"
    );
}

#[tokio::test]
async fn mtls_with_need_refuses_a_client_without_a_certificate_or_with_a_foreign_one() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let server = TestingServer::builder()
        .tls(ClientAuth::Need)
        .start()
        .await
        .expect("an mTLS server starts");
    let (err, took) = refused(
        Client::connector().with_tls(trusting(&server)),
        server.connect_string(),
        "a TLS client without a certificate",
    )
    .await;
    eprintln!("no client certificate under need: {err} after {took:?}");
    let foreign = server
        .tls()
        .expect("TLS")
        .foreign_client_cert("svc-client")
        .expect("a certificate from the other CA");
    let (err, took) = refused(
        Client::connector().with_tls(
            trusting(&server)
                .with_pem_identity(foreign.cert_pem(), foreign.key_pem())
                .expect("PEM"),
        ),
        server.connect_string(),
        "a client with a certificate of an unknown CA",
    )
    .await;
    eprintln!("foreign client certificate under need: {err} after {took:?}");
}

#[tokio::test]
async fn mtls_with_want_lets_a_client_without_a_certificate_in() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let server = TestingServer::builder()
        .tls(ClientAuth::Want)
        .start()
        .await
        .expect("a TLS server that wants certificates starts");
    let anonymous = connect(
        Client::connector().with_tls(trusting(&server)),
        server.connect_string(),
        "a TLS client without a certificate under want",
    )
    .await;
    let users = anonymous.list_auth_users().await.expect("whoami");
    assert!(users.iter().all(|u| u.scheme() != "x509"), "{users:?}");
    let me = server
        .tls()
        .expect("TLS")
        .client_cert("svc-client")
        .expect("cert");
    let known = connect(
        Client::connector().with_tls(
            trusting(&server)
                .with_pem_identity(me.cert_pem(), me.key_pem())
                .expect("PEM"),
        ),
        server.connect_string(),
        "a TLS client with a certificate under want",
    )
    .await;
    let users = known.list_auth_users().await.expect("whoami");
    assert!(
        users
            .iter()
            .any(|u| u.scheme() == "x509" && u.user() == "CN=svc-client"),
        "{users:?}"
    );
}

#[tokio::test]
async fn a_client_refuses_a_wrong_host_expired_or_unknown_ca_server_certificate() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    for certificate in [
        ServerCertificate::WrongHost,
        ServerCertificate::Expired,
        ServerCertificate::UnknownCa,
    ] {
        let server = TestingServer::builder()
            .tls(ClientAuth::None)
            .tls_server_certificate(certificate)
            .start()
            .await
            .unwrap_or_else(|e| panic!("a server presenting {certificate:?} starts: {e}"));
        assert_eq!(server.tls().expect("TLS").server_certificate(), certificate);
        let (err, took) = refused(
            Client::connector().with_tls(trusting(&server)),
            server.connect_string(),
            &format!("a client shown a {certificate:?} certificate"),
        )
        .await;
        eprintln!("{certificate:?} server certificate: {err} after {took:?}");
    }
}

#[tokio::test]
async fn sasl_digest_login_names_the_user_in_acls() {
    if !zookeeper_here() {
        return;
    }
    let server = TestingServer::builder()
        .sasl_user("alice", "alice-secret")
        .sasl_user("bob", "bob-secret")
        .start()
        .await
        .expect("a SASL server starts");
    let alice = connect(
        Client::connector().with_sasl(SaslOptions::digest_md5("alice", "alice-secret")),
        server.connect_string(),
        "alice over SASL DIGEST-MD5",
    )
    .await;
    let users = alice.list_auth_users().await.expect("whoami");
    assert!(
        users
            .iter()
            .any(|u| u.scheme() == "sasl" && u.user() == "alice"),
        "{users:?}"
    );
    let root = testing::unique_path("sasl");
    create_root(&alice, &root).await;
    let node = format!("{root}/alices");
    let mine = [Acl::new(Permission::ALL, AuthId::new("sasl", "alice"))];
    alice
        .create(
            &node,
            b"a",
            &CreateMode::Persistent.with_acls(Acls::new(&mine)),
        )
        .await
        .expect("a node only sasl:alice may use");
    let (acl, _) = alice.get_acl(&node).await.expect("getAcl");
    assert_eq!(
        acl.iter().map(|a| (a.scheme(), a.id())).collect::<Vec<_>>(),
        [("sasl", "alice")]
    );
    let bob = connect(
        Client::connector().with_sasl(SaslOptions::digest_md5("bob", "bob-secret")),
        server.connect_string(),
        "bob over SASL DIGEST-MD5",
    )
    .await;
    assert!(matches!(bob.get_data(&node).await, Err(ZkError::NoAuth)));
    let anonymous = connect(Client::connector(), server.connect_string(), "no SASL").await;
    assert!(matches!(
        anonymous.get_data(&node).await,
        Err(ZkError::NoAuth)
    ));
}

#[tokio::test]
async fn sasl_required_refuses_a_wrong_password_and_a_client_that_does_not_log_in() {
    if !zookeeper_here() {
        return;
    }
    let server = TestingServer::builder()
        .sasl_user("alice", "alice-secret")
        .sasl_required(true)
        .start()
        .await
        .expect("a SASL-only server starts");
    let alice = connect(
        Client::connector().with_sasl(SaslOptions::digest_md5("alice", "alice-secret")),
        server.connect_string(),
        "alice over SASL DIGEST-MD5",
    )
    .await;
    alice.check_stat("/").await.expect("alice is served");

    let wrong = tokio::time::timeout(
        REFUSED_BOUND,
        Client::connector()
            .with_session_timeout(REFUSED_SESSION)
            .with_sasl(SaslOptions::digest_md5("alice", "not-her-secret"))
            .connect(server.connect_string()),
    )
    .await
    .expect("a wrong SASL password is answered within the bound");
    match wrong {
        Err(e) => eprintln!("wrong SASL password: {e}"),
        Ok(client) => {
            let r = tokio::time::timeout(REFUSED_BOUND, client.check_stat("/"))
                .await
                .expect("a request after a failed SASL login is answered");
            assert!(r.is_err(), "a wrong SASL password was served: {r:?}");
            eprintln!("wrong SASL password: session made, then {r:?}");
        }
    }

    let anonymous = tokio::time::timeout(
        REFUSED_BOUND,
        Client::connector()
            .with_session_timeout(REFUSED_SESSION)
            .connect(server.connect_string()),
    )
    .await
    .expect("a client without SASL is answered within the bound");
    match anonymous {
        Err(e) => eprintln!("no SASL under enforce.auth: {e}"),
        Ok(client) => {
            let r = tokio::time::timeout(REFUSED_BOUND, client.check_stat("/"))
                .await
                .expect("a request without SASL is answered");
            assert!(r.is_err(), "a client without SASL was served: {r:?}");
            eprintln!("no SASL under enforce.auth: session made, then {r:?}");
        }
    }
}

#[tokio::test]
async fn sasl_over_mtls_gives_both_identities() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let server = TestingServer::builder()
        .tls(ClientAuth::Need)
        .sasl_user("alice", "alice-secret")
        .start()
        .await
        .expect("an mTLS + SASL server starts");
    let me = server
        .tls()
        .expect("TLS")
        .client_cert("svc-client")
        .expect("cert");
    let client = connect(
        Client::connector()
            .with_tls(
                trusting(&server)
                    .with_pem_identity(me.cert_pem(), me.key_pem())
                    .expect("PEM"),
            )
            .with_sasl(SaslOptions::digest_md5("alice", "alice-secret")),
        server.connect_string(),
        "alice over SASL inside mTLS",
    )
    .await;
    let mut users: Vec<(String, String)> = client
        .list_auth_users()
        .await
        .expect("whoami")
        .iter()
        .map(|u| (u.scheme().to_owned(), u.user().to_owned()))
        .collect();
    users.sort();
    assert!(
        users.contains(&("sasl".into(), "alice".into()))
            && users.contains(&("x509".into(), "CN=svc-client".into())),
        "{users:?}"
    );
}

#[tokio::test]
async fn an_mtls_cluster_serves_a_client_on_every_server_and_survives_a_restart() {
    if !zookeeper_here() {
        return;
    }
    install_crypto_provider();
    let cluster = TestingCluster::builder()
        .servers(3)
        .tls(ClientAuth::Need)
        .start()
        .await
        .expect("an mTLS ensemble starts");
    assert!(
        cluster
            .connect_string()
            .split(',')
            .all(|s| s.starts_with("tcp+tls://127.0.0.1:")),
        "{}",
        cluster.connect_string()
    );
    let tls = cluster.tls().expect("a TLS cluster");
    let me = tls.client_cert("svc-client").expect("a client certificate");
    let options = || {
        TlsOptions::new()
            .with_pem_ca(tls.ca_pem())
            .expect("CA")
            .with_pem_identity(me.cert_pem(), me.key_pem())
            .expect("PEM")
    };
    let root = testing::unique_path("mtls-cluster");
    let writer = connect(
        Client::connector().with_tls(options()),
        cluster.connect_string(),
        "an mTLS client of the ensemble",
    )
    .await;
    create_root(&writer, &root).await;
    let node = format!("{root}/owned");
    let mine = [Acl::new(
        Permission::ALL,
        AuthId::new("x509", "CN=svc-client"),
    )];
    writer
        .create(
            &node,
            b"x",
            &CreateMode::Persistent.with_acls(Acls::new(&mine)),
        )
        .await
        .expect("an x509-owned node");
    for i in 0..cluster.len() {
        let one = cluster.server_connect_string(i).expect("server").to_owned();
        let reader = connect(
            Client::connector().with_tls(options()),
            &one,
            &format!("an mTLS client of server {i}"),
        )
        .await;
        reader.sync(&node).await.expect("sync");
        assert_eq!(
            reader.get_data(&node).await.expect("read").0,
            b"x",
            "server {i}"
        );
    }
    let leader = cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader, asked over TLS");
    cluster
        .restart_server(leader)
        .await
        .expect("the leader restarts on its TLS port");
    cluster
        .wait_whole(Duration::from_secs(30))
        .await
        .expect("the ensemble is whole again");
}
