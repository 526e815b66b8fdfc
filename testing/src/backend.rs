//! Which way the harness runs servers: local JVMs or Docker containers, chosen by
//! `ZKR_TEST_BACKEND` or found by looking at what the machine has (and, with the `provision`
//! feature, what it may install).

#[cfg(feature = "docker")]
use super::docker;
use super::{HarnessError, Result, jvm::Installation, provision, server_process};

/// Which way the harness runs ZooKeeper servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// Local JVMs started from the jars of `ZOOKEEPER_HOME` or Debian's package.
    Process,
    /// Containers of the image `ZKR_ZOOKEEPER_IMAGE` (default `zookeeper:3.9`), crate feature
    /// `docker`.
    Docker,
}

/// The backend the harness uses, decided once per process.
///
/// `ZKR_TEST_BACKEND=process` or `docker` chooses. When it is not set, the harness takes, in
/// order: a local ZooKeeper if it finds one (`ZOOKEEPER_HOME`, or Debian's package in
/// `/usr/share/java`) with Java; else Docker (feature `docker`) if an engine answers and the
/// image `ZKR_ZOOKEEPER_IMAGE` is there or can be pulled; else, with the crate feature
/// `provision`, it installs Debian's packages when it may (Debian/Ubuntu, root or password-less
/// sudo, no `ZKR_NO_INSTALL=1`) and runs local processes. It prints the choice to stderr when it
/// is not the first one. `process` takes the same steps without Docker: a local ZooKeeper, else
/// an installation of Debian's packages.
///
/// # Errors
///
/// When nothing works, the local installation's error ([`HarnessError::ZooKeeperNotFound`] or
/// [`HarnessError::JavaNotFound`]), whose message names the commands; a bad
/// `ZKR_TEST_BACKEND` ([`HarnessError::UnknownBackend`], [`HarnessError::DockerFeatureMissing`]);
/// [`HarnessError::Io`] when an installation was tried and failed.
pub fn backend() -> Result<Backend> {
    match std::env::var("ZKR_TEST_BACKEND") {
        Ok(v) if v.eq_ignore_ascii_case("process") => chosen_backend(false),
        Ok(v) if v.eq_ignore_ascii_case("docker") => {
            if cfg!(feature = "docker") {
                Ok(Backend::Docker)
            } else {
                Err(HarnessError::DockerFeatureMissing)
            }
        }
        Ok(v) if !v.is_empty() => Err(HarnessError::UnknownBackend(v)),
        _ => chosen_backend(true),
    }
}

/// The packages a local server needs: the jars (`zookeeper` itself would pull the whole X11
/// `default-jre` in), and a headless Java runtime.
const ZOOKEEPER_PACKAGES: &[&str] = &["libzookeeper-java", "default-jre-headless"];

/// A local ZooKeeper, else (when `docker_allowed`) Docker, else an installation of Debian's
/// packages where the `provision` feature allows it: `ZKR_TEST_BACKEND=process` asks for the
/// first and the last only, so that CI can insist on local servers (and on their installation)
/// while an image is being built beside it.
fn chosen_backend(docker_allowed: bool) -> Result<Backend> {
    // Decided once per process, under a lock so that concurrent tests do not each probe Docker
    // or print the choice: `Some(None)` records that nothing worked (the local installation's
    // error is then returned again, cheaply, without another `docker pull` or install).
    static CHOICE: std::sync::Mutex<Option<Option<Backend>>> = std::sync::Mutex::new(None);
    let mut decided = server_process::lock(&CHOICE);
    match *decided {
        Some(Some(backend)) => return Ok(backend),
        Some(None) => return Installation::discover().map(|_| Backend::Process),
        None => {}
    }
    let local = match Installation::discover() {
        Ok(_) => {
            *decided = Some(Some(Backend::Process));
            return Ok(Backend::Process);
        }
        Err(local) => local,
    };
    if docker_allowed && docker_ready() {
        provision::say(format_args!(
            "zookeeper-recipes test harness: no local ZooKeeper ({local}); using Docker containers of {}",
            docker_image()
        ));
        *decided = Some(Some(Backend::Docker));
        return Ok(Backend::Docker);
    }
    // Installing packages is opt-in (feature `provision`): a user's tests never run apt-get.
    if !cfg!(feature = "provision") {
        *decided = Some(None);
        return Err(local);
    }
    let installed = provision::install_debian_packages(
        ZOOKEEPER_PACKAGES,
        &format!(
            "the tests need a ZooKeeper server and none was found (no local installation: {local}; no Docker engine with the image {})",
            docker_image()
        ),
        || Installation::discover().err().map(|e| e.to_string()),
    );
    match installed {
        Ok(true) => {
            *decided = Some(Some(Backend::Process));
            Ok(Backend::Process)
        }
        Ok(false) => {
            *decided = Some(None);
            Err(local)
        }
        Err(e) => {
            *decided = Some(None);
            Err(e)
        }
    }
}

fn docker_image() -> String {
    #[cfg(feature = "docker")]
    {
        docker::image_reference()
    }
    #[cfg(not(feature = "docker"))]
    {
        "(none: the crate feature `docker` is off)".to_owned()
    }
}

/// Whether a Docker engine answers and has (or can pull) the image.
fn docker_ready() -> bool {
    #[cfg(feature = "docker")]
    {
        docker::image_available()
    }
    #[cfg(not(feature = "docker"))]
    {
        false
    }
}
