//! Where the engine gets the time from.
//!
//! The engine reads its clock once per operation and passes that instant to the store, so
//! tests can drive expiry exactly with a [`ManualClock`] instead of sleeping.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Duration, Utc};

use crate::model::{truncate_to_micros, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant, truncated to whole microseconds.
    fn now(&self) -> Timestamp;

    /// The current instant, given that this clock read `earlier` and that `elapsed` real time
    /// has passed since. A clock that moves with real time may answer `earlier + elapsed`
    /// without reading the time again; the default reads it.
    fn now_after(&self, earlier: Timestamp, elapsed: std::time::Duration) -> Timestamp {
        let _ = (earlier, elapsed);
        self.now()
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // Whole microseconds straight from the system time: one conversion, no rounding step
        // (this sits on the availability hit path).
        let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
        };
        DateTime::from_timestamp_micros(micros).unwrap_or_else(|| truncate_to_micros(Utc::now()))
    }

    /// `earlier + elapsed` (whole microseconds): the availability hit path uses this to skip
    /// a second clock read.
    fn now_after(&self, earlier: Timestamp, elapsed: std::time::Duration) -> Timestamp {
        let micros = i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX);
        earlier
            .checked_add_signed(Duration::microseconds(micros))
            .unwrap_or_else(|| self.now())
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use slot_booking::{Clock, ManualClock};
/// use chrono::{Duration, TimeZone, Utc};
///
/// let start = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
/// let clock = ManualClock::new(start);
/// clock.advance(Duration::minutes(5));
/// assert_eq!(clock.now(), start + Duration::minutes(5));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    micros: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `start` (truncated to microseconds).
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            micros: Arc::new(AtomicI64::new(start.timestamp_micros())),
        }
    }

    /// Sets the time.
    pub fn set(&self, to: Timestamp) {
        self.micros.store(to.timestamp_micros(), Ordering::SeqCst);
    }

    /// Moves the time by `by` (which may be negative), truncated to microseconds.
    pub fn advance(&self, by: Duration) {
        let step = by.num_microseconds().unwrap_or(i64::MAX);
        self.micros.fetch_add(step, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        DateTime::from_timestamp_micros(self.micros.load(Ordering::SeqCst))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }

    fn now_after(&self, earlier: Timestamp, elapsed: std::time::Duration) -> Timestamp {
        (**self).now_after(earlier, elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_truncated_to_micros() {
        let now = SystemClock.now();
        assert_eq!(now.timestamp_subsec_nanos() % 1_000, 0);
    }

    #[test]
    fn wall_clock_answers_now_after_by_adding_and_manual_clock_reads_itself() {
        let earlier = DateTime::from_timestamp(1_900_000_000, 0).unwrap();
        let elapsed = std::time::Duration::from_micros(2_500_001);
        assert_eq!(
            SystemClock.now_after(earlier, elapsed),
            earlier + Duration::microseconds(2_500_001)
        );
        let manual = ManualClock::new(earlier + Duration::hours(3));
        assert_eq!(manual.now_after(earlier, elapsed), manual.now());
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let start = DateTime::from_timestamp(1_900_000_000, 123_456_789).unwrap();
        let clock = ManualClock::new(start);
        let other = clock.clone();
        assert_eq!(clock.now(), truncate_to_micros(start));
        other.advance(Duration::microseconds(5));
        assert_eq!(
            clock.now(),
            truncate_to_micros(start) + Duration::microseconds(5)
        );
        clock.set(start + Duration::hours(1));
        assert_eq!(other.now(), truncate_to_micros(start + Duration::hours(1)));
    }
}
