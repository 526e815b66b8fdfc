//! The checks every recipe's builder makes before it sends anything, written once: the path,
//! the participant id, the node ACL against the session's credentials, the grace and how early
//! a term is told to stop, and whether the session and a runtime are there to start on.
//!
//! Each recipe calls the ones that apply to it, in this order, so that the same mistake gets the
//! same error from every recipe.

use std::time::Duration;

use crate::acl::NodeAcl;
use crate::error::{Error, Result};
use crate::path;
use crate::session::Session;

/// The path, the id (or a fresh default one) and the ACL (or the session's default one,
/// [`Session::default_acl`]) of a recipe that creates nodes; returns the id and the ACL to use.
pub(crate) fn identity(
    session: &Session,
    recipe_path: &str,
    id: Option<String>,
    acl: Option<NodeAcl>,
) -> Result<(String, NodeAcl)> {
    path::validate_path(recipe_path)?;
    let id = id.unwrap_or_else(default_participant_id);
    path::validate_id(&id)?;
    let acl = node_acl(session, acl)?;
    Ok((id, acl))
}

/// The ACL given, checked against the session's credentials, or the session's default one
/// (creator and read for anyone with an identity, open without).
pub(crate) fn node_acl(session: &Session, acl: Option<NodeAcl>) -> Result<NodeAcl> {
    match acl {
        Some(acl) => {
            acl.check_usable(session.has_credentials())?;
            Ok(acl)
        }
        None => Ok(session.default_acl()),
    }
}

/// The grace of a term (default: the session's [`Session::default_grace`]) and how long before
/// its deadline it is asked to stop (default: the grace). Either, when given, must fit in the
/// lease the session timeout leaves ([`Session::grace_limit`]); the defaults always do.
pub(crate) fn grace(
    session: &Session,
    grace: Option<Duration>,
    stop_ahead: Option<Duration>,
) -> Result<(Duration, Duration)> {
    let chosen_grace = grace.unwrap_or_else(|| session.default_grace());
    let chosen_ahead = stop_ahead.unwrap_or(chosen_grace);
    if grace.is_some() || stop_ahead.is_some() {
        fits_in_lease(session, chosen_ahead)?;
    }
    Ok((chosen_grace, chosen_ahead))
}

/// `ahead` fits in the lease the session timeout leaves: measured against the negotiated
/// timeout once the session is connected, else the requested one.
pub(crate) fn fits_in_lease(session: &Session, ahead: Duration) -> Result<()> {
    let limit = session.grace_limit();
    if ahead > limit {
        return Err(Error::GraceTooLong {
            grace: ahead,
            limit,
            timeout: session.lease_timeout(),
        });
    }
    Ok(())
}

/// A recipe that runs in the background can start: the session is open and there is a tokio
/// runtime to spawn on, which is returned.
pub(crate) fn startable(session: &Session) -> Result<tokio::runtime::Handle> {
    if session.status().closed {
        return Err(Error::Closed);
    }
    tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)
}

/// A participant id for recipes built without one: `<hostname>-<pid>-<8 hex digits>`, unique
/// and still telling an operator where the participant runs.
pub(crate) fn default_participant_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let unique = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &unique[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ids_are_unique_and_non_empty() {
        let a = default_participant_id();
        let b = default_participant_id();
        assert_ne!(a, b);
        assert!(crate::path::validate_id(&a).is_ok());
        assert!(a.contains(&std::process::id().to_string()));
    }
}
