//! The case the lease's `session_timeout_floor` stands in for (docs/decisions/0001-no-relay.md),
//! seen through the patched zookeeper-client: a rolling change lowers a server's
//! `maxSessionTimeout` while a session runs, and the session moves to that server.

use std::time::Duration;

use zookeeper_client as zk;
use zookeeper_recipes_testing::{TestingCluster, require_zookeeper};

#[tokio::test]
async fn a_reconnect_to_a_server_with_a_lower_max_reports_the_renegotiated_timeout() {
    if !require_zookeeper().expect("ZooKeeper is required under CI=true") {
        return;
    }
    let cluster = TestingCluster::builder()
        .servers(3)
        .max_session_timeout(Duration::from_secs(20))
        .start()
        .await
        .expect("the ensemble starts");
    let servers = [
        cluster
            .server_connect_string(0)
            .expect("server 0")
            .to_string(),
        cluster
            .server_connect_string(1)
            .expect("server 1")
            .to_string(),
    ];
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&servers.join(","))
        .await
        .expect("a session on server 0 or 1");
    let first = client.connection_info();
    assert_eq!(first.generation(), 1);
    assert_eq!(first.negotiated_timeout(), Duration::from_secs(20));
    let on = servers
        .iter()
        .position(|s| s == first.server())
        .unwrap_or_else(|| panic!("{} is not among {servers:?}", first.server()));
    let other = 1 - on;

    // The rolling change: the server the session is not on now holds sessions to 4 s.
    cluster
        .set_session_timeouts(other, Duration::from_millis(400), Duration::from_secs(4))
        .expect("new limits for the other server");
    cluster
        .restart_server(other)
        .await
        .expect("the other server restarts");
    assert_eq!(
        client.connection_info(),
        first,
        "the session stayed where it was"
    );

    let mut watcher = client.connection_watcher();
    cluster
        .kill_server(on)
        .await
        .expect("the session's server is killed");
    let second = tokio::time::timeout(Duration::from_secs(30), watcher.changed())
        .await
        .expect("no connection to the other server within 30 s")
        .expect("the session ended instead of moving");
    assert_eq!(second.generation(), 2);
    assert_eq!(second.server(), servers[other]);
    assert_eq!(second.negotiated_timeout(), Duration::from_secs(4));
    // What zookeeper-client 0.11 reports, and all our lease can count with without a floor.
    assert_eq!(client.session_timeout(), Duration::from_secs(20));
    // The same session, served by the other server.
    client
        .check_stat("/")
        .await
        .expect("a read on the moved session");
}
