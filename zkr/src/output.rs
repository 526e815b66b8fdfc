//! The JSON that `zkr participants` and `zkr cron status` print: zkr's own shapes, so that the
//! library's types carry no serialization for the CLI. The field names are a contract (scripts
//! parse them): keep them, and add fields only.

use serde::Serialize;
use zookeeper_recipes::Participant;
use zookeeper_recipes::job::{JobStatus, SlotRecord};

/// One element of `zkr participants`: `{"id":"replica-1","leader":true}`.
#[derive(Debug, Serialize)]
pub(crate) struct ParticipantLine<'a> {
    id: &'a str,
    leader: bool,
}

impl<'a> From<&'a Participant> for ParticipantLine<'a> {
    fn from(p: &'a Participant) -> Self {
        ParticipantLine {
            id: &p.id,
            leader: p.is_leader,
        }
    }
}

/// `zkr cron status`. Slot records print as they are stored (their wire format).
#[derive(Debug, Serialize)]
pub(crate) struct StatusLine<'a> {
    path: &'a str,
    schedule: Option<&'a str>,
    paused: bool,
    leader: Option<&'a str>,
    cursor: Option<&'a str>,
    triggers_pending: u64,
    open: &'a [SlotRecord],
    last: Option<&'a SlotRecord>,
}

impl<'a> From<&'a JobStatus> for StatusLine<'a> {
    fn from(s: &'a JobStatus) -> Self {
        StatusLine {
            path: &s.path,
            schedule: s.schedule.as_deref(),
            paused: s.paused,
            leader: s.leader.as_deref(),
            cursor: s.cursor.as_deref(),
            triggers_pending: s.triggers_pending,
            open: &s.open,
            last: s.last.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_participant_prints_as_before() {
        let p = Participant {
            id: "replica-1".into(),
            is_leader: true,
        };
        assert_eq!(
            serde_json::to_string(&[ParticipantLine::from(&p)]).unwrap(),
            r#"[{"id":"replica-1","leader":true}]"#
        );
    }
}
