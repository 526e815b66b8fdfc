//! Tests of the test harness itself, against real ZooKeeper processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OnceCell};
use zookeeper_client::{Acls, Client, CreateMode, SessionState, StateWatcher};
use zookeeper_recipes::testing::{
    self, FaultProxy, HarnessError, ServerMode, TestingCluster, TestingServer, expire_session,
};

/// The server shared by the tests that do not fault it.
static SHARED: OnceCell<TestingServer> = OnceCell::const_new();
/// Tests that start their own JVMs take turns: the machine has two cores.
static OWN_JVMS: Mutex<()> = Mutex::const_new(());

fn zookeeper() -> bool {
    testing::require_zookeeper().unwrap_or_else(|e| panic!("{e}"))
}

async fn shared() -> &'static TestingServer {
    SHARED
        .get_or_try_init(|| async {
            let started = Instant::now();
            let server = TestingServer::start().await?;
            eprintln!(
                "[harness] standalone server serving after {} ms",
                started.elapsed().as_millis()
            );
            Ok::<_, HarnessError>(server)
        })
        .await
        .expect("the shared ZooKeeper server did not start")
}

async fn connect(connect_string: &str, session_timeout: Duration) -> Client {
    tokio::time::timeout(
        Duration::from_secs(20),
        Client::connector()
            .with_session_timeout(session_timeout)
            .connect(connect_string),
    )
    .await
    .expect("the client did not connect within 20 s")
    .expect("the client failed to connect")
}

async fn wait_state(watcher: &mut StateWatcher, want: SessionState, within: Duration, what: &str) {
    tokio::time::timeout(within, async {
        let mut state = watcher.state();
        while state != want {
            state = watcher.changed().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: the client did not reach {want} within {within:?}"));
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

#[tokio::test]
async fn server_starts_and_serves_a_client() {
    if !zookeeper() {
        return;
    }
    let server = shared().await;
    assert!(server.is_running());
    assert!(server.pid().is_some());
    assert_eq!(
        server.connect_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert_eq!(server.mode().await.expect("srvr"), ServerMode::Standalone);

    let client = connect(server.connect_string(), Duration::from_secs(10)).await;
    let root = testing::unique_path("serves");
    client.mkdir(&root, &persistent()).await.expect("mkdir");
    let node = format!("{root}/n");
    client
        .create(&node, b"hello", &persistent())
        .await
        .expect("create");
    let (data, _) = client.get_data(&node).await.expect("get_data");
    assert_eq!(data, b"hello");

    let mntr = server.mntr().await.expect("mntr");
    assert!(mntr.contains_key("zk_version"), "mntr: {mntr:?}");
    assert!(
        mntr["zk_packets_received"].parse::<u64>().expect("a count") > 0,
        "mntr: {mntr:?}"
    );
    let cons = server.four_letter_word("cons").await.expect("cons");
    assert!(
        cons.contains(&format!("sid={:#x}", client.session_id().0)),
        "cons does not list the client's session: {cons}"
    );
    assert!(matches!(
        server.four_letter_word("nope!").await,
        Err(HarnessError::InvalidArgument { .. })
    ));
}

#[tokio::test]
async fn restart_keeps_port_and_data() {
    if !zookeeper() {
        return;
    }
    let _turn = OWN_JVMS.lock().await;
    let server = TestingServer::start().await.expect("server did not start");
    let port = server.port();
    let client = connect(server.connect_string(), Duration::from_secs(10)).await;
    let root = testing::unique_path("restart");
    client.mkdir(&root, &persistent()).await.expect("mkdir");
    drop(client);

    // After a graceful stop.
    server.stop().await.expect("stop");
    assert!(!server.is_running());
    assert!(server.pid().is_none());
    assert!(matches!(server.pause(), Err(HarnessError::NotRunning(_))));
    server.stop().await.expect("a second stop is a no-op");
    let started = Instant::now();
    server.restart().await.expect("restart after stop");
    eprintln!(
        "[harness] restart after stop serving after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(server.port(), port);
    let client = connect(server.connect_string(), Duration::from_secs(10)).await;
    assert!(
        client.check_stat(&root).await.expect("stat").is_some(),
        "the persistent node did not survive a stop and restart"
    );
    let child = format!("{root}/after-stop");
    client
        .create(&child, b"", &persistent())
        .await
        .expect("create");
    drop(client);

    // After a crash.
    let pid = server.pid().expect("running");
    server.kill().await.expect("kill");
    assert!(!server.is_running());
    server.restart().await.expect("restart after kill");
    assert_ne!(server.pid(), Some(pid));

    // While running (and paused: restart must not hang on a frozen JVM).
    server.pause().expect("pause");
    let started = Instant::now();
    server.restart().await.expect("restart while running");
    eprintln!(
        "[harness] restart of a running (paused) server serving after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(server.port(), port);
    let client = connect(server.connect_string(), Duration::from_secs(10)).await;
    assert!(
        client.check_stat(&child).await.expect("stat").is_some(),
        "a node written before a SIGKILL did not survive the restart"
    );
}

#[tokio::test]
async fn pause_stalls_requests_until_resume() {
    if !zookeeper() {
        return;
    }
    let _turn = OWN_JVMS.lock().await;
    let server = TestingServer::start().await.expect("server did not start");
    // A long session (connection timeout 2/5 of it) so that the pause is not a disconnect.
    let client = connect(server.connect_string(), Duration::from_secs(20)).await;
    client.check_stat("/").await.expect("stat before pause");

    server.pause().expect("pause");
    let request = client.check_stat("/");
    tokio::pin!(request);
    match tokio::time::timeout(Duration::from_millis(1500), &mut request).await {
        Err(_) => {}
        Ok(Ok(_)) => panic!("a request to a paused server was answered"),
        Ok(Err(e)) => panic!("a request to a paused server failed instead of stalling: {e}"),
    }
    assert!(server.is_running(), "a paused server counts as running");

    server.resume().expect("resume");
    tokio::time::timeout(Duration::from_secs(5), request)
        .await
        .expect("the stalled request did not finish after resume")
        .expect("the stalled request failed after resume");
}

#[tokio::test]
async fn cluster_elects_a_new_leader_when_the_leader_is_killed() {
    if !zookeeper() {
        return;
    }
    let _turn = OWN_JVMS.lock().await;
    let started = Instant::now();
    let cluster = TestingCluster::start(3)
        .await
        .expect("ensemble did not start");
    eprintln!(
        "[harness] 3-server ensemble with a leader after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(cluster.len(), 3);
    assert_eq!(cluster.connect_string().split(',').count(), 3);
    let modes = [
        cluster.mode(0).await.expect("mode 0"),
        cluster.mode(1).await.expect("mode 1"),
        cluster.mode(2).await.expect("mode 2"),
    ];
    assert_eq!(
        modes.iter().filter(|m| **m == ServerMode::Leader).count(),
        1,
        "modes: {modes:?}"
    );

    let client = connect(cluster.connect_string(), Duration::from_secs(10)).await;
    let root = testing::unique_path("cluster");
    client.mkdir(&root, &persistent()).await.expect("mkdir");

    let leader = cluster
        .leader_index()
        .await
        .expect("leader_index")
        .expect("a started ensemble has a leader");
    cluster.kill_server(leader).await.expect("kill the leader");
    assert!(!cluster.is_running(leader).expect("index"));
    let killed = Instant::now();
    let next = cluster
        .wait_for_leader(Duration::from_secs(30))
        .await
        .expect("no new leader after the leader was killed");
    eprintln!(
        "[harness] new leader {} ms after the leader was killed",
        killed.elapsed().as_millis()
    );
    assert_ne!(next, leader, "the killed server cannot lead");

    let started = Instant::now();
    cluster
        .restart_server(leader)
        .await
        .expect("the old leader did not rejoin");
    eprintln!(
        "[harness] killed server rejoined after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(
        cluster.mode(leader).await.expect("mode"),
        ServerMode::Follower
    );
    tokio::time::timeout(Duration::from_secs(20), client.check_stat(&root))
        .await
        .expect("the client did not get an answer after the leader change")
        .expect("stat")
        .expect("the node written before the leader change is gone");

    // KillSession against an ensemble: the twin closes the session through another server.
    let doomed = connect(cluster.connect_string(), Duration::from_secs(20)).await;
    let mut doomed_state = doomed.state_watcher();
    expire_session(
        cluster.connect_string(),
        doomed.session(),
        Duration::from_secs(10),
    )
    .await
    .expect("expire_session against the ensemble");
    wait_state(
        &mut doomed_state,
        SessionState::Expired,
        Duration::from_secs(10),
        "after expire_session on the ensemble",
    )
    .await;

    assert!(matches!(
        cluster.kill_server(3).await,
        Err(HarnessError::NoSuchServer { index: 3, len: 3 })
    ));
}

#[tokio::test]
async fn proxy_cut_disconnects_and_heal_reconnects() {
    if !zookeeper() {
        return;
    }
    let server = shared().await;
    let proxy = FaultProxy::start(&[server.connect_string().to_owned()])
        .await
        .expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(10)).await;
    let session = client.session_id();
    let mut state = client.state_watcher();
    assert_eq!(proxy.connection_count(), 1);

    proxy.cut();
    wait_state(
        &mut state,
        SessionState::Disconnected,
        Duration::from_secs(5),
        "after cut",
    )
    .await;
    // Reconnection attempts are refused while cut.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(proxy.connection_count(), 0);
    // A request now is queued (or fails), never answered.
    assert!(
        !matches!(
            tokio::time::timeout(Duration::from_millis(300), client.check_stat("/")).await,
            Ok(Ok(_))
        ),
        "a request was answered through a cut link"
    );

    proxy.heal();
    wait_state(
        &mut state,
        SessionState::SyncConnected,
        Duration::from_secs(10),
        "after heal",
    )
    .await;
    assert_eq!(client.session_id(), session, "heal must keep the session");
    client.check_stat("/").await.expect("stat after heal");
}

#[tokio::test]
async fn proxy_blackhole_stalls_requests_until_heal() {
    if !zookeeper() {
        return;
    }
    let server = shared().await;
    let proxy = FaultProxy::start(&[server.connect_string().to_owned()])
        .await
        .expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(20)).await;
    client.check_stat("/").await.expect("stat before blackhole");

    proxy.blackhole();
    let request = client.check_stat("/");
    tokio::pin!(request);
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), &mut request)
            .await
            .is_err(),
        "a request through a blackholed proxy was answered"
    );
    assert_eq!(
        proxy.connection_count(),
        1,
        "a blackhole keeps connections open"
    );

    proxy.heal();
    tokio::time::timeout(Duration::from_secs(5), request)
        .await
        .expect("the held-back request did not finish after heal")
        .expect("the held-back request failed after heal");
}

#[tokio::test]
async fn proxy_delay_adds_latency_both_ways() {
    if !zookeeper() {
        return;
    }
    let server = shared().await;
    let proxy = FaultProxy::start(&[server.connect_string().to_owned()])
        .await
        .expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(20)).await;
    proxy.delay(Duration::from_millis(200));
    let started = Instant::now();
    client
        .check_stat("/")
        .await
        .expect("stat through a slow link");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "a round trip through a 200 ms link took {took:?}"
    );
    proxy.heal();
    let started = Instant::now();
    client.check_stat("/").await.expect("stat after heal");
    assert!(started.elapsed() < Duration::from_millis(200));
}

#[tokio::test]
async fn expire_session_expires_the_original_client() {
    if !zookeeper() {
        return;
    }
    let server = shared().await;
    let client = connect(server.connect_string(), Duration::from_secs(20)).await;
    let mut state = client.state_watcher();
    let root = testing::unique_path("expire");
    client.mkdir(&root, &persistent()).await.expect("mkdir");
    let ephemeral = format!("{root}/e");
    client
        .create(
            &ephemeral,
            b"",
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .expect("create ephemeral");

    let started = Instant::now();
    expire_session(
        server.connect_string(),
        client.session(),
        Duration::from_secs(10),
    )
    .await
    .expect("expire_session");
    eprintln!(
        "[harness] session expired from outside in {} ms",
        started.elapsed().as_millis()
    );
    wait_state(
        &mut state,
        SessionState::Expired,
        Duration::from_secs(10),
        "after expire_session",
    )
    .await;

    let observer = connect(server.connect_string(), Duration::from_secs(10)).await;
    assert!(
        observer
            .check_stat(&ephemeral)
            .await
            .expect("stat")
            .is_none(),
        "the expired session's ephemeral node is still there"
    );
}

#[tokio::test]
async fn proxy_spans_an_ensemble_in_order() {
    // No server needed: listeners exist before any upstream is reached.
    let upstreams = ["127.0.0.1:1".to_owned(), "127.0.0.1:2".to_owned()];
    let proxy = FaultProxy::start(&upstreams).await.expect("proxy");
    let cs = proxy.connect_string();
    let parts: Vec<&str> = cs.split(',').collect();
    assert_eq!(parts.len(), 2);
    assert_eq!(
        parts[1],
        proxy.listen_address(1).expect("second").to_string()
    );
    assert!(proxy.listen_address(2).is_none());
    // A client connection to a down upstream is closed, not leaked.
    let mut s = tokio::net::TcpStream::connect(parts[0])
        .await
        .expect("connect");
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut s, &mut buf),
    )
    .await
    .expect("the proxy did not close a connection whose upstream is down");
    assert!(matches!(n, Ok(0) | Err(_)));
    assert!(FaultProxy::start(&[]).await.is_err());
}

#[test]
fn harness_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TestingServer>();
    assert_send_sync::<TestingCluster>();
    assert_send_sync::<FaultProxy>();
    assert_send_sync::<HarnessError>();
}

/// Proves the sidecar: a test process that is `SIGKILL`ed takes its server with it.
#[test]
fn server_dies_when_the_test_process_is_killed() {
    if !zookeeper() {
        return;
    }
    let _turn = OWN_JVMS.blocking_lock();
    let exe = std::env::current_exe().expect("current exe");
    let mut child = KillOnDrop(
        std::process::Command::new(exe)
            .args([
                "--exact",
                "leak_probe_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ZKR_LEAK_PROBE", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the probe"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // libtest prints `test leak_probe_child ... ` before it on the same line.
            if let Some((_, rest)) = line.split_once("LEAK-PROBE ") {
                let _ = tx.send(rest.to_owned());
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the probe did not report a started server within 60 s");
    let (pid, dir) = line.split_once(' ').expect("pid and dir");
    let pid: u32 = pid.parse().expect("pid");
    let dir = PathBuf::from(dir);
    assert!(alive(pid), "the probe's server is not running");
    assert!(dir.exists());

    child.0.kill().expect("SIGKILL the probe");
    child.0.wait().expect("reap the probe");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (alive(pid) || dir.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(pid),
        "the JVM {pid} outlived its SIGKILLed test process"
    );
    assert!(!dir.exists(), "{} outlived its test process", dir.display());
}

/// A child process that is killed if the test fails before it is.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a pid is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
#[ignore = "run as a child process by server_dies_when_the_test_process_is_killed"]
fn leak_probe_child() {
    if std::env::var_os("ZKR_LEAK_PROBE").is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt
        .block_on(TestingServer::start())
        .expect("probe server did not start");
    let dir = server
        .data_dir()
        .and_then(|d| d.parent())
        .expect("the server's directory")
        .to_path_buf();
    println!(
        "LEAK-PROBE {} {}",
        server.pid().expect("pid"),
        dir.display()
    );
    // Wait to be killed (bounded, should the parent die first).
    std::thread::sleep(Duration::from_secs(120));
}
