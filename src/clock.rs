//! Time as this crate reads it: boot time, which counts a host's suspend ([`Clock`] has the rules).

use std::fmt;
use std::ops::{Add, Sub};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{
    ClockId as TimerClock, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags,
};
use nix::time::{ClockId, clock_gettime};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

/// A reading of the machine's `CLOCK_BOOTTIME`: the time since boot, suspend included.
///
/// Comparable across the processes of one machine, unlike [`Instant`], and unlike
/// `CLOCK_MONOTONIC` it does not stand still while the host is suspended.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use zookeeper_recipes::BootTime;
///
/// let now = BootTime::now();
/// let later = now + Duration::from_millis(5);
/// assert_eq!(later - now, Duration::from_millis(5));
/// assert_eq!(now - later, Duration::ZERO);
/// assert_eq!(BootTime::from_nanos(later.as_nanos()), later);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BootTime(Duration);

fn read(clock: ClockId) -> Option<Duration> {
    clock_gettime(clock).ok().map(Duration::from)
}

/// `CLOCK_BOOTTIME`, or, should it be unreadable (it cannot be on Linux), the time since this
/// process first read it.
fn read_boot() -> Duration {
    static FALLBACK: OnceLock<Instant> = OnceLock::new();
    read(ClockId::CLOCK_BOOTTIME).unwrap_or_else(|| FALLBACK.get_or_init(Instant::now).elapsed())
}

impl BootTime {
    /// The machine's boot time now.
    pub fn now() -> Self {
        BootTime(read_boot())
    }

    /// A reading from its nanoseconds since boot (as [`as_nanos`](Self::as_nanos) gives them).
    pub const fn from_nanos(nanos: u64) -> Self {
        BootTime(Duration::from_nanos(nanos))
    }

    /// Nanoseconds since boot (saturating at `u64::MAX`, some 584 years of uptime).
    pub fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The time since boot.
    pub const fn since_boot(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: BootTime) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for BootTime {
    type Output = BootTime;

    fn add(self, rhs: Duration) -> BootTime {
        BootTime(self.0.saturating_add(rhs))
    }
}

impl Sub<Duration> for BootTime {
    type Output = BootTime;

    fn sub(self, rhs: Duration) -> BootTime {
        BootTime(self.0.saturating_sub(rhs))
    }
}

impl Sub for BootTime {
    type Output = Duration;

    /// The time from `rhs` to `self`, zero when `rhs` is later.
    fn sub(self, rhs: BootTime) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for BootTime {
    /// Seconds since boot with millisecond precision, like `12345.678s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0.as_secs(), self.0.subsec_millis())
    }
}

/// Milliseconds since the Unix epoch by the machine's wall clock.
fn read_wall_ms() -> i64 {
    read(ClockId::CLOCK_REALTIME)
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .unwrap_or(0)
}

/// Time as this crate reads it: `CLOCK_BOOTTIME`, the clock that keeps counting while the host
/// is suspended.
///
/// Every deadline of the crate (a session's lease, a term's validity, the stop of work that
/// outlives its term) is a [`BootTime`]. Rust's [`Instant`] and tokio's
/// timers read `CLOCK_MONOTONIC`, which on Linux **stands still while the host is suspended**
/// (`systemctl suspend`, a closed laptop lid, a hibernated cloud VM): a leader whose host slept
/// for ten minutes would wake believing its lease had all the time left that it had when it went
/// to sleep, while the ensemble had long expired its session and elected another leader.
/// `CLOCK_BOOTTIME` is the same clock plus the time spent suspended, so a deadline on it has
/// passed the moment the host resumes: [`Leadership::is_valid`](crate::Leadership::is_valid) is
/// false at once, without any network.
///
/// Timers still run on tokio (on the monotonic clock), so a wait for a boot-time deadline is a
/// loop that sleeps and reads the clock again. The one wait that must end the moment a host
/// resumes, a session's watch over its lease, also arms a `timerfd` on `CLOCK_BOOTTIME`, which
/// the kernel fires on resume when its time passed during the suspend.
///
/// # What no clock of the guest sees
/// A hypervisor that pauses a VM and restores its clock source on resume (`virsh suspend`, QEMU's
/// `stop`/`cont` with kvmclock) hides the pause from `CLOCK_BOOTTIME` too. The guest sees such a
/// pause only when its wall clock is stepped back into line (NTP, the guest agent); a session
/// treats a wall clock that moved ahead of boot time by more than its lease margin as a lost
/// lease. Until that step, the paused leader believes its term valid, and only fencing (the
/// token, [`Fence`](crate::Fence), [`Leadership::fenced`](crate::Leadership::fenced)) protects
/// the resource.
///
/// # A clock for tests
/// A [`Clock`] is what a session reads; [`Clock::system`] is the machine's. A [`TestClock`]
/// gives tests the faults no process can cause to itself: [`TestClock::suspend`] moves boot time
/// ahead of the monotonic clock at once (the host resumed from a suspend),
/// [`TestClock::freeze`] and [`TestClock::thaw`] let a session believe no time passes and then
/// see it all at once, and [`TestClock::step_wall`] steps the wall clock alone (a hypervisor
/// pause seen through the wall clock). A session built with
/// [`SessionBuilder::clock`](crate::SessionBuilder::clock) reads it for its lease and every term
/// won on it.
///
/// The clocks a session reads: boot time for every deadline, the wall clock only to notice a
/// pause that boot time did not see. Cheap to clone.
///
/// [`Clock::system`] (the default) reads the machine's clocks; [`TestClock::clock`] gives one
/// that a test can suspend, freeze or step.
#[derive(Clone, Default)]
pub struct Clock {
    test: Option<Arc<TestState>>,
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.test {
            None => f.write_str("Clock::system"),
            Some(_) => f.write_str("Clock::test"),
        }
    }
}

impl Clock {
    /// The machine's clocks.
    pub fn system() -> Self {
        Clock { test: None }
    }

    /// Boot time now.
    pub fn now(&self) -> BootTime {
        match &self.test {
            None => BootTime::now(),
            Some(t) => t.now(),
        }
    }

    /// The wall clock now, in milliseconds since the Unix epoch.
    pub fn wall_ms(&self) -> i64 {
        match &self.test {
            None => read_wall_ms(),
            Some(t) => {
                let inner = t.lock();
                inner
                    .wall_frozen_at
                    .unwrap_or_else(read_wall_ms)
                    .saturating_add(inner.wall_offset_ms)
            }
        }
    }

    /// A receiver that changes whenever a test moves this clock by hand (never for the system
    /// clock, whose jumps a [`BootTimer`] sees instead).
    pub(crate) fn jumps(&self) -> Option<watch::Receiver<u64>> {
        self.test.as_ref().map(|t| t.jumps.subscribe())
    }

    /// Completes when a test next moves the clock by hand, as `jumps` (from [`Clock::jumps`])
    /// sees it; never for the system clock (`None`).
    ///
    /// Cancel safe.
    pub(crate) async fn jumped(jumps: &mut Option<watch::Receiver<u64>>) {
        match jumps.as_mut() {
            Some(rx) => {
                let _ = rx.changed().await;
            }
            None => std::future::pending().await,
        }
    }

    /// Waits until boot time reaches `deadline`. It sleeps on tokio's (monotonic) timers and
    /// reads the clock again on every wake, so after a host suspend it returns within the
    /// remaining monotonic time at the latest, and at once after a test's jump. Use a
    /// [`BootTimer`] where the end of a suspend must be seen at once.
    ///
    /// Cancel safe.
    pub(crate) async fn sleep_until(&self, deadline: BootTime) {
        let mut jumps = self.jumps();
        loop {
            let left = deadline.saturating_duration_since(self.now());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                () = Clock::jumped(&mut jumps) => {}
            }
        }
    }
}

/// A timer on boot time that fires the moment a host resumes from a suspend during which its
/// deadline passed: a `timerfd` on `CLOCK_BOOTTIME` (tokio's timers would fire only once the
/// monotonic time left had passed after the resume). Falls back to [`Clock::sleep_until`] where
/// no `timerfd` can be made.
pub(crate) struct BootTimer {
    clock: Clock,
    fd: Option<AsyncFd<RawTimer>>,
}

/// A `timerfd`, as tokio's `AsyncFd` wants it.
struct RawTimer(TimerFd);

impl AsRawFd for RawTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Registers the timer with tokio's reactor.
///
/// `AsyncFd::new` is deprecated since tokio 1.5x because a caller could close the descriptor
/// while it is registered; its replacement is `unsafe`, which this crate forbids. Here the
/// `AsyncFd` owns the only handle to the descriptor (the `TimerFd`'s `OwnedFd`), and drops it
/// only after deregistering it, so the reason for the deprecation does not apply.
#[allow(deprecated)]
fn register(timer: RawTimer) -> Option<AsyncFd<RawTimer>> {
    AsyncFd::new(timer).ok()
}

impl BootTimer {
    pub(crate) fn new(clock: Clock) -> Self {
        let fd = TimerFd::new(
            TimerClock::CLOCK_BOOTTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .ok()
        .and_then(|t| register(RawTimer(t)));
        if fd.is_none() {
            tracing::debug!(
                "no timerfd on CLOCK_BOOTTIME: the end of a host suspend is seen on the next monotonic wake"
            );
        }
        BootTimer { clock, fd }
    }

    /// Waits until boot time reaches `deadline`. Cancel safe.
    pub(crate) async fn sleep_until(&mut self, deadline: BootTime) {
        let Some(fd) = self.fd.as_ref() else {
            return self.clock.sleep_until(deadline).await;
        };
        let mut jumps = self.clock.jumps();
        loop {
            let left = deadline.saturating_duration_since(self.clock.now());
            if left.is_zero() {
                return;
            }
            // Relative to now on CLOCK_BOOTTIME: a suspend counts towards it, and a test clock
            // that runs ahead of the machine's is read again on every wake.
            let armed = fd.get_ref().0.set(
                Expiration::OneShot(TimeSpec::from_duration(left)),
                TimerSetTimeFlags::empty(),
            );
            if armed.is_err() {
                return self.clock.sleep_until(deadline).await;
            }
            let fired = async {
                match fd.readable().await {
                    Ok(mut guard) => {
                        // Reading the expiry count clears the readiness; EAGAIN means the timer
                        // was re-armed since it fired.
                        let _ = guard.get_inner().0.wait();
                        guard.clear_ready();
                    }
                    Err(_) => tokio::time::sleep(left).await,
                }
            };
            match jumps.as_mut() {
                Some(rx) => {
                    tokio::select! {
                        () = fired => {}
                        _ = rx.changed() => {}
                    }
                }
                None => fired.await,
            }
        }
    }
}

/// A clock for tests, sharing one state between the [`Clock`]s it hands out.
///
/// It reads the machine's clocks, except that a test can
/// - [`suspend`](Self::suspend) the host: boot time moves ahead by the given time at once while
///   the monotonic clock does not, as a host that resumes from a suspend sees it;
/// - [`freeze`](Self::freeze) it: its boot time and its wall clock stand still (a session that
///   reads it believes no time passes, as in a suspended host), until [`thaw`](Self::thaw)
///   moves both to where the machine's clocks are now, in one jump;
/// - [`step_wall`](Self::step_wall): the wall clock moves and boot time does not (a hypervisor
///   pause the guest notices only when its wall clock is set right).
///
/// A session built with [`SessionBuilder::clock`](crate::SessionBuilder::clock) reads it for its
/// lease and for every term it wins.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use zookeeper_recipes::TestClock;
///
/// let test = TestClock::new();
/// let clock = test.clock();
/// let before = clock.now();
/// test.suspend(Duration::from_secs(600));
/// assert!(clock.now() - before >= Duration::from_secs(600));
/// ```
#[derive(Clone, Debug, Default)]
pub struct TestClock {
    state: Arc<TestState>,
}

#[derive(Debug)]
struct TestState {
    inner: Mutex<TestInner>,
    jumps: watch::Sender<u64>,
}

impl Default for TestState {
    fn default() -> Self {
        TestState {
            inner: Mutex::new(TestInner::default()),
            jumps: watch::channel(0).0,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct TestInner {
    /// How far boot time runs ahead of the machine's.
    ahead: Duration,
    /// The reading while frozen.
    frozen_at: Option<BootTime>,
    /// The machine's wall clock when frozen (the offset is added on reading).
    wall_frozen_at: Option<i64>,
    /// How far the wall clock runs ahead of the machine's (behind when negative).
    wall_offset_ms: i64,
}

impl TestState {
    fn lock(&self) -> TestInner {
        *self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> BootTime {
        let inner = self.lock();
        inner
            .frozen_at
            .unwrap_or_else(|| BootTime::now() + inner.ahead)
    }

    fn change(&self, f: impl FnOnce(&mut TestInner)) {
        {
            let mut inner = self
                .inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&mut inner);
        }
        self.jumps.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl TestClock {
    /// A clock that reads the machine's until a test moves it.
    pub fn new() -> Self {
        TestClock::default()
    }

    /// A [`Clock`] that reads this test clock.
    pub fn clock(&self) -> Clock {
        Clock {
            test: Some(Arc::clone(&self.state)),
        }
    }

    /// The host resumes from a suspend of `slept`: boot time jumps ahead by `slept` now, the
    /// monotonic clock (tokio's timers) does not.
    pub fn suspend(&self, slept: Duration) {
        self.state.change(|i| {
            i.ahead = i.ahead.saturating_add(slept);
            if let Some(at) = i.frozen_at.as_mut() {
                *at = *at + slept;
            }
        });
    }

    /// From now on boot time and the wall clock stand still, until [`thaw`](Self::thaw): a host
    /// that is suspended, as the code on it would see it if it ran.
    pub fn freeze(&self) {
        self.state.change(|i| {
            if i.frozen_at.is_none() {
                i.frozen_at = Some(BootTime::now() + i.ahead);
                i.wall_frozen_at = Some(read_wall_ms());
            }
        });
    }

    /// Boot time and the wall clock move again, at once to where they would be had they never
    /// stood still: the host resumes, and `CLOCK_BOOTTIME` has counted the suspend.
    pub fn thaw(&self) {
        self.state.change(|i| {
            i.frozen_at = None;
            i.wall_frozen_at = None;
        });
    }

    /// The wall clock jumps by `ms` (back when negative); boot time does not move.
    pub fn step_wall(&self, ms: i64) {
        self.state
            .change(|i| i.wall_offset_ms = i.wall_offset_ms.saturating_add(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_is_the_kernels_and_at_least_the_monotonic_clock() {
        let before = read(ClockId::CLOCK_BOOTTIME).unwrap();
        let now = BootTime::now().since_boot();
        let after = read(ClockId::CLOCK_BOOTTIME).unwrap();
        assert!(
            before <= now && now <= after,
            "{before:?} {now:?} {after:?}"
        );
        assert!(
            read(ClockId::CLOCK_MONOTONIC).unwrap() <= BootTime::now().since_boot(),
            "boot time counts suspend on top of the monotonic clock"
        );
    }

    #[test]
    fn nanos_round_trip_and_display_is_seconds() {
        let t = BootTime::from_nanos(12_345_678_901);
        assert_eq!(t.as_nanos(), 12_345_678_901);
        assert_eq!(t.to_string(), "12.345s");
        assert_eq!(t + Duration::from_millis(1) - t, Duration::from_millis(1));
        assert_eq!(t - Duration::from_secs(20), BootTime::from_nanos(0));
    }

    #[test]
    fn a_suspend_moves_boot_time_at_once_and_a_frozen_clock_catches_up_on_thaw() {
        let test = TestClock::new();
        let clock = test.clock();
        let t0 = clock.now();
        test.suspend(Duration::from_secs(3600));
        assert!(clock.now() - t0 >= Duration::from_secs(3600));
        test.freeze();
        let (frozen, frozen_wall) = (clock.now(), clock.wall_ms());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(clock.now(), frozen, "a frozen clock stands still");
        assert_eq!(clock.wall_ms(), frozen_wall, "its wall clock too");
        test.thaw();
        assert!(clock.now() - frozen >= Duration::from_millis(20));
        assert!(clock.wall_ms() - frozen_wall >= 20);
        let wall = clock.wall_ms();
        test.step_wall(60_000);
        assert!(clock.wall_ms() - wall >= 60_000);
        assert!(
            Clock::system().now() < clock.now(),
            "the system clock is not moved"
        );
    }

    #[tokio::test]
    async fn a_boot_timer_wakes_at_a_tests_jump_past_its_deadline() {
        let test = TestClock::new();
        let mut timer = BootTimer::new(test.clock());
        let deadline = test.clock().now() + Duration::from_secs(3600);
        let jump = {
            let test = test.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                test.suspend(Duration::from_secs(3600));
            }
        };
        let slept = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(timer.sleep_until(deadline), jump)
        })
        .await;
        assert!(slept.is_ok(), "the timer did not wake at the jump");
        assert!(test.clock().now() >= deadline);
    }

    #[tokio::test]
    async fn a_boot_timer_fires_at_its_deadline() {
        let clock = Clock::system();
        let mut timer = BootTimer::new(clock.clone());
        let deadline = clock.now() + Duration::from_millis(30);
        tokio::time::timeout(Duration::from_secs(5), timer.sleep_until(deadline))
            .await
            .expect("the boot timer did not fire");
        assert!(clock.now() >= deadline);
        // Re-armed for a later deadline, it waits again.
        let next = clock.now() + Duration::from_millis(30);
        tokio::time::timeout(Duration::from_secs(5), timer.sleep_until(next))
            .await
            .expect("the re-armed boot timer did not fire");
        assert!(clock.now() >= next);
    }
}
