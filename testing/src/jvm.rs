//! Where Java and the ZooKeeper jars are: `JAVA_HOME` or `PATH`, and `ZOOKEEPER_HOME` (Apache's
//! tarball) or Debian's packages in `/usr/share/java`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{HarnessError, Result, server_logs_wanted};

/// Where Java and the ZooKeeper jars are.
#[derive(Debug, Clone)]
pub(crate) struct Installation {
    pub(crate) java: PathBuf,
    pub(crate) classpath: OsString,
}

/// Debian's jars for a server, in `/usr/share/java`; the slf4j binding is added separately.
const DEBIAN_JARS: &[&str] = &[
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
];

const DEBIAN_JAVA_DIR: &str = "/usr/share/java";

impl Installation {
    pub(crate) fn discover() -> Result<Installation> {
        let java = find_java()?;
        let classpath = find_classpath()?;
        Ok(Installation { java, classpath })
    }
}

fn find_java() -> Result<PathBuf> {
    let mut searched = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return Ok(java);
        }
        searched.push(format!("JAVA_HOME ({})", java.display()));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let java = dir.join("java");
            if java.is_file() {
                return Ok(java);
            }
        }
    }
    searched.push("PATH".to_owned());
    Err(HarnessError::JavaNotFound {
        searched: searched.join(", "),
    })
}

fn find_classpath() -> Result<OsString> {
    if let Some(home) = std::env::var_os("ZOOKEEPER_HOME").filter(|h| !h.is_empty()) {
        return tarball_classpath(Path::new(&home));
    }
    debian_classpath(Path::new(DEBIAN_JAVA_DIR))
}

/// The Apache tarball: `$ZOOKEEPER_HOME/lib/*.jar`, `$ZOOKEEPER_HOME/*.jar`, and `conf/` (its
/// logback.xml) when present.
fn tarball_classpath(home: &Path) -> Result<OsString> {
    let mut entries = Vec::new();
    let conf = home.join("conf");
    if conf.is_dir() {
        entries.push(conf);
    }
    for dir in [home.join("lib"), home.to_path_buf()] {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut jars: Vec<PathBuf> = read
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .collect();
        jars.sort();
        entries.extend(jars);
    }
    let has_server = entries.iter().any(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("zookeeper-") && !n.starts_with("zookeeper-jute"))
    });
    if !has_server {
        return Err(HarnessError::ZooKeeperNotFound {
            searched: format!(
                "ZOOKEEPER_HOME: {}/lib and {}, no zookeeper-*.jar",
                home.display(),
                home.display()
            ),
        });
    }
    join_classpath(entries)
}

fn debian_classpath(dir: &Path) -> Result<OsString> {
    let binding = if server_logs_wanted() {
        "slf4j-simple.jar"
    } else {
        "slf4j-nop.jar"
    };
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    for jar in DEBIAN_JARS.iter().copied().chain([binding]) {
        let path = dir.join(jar);
        if path.is_file() {
            entries.push(path);
        } else {
            missing.push(jar);
        }
    }
    if !missing.is_empty() {
        return Err(HarnessError::ZooKeeperNotFound {
            searched: format!(
                "ZOOKEEPER_HOME (not set) and {} (missing {})",
                dir.display(),
                missing.join(", ")
            ),
        });
    }
    join_classpath(entries)
}

fn join_classpath(entries: Vec<PathBuf>) -> Result<OsString> {
    std::env::join_paths(entries).map_err(|e| HarnessError::InvalidArgument {
        what: "classpath",
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_layout_reports_missing_jars() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = debian_classpath(dir.path()).expect_err("an empty dir has no jars");
        let msg = err.to_string();
        assert!(msg.contains("zookeeper.jar"), "{msg}");
    }

    #[test]
    fn tarball_layout_needs_a_server_jar() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("lib")).expect("mkdir");
        assert!(tarball_classpath(dir.path()).is_err());
        std::fs::write(dir.path().join("lib/zookeeper-3.9.2.jar"), b"").expect("write");
        std::fs::write(dir.path().join("lib/slf4j-api-1.7.30.jar"), b"").expect("write");
        let cp = tarball_classpath(dir.path()).expect("classpath");
        let cp = cp.to_string_lossy();
        assert!(
            cp.contains("zookeeper-3.9.2.jar") && cp.contains("slf4j-api"),
            "{cp}"
        );
    }
}
