//! The session over TLS, mutual TLS and SASL against the harness's secured ZooKeeper servers:
//! nodes made and read, the creator ACL naming the certificate's or the SASL login's identity,
//! and each bad input refused with an error that names its cause, in bounded time.
//!
//! Each test starts its own server (the modes differ). Each failure prints its message and the
//! time it took (`cargo test --test recipes -- security:: --nocapture`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zookeeper_client::{Acl, Acls, Client, CreateMode, Error as ZkError, Permission};
use zookeeper_recipes::job::{ScheduledJob, SlotRun, SlotState};
use zookeeper_recipes::{
    ConnectionState, Error, InterProcessMutex, LeaderLatch, LeaderPool, NodeAcl, Session,
    SessionBuilder, TlsConfig,
};
use zookeeper_recipes_rigs::fixtures::{
    BOUND, StateRecorder, eventually, shared_server, within, zookeeper,
};
use zookeeper_recipes_testing::{
    self as testing, ClientAuth, ServerCertificate, TestCa, TestingServer,
};

/// The connection timeout of the sessions that must fail: they must fail within it.
const FAIL_WITHIN: Duration = Duration::from_secs(3);
/// What a failing connect may take beyond its connection timeout (the supervisor's last
/// diagnosis is bounded by a second and a half).
const FAIL_SLACK: Duration = Duration::from_secs(2);

async fn server(builder: zookeeper_recipes_testing::TestingServerBuilder) -> TestingServer {
    within(BOUND, "a secured server starts", builder.start())
        .await
        .expect("the secured server starts")
}

/// A session that must come up.
async fn connect(builder: zookeeper_recipes::SessionBuilder, what: &str) -> Session {
    within(
        BOUND,
        &format!("{what}: a session"),
        builder
            .connection_timeout(Duration::from_secs(10))
            .connect(),
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: no session: {e}"))
}

/// A session that must not come up: its error and how long it took.
async fn refused(builder: zookeeper_recipes::SessionBuilder, what: &str) -> (Error, Duration) {
    let started = Instant::now();
    let result = within(
        FAIL_WITHIN + FAIL_SLACK,
        &format!("{what}: the connect fails"),
        builder.connection_timeout(FAIL_WITHIN).connect(),
    )
    .await;
    let took = started.elapsed();
    match result {
        Ok(_) => panic!("{what}: a session was established, and must not be"),
        Err(e) => {
            eprintln!("{what}: {e} (after {} ms)", took.as_millis());
            (e, took)
        }
    }
}

/// A copy of `key` that only its owner may read, or with `mode`.
fn key_copy(dir: &Path, key: &Path, mode: u32) -> PathBuf {
    let copy = dir.join(format!("key-{mode:o}.pem"));
    std::fs::copy(key, &copy).expect("copy the key");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode)).expect("chmod");
    copy
}

/// Makes `/zkr-test/<unique>` open to anyone, through `session`'s client.
async fn root_on(session: &Session, name: &str) -> String {
    let client = session.client().expect("a live client");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match client.create("/zkr-test", b"", &open).await {
        Ok(_) | Err(ZkError::NodeExists) => {}
        Err(e) => panic!("/zkr-test: {e}"),
    }
    let root = testing::unique_path(name);
    client.create(&root, b"", &open).await.expect("the root");
    root
}

/// Creates `node` with the creator ACL, as a recipe would, and returns its ACL as the server
/// expanded it.
async fn create_as_creator(session: &Session, node: &str) -> Vec<(String, String, Permission)> {
    let client = session.client().expect("a live client");
    let acl = NodeAcl::creator_all();
    client
        .create(
            node,
            b"mine",
            &CreateMode::Persistent.with_acls(Acls::new(acl.entries())),
        )
        .await
        .expect("a node with the creator ACL");
    let (acl, _) = client.get_acl(node).await.expect("getAcl");
    acl.iter()
        .map(|a| (a.scheme().to_owned(), a.id().to_owned(), a.permission()))
        .collect()
}

#[tokio::test]
async fn a_session_over_tls_creates_and_reads_nodes_with_the_ca_from_a_file_or_from_memory() {
    if !zookeeper() {
        return;
    }
    let server = server(TestingServer::builder().tls(ClientAuth::None)).await;
    let tls = server.tls().expect("TLS");
    // The harness's connect string says tcp+tls:// on its host.
    let from_file = connect(
        Session::builder(server.connect_string()).tls(TlsConfig::ca_file(tls.ca_path())),
        "tcp+tls:// with the CA from a file",
    )
    .await;
    let root = root_on(&from_file, "tls").await;
    let node = format!("{root}/n");
    let client = from_file.client().unwrap();
    client
        .create(
            &node,
            b"over tls",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .expect("create over TLS");
    // A host without a scheme goes over TLS too when the session has a TLS configuration.
    let from_memory = connect(
        Session::builder(format!("127.0.0.1:{}", server.port()))
            .tls(TlsConfig::ca_pem(tls.ca_pem())),
        "a bare host with the CA in memory",
    )
    .await;
    let (data, _) = from_memory
        .client()
        .unwrap()
        .get_data(&node)
        .await
        .expect("read over TLS");
    assert_eq!(data, b"over tls");
    // And the errors of the server still come back typed.
    assert!(matches!(
        from_memory
            .client()
            .unwrap()
            .create(
                &node,
                b"",
                &CreateMode::Persistent.with_acls(Acls::anyone_all())
            )
            .await,
        Err(ZkError::NodeExists)
    ));
    from_file.close().await.unwrap();
    from_memory.close().await.unwrap();
}

#[tokio::test]
async fn a_session_over_mtls_survives_a_server_restart_within_its_timeout() {
    if !zookeeper() {
        return;
    }
    let server = server(TestingServer::builder().tls(ClientAuth::Need)).await;
    let tls = server.tls().expect("TLS");
    let me = tls.client_cert("svc-client").expect("a client certificate");
    let session = connect(
        Session::builder(server.connect_string())
            .session_timeout(Duration::from_secs(8))
            .tls(TlsConfig::ca_file(tls.ca_path()).identity_files(me.cert_path(), me.key_path())),
        "mTLS",
    )
    .await;
    let id = session.session_id().expect("a session id");
    let mut states = StateRecorder::start(&session);
    server.stop().await.expect("the server stops");
    states.expect(ConnectionState::Suspended, BOUND).await;
    server.restart().await.expect("the server restarts");
    let (status, _) = states.expect(ConnectionState::Reconnected, BOUND).await;
    assert_eq!(
        status.session_id,
        Some(id),
        "the same session, over TLS again"
    );
    assert!(!status.new_session);
    session.close().await.unwrap();
}

#[tokio::test]
async fn with_mtls_and_x509_the_creator_acl_names_the_certificate_and_nobody_else() {
    if !zookeeper() {
        return;
    }
    let server = server(
        TestingServer::builder()
            .tls(ClientAuth::Need)
            .x509_auth(true),
    )
    .await;
    let tls = server.tls().expect("TLS");
    let me = tls.client_cert("svc-client").expect("a client certificate");
    let owner = connect(
        Session::builder(server.connect_string())
            .tls(TlsConfig::ca_file(tls.ca_path()).identity_files(me.cert_path(), me.key_path())),
        "mTLS as CN=svc-client",
    )
    .await;
    let root = root_on(&owner, "x509").await;
    let node = format!("{root}/owned");
    let acl = create_as_creator(&owner, &node).await;
    assert_eq!(
        acl,
        [(
            "x509".to_owned(),
            "CN=svc-client".to_owned(),
            Permission::ALL
        )],
        "the creator ACL must give the certificate's identity all rights, and nothing else"
    );
    let (data, _) = owner
        .client()
        .unwrap()
        .get_data(&node)
        .await
        .expect("the owner reads");
    assert_eq!(data, b"mine");

    let other = tls
        .client_cert("someone-else")
        .expect("a second certificate");
    let stranger = connect(
        Session::builder(server.connect_string())
            .tls(TlsConfig::ca_pem(tls.ca_pem()).identity_pem(other.cert_pem(), other.key_pem())),
        "mTLS as CN=someone-else, from memory",
    )
    .await;
    let client = stranger.client().unwrap();
    assert!(
        matches!(client.get_data(&node).await, Err(ZkError::NoAuth)),
        "CN=someone-else must not read CN=svc-client's node"
    );
    assert!(
        matches!(
            client.set_data(&node, b"x", None).await,
            Err(ZkError::NoAuth)
        ),
        "CN=someone-else must not write CN=svc-client's node"
    );
    assert!(
        matches!(
            client.delete(&node, None).await,
            Ok(()) | Err(ZkError::NoAuth)
        ),
        "delete is decided by the parent's ACL"
    );
    owner.close().await.unwrap();
    stranger.close().await.unwrap();
}

#[tokio::test]
async fn bad_tls_files_are_refused_when_the_session_is_built_naming_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "bad-input").unwrap();
    let me = ca.client_cert("svc-client").unwrap();
    let other = ca.client_cert("other").unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let open_key = key_copy(dir.path(), me.key_path(), 0o644);
    let private_other_key = key_copy(dir.path(), other.key_path(), 0o600);
    let cases: [(&str, TlsConfig, &str); 6] = [
        (
            "a CA file that is not PEM",
            TlsConfig::ca_file(&not_pem),
            "no CERTIFICATE",
        ),
        (
            "a missing CA file",
            TlsConfig::ca_file(dir.path().join("missing.pem")),
            "cannot read it",
        ),
        (
            "a client certificate file that is not PEM",
            TlsConfig::ca_file(ca.ca_path()).identity_files(&not_pem, me.key_path()),
            "no CERTIFICATE",
        ),
        (
            "a key that does not match its certificate",
            TlsConfig::ca_file(ca.ca_path()).identity_files(me.cert_path(), &private_other_key),
            "does not match",
        ),
        (
            "a key file readable by group and others",
            TlsConfig::ca_file(ca.ca_path()).identity_files(me.cert_path(), &open_key),
            "group or others",
        ),
        (
            "a key that is not PEM, in memory",
            TlsConfig::ca_pem(ca.ca_pem()).identity_pem(me.cert_pem(), "not a key"),
            "no PRIVATE KEY",
        ),
    ];
    for (what, config, cause) in cases {
        let started = Instant::now();
        let result = Session::builder("tcp+tls://127.0.0.1:1")
            .tls(config)
            .connection_timeout(FAIL_WITHIN)
            .connect()
            .await;
        let took = started.elapsed();
        match result {
            Err(e @ Error::InvalidTls { .. }) => {
                eprintln!("{what}: {e} (after {} ms)", took.as_millis());
                assert!(e.to_string().contains(cause), "{what}: {e}");
                assert!(took < Duration::from_millis(500), "{what}: took {took:?}");
            }
            Err(e) => panic!("{what}: {e}, not InvalidTls"),
            Ok(_) => panic!("{what}: a session"),
        }
    }
}

#[tokio::test]
async fn tls_settings_and_connect_strings_that_disagree_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "mismatch").unwrap();
    for (connect, tls, cause) in [
        ("tcp+tls://127.0.0.1:1", false, "need a TLS configuration"),
        ("tcp://127.0.0.1:1", true, "clear text"),
        ("tcp+tls://127.0.0.1:1,127.0.0.1:2", true, "mixes"),
    ] {
        let builder = Session::builder(connect);
        let builder = if tls {
            builder.tls(TlsConfig::ca_file(ca.ca_path()))
        } else {
            builder
        };
        match builder.start() {
            Err(e @ Error::InvalidConnectString { .. }) => {
                eprintln!("{connect} (tls {tls}): {e}");
                assert!(e.to_string().contains(cause), "{connect}: {e}");
            }
            Err(e) => panic!("{connect}: {e}"),
            Ok(_) => panic!("{connect} (tls {tls}) was accepted"),
        }
    }
}

#[tokio::test]
async fn a_failed_handshake_fails_the_connect_within_its_timeout_saying_why() {
    if !zookeeper() {
        return;
    }
    for (certificate, cause) in [
        (
            ServerCertificate::UnknownCa,
            "not signed by a CA of the configured CA bundle",
        ),
        (ServerCertificate::Expired, "expired"),
        (ServerCertificate::WrongHost, "not valid for 127.0.0.1"),
    ] {
        let server = server(
            TestingServer::builder()
                .tls(ClientAuth::None)
                .tls_server_certificate(certificate),
        )
        .await;
        let (e, took) = refused(
            Session::builder(server.connect_string())
                .tls(TlsConfig::ca_pem(server.tls().unwrap().ca_pem())),
            &format!("a {certificate:?} server certificate"),
        )
        .await;
        assert!(
            matches!(e, Error::TlsHandshake { .. }),
            "{certificate:?}: {e}"
        );
        assert!(e.to_string().contains(cause), "{certificate:?}: {e}");
        assert!(
            took <= FAIL_WITHIN + FAIL_SLACK,
            "{certificate:?}: {took:?}"
        );
    }
    let need = server(TestingServer::builder().tls(ClientAuth::Need)).await;
    let (e, took) = refused(
        Session::builder(need.connect_string())
            .tls(TlsConfig::ca_pem(need.tls().unwrap().ca_pem())),
        "no client certificate for a server that needs one",
    )
    .await;
    assert!(matches!(e, Error::TlsHandshake { .. }), "{e}");
    assert!(e.to_string().contains("client certificate"), "{e}");
    assert!(took <= FAIL_WITHIN + FAIL_SLACK, "{took:?}");
}

#[tokio::test]
async fn a_sasl_digest_session_gets_the_sasl_identity_for_creator_acls() {
    if !zookeeper() {
        return;
    }
    let server = server(
        TestingServer::builder()
            .sasl_user("alice", "alice-secret")
            .sasl_user("bob", "bob-secret"),
    )
    .await;
    let alice = connect(
        Session::builder(server.connect_string()).sasl_digest("alice", "alice-secret"),
        "alice over SASL",
    )
    .await;
    let root = root_on(&alice, "sasl").await;
    let node = format!("{root}/alices");
    assert_eq!(
        create_as_creator(&alice, &node).await,
        [("sasl".to_owned(), "alice".to_owned(), Permission::ALL)]
    );
    let bob = connect(
        Session::builder(server.connect_string()).sasl_digest("bob", "bob-secret"),
        "bob over SASL",
    )
    .await;
    assert!(matches!(
        bob.client().unwrap().get_data(&node).await,
        Err(ZkError::NoAuth)
    ));
    let (e, took) = refused(
        Session::builder(server.connect_string()).sasl_digest("alice", "wrong"),
        "a wrong SASL password",
    )
    .await;
    assert!(matches!(e, Error::AuthFailed), "{e}");
    assert!(took <= FAIL_WITHIN + FAIL_SLACK, "{took:?}");
    assert!(matches!(
        Session::builder(server.connect_string())
            .sasl_digest("alice", "")
            .start(),
        Err(Error::InvalidArgument {
            what: "SASL password",
            ..
        })
    ));
    alice.close().await.unwrap();
    bob.close().await.unwrap();
}

/// The recipes over mutual TLS: a latch with the creator ACL is elected, and its node names the
/// certificate. (A TLS session has no relay: its lease is proven by its heartbeats alone, and
/// a reconnect's renegotiated timeout is not seen until the relay's removal brings its
/// replacement; the faults over TLS are tested after that.)
#[tokio::test]
async fn a_latch_over_mtls_is_elected_with_the_creator_acl_naming_the_certificate() {
    if !zookeeper() {
        return;
    }
    let server = server(
        TestingServer::builder()
            .tls(ClientAuth::Need)
            .x509_auth(true),
    )
    .await;
    let tls = server.tls().expect("TLS");
    let me = tls.client_cert("svc-client").expect("a client certificate");
    let session = connect(
        Session::builder(server.connect_string())
            .session_timeout(Duration::from_secs(6))
            .tls(TlsConfig::ca_file(tls.ca_path()).identity_files(me.cert_path(), me.key_path())),
        "mTLS",
    )
    .await;
    let root = root_on(&session, "latch-mtls").await;
    let election = format!("{root}/election");
    let latch = LeaderLatch::builder(&session, &election)
        .id("a")
        .acl(NodeAcl::creator_all())
        .start()
        .await
        .expect("a latch with the creator ACL on a certificate's identity");
    within(BOUND, "the only latch is elected", latch.await_leadership())
        .await
        .expect("elected");
    let client = session.client().unwrap();
    let children = client.list_children(&election).await.unwrap();
    let (acl, _) = client
        .get_acl(&format!("{election}/{}", children[0]))
        .await
        .unwrap();
    assert_eq!(acl.len(), 1, "{acl:?}");
    assert_eq!((acl[0].scheme(), acl[0].id()), ("x509", "CN=svc-client"));
    latch.close().await.unwrap();
    session.close().await.unwrap();
}

/// A mutex over SASL: two sessions of the same login take turns, and the lock's nodes name the
/// login alone.
#[tokio::test]
async fn a_mutex_over_sasl_serialises_two_sessions_of_one_login_with_the_creator_acl() {
    if !zookeeper() {
        return;
    }
    let server = server(TestingServer::builder().sasl_user("job", "job-secret")).await;
    let a = connect(
        Session::builder(server.connect_string())
            .session_timeout(Duration::from_secs(6))
            .sasl_digest("job", "job-secret"),
        "job over SASL (a)",
    )
    .await;
    let b = connect(
        Session::builder(server.connect_string())
            .session_timeout(Duration::from_secs(6))
            .sasl_digest("job", "job-secret"),
        "job over SASL (b)",
    )
    .await;
    let root = root_on(&a, "mutex-sasl").await;
    let path = format!("{root}/lock");
    let mutex = |s: &Session| {
        InterProcessMutex::builder(s, &path)
            .acl(NodeAcl::creator_all())
            .build()
            .expect("a mutex with the creator ACL on a SASL login")
    };
    let (ma, mb) = (mutex(&a), mutex(&b));
    let held = within(BOUND, "a takes the free lock", ma.acquire())
        .await
        .expect("a holds the lock");
    assert!(
        mb.acquire_timeout(Duration::from_millis(500))
            .await
            .expect("b asks")
            .is_none(),
        "b must not get the lock a holds"
    );
    let client = a.client().unwrap();
    let nodes = client.list_children(&path).await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let (acl, _) = client
        .get_acl(&format!("{path}/{}", nodes[0]))
        .await
        .unwrap();
    assert_eq!(
        acl.iter().map(|x| (x.scheme(), x.id())).collect::<Vec<_>>(),
        [("sasl", "job")]
    );
    held.release().await.expect("a releases");
    let next = within(BOUND, "b takes the lock a released", mb.acquire())
        .await
        .expect("b holds the lock");
    next.release().await.expect("b releases");
    a.close().await.unwrap();
    b.close().await.unwrap();
}

// Least privilege by default (issue 43): with an identity, every node the crate creates is the
// creator's, and others may only read it; without one, everything stays open (as Curator).

/// How a session proves who it is, with a server that knows that kind of identity: digest
/// needs nothing of the server, SASL a JAAS user, a client certificate the x509 provider (and
/// `want`, so that a client without a certificate still gets in, unauthenticated).
#[derive(Clone, Copy, Debug)]
enum Identity {
    Digest,
    Sasl,
    X509,
}

/// A server for one kind of identity, and the sessions of its owner and of a stranger.
struct Secured {
    server: TestingServer,
    identity: Identity,
}

impl Secured {
    async fn start(identity: Identity) -> Secured {
        let builder = match identity {
            Identity::Digest => TestingServer::builder(),
            Identity::Sasl => TestingServer::builder().sasl_user("svc", "svc-secret"),
            Identity::X509 => TestingServer::builder()
                .tls(ClientAuth::Want)
                .x509_auth(true),
        };
        Secured {
            server: server(builder).await,
            identity,
        }
    }

    /// A session of the owner: digest `svc`, SASL `svc`, or the certificate `CN=svc-client`.
    fn owner(&self) -> SessionBuilder {
        let builder =
            Session::builder(self.server.connect_string()).session_timeout(Duration::from_secs(6));
        match self.identity {
            Identity::Digest => builder.digest_auth("svc", "svc-secret"),
            Identity::Sasl => builder.sasl_digest("svc", "svc-secret"),
            Identity::X509 => {
                let tls = self.server.tls().expect("TLS");
                let me = tls.client_cert("svc-client").expect("a client certificate");
                builder
                    .tls(TlsConfig::ca_pem(tls.ca_pem()).identity_pem(me.cert_pem(), me.key_pem()))
            }
        }
    }

    /// A session without any identity (over TLS, without a certificate, on the x509 server).
    fn stranger(&self) -> SessionBuilder {
        let builder = Session::builder(self.server.connect_string());
        match self.identity {
            Identity::X509 => {
                builder.tls(TlsConfig::ca_pem(self.server.tls().expect("TLS").ca_pem()))
            }
            Identity::Digest | Identity::Sasl => builder,
        }
    }

    /// Whether `acl` is the owner's entry with every permission.
    fn is_owner(&self, acl: &Acl) -> bool {
        let named = match self.identity {
            Identity::Digest => acl.scheme() == "digest" && acl.id().starts_with("svc:"),
            Identity::Sasl => acl.scheme() == "sasl" && acl.id() == "svc",
            Identity::X509 => acl.scheme() == "x509" && acl.id() == "CN=svc-client",
        };
        named && acl.permission() == Permission::ALL
    }
}

/// A node of a tree as a stranger sees it: its path, ACL and whether it is ephemeral.
#[derive(Debug)]
struct Seen {
    path: String,
    acl: Vec<Acl>,
    ephemeral: bool,
}

/// Every node at and under `top`, read by `client` (which needs READ on each).
async fn walk(client: &Client, top: &str) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut queue = vec![top.to_owned()];
    while let Some(path) = queue.pop() {
        let (acl, stat) = client
            .get_acl(&path)
            .await
            .unwrap_or_else(|e| panic!("getAcl {path}: {e}"));
        let children = client
            .list_children(&path)
            .await
            .unwrap_or_else(|e| panic!("getChildren {path}: {e}"));
        for child in children {
            queue.push(format!("{}/{child}", path.trim_end_matches('/')));
        }
        seen.push(Seen {
            path,
            acl,
            ephemeral: stat.ephemeral_owner != 0,
        });
    }
    seen
}

/// What every recipe, the pool and a job leave under a session's root, all with their default
/// ACL: a latch that leads, a held lock, a pool that leads its job, a job with one slot run
/// (a trigger) and the ensemble's clock probed.
struct Workload {
    latch: LeaderLatch,
    lock: zookeeper_recipes::MutexGuard,
    pool: LeaderPool,
    job: ScheduledJob,
}

impl Workload {
    /// The node kinds the workload makes, relative to the session's root: each must be seen.
    const NODES: [&'static str; 14] = [
        "/election",
        "/election/latch",
        "/locks/mutex",
        "/pools/p",
        "/pools/p/members",
        "/pools/p/assignment",
        "/pools/p/jobs",
        "/pools/p/jobs/j",
        "/jobs/nightly",
        "/jobs/nightly/leader",
        "/jobs/nightly/state",
        "/jobs/nightly/control",
        "/jobs/nightly/slots",
        "/jobs/nightly/clock",
    ];
    /// Parents whose children (contender nodes, slot records) must be seen too.
    const WITH_CHILDREN: [&'static str; 6] = [
        "/election/latch",
        "/locks/mutex",
        "/pools/p/members",
        "/pools/p/jobs/j",
        "/jobs/nightly/leader",
        "/jobs/nightly/slots",
    ];

    async fn start(session: &Session) -> Workload {
        let latch = LeaderLatch::builder(session, "/election/latch")
            .id("a")
            .start()
            .await
            .expect("a latch with the default ACL");
        within(BOUND, "the latch is elected", latch.await_leadership())
            .await
            .expect("elected");
        let mutex = InterProcessMutex::builder(session, "/locks/mutex")
            .id("a")
            .build()
            .expect("a mutex with the default ACL");
        let lock = within(BOUND, "the lock is taken", mutex.acquire())
            .await
            .expect("held");
        let pool = LeaderPool::builder(session, "/pools/p")
            .id("a")
            .jobs(["j"])
            .start()
            .await
            .expect("a pool with the default ACL");
        eventually(BOUND, "the pool's only member leads its job", || async {
            pool.is_leading("j").then_some(())
        })
        .await;
        let job = ScheduledJob::builder(session, "/jobs/nightly")
            .every(Duration::from_secs(3600))
            .id("a")
            .start(|_run: SlotRun| async { Ok::<(), std::io::Error>(()) })
            .await
            .expect("a job with the default ACL");
        eventually(BOUND, "the job leads", || async {
            job.has_leadership().then_some(())
        })
        .await;
        let admin = job.admin();
        admin.trigger().await.expect("a trigger");
        eventually(BOUND, "the triggered slot succeeds", || async {
            let history = admin.history(10).await.ok()?;
            history
                .iter()
                .any(|r| r.state == SlotState::Succeeded)
                .then_some(())
        })
        .await;
        admin
            .ensemble_now()
            .await
            .expect("the clock node is written");
        Workload {
            latch,
            lock,
            pool,
            job,
        }
    }

    /// Checks that every node kind was seen under `root`.
    fn assert_seen(tree: &[Seen], root: &str) {
        let has = |p: &str| tree.iter().any(|n| n.path == p);
        for node in Self::NODES {
            let path = format!("{root}{node}");
            assert!(has(&path), "{path} is missing from {:#?}", paths(tree));
        }
        for parent in Self::WITH_CHILDREN {
            let prefix = format!("{root}{parent}/");
            assert!(
                tree.iter().any(|n| n.path.starts_with(&prefix)),
                "nothing under {root}{parent}: {:#?}",
                paths(tree)
            );
        }
    }

    async fn close(self) {
        self.lock.release().await.expect("the lock is released");
        self.latch.close().await.expect("the latch closes");
        self.pool.close().await.expect("the pool closes");
        self.job.close().await.expect("the job closes");
    }
}

/// A unique path right under `/` (each of these tests has a server of its own): the crate then
/// creates every node of the test's tree itself.
fn top_level(name: &str) -> String {
    testing::unique_path(name).replacen("/zkr-test", "", 1)
}

fn paths(tree: &[Seen]) -> Vec<&str> {
    tree.iter().map(|n| n.path.as_str()).collect()
}

/// With `identity`: the chroot, its missing ancestor, and every node the recipes, the pool and
/// a job create are the owner's with all rights, and others may read them and do nothing else.
async fn every_node_is_the_creators_and_only_readable_by_others(identity: Identity) {
    let secured = Secured::start(identity).await;
    let top = top_level("lp");
    let chroot = format!("{top}/app");
    let owner = connect(
        secured.owner().chroot(&chroot),
        &format!("{identity:?}: the owner"),
    )
    .await;
    assert_eq!(owner.default_acl(), NodeAcl::creator_all_anyone_read());
    let work = Workload::start(&owner).await;

    let stranger = connect(secured.stranger(), &format!("{identity:?}: a stranger")).await;
    assert_eq!(stranger.default_acl(), NodeAcl::anyone_all());
    let client = stranger.client().expect("a live client");
    let tree = walk(&client, &top).await;
    Workload::assert_seen(&tree, &chroot);
    assert!(paths(&tree).contains(&chroot.as_str()));
    for node in &tree {
        assert_eq!(
            node.acl.len(),
            2,
            "{identity:?}: {} has the ACL {:?}",
            node.path,
            node.acl
        );
        assert!(
            node.acl.iter().any(|a| secured.is_owner(a)),
            "{identity:?}: {} does not give its creator every right: {:?}",
            node.path,
            node.acl
        );
        assert!(
            node.acl.iter().any(|a| a.scheme() == "world"
                && a.id() == "anyone"
                && a.permission() == Permission::READ),
            "{identity:?}: {} gives others more (or less) than READ: {:?}",
            node.path,
            node.acl
        );
    }
    // The stranger may read, and nothing else.
    for node in &tree {
        let path = node.path.as_str();
        let refused = |what: &str, r: Result<(), ZkError>| {
            assert_eq!(
                r.err(),
                Some(ZkError::NoAuth),
                "{identity:?}: a stranger's {what} of {path} was not refused"
            );
        };
        refused("setData", client.set_data(path, b"x", None).await.map(drop));
        refused(
            "setAcl",
            client
                .set_acl(path, &Acls::anyone_all(), None)
                .await
                .map(drop),
        );
        if !node.ephemeral {
            refused(
                "create",
                client
                    .create(
                        &format!("{path}/intruder"),
                        b"",
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .await
                    .map(drop),
            );
        }
        // A delete is checked against the parent's ACL; the top's parent is `/`.
        if path != top {
            refused("delete", client.delete(path, None).await);
        }
    }
    work.close().await;
    stranger.close().await.unwrap();
    owner.close().await.unwrap();
}

#[tokio::test]
async fn with_digest_credentials_every_node_created_is_the_creators_and_read_only_for_others() {
    if !zookeeper() {
        return;
    }
    every_node_is_the_creators_and_only_readable_by_others(Identity::Digest).await;
}

#[tokio::test]
async fn with_a_sasl_login_every_node_created_is_the_creators_and_read_only_for_others() {
    if !zookeeper() {
        return;
    }
    every_node_is_the_creators_and_only_readable_by_others(Identity::Sasl).await;
}

#[tokio::test]
async fn with_a_client_certificate_and_x509_every_node_created_is_the_creators_and_read_only_for_others()
 {
    if !zookeeper() {
        return;
    }
    every_node_is_the_creators_and_only_readable_by_others(Identity::X509).await;
}

/// Compatibility: a session without an identity creates everything open, as Curator does.
#[tokio::test]
async fn without_an_identity_every_node_created_stays_open_to_anyone() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let top = testing::unique_path("open-default");
    let chroot = format!("{top}/app");
    let session = connect(
        Session::builder(server.connect_string())
            .session_timeout(Duration::from_secs(6))
            .chroot(&chroot),
        "no identity",
    )
    .await;
    assert_eq!(session.default_acl(), NodeAcl::anyone_all());
    let work = Workload::start(&session).await;
    let reader = connect(Session::builder(server.connect_string()), "a reader").await;
    let tree = walk(&reader.client().unwrap(), &top).await;
    Workload::assert_seen(&tree, &chroot);
    for node in &tree {
        assert_eq!(
            node.acl,
            Acls::anyone_all().to_vec(),
            "{} is not open to anyone",
            node.path
        );
    }
    work.close().await;
    reader.close().await.unwrap();
    session.close().await.unwrap();
}

/// An explicit ACL still wins over the default: `anyone_all` on a session with an identity
/// opens the recipe's nodes, and `chroot_acl` the chroot.
#[tokio::test]
async fn an_explicit_open_acl_still_opens_the_nodes_of_a_session_with_an_identity() {
    if !zookeeper() {
        return;
    }
    let secured = Secured::start(Identity::Digest).await;
    let chroot = top_level("open");
    let session = connect(
        secured
            .owner()
            .chroot(&chroot)
            .chroot_acl(NodeAcl::anyone_all()),
        "digest, told to stay open",
    )
    .await;
    let latch = LeaderLatch::builder(&session, "/election/open")
        .id("a")
        .acl(NodeAcl::anyone_all())
        .start()
        .await
        .unwrap();
    within(BOUND, "the latch is elected", latch.await_leadership())
        .await
        .unwrap();
    let stranger = connect(secured.stranger(), "a stranger").await;
    let tree = walk(&stranger.client().unwrap(), &chroot).await;
    assert_eq!(tree.len(), 4, "{:#?}", paths(&tree));
    for node in &tree {
        assert_eq!(node.acl, Acls::anyone_all().to_vec(), "{}", node.path);
    }
    latch.close().await.unwrap();
    stranger.close().await.unwrap();
    session.close().await.unwrap();
}

/// A chroot that must be provisioned: no session while it is missing (a typed error naming
/// it), nothing created; once an operator made it, the session comes up in it and it keeps
/// the operator's ACL.
#[tokio::test]
async fn a_chroot_that_must_exist_is_never_created_and_its_absence_is_named() {
    if !zookeeper() {
        return;
    }
    let secured = Secured::start(Identity::Digest).await;
    let chroot = top_level("provisioned");
    let (e, took) = refused(
        secured.owner().chroot(&chroot).chroot_must_exist(),
        "a missing chroot that must exist",
    )
    .await;
    match &e {
        Error::NoChroot { chroot: named } => assert_eq!(named, &chroot),
        other => panic!("{other}, not NoChroot"),
    }
    assert!(e.to_string().contains(&chroot), "{e}");
    assert!(took <= FAIL_WITHIN + FAIL_SLACK, "{took:?}");
    let operator = connect(secured.stranger(), "the operator").await;
    let client = operator.client().unwrap();
    assert!(
        client.check_stat(&chroot).await.unwrap().is_none(),
        "the session created the chroot it was told must exist"
    );
    client
        .create(
            &chroot,
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .expect("the operator provisions the chroot");
    let session = connect(
        secured.owner().chroot(&chroot).chroot_must_exist(),
        "the provisioned chroot",
    )
    .await;
    let (acl, _) = client.get_acl(&chroot).await.unwrap();
    assert_eq!(acl, Acls::anyone_all().to_vec(), "the operator's ACL stays");
    session.close().await.unwrap();
    operator.close().await.unwrap();
}
