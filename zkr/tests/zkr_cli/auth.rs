//! Authentication and ACLs from the command line (issue 28, item 15): `--auth-file`,
//! `$ZK_AUTH` and `--acl`, through the real binary against real ZooKeeper. Each test owns its
//! job path; every wait is bounded with a message that says what did not happen.

use zookeeper_recipes_rigs::fixtures as common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::zkr::{EventsOn, Zkr, zkr};
use common::{BOUND, client, persistent, shared_server, zookeeper};
use nix::sys::signal::Signal;
use serde_json::Value;
use zookeeper_client::Error as Zk;
use zookeeper_recipes_testing as testing;

// `zkr [ENV] ARGS...` to completion: the suite's helper, with an environment variable.
use crate::cron_cli::zkr_output_with as zkr_output;

/// Writes `text` to `dir/name` with `mode`; returns the path as a string.
pub(crate) fn write_file(dir: &Path, name: &str, text: &str, mode: u32) -> String {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    file.to_str().unwrap().to_owned()
}

/// A fresh digest identity: (user, password).
pub(crate) fn identity() -> (String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    (format!("job-{}", &id[..8]), format!("pw-{}", &id[8..24]))
}

/// A fresh digest identity and its `--auth-file` in `dir` (mode 0600): (user, password, file).
pub(crate) fn identity_file(dir: &Path) -> (String, String, String) {
    let (user, password) = identity();
    let file = write_file(
        dir,
        "zk.auth",
        &format!("digest:{user}:{password}\n"),
        0o600,
    );
    (user, password, file)
}

/// A client of ZooKeeper authenticated as `user:password` (digest).
async fn client_as(connect: &str, user: &str, password: &str) -> zookeeper_client::Client {
    let zk = client(connect).await;
    tokio::time::timeout(
        BOUND,
        zk.auth("digest", format!("{user}:{password}").as_bytes()),
    )
    .await
    .unwrap_or_else(|_| panic!("digest auth as {user} got no answer within {BOUND:?}"))
    .expect("the server accepts a digest identity");
    zk
}

/// The parent of the test paths exists with an open ACL, so that a creator ACL given to a job
/// never lands on a node other tests share.
pub(crate) async fn open_parent(connect: &str, path: &str) {
    let parent = &path[..path.rfind('/').unwrap()];
    let zk = client(connect).await;
    match zk.mkdir(parent, &persistent()).await {
        Ok(()) | Err(Zk::NodeExists) => {}
        Err(e) => panic!("cannot create {parent}: {e}"),
    }
}

#[tokio::test]
async fn a_job_with_auth_file_and_acl_creator_is_closed_to_others_and_open_to_its_user() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("auth-creator");
    open_parent(connect, &path).await;
    let dir = tempfile::tempdir().unwrap();
    let (user, password, file) = identity_file(dir.path());

    let mut r = Zkr::supervisor(
        connect,
        "r",
        &[
            "--session-timeout",
            "6s",
            "--auth-file",
            &file,
            "--acl",
            "creator",
            "cron",
            "run",
            &path,
            "--id",
            "r",
            "--every",
            "1s",
            "--",
            "true",
        ],
    );
    r.wait_for("slot_finished", BOUND, "r ran no slot with --acl creator")
        .await;

    // Nobody else may read, list or write the job's nodes.
    let anyone = client(connect).await;
    for (what, denied) in [
        ("getData", anyone.get_data(&path).await.err()),
        ("getChildren", anyone.get_children(&path).await.err()),
        (
            "getChildren of the election",
            anyone.get_children(&format!("{path}/leader")).await.err(),
        ),
        (
            "create a child",
            anyone
                .create(&format!("{path}/intruder"), b"", &persistent())
                .await
                .err(),
        ),
    ] {
        assert_eq!(
            denied,
            Some(Zk::NoAuth),
            "an unauthenticated client could {what} on {path}"
        );
    }
    // A client of another digest user neither.
    let (stranger, other_password) = identity();
    let other = client_as(connect, &stranger, &other_password).await;
    assert_eq!(
        other.get_children(&path).await.err(),
        Some(Zk::NoAuth),
        "another digest user could list {path}"
    );
    // The same digest user can do everything.
    let same = client_as(connect, &user, &password).await;
    let (children, _) = same
        .get_children(&path)
        .await
        .expect("its user lists the job");
    assert!(children.contains(&"leader".to_owned()), "{children:?}");
    let mine = format!("{path}/mine");
    same.create(&mine, b"x", &persistent())
        .await
        .expect("its user creates under the job");
    same.delete(&mine, None).await.expect("and deletes");

    // `cron status`: with the credentials (the file, or $ZK_AUTH) it works.
    let mut said = Vec::new();
    for (env, pre) in [
        (None, vec!["--auth-file", file.as_str()]),
        (Some(format!("digest:{user}:{password}")), vec![]),
    ] {
        let mut args = pre.clone();
        args.extend_from_slice(&["cron", "status", &path]);
        let (status, out, err) =
            zkr_output(connect, env.as_deref().map(|v| ("ZK_AUTH", v)), &args).await;
        assert!(status.success(), "zkr {args:?} failed: {status}\n{err}");
        let json: Value = serde_json::from_str(&out).expect("status prints JSON");
        assert!(json.is_object(), "{out}");
        said.push(err);
    }
    // Without credentials, or with the wrong ones, it fails with 77 and says why.
    let wrong = write_file(
        dir.path(),
        "wrong.auth",
        &format!("digest:{user}:not-{password}"),
        0o600,
    );
    for pre in [vec![], vec!["--auth-file", wrong.as_str()]] {
        let mut args = pre.clone();
        args.extend_from_slice(&["cron", "status", &path]);
        let (status, out, err) = zkr_output(connect, None, &args).await;
        assert_eq!(status.code(), Some(77), "zkr {args:?}: {out}\n{err}");
        assert!(out.is_empty(), "zkr {args:?} printed {out:?}");
        assert!(
            err.contains(&format!("cannot read the status of {path}"))
                && err.contains("access denied")
                && err.contains("--auth-file"),
            "zkr {args:?} should say access was denied and how to authenticate: {err}"
        );
        said.push(err);
    }

    r.signal(Signal::SIGTERM);
    let code = r.exit(BOUND, "r after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "{code:?}\n{}", r.context());
    let lines = r.all_lines(BOUND).await;
    // The password is in no event line, no other output of r, and no message of the commands.
    for line in &lines {
        let text = line.json.to_string();
        assert!(
            !text.contains(&password),
            "an event line holds the password: {text}"
        );
    }
    let other_output = r.other.lock().unwrap().join("\n");
    assert!(
        !other_output.contains(&password),
        "r's output holds the password: {other_output}"
    );
    for err in said {
        assert!(
            !err.contains(&password),
            "a message holds the password: {err}"
        );
    }
}

#[tokio::test]
async fn bad_credentials_or_acl_are_exit_2_before_connecting_and_never_echo_the_password() {
    // No server: a listener that tells whether zkr tried to connect.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let secret = "hunter2-s3cret";
    let open = write_file(
        dir.path(),
        "open.auth",
        &format!("digest:u:{secret}\n"),
        0o644,
    );
    let no_scheme = write_file(dir.path(), "plain.auth", &format!("u:{secret}"), 0o600);
    let no_user = write_file(
        dir.path(),
        "nouser.auth",
        &format!("digest::{secret}"),
        0o600,
    );
    let no_password = write_file(dir.path(), "nopw.auth", "digest:u:\n", 0o600);
    let two_lines = write_file(
        dir.path(),
        "two.auth",
        &format!("digest:u:{secret}\ndigest:v:{secret}\n"),
        0o600,
    );
    let missing = dir.path().join("missing.auth").to_str().unwrap().to_owned();
    for (file, says) in [
        (&open, "group or others may access it (mode 644)"),
        (&no_scheme, "must be `digest:USER:PASSWORD`"),
        (&no_user, "the user is empty"),
        (&no_password, "the password is empty"),
        (&two_lines, "several lines"),
        (&missing, "cannot read it"),
    ] {
        let args = ["--auth-file", file.as_str(), "cron", "status", "/cron/x"];
        let (status, out, err) = zkr_output(&connect, None, &args).await;
        assert_eq!(status.code(), Some(2), "zkr {args:?}: {out}\n{err}");
        assert!(
            err.contains(&format!("--auth-file {file}")) && err.contains(says),
            "zkr {args:?} should name the file and say {says:?}: {err}"
        );
        assert!(
            !err.contains(secret),
            "the message holds the password: {err}"
        );
    }
    // $ZK_AUTH with an empty user or password (the library refuses both at build too).
    for (value, says) in [
        (format!("digest::{secret}"), "the user is empty"),
        ("digest:u:".to_owned(), "the password is empty"),
    ] {
        let (status, out, err) = zkr_output(
            &connect,
            Some(("ZK_AUTH", &value)),
            &["cron", "status", "/cron/x"],
        )
        .await;
        assert_eq!(status.code(), Some(2), "ZK_AUTH={value:?}: {out}\n{err}");
        assert!(err.contains("$ZK_AUTH") && err.contains(says), "{err}");
        assert!(
            !err.contains(secret),
            "the message holds the password: {err}"
        );
    }
    // $ZK_AUTH in a wrong format.
    let (status, _, err) = zkr_output(
        &connect,
        Some(("ZK_AUTH", &format!("sasl:u:{secret}"))),
        &["cron", "status", "/cron/x"],
    )
    .await;
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("$ZK_AUTH must be `digest:USER:PASSWORD`"),
        "{err}"
    );
    assert!(
        !err.contains(secret),
        "the message holds the password: {err}"
    );
    // A creator ACL without credentials.
    for acl in ["creator", "creator-read"] {
        let args = [
            "--acl", acl, "cron", "run", "/cron/x", "--every", "1s", "--", "true",
        ];
        let (status, _, err) = zkr_output(&connect, None, &args).await;
        assert_eq!(status.code(), Some(2), "zkr {args:?}: {err}");
        assert!(
            err.contains(&format!("--acl {acl} needs an identity")),
            "zkr {args:?}: {err}"
        );
    }
    assert!(
        listener.accept().is_err(),
        "zkr connected although its arguments were refused"
    );
}

#[tokio::test]
async fn run_and_lock_with_acl_creator_create_their_paths_closed_to_others() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let (user, password) = identity();
    let file = write_file(
        dir.path(),
        "zk.auth",
        &format!("digest:{user}:{password}"),
        0o600,
    );
    for command in ["run", "lock"] {
        let path = testing::unique_path(&format!("auth-{command}"));
        open_parent(connect, &path).await;
        // A holder keeps the path: an empty election or lock path is a container, which the
        // server may delete at any time. `run` takes the credentials from $ZK_AUTH, `lock` from
        // the file; CMD, which fails at once if it sees $ZK_AUTH, does not inherit them.
        let mut c = zkr(connect);
        if command == "run" {
            c.env("ZK_AUTH", format!("digest:{user}:{password}"));
        } else {
            c.args(["--auth-file", file.as_str()]);
        }
        c.args([
            "--acl",
            "creator",
            command,
            &path,
            "--",
            "sh",
            "-c",
            "test -z \"${ZK_AUTH+set}\" && exec sleep 60",
        ]);
        let mut holder = Zkr::spawn(command, c, EventsOn::Stderr);
        holder
            .wait_for("cmd_started", BOUND, "the holder's CMD never started")
            .await;

        let anyone = client(connect).await;
        assert_eq!(
            anyone.get_children(&path).await.err(),
            Some(Zk::NoAuth),
            "`zkr {command} --acl creator` left {path} open to anyone"
        );
        // ZooKeeper (since 3.4.14/3.5.5) shows an ACL only to a reader: its user reads it.
        let same = client_as(connect, &user, &password).await;
        let (acl, _) = same.get_acl(&path).await.expect("its user reads the ACL");
        assert!(
            acl.iter()
                .all(|a| a.scheme() == "digest" && a.id().starts_with(&format!("{user}:"))),
            "`zkr {command}` gave {path} the ACL {acl:?}"
        );
        // Taking part without the credentials: 77, "access denied".
        let args = [command, path.as_str(), "--", "true"];
        let (status, out, err) = zkr_output(connect, None, &args).await;
        assert_eq!(status.code(), Some(77), "zkr {args:?}: {out}\n{err}");
        assert!(err.contains("access denied"), "zkr {args:?}: {err}");
        // `zkr participants`: 77 without the credentials, the holder with them.
        let (status, out, err) = zkr_output(connect, None, &["participants", &path]).await;
        assert_eq!(status.code(), Some(77), "{out}\n{err}");
        assert!(err.contains("access denied"), "{err}");
        let (status, out, err) = zkr_output(
            connect,
            None,
            &["--auth-file", &file, "participants", &path],
        )
        .await;
        assert!(status.success(), "{err}");
        let list: Value = serde_json::from_str(&out).expect("participants prints JSON");
        assert_eq!(list.as_array().map(Vec::len), Some(1), "{out}");
        assert!(
            !err.contains(&password),
            "a message holds the password: {err}"
        );

        holder.signal(Signal::SIGTERM);
        let code = holder.exit(BOUND, "the holder after SIGTERM").await.code();
        assert!(
            matches!(code, Some(0 | 143)),
            "{code:?}\n{}",
            holder.context()
        );
        for line in holder.all_lines(BOUND).await {
            let text = line.json.to_string();
            assert!(
                !text.contains(&password),
                "an event line holds the password: {text}"
            );
        }
        let other = holder.other.lock().unwrap().join("\n");
        assert!(
            !other.contains(&password),
            "the output holds the password: {other}"
        );
    }
}

/// The ACL of `path` as `(scheme, id, permission)`, read by a client without credentials (the
/// nodes zkr makes with an identity are readable by anyone).
async fn acl_of(connect: &str, path: &str) -> Vec<(String, String, zookeeper_client::Permission)> {
    let anyone = client(connect).await;
    let (acl, _) = anyone
        .get_acl(path)
        .await
        .unwrap_or_else(|e| panic!("getAcl {path}: {e}"));
    acl.iter()
        .map(|a| (a.scheme().to_owned(), a.id().to_owned(), a.permission()))
        .collect()
}

/// `zkr [--acl ACL] --auth-file FILE run /svc -- sleep 60` in a chroot of its own: the holder
/// and the chroot (whose parent `/zkr-test` is open).
async fn run_in_a_chroot(
    connect: &str,
    file: &str,
    acl: Option<&str>,
    name: &str,
) -> (Zkr, String) {
    let chroot = testing::unique_path(name);
    open_parent(connect, &chroot).await;
    let mut c = zkr(&format!("{connect}{chroot}"));
    c.args(["--auth-file", file]);
    if let Some(acl) = acl {
        c.args(["--acl", acl]);
    }
    c.args(["run", "/svc", "--", "sh", "-c", "exec sleep 60"]);
    let mut holder = Zkr::spawn(name, c, EventsOn::Stderr);
    holder
        .wait_for("cmd_started", BOUND, "the holder's CMD never started")
        .await;
    (holder, chroot)
}

async fn stop(mut holder: Zkr) {
    holder.signal(Signal::SIGTERM);
    let code = holder.exit(BOUND, "the holder after SIGTERM").await.code();
    assert!(
        matches!(code, Some(0 | 143)),
        "{code:?}\n{}",
        holder.context()
    );
}

#[tokio::test]
async fn with_an_auth_file_and_no_acl_the_chroot_and_every_node_are_the_users_and_read_only_for_others()
 {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let (user, _, file) = identity_file(dir.path());
    let (holder, chroot) = run_in_a_chroot(connect, &file, None, "lp-zkr").await;
    let election = format!("{chroot}/svc");
    let anyone = client(connect).await;
    let nodes = anyone
        .list_children(&election)
        .await
        .expect("anyone may list the election");
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = format!("{election}/{}", nodes[0]);
    for path in [&chroot, &election, &node] {
        let acl = acl_of(connect, path).await;
        assert_eq!(acl.len(), 2, "{path}: {acl:?}");
        assert!(
            acl.iter().any(|(scheme, id, perms)| scheme == "digest"
                && id.starts_with(&format!("{user}:"))
                && *perms == zookeeper_client::Permission::ALL),
            "{path}: the user lacks every right: {acl:?}"
        );
        assert!(
            acl.contains(&(
                "world".to_owned(),
                "anyone".to_owned(),
                zookeeper_client::Permission::READ
            )),
            "{path}: others get more than READ: {acl:?}"
        );
        assert_eq!(
            anyone.set_data(path, b"x", None).await.err(),
            Some(Zk::NoAuth),
            "{path}: a stranger wrote"
        );
        assert_eq!(
            anyone
                .set_acl(path, &zookeeper_client::Acls::anyone_all(), None)
                .await
                .err(),
            Some(Zk::NoAuth),
            "{path}: a stranger set the ACL"
        );
    }
    assert_eq!(
        anyone
            .create(&format!("{election}/intruder"), b"", &persistent())
            .await
            .err(),
        Some(Zk::NoAuth),
        "a stranger joined the election"
    );
    assert_eq!(
        anyone.delete(&node, None).await.err(),
        Some(Zk::NoAuth),
        "a stranger deleted the leader's node"
    );
    // And without credentials, `participants` still reads the election (creator-read).
    let (status, out, err) = zkr_output(
        &format!("{connect}{chroot}"),
        None,
        &["participants", "/svc"],
    )
    .await;
    assert!(status.success(), "{out}\n{err}");
    stop(holder).await;
}

#[tokio::test]
async fn with_an_auth_file_acl_open_still_opens_the_chroot_and_every_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let (_, _, file) = identity_file(dir.path());
    let (holder, chroot) = run_in_a_chroot(connect, &file, Some("open"), "open-zkr").await;
    let election = format!("{chroot}/svc");
    let nodes = client(connect)
        .await
        .list_children(&election)
        .await
        .expect("the election");
    let node = format!("{election}/{}", nodes[0]);
    for path in [&chroot, &election, &node] {
        assert_eq!(
            acl_of(connect, path).await,
            [(
                "world".to_owned(),
                "anyone".to_owned(),
                zookeeper_client::Permission::ALL
            )],
            "{path}: --acl open must give anyone every right"
        );
    }
    stop(holder).await;
}
