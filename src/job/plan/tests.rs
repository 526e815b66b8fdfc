//! The planner's tables: each policy against the facts a term finds.

use super::*;

const MIN: i64 = 60_000;

fn every_minute() -> Schedule {
    Schedule::every(Duration::from_secs(60)).unwrap()
}

fn policies(catch_up: CatchUp, overlap: Overlap, on_crash: OnCrash) -> Policies {
    Policies {
        catch_up,
        overlap,
        on_crash,
        ..Policies::default()
    }
}

fn state(cursor_ms: i64) -> JobState {
    let s = every_minute();
    JobState {
        spec: s.spec(),
        spec_hash: s.spec_hash(),
        cursor_ms,
        triggers_done: 0,
        tzdb: None,
        records_until_ms: None,
    }
}

fn record(key: &str, nominal_ms: i64, state: SlotState, attempt: u32) -> SlotRecord {
    let mut r = SlotRecord::not_run(key, nominal_ms, state, "x", 0);
    r.reason = None;
    r.attempt = attempt;
    r
}

fn running(key: &str, nominal_ms: i64, token: i64, attempt: u32) -> SlotRecord {
    let mut r = record(key, nominal_ms, SlotState::Running, attempt);
    r.token = Some(token);
    r
}

fn records(list: Vec<SlotRecord>) -> Records {
    list.into_iter().map(|r| (r.slot.clone(), (r, 1))).collect()
}

fn slot(n: i64) -> i64 {
    n * MIN
}

fn key(n: i64) -> String {
    Schedule::key(slot(n))
}

fn nr(after: i64, up_to: i64, reason: NotRunReason) -> Option<NotRun> {
    Some(NotRun {
        after: slot(after),
        up_to: slot(up_to),
        reason,
    })
}

fn runs(ns: &[i64]) -> Vec<Work> {
    ns.iter().map(|&n| Work::first_run(slot(n))).collect()
}

#[test]
fn reasons_keep_the_strings_records_and_events_carry() {
    let strings: Vec<&str> = [
        NotRunReason::Overlap,
        NotRunReason::Paused,
        NotRunReason::CatchUp,
    ]
    .into_iter()
    .map(NotRunReason::as_str)
    .chain(
        [
            SettleReason::CutOff,
            SettleReason::MaxAttempts,
            SettleReason::Resolved,
        ]
        .into_iter()
        .map(SettleReason::as_str),
    )
    .chain(
        [PendingReason::Buffered, PendingReason::Rerun]
            .into_iter()
            .map(PendingReason::as_str),
    )
    .collect();
    assert_eq!(
        strings,
        [
            "overlap",
            "paused",
            "catch_up",
            "cut_off",
            "max_attempts",
            "resolved",
            "buffered",
            "rerun"
        ]
    );
    for reason in [PendingReason::Buffered, PendingReason::Rerun] {
        let r = SlotRecord::not_run("s", 0, SlotState::Pending, reason.as_str(), 0);
        assert_eq!(PendingReason::of(&r), Some(reason));
    }
    let r = SlotRecord::not_run("s", 0, SlotState::Pending, "resolved", 0);
    assert_eq!(PendingReason::of(&r), None);
}

#[test]
fn on_crash_retries_below_max_attempts_and_fails_or_parks_otherwise() {
    use OnCrash::{Fail, Park, Retry};
    let failed = |reason| Crash::Settle {
        state: SlotState::Failed,
        reason,
    };
    let parked = Crash::Settle {
        state: SlotState::Parked,
        reason: SettleReason::CutOff,
    };
    // (policy, max attempts, attempts so far) -> decision
    let table = [
        (Retry, 3, 1, Crash::Retry { attempt: 2 }),
        (Retry, 3, 2, Crash::Retry { attempt: 3 }),
        (Retry, 3, 3, failed(SettleReason::MaxAttempts)),
        (Retry, 3, 7, failed(SettleReason::MaxAttempts)),
        (Retry, 1, 1, failed(SettleReason::MaxAttempts)),
        (Retry, 3, 0, Crash::Retry { attempt: 1 }),
        (Fail, 3, 1, failed(SettleReason::CutOff)),
        (Fail, 3, 3, failed(SettleReason::CutOff)),
        (Park, 3, 1, parked),
        (Park, 3, 3, parked),
    ];
    for (policy, max, attempt, expected) in table {
        assert_eq!(
            crash(policy, max, attempt),
            expected,
            "{policy:?}, max {max}, attempt {attempt}"
        );
    }
}

#[test]
fn recovery_takes_up_cut_off_slots_oldest_first_and_leaves_settled_ones() {
    let found = records(vec![
        running(&key(3), slot(3), 7, 1),
        running(&key(1), slot(1), 6, 3),
        running("trigger-2", slot(2), 7, 1),
        record(&key(0), slot(0), SlotState::Succeeded, 1),
        record(&key(4), slot(4), SlotState::Parked, 1),
    ]);
    let p = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Retry);
    let Recovery::CutOff(plan) = recovery(&found, 9, &p) else {
        panic!("no slot of this term runs");
    };
    let summary: Vec<(&str, u32, Option<u64>, Crash)> = plan
        .iter()
        .map(|(w, c)| (w.key.as_str(), w.attempt, w.trigger, *c))
        .collect();
    assert_eq!(
        summary,
        [
            (
                key(1).as_str(),
                3,
                None,
                Crash::Settle {
                    state: SlotState::Failed,
                    reason: SettleReason::MaxAttempts
                }
            ),
            ("trigger-2", 2, Some(0), Crash::Retry { attempt: 2 }),
            (key(3).as_str(), 2, None, Crash::Retry { attempt: 2 }),
        ]
    );
    assert!(plan.iter().all(|(w, _)| w.recovering));
    let parked = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Park);
    let Recovery::CutOff(plan) = recovery(&found, 9, &parked) else {
        panic!("no slot of this term runs");
    };
    assert!(plan.iter().all(|(_, c)| matches!(
        c,
        Crash::Settle {
            state: SlotState::Parked,
            ..
        }
    )));
}

#[test]
fn a_slot_running_with_the_terms_own_token_gives_the_term_up() {
    let found = records(vec![
        running(&key(1), slot(1), 6, 1),
        running(&key(2), slot(2), 9, 1),
    ]);
    let p = Policies::default();
    assert_eq!(
        recovery(&found, 9, &p),
        Recovery::GiveUpTerm { slot: key(2) }
    );
    assert_eq!(recovery(&Records::new(), 9, &p), Recovery::CutOff(vec![]));
}

#[test]
fn pending_slots_are_queued_once_oldest_first_and_reruns_recover() {
    let mut buffered = record(&key(5), slot(5), SlotState::Pending, 0);
    buffered.reason = Some("buffered".into());
    let mut rerun = record(&key(2), slot(2), SlotState::Pending, 2);
    rerun.reason = Some("rerun".into());
    let mut trigger = record("trigger-1", slot(3), SlotState::Pending, 1);
    trigger.reason = Some("rerun".into());
    let parked = record(&key(1), slot(1), SlotState::Parked, 1);
    let found = records(vec![buffered, rerun, trigger, parked]);
    let queued: Vec<(String, u32, bool, Option<u64>)> = pending(&found, &VecDeque::new())
        .into_iter()
        .map(|w| (w.key, w.attempt, w.recovering, w.trigger))
        .collect();
    assert_eq!(
        queued,
        [
            (key(2), 3, true, None),
            ("trigger-1".to_owned(), 2, true, Some(0)),
            (key(5), 1, false, None),
        ],
        "a parked slot waits for an operator"
    );
    let queue: VecDeque<Work> = runs(&[5]).into();
    assert_eq!(pending(&found, &queue).len(), 2, "queued already");
}

#[test]
fn step_takes_up_the_queue_then_triggers_then_due_slots_then_waits() {
    let s = every_minute();
    let now = slot(10) + 30_000;
    let mut control = Control::default();
    let none = Records::new();
    let queue: VecDeque<Work> = runs(&[9, 10]).into();
    // (cursor, triggers asked, queue) -> step
    assert_eq!(
        step(&s, &state(slot(10)), &control, &queue, &none, now),
        Step::RunQueued(0)
    );
    control.triggers = 1;
    let Step::QueueTrigger(w) = step(&s, &state(slot(10)), &control, &VecDeque::new(), &none, now)
    else {
        panic!("the trigger is taken up");
    };
    assert_eq!(
        (w.key.as_str(), w.trigger, w.nominal_ms),
        ("trigger-1", Some(1), now)
    );
    control.triggers = 0;
    assert_eq!(
        step(&s, &state(slot(7)), &control, &VecDeque::new(), &none, now),
        Step::TakeUpDue { latest: slot(10) }
    );
    assert_eq!(
        step(&s, &state(slot(10)), &control, &VecDeque::new(), &none, now),
        Step::Wait
    );
}

#[test]
fn paused_the_step_runs_only_triggers_and_records_fresh_queued_slots_paused() {
    let s = every_minute();
    let now = slot(10) + 30_000;
    let control = Control {
        paused: true,
        ..Control::default()
    };
    let mut queue: VecDeque<Work> = runs(&[8, 9]).into();
    let mut owed = Work::first_run(slot(7));
    owed.attempt = 2;
    owed.recovering = true;
    queue.push_front(owed);
    // The cut-off slot at 7 has a record: it is owed, and waits.
    let found = records(vec![running(&key(7), slot(7), 3, 1)]);
    assert_eq!(
        step(&s, &state(slot(9)), &control, &queue, &found, now),
        Step::RecordQueuedPaused { up_to: slot(9) }
    );
    queue.retain(|w| !fresh(w, &found));
    assert_eq!(queue.len(), 1);
    // Then: no trigger, the next due slot (10) is taken up (and `due` records it paused).
    assert_eq!(
        step(&s, &state(slot(9)), &control, &queue, &found, now),
        Step::TakeUpDue { latest: slot(10) }
    );
    assert_eq!(
        step(&s, &state(slot(10)), &control, &queue, &found, now),
        Step::Wait,
        "an owed slot waits for the resume"
    );
    let mut trigger = Work::first_run(now);
    trigger.key = "trigger-1".into();
    trigger.trigger = Some(1);
    queue.push_back(trigger);
    assert_eq!(
        step(&s, &state(slot(10)), &control, &queue, &found, now),
        Step::RunQueued(1),
        "an operator's trigger runs while paused"
    );
}

/// When the due slots (up to slot 10) were found.
#[derive(Debug, Clone, Copy)]
enum When {
    /// By waiting for them, 100 ms after slot 10.
    OnTime,
    /// After an outage, 50 s after slot 10: inside the default window (one period).
    LateInWindow,
    /// After an outage, 2 min after slot 10: beyond it.
    LateBeyond,
    /// Paused, on time.
    PausedOnTime,
    /// Paused, late.
    PausedLate,
}

/// A plan in a few words: `catch_up 6..=9; run 10`.
fn show_due(due: &Due) -> String {
    let mut parts = Vec::new();
    if let Some(n) = due.not_run {
        parts.push(show_not_run(n));
    }
    if !due.run.is_empty() {
        let slots: Vec<String> = due
            .run
            .iter()
            .map(|w| (w.nominal_ms / MIN).to_string())
            .collect();
        parts.push(format!("run {}", slots.join(",")));
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join("; ")
    }
}

fn show_not_run(n: NotRun) -> String {
    format!(
        "{} {}..={}",
        n.reason.as_str(),
        n.after / MIN + 1,
        n.up_to / MIN
    )
}

#[test]
fn due_slots_follow_the_catch_up_policy() {
    use CatchUp::{All, Latest, None as Skip};
    use When::{LateBeyond, LateInWindow, OnTime, PausedLate, PausedOnTime};
    let s = every_minute();
    // (catch-up, cursor slot, when) -> the plan for the slots up to slot 10.
    let table = [
        // On time: every due slot runs, whatever the policy.
        (Latest, 9, OnTime, "run 10"),
        (Skip, 9, OnTime, "run 10"),
        (Skip, 7, OnTime, "run 8,9,10"),
        // Late, one slot missed.
        (All, 9, LateBeyond, "run 10"),
        (Latest, 9, LateInWindow, "run 10"),
        (Latest, 9, LateBeyond, "catch_up 10..=10"),
        (Skip, 9, LateInWindow, "catch_up 10..=10"),
        // Late, many missed.
        (All, 5, LateBeyond, "run 6,7,8,9,10"),
        (Latest, 5, LateInWindow, "catch_up 6..=9; run 10"),
        (Latest, 5, LateBeyond, "catch_up 6..=10"),
        (Skip, 5, LateInWindow, "catch_up 6..=10"),
        // Paused: all recorded paused, on time or late, whatever the policy.
        (All, 5, PausedOnTime, "paused 6..=10"),
        (Latest, 9, PausedLate, "paused 10..=10"),
        (Skip, 5, PausedLate, "paused 6..=10"),
    ];
    for (catch_up, cursor, when, expected) in table {
        let (now, late, paused) = match when {
            When::OnTime => (slot(10) + 100, false, false),
            When::LateInWindow => (slot(10) + 50_000, true, false),
            When::LateBeyond => (slot(10) + 2 * MIN, true, false),
            When::PausedOnTime => (slot(10) + 100, false, true),
            When::PausedLate => (slot(10) + 2 * MIN, true, true),
        };
        let p = policies(catch_up, Overlap::Skip, OnCrash::Retry);
        let got = due(&s, &p, slot(cursor), slot(10), now, late, paused);
        assert_eq!(
            show_due(&got),
            expected,
            "{catch_up:?}, cursor {cursor}, {when:?}"
        );
        assert!(got.run.iter().all(|w| w.attempt == 1 && !w.recovering));
    }
}

#[test]
fn catch_up_all_takes_up_a_long_outage_in_batches_and_the_window_is_configurable() {
    let s = every_minute();
    let p = policies(CatchUp::All, Overlap::Skip, OnCrash::Retry);
    let got = due(&s, &p, slot(0), slot(500), slot(500), true, false);
    assert_eq!(got.run.len() as u64, CATCH_UP_BATCH);
    assert_eq!(got.run[0].nominal_ms, slot(1));
    let mut p = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Retry);
    p.window = Some(Duration::from_secs(300));
    let got = due(&s, &p, slot(9), slot(10), slot(14), true, false);
    assert_eq!(
        got.run,
        runs(&[10]),
        "four minutes late, inside a five-minute window"
    );
}

#[test]
fn slots_not_run_are_one_skip_or_one_missed_range() {
    let s = every_minute();
    let now = slot(20);
    // (after, up_to, reason) -> (state, count, range)
    let table = [
        (9, 10, NotRunReason::Overlap, SlotState::Skipped, 1, false),
        (9, 10, NotRunReason::Paused, SlotState::Skipped, 1, false),
        (9, 10, NotRunReason::CatchUp, SlotState::Missed, 1, true),
        (5, 10, NotRunReason::Overlap, SlotState::Missed, 5, true),
        (5, 10, NotRunReason::Paused, SlotState::Missed, 5, true),
        (5, 10, NotRunReason::CatchUp, SlotState::Missed, 5, true),
    ];
    for (after, up_to, reason, state, count, ranged) in table {
        let got = not_run(
            &s,
            NotRun {
                after: slot(after),
                up_to: slot(up_to),
                reason,
            },
            now,
        )
        .unwrap();
        let what = format!("({after}, {up_to}] {reason:?}");
        assert_eq!(got.record.state, state, "{what}");
        assert_eq!(got.is_skip(), state == SlotState::Skipped, "{what}");
        assert_eq!(got.count, count, "{what}");
        assert_eq!(got.last, slot(up_to), "{what}");
        assert_eq!(got.record.slot, key(after + 1), "{what}");
        assert_eq!(
            got.record.reason.as_deref(),
            Some(reason.as_str()),
            "{what}"
        );
        assert_eq!(got.record.ended_ms, Some(now), "{what}");
        assert_eq!(
            got.record.range,
            ranged.then(|| SlotRange {
                from: key(after + 1),
                to: key(up_to),
                count,
                more: false,
            }),
            "{what}"
        );
    }
    let empty = NotRun {
        after: slot(9),
        up_to: slot(9) + 10,
        reason: NotRunReason::Overlap,
    };
    assert_eq!(not_run(&s, empty, now), None, "no slot in the range");
}

fn overlap_plan(
    p: &Policies,
    now: i64,
    started: Option<(i64, i64)>,
    queue: &VecDeque<Work>,
    cursor: i64,
    paused: bool,
    buffered: bool,
) -> OverlapPlan {
    overlap(
        &every_minute(),
        p,
        &Running {
            now,
            started,
            queue,
            cursor,
            paused,
            buffered,
            late_start: false,
        },
    )
}

fn show_overlap(plan: &OverlapPlan) -> String {
    match plan {
        OverlapPlan::Nothing => "nothing".to_owned(),
        OverlapPlan::NotRun(n) => show_not_run(*n),
        OverlapPlan::Buffer { first, rest, .. } => match rest {
            Some(n) => format!("buffer {}; {}", first / MIN, show_not_run(*n)),
            None => format!("buffer {}", first / MIN),
        },
    }
}

#[test]
fn slots_due_during_a_run_are_skipped_or_buffered_by_the_overlap_policy() {
    use Overlap::{BufferOne, Skip};
    let empty = VecDeque::new();
    // (overlap, slot it is now 5 s past, paused, buffered already) -> the plan, for a run of
    // slot 10 that started on time and is still going.
    let table = [
        (Skip, 11, false, false, "overlap 11..=11"),
        (Skip, 13, false, false, "overlap 11..=13"),
        (BufferOne, 11, false, false, "buffer 11"),
        (BufferOne, 13, false, false, "buffer 11; overlap 12..=13"),
        (BufferOne, 11, false, true, "overlap 11..=11"),
        (BufferOne, 13, false, true, "overlap 11..=13"),
        (Skip, 11, true, false, "paused 11..=11"),
        (BufferOne, 13, true, false, "paused 11..=13"),
        (Skip, 10, false, false, "nothing"),
    ];
    for (policy, past, paused, buffered, expected) in table {
        let p = policies(CatchUp::Latest, policy, OnCrash::Retry);
        let now = slot(past) + 5_000;
        let started = Some((slot(10), now - slot(10)));
        let plan = overlap_plan(&p, now, started, &empty, slot(10), paused, buffered);
        assert_eq!(
            show_overlap(&plan),
            expected,
            "{policy:?}, 5 s past slot {past}, paused {paused}, buffered {buffered}"
        );
        if let OverlapPlan::Buffer { now: at, .. } = plan {
            assert_eq!(
                at,
                now - 1_000,
                "the pending record is stamped minus the tolerance"
            );
        }
    }
}

#[test]
fn no_slot_overlaps_within_the_misfire_tolerance_nor_before_the_run_waited_for_it() {
    let skip = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Retry);
    let empty = VecDeque::new();
    // Half a second past slot 11: within the tolerance (one second), it runs after.
    let now = slot(11) + 500;
    assert_eq!(
        overlap_plan(
            &skip,
            now,
            Some((slot(10), MIN + 500)),
            &empty,
            slot(10),
            false,
            false
        ),
        OverlapPlan::Nothing
    );
    // The estimate jumped on a new sample, but the run has waited only 10 s: not overlapped.
    let now = slot(12);
    assert_eq!(
        overlap_plan(
            &skip,
            now,
            Some((slot(10), 10_000)),
            &empty,
            slot(10),
            false,
            false
        ),
        OverlapPlan::Nothing
    );
    // Between runs (the last moments of one): judged by the estimate alone.
    assert_eq!(
        overlap_plan(
            &skip,
            slot(11) + 5_000,
            None,
            &empty,
            slot(10),
            false,
            false
        ),
        OverlapPlan::NotRun(nr(10, 11, NotRunReason::Overlap).unwrap())
    );
}

#[test]
fn slots_due_before_a_late_run_or_behind_a_queue_are_left_to_the_loop() {
    let skip = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Retry);
    let all = policies(CatchUp::All, Overlap::Skip, OnCrash::Retry);
    let empty = VecDeque::new();
    // A cut-off slot 5 retried at slot 10: slots 6..10 were due at its start.
    assert_eq!(
        overlap_plan(
            &skip,
            slot(11) + 5_000,
            Some((slot(10), MIN + 5_000)),
            &empty,
            slot(5),
            false,
            false
        ),
        OverlapPlan::Nothing
    );
    // Catching up everything: the queue (up to 12) goes first, new slots join it.
    let queue: VecDeque<Work> = runs(&[11, 12]).into();
    let started = Some((slot(10), 3 * MIN + 5_000));
    assert_eq!(
        overlap_plan(
            &all,
            slot(13) + 5_000,
            started,
            &queue,
            slot(10),
            false,
            false
        ),
        OverlapPlan::Nothing
    );
    // Under another policy, only the slots after the queue overlap.
    assert_eq!(
        overlap_plan(
            &skip,
            slot(13) + 5_000,
            started,
            &queue,
            slot(10),
            false,
            false
        ),
        OverlapPlan::NotRun(nr(12, 13, NotRunReason::Overlap).unwrap())
    );
}

#[test]
fn a_new_term_places_rewinds_and_rebases_the_cursor() {
    let s = every_minute();
    let now = slot(10) + 30_000;
    let tolerance = 10_000;
    let placed = align(&state(UNPLACED), &s, now, tolerance, false);
    assert_eq!(
        (placed.placed, placed.next.cursor_ms),
        (Some(slot(10)), slot(10))
    );
    let within = align(&state(slot(11)), &s, slot(11) - 5_000, tolerance, false);
    assert_eq!((within.rewound, within.next.cursor_ms), (None, slot(11)));
    let ahead = align(&state(slot(100)), &s, now, tolerance, false);
    assert_eq!(ahead.rewound, Some((slot(100), slot(10))));
    assert_eq!(ahead.next.cursor_ms, slot(10));
    let mut old = state(slot(3));
    old.spec = "every 30s".into();
    old.spec_hash = "0".into();
    let changed = align(&old, &s, now, tolerance, false);
    assert_eq!(
        changed.schedule_changed,
        Some(("every 30s".to_owned(), s.spec()))
    );
    assert_eq!(
        changed.next.cursor_ms,
        slot(10),
        "the new schedule starts from now"
    );
    let replay = align(&old, &s, now, tolerance, true);
    assert_eq!(replay.next.cursor_ms, slot(3), "replayed from the cursor");
    let same = align(&state(slot(9)), &s, now, tolerance, false);
    assert_eq!(same.next, state(slot(9)), "nothing to write");
    assert_eq!(same.schedule_changed, None);
    let nightly = Schedule::cron("0 2 * * *", "Europe/Oslo").unwrap();
    let mut recorded = state(slot(9));
    recorded.spec = nightly.spec();
    recorded.spec_hash = nightly.spec_hash();
    recorded.tzdb = Some("1999a".into());
    let tz = align(&recorded, &nightly, now, tolerance, false);
    assert_eq!(tz.tzdb_differs.map(|(r, _)| r).as_deref(), Some("1999a"));
    assert_eq!(tz.next.tzdb.as_deref(), nightly.tzdb_version());
}

#[test]
fn a_claim_moves_the_cursor_or_the_trigger_count_but_a_triggers_rerun_neither() {
    let at = state(slot(5));
    assert_eq!(claim(&at, &Work::first_run(slot(6))).cursor_ms, slot(6));
    assert_eq!(claim(&at, &Work::first_run(slot(4))).cursor_ms, slot(5));
    let mut trigger = Work::first_run(slot(9));
    trigger.trigger = Some(1);
    let next = claim(&at, &trigger);
    assert_eq!((next.cursor_ms, next.triggers_done), (slot(5), 1));
    trigger.trigger = Some(0);
    assert_eq!(claim(&at, &trigger), at);
    assert_eq!(
        cursor_past_settled(&at, &Work::first_run(slot(6))),
        Some(slot(6))
    );
    assert_eq!(cursor_past_settled(&at, &Work::first_run(slot(5))), None);
    trigger.trigger = Some(2);
    assert_eq!(cursor_past_settled(&at, &trigger), None);
}

#[test]
fn a_run_is_recorded_succeeded_or_failed_with_its_error() {
    assert_eq!(
        outcome(RunEnd::Returned(Ok(()))),
        (SlotState::Succeeded, None)
    );
    assert_eq!(
        outcome(RunEnd::Returned(Err("boom".into()))),
        (SlotState::Failed, Some("boom".to_owned()))
    );
    assert_eq!(
        outcome(RunEnd::CutOff),
        (
            SlotState::Failed,
            Some("cut off: the term ended".to_owned())
        )
    );
}

#[test]
fn pruning_deletes_the_oldest_settled_records_and_never_open_ones() {
    let found = records(vec![
        record(&key(1), slot(1), SlotState::Parked, 1),
        record(&key(2), slot(2), SlotState::Succeeded, 1),
        record(&key(3), slot(3), SlotState::Missed, 0),
        record(&key(4), slot(4), SlotState::Running, 1),
        record(&key(5), slot(5), SlotState::Failed, 1),
    ]);
    let keys = |v: Vec<(String, i32)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    assert_eq!(keys(prune(&found, 3, i64::MAX, slot(6))), [key(2), key(3)]);
    assert_eq!(
        keys(prune(&found, 100, i64::MAX, slot(6))),
        Vec::<String>::new()
    );
    assert_eq!(
        keys(prune(&found, 100, 3 * MIN, slot(6))),
        [key(2)],
        "older than 3 min"
    );
    assert_eq!(keys(prune(&found, 1, 0, slot(6))), [key(2), key(3), key(5)]);
}

#[test]
fn a_slot_due_during_a_late_started_run_is_buffered_under_skip_too() {
    let skip = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Retry);
    let empty = VecDeque::new();
    let now = slot(11) + 5_000;
    let started = Some((slot(10) + 30_000, now - slot(10) - 30_000));
    let running = |late_start, buffered| Running {
        now,
        started,
        queue: &empty,
        cursor: slot(10),
        paused: false,
        buffered,
        late_start,
    };
    // A retry after a failover (or a catch-up) runs late: the slot that comes due meanwhile
    // waits for it instead of being skipped; a second one is skipped as usual.
    assert_eq!(
        show_overlap(&overlap(&every_minute(), &skip, &running(true, false))),
        "buffer 11"
    );
    assert_eq!(
        show_overlap(&overlap(&every_minute(), &skip, &running(true, true))),
        "overlap 11..=11"
    );
    assert_eq!(
        show_overlap(&overlap(&every_minute(), &skip, &running(false, false))),
        "overlap 11..=11"
    );
    // Late: a retry, or a start more than the misfire tolerance (1 s here) after the instant.
    let s = every_minute();
    assert!(started_late(&s, Some(slot(10)), true, slot(10)));
    assert!(started_late(&s, Some(slot(10)), false, slot(10) + 1_001));
    assert!(!started_late(&s, Some(slot(10)), false, slot(10) + 1_000));
    assert!(!started_late(&s, None, false, slot(10) + 60_000));
}

#[test]
fn failures_count_against_the_retries_and_cut_off_starts_against_max_attempts() {
    // Two retries: the first and second failures are retried, the third is not.
    assert!(retry_on_failure(2, 1));
    assert!(retry_on_failure(2, 2));
    assert!(!retry_on_failure(2, 3));
    assert!(!retry_on_failure(0, 1));
    // A slot started three times, twice failed and retried, then cut off: one cut-off start,
    // so max attempts 3 retries it (as attempt 4).
    let mut cut = running(&key(1), slot(1), 6, 3);
    cut.failures = 2;
    let p = policies(CatchUp::Latest, Overlap::Skip, OnCrash::Retry);
    let Recovery::CutOff(plan) = recovery(&records(vec![cut]), 9, &p) else {
        panic!("no slot of this term runs");
    };
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].0.attempt, 4);
    assert_eq!(plan[0].1, Crash::Retry { attempt: 2 });
}

// Inputs not taken on trust (issue 43)

#[test]
fn a_trigger_jump_beyond_the_cap_is_refused_whole_and_a_bad_trigger_argument_alone() {
    let mut s = state(slot(10));
    s.triggers_done = 4;
    let control = |triggers: u64| Control {
        triggers,
        ..Control::default()
    };
    // Up to the cap waiting: taken up one after another.
    assert_eq!(refused_triggers(&s, &control(4), 10), None);
    assert_eq!(refused_triggers(&s, &control(14), 10), None);
    // One write of a huge count: refused whole, recorded taken up.
    let refused = refused_triggers(&s, &control(1_000_000), 10).unwrap();
    assert_eq!(refused.up_to, 1_000_000);
    assert!(
        refused.reason.contains("999996 triggers"),
        "{}",
        refused.reason
    );
    assert_eq!(refused_triggers(&s, &control(15), 10).unwrap().up_to, 15);
    // A trigger whose argument an operator's tool would not have written: that one alone.
    let mut bad = control(6);
    bad.trigger_for.insert(
        5,
        TriggerFor {
            slot: None,
            date: Some("9999-99-99; rm -rf /".to_owned()),
        },
    );
    let refused = refused_triggers(&s, &bad, 10).unwrap();
    assert_eq!(refused.up_to, 5);
    assert!(refused.reason.contains("trigger 5"), "{}", refused.reason);
    let mut good = control(5);
    good.trigger_for
        .insert(5, TriggerFor::date("2026-12-03").unwrap());
    assert_eq!(refused_triggers(&s, &good, 10), None);
}

#[test]
fn a_state_behind_the_jobs_records_is_refused_and_one_brought_back_from_the_future_is_not() {
    let now = slot(20) + 30_000;
    let history = records(vec![
        record(&key(8), slot(8), SlotState::Succeeded, 1),
        record(&key(9), slot(9), SlotState::Succeeded, 1),
        record("trigger-2", slot(9), SlotState::Succeeded, 1),
    ]);
    let mut s = state(slot(9));
    s.triggers_done = 2;
    assert_eq!(state_refused(&s, &history, now), None);
    // The cursor moved back behind slot 9.
    let reason = state_refused(&state(slot(3)), &history, now).unwrap();
    assert!(reason.contains(&key(9)), "{reason}");
    // A new job's unplaced cursor is not checked; a record of a slot still to come when the
    // state was last written is not evidence against it (a forged one: see `foreign_final`).
    assert_eq!(state_refused(&state(UNPLACED), &history, now), None);
    let future = records(vec![record(&key(30), slot(30), SlotState::Succeeded, 1)]);
    assert_eq!(state_refused(&state(slot(20)), &future, now), None);
    assert_eq!(state_refused(&state(slot(9)), &history, slot(9) + 1), None);
    // A cursor a leader brought back from the future covers the records up to where it stood.
    let brought_back = align(&state(slot(30)), &every_minute(), slot(20), 10_000, false);
    assert_eq!(brought_back.next.records_until_ms, Some(slot(30)));
    assert_eq!(state_refused(&brought_back.next, &future, slot(31)), None);
}

#[test]
fn a_final_record_beyond_the_cursor_or_the_trigger_count_is_not_the_jobs() {
    let mut s = state(slot(10));
    s.triggers_done = 3;
    let scheduled = |n: i64| Work::first_run(slot(n));
    let trigger = |n: u64| Work {
        key: format!("trigger-{n}"),
        nominal_ms: slot(10),
        attempt: 1,
        recovering: false,
        trigger: Some(n),
    };
    assert!(
        !foreign_final(&s, &scheduled(10)),
        "at the cursor: the job's"
    );
    assert!(!foreign_final(&s, &scheduled(9)));
    assert!(
        foreign_final(&s, &scheduled(11)),
        "beyond the cursor: forged"
    );
    assert!(!foreign_final(&s, &trigger(3)));
    assert!(
        foreign_final(&s, &trigger(4)),
        "beyond the triggers taken up: forged"
    );
    let rerun = Work {
        trigger: Some(0),
        ..trigger(9)
    };
    assert!(
        !foreign_final(&s, &rerun),
        "a trigger's re-run is of the job's own record"
    );
    s.records_until_ms = Some(slot(12));
    assert!(
        !foreign_final(&s, &scheduled(11)),
        "under a cursor brought back"
    );
}
