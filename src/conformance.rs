//! A reusable test suite for [`Store`] implementations (feature `conformance`).
//!
//! It drives a store through a [`BookingEngine`](crate::BookingEngine) with a
//! [`ManualClock`](crate::ManualClock) and checks every row of the outcome table of the crate
//! docs, the reclaim of expired holds, the capacity invariant after each step, and concurrent
//! races. Backends run it in one line from a test file:
//!
//! ```text
//! // tests/conformance.rs of a backend crate
//! slot_booking::conformance_tests!(|| async { my_backend::MyStore::connect_fresh().await });
//! ```
//!
//! The macro expands to one `#[test]` per case; each case calls the factory for a fresh, empty
//! store and runs on its own multi-threaded runtime under a timeout, so a hung store fails the
//! test instead of hanging it.

use std::future::Future;
use std::time::Duration;

use crate::store::Store;

/// Asserts `$result` is an error matching `$pattern` and evaluates to that error. Defined
/// before the case modules so each of them can use it.
macro_rules! assert_err {
    ($result:expr, $pattern:pat) => {
        match $result {
            Err(error @ $pattern) => error,
            other => panic!("expected {}, got {other:?}", stringify!($pattern)),
        }
    };
}

pub mod events;
pub mod faults;
mod fixture;
pub mod kit;
pub mod leases;
pub mod model;
mod slots;
pub mod transactions;

use fixture::cached_engine;
pub use fixture::{epoch, Fixture};

/// How long one case may run before it counts as hung.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Random sequences [`conformance_tests!`](crate::conformance_tests) runs against the model
/// per store (`PROPTEST_CASES` overrides it).
pub const MODEL_CASES: u32 = 256;

/// Random transaction sequences [`transaction_conformance_tests!`](crate::transaction_conformance_tests)
/// runs against the model per store (`PROPTEST_CASES` overrides it).
pub const TRANSACTION_MODEL_CASES: u32 = 64;

/// Random sequences [`event_conformance_tests!`](crate::event_conformance_tests) runs against
/// the model, event log included, per store (`PROPTEST_CASES` overrides it).
pub const EVENT_MODEL_CASES: u32 = 128;

/// Random concurrent runs [`conformance_tests!`](crate::conformance_tests) makes per store.
pub const CONCURRENT_CASES: u32 = 48;

/// The hold lifetime the suite's engines use.
pub const HOLD_TTL: Duration = Duration::from_secs(300);

/// The shortest lifetime a request may ask for in the suite's engines.
pub const MIN_REQUESTED_TTL: Duration = Duration::from_secs(1);

/// The longest lifetime a request may ask for in the suite's engines.
pub const MAX_REQUESTED_TTL: Duration = Duration::from_secs(600);

/// The longest total life of a hold in the suite's engines.
pub const MAX_HOLD_LIFE: Duration = Duration::from_secs(900);

/// Runs one case on a fresh store from `factory`. Used by [`conformance_tests!`](crate::conformance_tests).
///
/// # Panics
///
/// When the case fails or takes longer than [`CASE_TIMEOUT`]: this is a test harness.
pub fn run<S, F, FFut, C, CFut>(factory: F, case: C)
where
    S: Store,
    F: FnOnce() -> FFut,
    FFut: Future<Output = S>,
    C: FnOnce(S) -> CFut,
    CFut: Future<Output = ()>,
{
    run_optional("", || async { Some(factory().await) }, case);
}

/// Runs one case on the store `factory` returns, or, when it returns `None` (the backend's
/// database is not configured), prints loudly that the case `name` was skipped and returns.
///
/// # Panics
///
/// As [`run`].
pub fn run_optional<S, F, FFut, C, CFut>(name: &str, factory: F, case: C)
where
    S: Store,
    F: FnOnce() -> FFut,
    FFut: Future<Output = Option<S>>,
    C: FnOnce(S) -> CFut,
    CFut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("conformance: cannot build a tokio runtime");
    runtime.block_on(async {
        let Some(store) = factory().await else {
            use std::io::Write;
            // Straight to stderr: the harness captures `eprintln!` of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "*** SKIPPED conformance case {name}: its store is not configured ***"
            );
            return;
        };
        tokio::time::timeout(CASE_TIMEOUT, case(store))
            .await
            .expect("conformance: case timed out (a store call hung)");
    });
}

/// Expands to one `#[test]` per conformance case, each on a fresh store from `$factory`
/// (an expression of type `Fn() -> impl Future<Output = impl Store>`).
///
/// `conformance_tests!(optional: $factory)` takes a factory whose future yields
/// `Option<impl Store>`: `None` skips each case with a loud notice (for a database that is not
/// configured on this machine). The two property tests then skip too.
#[macro_export]
macro_rules! conformance_tests {
    (@cases optional $factory:expr; $($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run_optional(
                    stringify!($case),
                    $factory,
                    $crate::conformance::cases::$case,
                );
            }
        )*
    };
    (optional: $factory:expr) => {
        $crate::__conformance_case_list!($crate::conformance_tests; @cases optional $factory);

        /// Random operation sequences against the sequential model.
        #[test]
        fn model_based_sequences() {
            if $crate::conformance::__configured($factory) {
                $crate::conformance::model::check(
                    || async { ($factory)().await.expect("the store was configured a moment ago") },
                    $crate::conformance::MODEL_CASES,
                    40,
                );
            }
        }

        /// Random concurrent batches: the invariant and every success hold after each batch.
        #[test]
        fn concurrent_random_batches() {
            if $crate::conformance::__configured($factory) {
                $crate::conformance::model::check_concurrent(
                    || async { ($factory)().await.expect("the store was configured a moment ago") },
                    $crate::conformance::CONCURRENT_CASES,
                );
            }
        }
    };
    ($factory:expr) => {
        $crate::conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Whether an optional factory yields a store here (printing a skip notice if not). Used by
/// [`conformance_tests!`](crate::conformance_tests); not part of the API.
#[doc(hidden)]
pub fn __configured<S, F, Fut>(factory: F) -> bool
where
    S: Store,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Option<S>>,
{
    let mut configured = false;
    run_optional("property tests", factory, |_store: S| {
        configured = true;
        async {}
    });
    configured
}

/// The case bodies. Each is reachable only through [`cases`], which [`__conformance_case_list!`]
/// generates: a body missing from the list is dead code, which CI refuses (`-D warnings`).
mod case_bodies {
    pub(super) use super::slots::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    use chrono::Duration;

    use super::Fixture;
    use crate::engine::NewHold;
    use crate::error::BookingError;
    use crate::model::{
        AvailabilityQuery, HoldId, HoldStatus, NewSlot, OwnerId, PageRequest, SlotId,
    };
    use crate::scope::Scope;
    use crate::store::Store;

    fn hours(n: i64) -> Duration {
        Duration::hours(n)
    }

    fn ttl() -> Duration {
        Duration::from_std(super::HOLD_TTL).expect("ttl fits")
    }

    /// A hold on a free unit is `held`, expires after the hold lifetime and takes one unit.
    pub(super) async fn hold_creates_a_held_hold_reserving_one_unit<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(3, hours(1)).await;
        let placed = f.engine.hold(slot, "k1").await.unwrap();
        assert!(!placed.replayed);
        let hold = placed.hold;
        assert_eq!(hold.slot_id, slot);
        assert_eq!(hold.status, HoldStatus::Held);
        assert_eq!(hold.expires_at, f.now() + ttl());
        assert_eq!((hold.confirmed_at, hold.cancelled_at), (None, None));
        assert_eq!(f.remaining(slot).await, 2);
        assert_eq!(f.available(slot).await, Some(2));
        assert_eq!(f.engine.get_hold(hold.hold_id).await.unwrap(), hold);
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// The same key on the same slot returns the existing hold as it is now.
    pub(super) async fn hold_replay_returns_the_current_state_and_reserves_nothing<S: Store>(
        store: S,
    ) {
        let f = Fixture::new(store);
        let slot = f.slot(3, hours(1)).await;
        let first = f.engine.hold(slot, "same").await.unwrap().hold;
        let again = f.engine.hold(slot, "same").await.unwrap();
        assert!(again.replayed);
        assert_eq!(again.hold, first);
        f.advance(Duration::seconds(1));
        let confirmed = f.engine.confirm(first.hold_id).await.unwrap();
        let replay = f.engine.hold(slot, "same").await.unwrap();
        assert!(replay.replayed);
        assert_eq!(replay.hold, confirmed, "a replay shows the current state");
        assert_eq!(f.remaining(slot).await, 2);
        f.assert_invariant(slot, &[first.hold_id]).await;
    }

    /// A replay is a replay even when the slot is now sold out or has started.
    pub(super) async fn hold_replay_wins_over_sold_out_and_closed<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(1, hours(1)).await;
        let first = f.engine.hold(slot, "only").await.unwrap().hold;
        let replay = f.engine.hold(slot, "only").await.unwrap();
        assert!(replay.replayed, "sold out, but the key's hold exists");
        assert_eq!(replay.hold.hold_id, first.hold_id);
        f.advance(hours(2));
        let late = f.engine.hold(slot, "only").await.unwrap();
        assert!(late.replayed, "started, but the key's hold exists");
        assert_eq!(late.hold.status, HoldStatus::Expired);
        f.assert_invariant(slot, &[first.hold_id]).await;
    }

    /// The same key on another slot is refused and changes nothing.
    pub(super) async fn hold_key_reused_on_another_slot_changes_nothing<S: Store>(store: S) {
        let f = Fixture::new(store);
        let a = f.slot(2, hours(1)).await;
        let b = f.slot(2, hours(1)).await;
        let hold = f.engine.hold(a, "shared").await.unwrap().hold;
        let error = assert_err!(
            f.engine.hold(b, "shared").await,
            BookingError::IdempotencyKeyReused { .. }
        );
        assert_eq!(error.code(), "idempotency_key_reused");
        match error {
            BookingError::IdempotencyKeyReused {
                slot_id,
                existing_hold_id,
                existing_slot_id,
            } => assert_eq!(
                (slot_id, existing_hold_id, existing_slot_id),
                (b, Some(hold.hold_id), Some(a)),
                "both anonymous: the caller's own kind of hold may be named"
            ),
            _ => unreachable!(),
        }
        assert_eq!(f.remaining(a).await, 1);
        assert_eq!(f.remaining(b).await, 2);
        f.assert_invariant(a, &[hold.hold_id]).await;
        f.assert_invariant(b, &[]).await;
    }

    /// A slot id nobody created.
    pub(super) async fn hold_on_unknown_slot_is_slot_not_found<S: Store>(store: S) {
        let f = Fixture::new(store);
        let real = f.slot(1, hours(1)).await;
        let missing = SlotId(real.0 + 1000);
        let error = assert_err!(
            f.engine.hold(missing, "k").await,
            BookingError::SlotNotFound { .. }
        );
        assert_eq!(error.code(), "slot_not_found");
        // The key was not consumed by the failure.
        assert!(!f.engine.hold(real, "k").await.unwrap().replayed);
    }

    /// No holds once `starts_at <= now`, including exactly at `starts_at`.
    pub(super) async fn hold_on_started_slot_is_slot_closed<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(5, hours(1)).await;
        f.advance(hours(1) - Duration::microseconds(1));
        assert!(f.engine.hold(slot, "just-in-time").await.is_ok());
        f.advance(Duration::microseconds(1));
        let error = assert_err!(
            f.engine.hold(slot, "on-the-dot").await,
            BookingError::SlotClosed { .. }
        );
        assert_eq!(error.code(), "slot_closed");
        f.advance(hours(1));
        assert_err!(
            f.engine.hold(slot, "late").await,
            BookingError::SlotClosed { .. }
        );
        assert_eq!(f.remaining(slot).await, 4);
    }

    /// A full slot refuses holds and nothing is reserved.
    pub(super) async fn hold_on_full_slot_is_sold_out_and_reserves_nothing<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let a = f.engine.hold(slot, "a").await.unwrap().hold.hold_id;
        let b = f.engine.hold(slot, "b").await.unwrap().hold.hold_id;
        let error = assert_err!(f.engine.hold(slot, "c").await, BookingError::SoldOut { .. });
        assert_eq!(error.code(), "sold_out");
        assert_eq!(f.remaining(slot).await, 0);
        assert_eq!(
            f.available(slot).await,
            Some(0),
            "sold-out slots stay listed"
        );
        // The refused key did not create anything: after a cancel it books normally.
        f.engine.cancel(a).await.unwrap();
        let c = f.engine.hold(slot, "c").await.unwrap();
        assert!(!c.replayed);
        f.assert_invariant(slot, &[a, b, c.hold.hold_id]).await;
    }

    /// Malformed keys never reach the store.
    pub(super) async fn hold_with_invalid_key_is_refused<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let long = "x".repeat(256);
        for bad in ["", " ", "with space", "tab\t", "é", long.as_str()] {
            let error = assert_err!(
                f.engine.hold(slot, bad).await,
                BookingError::InvalidIdempotencyKey(_)
            );
            assert_eq!(error.code(), "invalid_idempotency_key");
        }
        assert_eq!(f.remaining(slot).await, 2);
    }

    /// Confirm sets `confirmed` and `confirmed_at`; capacity is unchanged.
    pub(super) async fn confirm_an_active_hold<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.advance(ttl() - Duration::microseconds(1));
        let confirmed = f.engine.confirm(hold.hold_id).await.unwrap();
        assert_eq!(confirmed.status, HoldStatus::Confirmed);
        assert_eq!(confirmed.confirmed_at, Some(f.now()));
        assert_eq!(confirmed.cancelled_at, None);
        assert_eq!(confirmed.expires_at, hold.expires_at);
        assert_eq!(f.remaining(slot).await, 1);
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// Confirming twice returns the hold unchanged.
    pub(super) async fn confirm_is_idempotent<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        let first = f.engine.confirm(hold.hold_id).await.unwrap();
        f.advance(Duration::seconds(5));
        let second = f.engine.confirm(hold.hold_id).await.unwrap();
        assert_eq!(first, second);
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// A cancelled hold cannot be confirmed.
    pub(super) async fn confirm_a_cancelled_hold_fails<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.engine.cancel(hold.hold_id).await.unwrap();
        let error = assert_err!(
            f.engine.confirm(hold.hold_id).await,
            BookingError::HoldCancelled { .. }
        );
        assert_eq!(error.code(), "hold_cancelled");
        assert_eq!(
            f.engine.get_hold(hold.hold_id).await.unwrap().status,
            HoldStatus::Cancelled
        );
        assert_eq!(f.remaining(slot).await, 2);
    }

    /// A hold is expired from `expires_at` on (inclusive).
    pub(super) async fn confirm_fails_exactly_at_expires_at<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.clock.set(hold.expires_at);
        let error = assert_err!(
            f.engine.confirm(hold.hold_id).await,
            BookingError::HoldExpired { .. }
        );
        assert_eq!(error.code(), "hold_expired");
        assert_eq!(
            f.engine.get_hold(hold.hold_id).await.unwrap().status,
            HoldStatus::Expired
        );
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// Cancelling a held hold gives the unit back.
    pub(super) async fn cancel_a_held_hold_returns_its_unit<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(1, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.advance(Duration::seconds(3));
        let cancelled = f.engine.cancel(hold.hold_id).await.unwrap();
        assert_eq!(cancelled.status, HoldStatus::Cancelled);
        assert_eq!(cancelled.cancelled_at, Some(f.now()));
        assert_eq!(cancelled.confirmed_at, None);
        assert_eq!(f.remaining(slot).await, 1);
        assert!(f.engine.hold(slot, "next").await.is_ok());
    }

    /// Cancelling a confirmed hold gives the unit back, even after its `expires_at`.
    pub(super) async fn cancel_a_confirmed_hold_returns_its_unit<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(1, hours(2)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        let confirmed = f.engine.confirm(hold.hold_id).await.unwrap();
        f.advance(ttl() * 3);
        let cancelled = f.engine.cancel(hold.hold_id).await.unwrap();
        assert_eq!(cancelled.status, HoldStatus::Cancelled);
        assert_eq!(cancelled.confirmed_at, confirmed.confirmed_at);
        assert_eq!(cancelled.cancelled_at, Some(f.now()));
        assert_eq!(f.remaining(slot).await, 1);
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// Cancelling twice returns the hold unchanged and the unit only once.
    pub(super) async fn cancel_is_idempotent<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        let first = f.engine.cancel(hold.hold_id).await.unwrap();
        f.advance(Duration::seconds(1));
        let second = f.engine.cancel(hold.hold_id).await.unwrap();
        assert_eq!(first, second);
        assert_eq!(f.remaining(slot).await, 2);
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// An expired hold cannot be cancelled (its unit is already free).
    pub(super) async fn cancel_an_expired_hold_fails<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(1, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.clock.set(hold.expires_at);
        assert_err!(
            f.engine.cancel(hold.hold_id).await,
            BookingError::HoldExpired { .. }
        );
        assert_eq!(f.available(slot).await, Some(1));
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// Confirm, cancel and get of an id nobody created.
    pub(super) async fn unknown_holds_are_not_found<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(1, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        let missing = HoldId(hold.hold_id.0 + 1000);
        let error = assert_err!(
            f.engine.confirm(missing).await,
            BookingError::HoldNotFound { .. }
        );
        assert_eq!(error.code(), "hold_not_found");
        assert_err!(
            f.engine.cancel(missing).await,
            BookingError::HoldNotFound { .. }
        );
        assert_err!(
            f.engine.get_hold(missing).await,
            BookingError::HoldNotFound { .. }
        );
        assert_err!(
            f.engine.get_hold(HoldId(-1)).await,
            BookingError::HoldNotFound { .. }
        );
    }

    /// A hold reads as expired by its `expires_at` alone (R6): no cleanup job needed.
    pub(super) async fn expired_status_needs_no_cleanup<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(3, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.clock.set(hold.expires_at - Duration::microseconds(1));
        assert_eq!(
            f.engine.get_hold(hold.hold_id).await.unwrap().status,
            HoldStatus::Held
        );
        f.clock.set(hold.expires_at);
        assert_eq!(
            f.engine.get_hold(hold.hold_id).await.unwrap().status,
            HoldStatus::Expired
        );
        let stored = f
            .engine
            .store()
            .get_hold(hold.hold_id, &crate::Scope::BackOffice, f.now())
            .await
            .unwrap()
            .outcome
            .unwrap();
        assert_eq!(stored.status, HoldStatus::Held, "nothing rewrote the row");
        assert_eq!(f.available(slot).await, Some(3));
    }

    /// When a slot is full of expired holds, a new hold reclaims them and succeeds.
    pub(super) async fn expired_holds_are_reclaimed_when_the_slot_is_full<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(2)).await;
        let a = f.engine.hold(slot, "a").await.unwrap().hold;
        let b = f.engine.hold(slot, "b").await.unwrap().hold;
        assert_err!(f.engine.hold(slot, "c").await, BookingError::SoldOut { .. });
        f.clock.set(a.expires_at);
        let c = f.engine.hold(slot, "c").await.unwrap().hold;
        let d = f.engine.hold(slot, "d").await.unwrap().hold;
        assert_err!(f.engine.hold(slot, "e").await, BookingError::SoldOut { .. });
        for old in [&a, &b] {
            let stored = f
                .engine
                .store()
                .get_hold(old.hold_id, &crate::Scope::BackOffice, f.now())
                .await
                .unwrap()
                .outcome
                .unwrap();
            assert_eq!(stored.status, HoldStatus::Expired, "reclaimed");
            assert_err!(
                f.engine.confirm(old.hold_id).await,
                BookingError::HoldExpired { .. }
            );
        }
        assert_eq!(f.remaining(slot).await, 0);
        f.assert_invariant(slot, &[a.hold_id, b.hold_id, c.hold_id, d.hold_id])
            .await;
    }

    /// Availability counts an expired, unreclaimed hold as free.
    pub(super) async fn availability_counts_expired_holds_as_free<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(3, hours(1)).await;
        let a = f.engine.hold(slot, "a").await.unwrap().hold;
        f.advance(Duration::seconds(10));
        f.engine.hold(slot, "b").await.unwrap();
        assert_eq!(f.available(slot).await, Some(1));
        f.clock.set(a.expires_at);
        assert_eq!(f.available(slot).await, Some(2));
        assert_eq!(f.remaining(slot).await, 1, "stored remaining unchanged");
    }

    /// Confirmed holds keep their unit past `expires_at`; reclaim never touches them.
    pub(super) async fn confirmed_holds_never_expire<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(1, hours(3)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold;
        f.engine.confirm(hold.hold_id).await.unwrap();
        f.advance(ttl() * 2);
        assert_eq!(
            f.engine.get_hold(hold.hold_id).await.unwrap().status,
            HoldStatus::Confirmed
        );
        assert_err!(
            f.engine.hold(slot, "other").await,
            BookingError::SoldOut { .. }
        );
        assert_eq!(f.available(slot).await, Some(0));
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// Future slots only, by `starts_at` then id, sold-out slots included.
    pub(super) async fn availability_lists_future_slots_in_order<S: Store>(store: S) {
        let f = Fixture::new(store);
        let later = f.slot(2, hours(3)).await;
        let soon = f.slot(1, hours(1)).await;
        let tie = f.slot(4, hours(1)).await;
        let started = f.slot(9, Duration::minutes(30)).await;
        let hold = f.engine.hold(soon, "k").await.unwrap().hold;
        f.engine.confirm(hold.hold_id).await.unwrap();
        f.advance(Duration::minutes(30));
        let listing = f
            .engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap();
        let seen: Vec<(SlotId, i32, i32)> = listing
            .iter()
            .map(|e| (e.slot_id, e.capacity, e.remaining))
            .collect();
        assert_eq!(seen, vec![(soon, 1, 0), (tie, 4, 4), (later, 2, 2)]);
        assert!(listing.iter().all(|e| e.slot_id != started));
        let entry = &listing[2];
        assert_eq!(entry.starts_at, f.now() - Duration::minutes(30) + hours(3));
        assert_eq!(entry.ends_at, entry.starts_at + hours(1));
    }

    /// `from` is inclusive, `to` exclusive, both on `starts_at`.
    pub(super) async fn availability_query_narrows_by_starts_at<S: Store>(store: S) {
        let f = Fixture::new(store);
        let mut slots = Vec::new();
        for h in 1..=5 {
            slots.push(f.slot(1, hours(h)).await);
        }
        let at = |h: i64| f.now() + hours(h);
        let ids = |query| {
            let engine = f.engine.clone();
            async move {
                engine
                    .availability(query)
                    .await
                    .unwrap()
                    .iter()
                    .map(|e| e.slot_id)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            ids(AvailabilityQuery::all().from(at(2)).to(at(4))).await,
            slots[1..3]
        );
        assert_eq!(ids(AvailabilityQuery::all().from(at(4))).await, slots[3..]);
        assert_eq!(ids(AvailabilityQuery::all().to(at(2))).await, slots[..1]);
        assert_eq!(
            ids(AvailabilityQuery::all().from(at(3)).to(at(3))).await,
            []
        );
        let error = assert_err!(
            f.engine
                .availability(AvailabilityQuery::all().from(at(4)).to(at(3)))
                .await,
            BookingError::InvalidQuery
        );
        assert_eq!(error.code(), "invalid_query");
    }

    /// Slots with no capacity or an empty time window are refused before the store.
    pub(super) async fn invalid_slots_are_refused<S: Store>(store: S) {
        let f = Fixture::new(store);
        let start = f.now() + hours(1);
        for (ends_at, capacity) in [(start + hours(1), 0), (start + hours(1), -3), (start, 2)] {
            let error = assert_err!(
                f.engine
                    .create_slot(NewSlot::new(start, ends_at, capacity))
                    .await,
                BookingError::InvalidSlot(_)
            );
            assert_eq!(error.code(), "invalid_slot");
        }
        let slot = f
            .engine
            .create_slot(NewSlot::new(start, start + hours(1), i32::MAX))
            .await
            .unwrap();
        assert_eq!((slot.capacity, slot.remaining), (i32::MAX, i32::MAX));
        assert_eq!(
            f.engine
                .availability(AvailabilityQuery::all())
                .await
                .unwrap()
                .len(),
            1
        );
    }

    /// With a real cache period, a cancel shows in the very next availability read (R3).
    pub(super) async fn cancel_shows_in_cached_availability_at_once<S: Store>(store: S) {
        let (engine, start) = super::cached_engine(store);
        let slot = engine
            .create_slot(NewSlot::new(start, start + hours(1), 1))
            .await
            .unwrap()
            .slot_id;
        let hold = engine.hold(slot, "k").await.unwrap().hold;
        engine.confirm(hold.hold_id).await.unwrap();
        let before = engine.availability(AvailabilityQuery::all()).await.unwrap();
        assert_eq!(before[0].remaining, 0);
        engine.cancel(hold.hold_id).await.unwrap();
        let after = engine.availability(AvailabilityQuery::all()).await.unwrap();
        assert_eq!(
            after[0].remaining, 1,
            "the cancel invalidated the cached listing"
        );
    }

    /// Many concurrent holds on one slot: exactly `capacity` succeed, the rest are sold out.
    pub(super) async fn race_holds_on_one_slot_take_exactly_its_capacity<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slot = f.slot(7, hours(1)).await;
        let tasks: Vec<_> = (0..250)
            .map(|i| {
                let f = Arc::clone(&f);
                tokio::spawn(async move { f.engine.hold(slot, &format!("race-{i}")).await })
            })
            .collect();
        let (mut held, mut sold_out) = (Vec::new(), 0);
        for task in tasks {
            match task.await.expect("task") {
                Ok(placed) => held.push(placed.hold.hold_id),
                Err(BookingError::SoldOut { .. }) => sold_out += 1,
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((held.len(), sold_out), (7, 243));
        assert_eq!(f.remaining(slot).await, 0);
        f.assert_invariant(slot, &held).await;
    }

    /// Many concurrent holds with one key: one hold, every caller gets it.
    pub(super) async fn race_one_key_makes_one_hold<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slot = f.slot(100, hours(1)).await;
        let tasks: Vec<_> = (0..60)
            .map(|_| {
                let f = Arc::clone(&f);
                tokio::spawn(async move { f.engine.hold(slot, "one-key").await })
            })
            .collect();
        let mut ids = HashSet::new();
        let mut created = 0;
        for task in tasks {
            let placed = task.await.expect("task").expect("hold or replay");
            ids.insert(placed.hold.hold_id);
            created += usize::from(!placed.replayed);
        }
        assert_eq!(created, 1, "exactly one caller created the hold");
        assert_eq!(ids.len(), 1, "everyone got the same hold");
        assert_eq!(f.remaining(slot).await, 99);
        let id = ids.into_iter().next().unwrap_or(HoldId(0));
        f.assert_invariant(slot, &[id]).await;
    }

    /// Racing holds on a slot full of expired holds reclaim each unit once.
    pub(super) async fn race_reclaim_returns_each_expired_unit_once<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slot = f.slot(5, hours(2)).await;
        let mut all = Vec::new();
        for i in 0..5 {
            all.push(
                f.engine
                    .hold(slot, &format!("old-{i}"))
                    .await
                    .unwrap()
                    .hold
                    .hold_id,
            );
        }
        f.advance(ttl());
        let tasks: Vec<_> = (0..80)
            .map(|i| {
                let f = Arc::clone(&f);
                tokio::spawn(async move { f.engine.hold(slot, &format!("new-{i}")).await })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            match task.await.expect("task") {
                Ok(placed) => {
                    won += 1;
                    all.push(placed.hold.hold_id);
                }
                Err(BookingError::SoldOut { .. }) => {}
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(won, 5);
        assert_eq!(f.remaining(slot).await, 0);
        f.assert_invariant(slot, &all).await;
    }

    /// Concurrent cancels of one hold give its unit back once.
    pub(super) async fn race_cancels_of_one_hold_return_one_unit<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slot = f.slot(3, hours(1)).await;
        let hold = f.engine.hold(slot, "k").await.unwrap().hold.hold_id;
        f.engine.confirm(hold).await.unwrap();
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let f = Arc::clone(&f);
                tokio::spawn(async move { f.engine.cancel(hold).await })
            })
            .collect();
        for task in tasks {
            let cancelled = task.await.expect("task").expect("cancel is idempotent");
            assert_eq!(cancelled.status, HoldStatus::Cancelled);
        }
        assert_eq!(f.remaining(slot).await, 3);
        f.assert_invariant(slot, &[hold]).await;
    }

    /// Holds, confirms, cancels and expiries racing on two slots keep the invariant.
    pub(super) async fn race_mixed_operations_keep_the_invariant<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slots = [f.slot(4, hours(2)).await, f.slot(1, hours(2)).await];
        // Replays hand several tasks the same hold: a set counts each hold once.
        let mut all = std::collections::BTreeSet::<(SlotId, HoldId)>::new();
        for round in 0..4 {
            let tasks: Vec<_> = (0..48)
                .map(|i| {
                    let f = Arc::clone(&f);
                    let slot = slots[i % 2];
                    tokio::spawn(async move {
                        let placed = f.engine.hold(slot, &format!("r{round}-{}", i % 24)).await;
                        let Ok(placed) = placed else { return None };
                        let id = placed.hold.hold_id;
                        match i % 3 {
                            0 => {
                                let _ = f.engine.confirm(id).await;
                            }
                            1 => {
                                let _ = f.engine.cancel(id).await;
                            }
                            _ => {
                                let _ = f.engine.confirm(id).await;
                                let _ = f.engine.cancel(id).await;
                            }
                        }
                        Some((slot, id))
                    })
                })
                .collect();
            for task in tasks {
                if let Some(placed) = task.await.expect("task") {
                    all.insert(placed);
                }
            }
            f.advance(ttl() / 2);
            for slot in slots {
                let ids: Vec<HoldId> = all
                    .iter()
                    .filter(|(s, _)| *s == slot)
                    .map(|(_, h)| *h)
                    .collect();
                f.assert_invariant(slot, &ids).await;
            }
        }
        assert!(!all.is_empty());
    }

    fn owner(name: &str) -> OwnerId {
        OwnerId::new(name).expect("a valid owner id")
    }

    /// A hold of `quantity` units for `owner` (or anonymous) with `key`.
    async fn place<S: Store>(
        f: &Fixture<S>,
        slot: SlotId,
        key: &str,
        quantity: i64,
        who: Option<&str>,
    ) -> Result<crate::HoldPlaced, BookingError> {
        let mut request = NewHold::new(slot, key).quantity(quantity);
        if let Some(who) = who {
            request = request.owner(owner(who));
        }
        f.engine.place_hold(request).await
    }

    /// An owned hold answers only its owner (and back-office code); anyone else gets
    /// `hold_not_found` for every call, exactly like an id nobody uses, and changes nothing.
    pub(super) async fn owned_holds_answer_only_in_their_owners_scope<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(4, hours(1)).await;
        let alice = Scope::Owner(owner("alice"));
        let bob = Scope::Owner(owner("bob"));
        let held = place(&f, slot, "a-1", 2, Some("alice")).await.unwrap().hold;
        assert_eq!(held.owner, Some(owner("alice")));
        let anonymous = f.engine.hold(slot, "anon-1").await.unwrap().hold;
        assert_eq!(anonymous.owner, None);
        let unused = HoldId(held.hold_id.0.max(anonymous.hold_id.0) + 1000);

        for (scope, id) in [
            (Scope::Anonymous, held.hold_id),
            (bob.clone(), held.hold_id),
            (alice.clone(), anonymous.hold_id),
            (bob.clone(), unused),
        ] {
            let e = |r: Result<_, BookingError>| r.map(|_: crate::Hold| ()).unwrap_err();
            for error in [
                e(f.engine.get_hold_as(&scope, id).await),
                e(f.engine.confirm_as(&scope, id).await),
                e(f.engine.cancel_as(&scope, id).await),
                e(f.engine.renew_as(&scope, id, None).await),
            ] {
                match error {
                    BookingError::HoldNotFound { hold_id } => assert_eq!(hold_id, id),
                    other => panic!("{scope:?} on {id}: expected hold_not_found, got {other:?}"),
                }
            }
        }
        assert_eq!(f.remaining(slot).await, 1, "nothing changed");
        assert_eq!(
            f.engine.get_hold(held.hold_id).await.map_err(|e| e.code()),
            Err("hold_not_found"),
            "the seed's calls are anonymous"
        );
        assert_eq!(
            f.engine.get_hold_as(&alice, held.hold_id).await.unwrap(),
            held
        );
        assert_eq!(
            f.engine
                .get_hold_as(&Scope::BackOffice, held.hold_id)
                .await
                .unwrap(),
            held
        );
        assert_eq!(
            f.engine
                .get_hold_as(&Scope::BackOffice, anonymous.hold_id)
                .await
                .unwrap(),
            anonymous
        );
        let confirmed = f.engine.confirm_as(&alice, held.hold_id).await.unwrap();
        assert_eq!(confirmed.status, HoldStatus::Confirmed);
        let cancelled = f
            .engine
            .cancel_as(&Scope::BackOffice, held.hold_id)
            .await
            .unwrap();
        assert_eq!(cancelled.status, HoldStatus::Cancelled);
        assert_eq!(f.remaining(slot).await, 3);
        f.assert_invariant(slot, &[held.hold_id, anonymous.hold_id])
            .await;
    }

    /// A key is a replay only for the same slot, quantity and owner; the owner's own other
    /// request is told which hold has the key.
    pub(super) async fn a_key_replays_only_the_same_request<S: Store>(store: S) {
        let f = Fixture::new(store);
        let a = f.slot(6, hours(1)).await;
        let b = f.slot(6, hours(1)).await;
        let first = place(&f, a, "cart-1", 2, Some("alice")).await.unwrap();
        assert!(!first.replayed);
        let again = place(&f, a, "cart-1", 2, Some("alice")).await.unwrap();
        assert!(again.replayed);
        assert_eq!(again.hold, first.hold);
        for (slot, quantity) in [(a, 3), (b, 2), (a, 1)] {
            match place(&f, slot, "cart-1", quantity, Some("alice")).await {
                Err(BookingError::IdempotencyKeyReused {
                    slot_id,
                    existing_hold_id,
                    existing_slot_id,
                }) => assert_eq!(
                    (slot_id, existing_hold_id, existing_slot_id),
                    (slot, Some(first.hold.hold_id), Some(a))
                ),
                other => panic!("slot {slot}, quantity {quantity}: {other:?}"),
            }
        }
        assert_eq!((f.remaining(a).await, f.remaining(b).await), (4, 6));
        f.assert_invariant(a, &[first.hold.hold_id]).await;
        f.assert_invariant(b, &[]).await;
    }

    /// A key already used by another owner (or by an anonymous client, or used anonymously by
    /// an owner's request) is refused without a word about that hold: no id in the error, no
    /// hold handed back, nothing changed.
    pub(super) async fn a_key_of_another_owner_reveals_nothing<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(5, hours(1)).await;
        let alices = place(&f, slot, "shared", 1, Some("alice"))
            .await
            .unwrap()
            .hold;
        let anons = place(&f, slot, "anon-key", 1, None).await.unwrap().hold;
        for (key, who) in [
            ("shared", Some("bob")),
            ("shared", None),
            ("anon-key", Some("alice")),
        ] {
            match place(&f, slot, key, 1, who).await {
                Err(
                    error @ BookingError::IdempotencyKeyReused {
                        existing_hold_id: None,
                        existing_slot_id: None,
                        ..
                    },
                ) => {
                    let message = error.to_string();
                    for id in [alices.hold_id, anons.hold_id] {
                        assert!(
                            !message.contains(&format!("hold {id}")),
                            "{message:?} names hold {id}"
                        );
                    }
                }
                other => panic!("{key} by {who:?}: expected an anonymous refusal, got {other:?}"),
            }
        }
        assert_eq!(f.remaining(slot).await, 3);
        f.assert_invariant(slot, &[alices.hold_id, anons.hold_id])
            .await;
    }

    /// A hold takes all of its units by one conditional decrement, or none.
    pub(super) async fn a_hold_takes_its_quantity_all_or_nothing<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(5, hours(1)).await;
        let three = place(&f, slot, "three", 3, None).await.unwrap().hold;
        assert_eq!(three.quantity, 3);
        assert_eq!(
            (f.remaining(slot).await, f.available(slot).await),
            (2, Some(2))
        );
        assert_err!(
            place(&f, slot, "three-more", 3, None).await,
            BookingError::SoldOut { .. }
        );
        assert_eq!(f.remaining(slot).await, 2, "a refused hold takes nothing");
        let two = place(&f, slot, "two", 2, Some("alice")).await.unwrap().hold;
        assert_eq!(f.available(slot).await, Some(0));
        assert_err!(
            place(&f, slot, "one", 1, None).await,
            BookingError::SoldOut { .. }
        );
        f.assert_invariant(slot, &[three.hold_id, two.hold_id])
            .await;
    }

    /// Quantities outside 1..=1000 never reach the store; more than the slot's capacity is
    /// its own error; neither changes anything.
    pub(super) async fn quantities_out_of_bounds_are_refused<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(5, hours(1)).await;
        for bad in [0, -1, 1001, i64::from(i32::MAX) + 1] {
            let error = assert_err!(
                place(&f, slot, "q", bad, None).await,
                BookingError::InvalidQuantity { .. }
            );
            assert_eq!(error.code(), "invalid_quantity");
        }
        let error = assert_err!(
            place(&f, slot, "q", 6, None).await,
            BookingError::QuantityExceedsCapacity { .. }
        );
        match error {
            BookingError::QuantityExceedsCapacity {
                slot_id,
                quantity,
                capacity,
            } => assert_eq!((slot_id, quantity, capacity), (slot, 6, 5)),
            _ => unreachable!(),
        }
        assert_eq!(f.remaining(slot).await, 5);
        // The key was not consumed: the whole slot in one hold works.
        assert_eq!(
            place(&f, slot, "q", 5, None).await.unwrap().hold.quantity,
            5
        );
    }

    /// Cancel gives back every unit of a hold; an expired hold's units count as free and are
    /// reclaimed together.
    pub(super) async fn cancel_and_expiry_return_every_unit_of_a_hold<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(6, hours(2)).await;
        let cancelled = place(&f, slot, "c", 3, None).await.unwrap().hold;
        let expiring = place(&f, slot, "e", 2, None).await.unwrap().hold;
        f.engine.confirm(cancelled.hold_id).await.unwrap();
        f.engine.cancel(cancelled.hold_id).await.unwrap();
        assert_eq!(f.remaining(slot).await, 4);
        f.advance(ttl());
        assert_eq!(
            f.available(slot).await,
            Some(6),
            "the expired 2 count as free"
        );
        let big = place(&f, slot, "big", 6, None).await.unwrap().hold;
        let stored = f
            .engine
            .get_hold_as(&Scope::BackOffice, expiring.hold_id)
            .await
            .unwrap();
        assert_eq!(stored.status, HoldStatus::Expired);
        assert_eq!(f.remaining(slot).await, 0);
        f.assert_invariant(slot, &[cancelled.hold_id, expiring.hold_id, big.hold_id])
            .await;
    }

    /// A hold that does not fit even with the expired units is refused and reclaims nothing.
    pub(super) async fn a_refused_hold_reclaims_nothing<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(4, hours(2)).await;
        let short = f
            .engine
            .place_hold(NewHold::new(slot, "short").lifetime(std::time::Duration::from_secs(60)))
            .await
            .unwrap()
            .hold;
        let long = place(&f, slot, "long", 2, None).await.unwrap().hold;
        f.advance(Duration::seconds(61));
        assert_err!(
            place(&f, slot, "three", 3, None).await,
            BookingError::SoldOut { .. }
        );
        let stored = f
            .engine
            .store()
            .get_hold(short.hold_id, &Scope::BackOffice, f.now())
            .await;
        assert_eq!(
            stored.unwrap().outcome.map(|h| h.status),
            Some(HoldStatus::Held),
            "still stored as held: nothing was reclaimed"
        );
        assert_eq!(f.remaining(slot).await, 1);
        let two = place(&f, slot, "two", 2, None).await.unwrap().hold;
        assert_eq!(f.remaining(slot).await, 0);
        f.assert_invariant(slot, &[short.hold_id, long.hold_id, two.hold_id])
            .await;
    }

    /// Ten concurrent 3-unit holds on a 6-unit slot sell exactly two, every round.
    pub(super) async fn race_multi_unit_holds_sell_whole_holds<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        for round in 0..20 {
            let slot = f.slot(6, hours(1)).await;
            let tasks: Vec<_> = (0..10)
                .map(|i| {
                    let f = Arc::clone(&f);
                    tokio::spawn(async move {
                        let key = format!("r{round}-{i}");
                        place(&f, slot, &key, 3, Some(&format!("buyer-{i}"))).await
                    })
                })
                .collect();
            let (mut sold, mut refused) = (Vec::new(), 0);
            for task in tasks {
                match task.await.expect("task") {
                    Ok(placed) => sold.push(placed.hold.hold_id),
                    Err(BookingError::SoldOut { .. }) => refused += 1,
                    Err(other) => panic!("round {round}: unexpected {other:?}"),
                }
            }
            assert_eq!((sold.len(), refused), (2, 8), "round {round}");
            assert_eq!(f.remaining(slot).await, 0, "round {round}");
            f.assert_invariant(slot, &sold).await;
        }
    }

    /// Renewal moves an active hold's expiry to now plus its lifetime, never past its creation
    /// plus the maximum life, and takes no capacity.
    pub(super) async fn renew_extends_an_active_hold_up_to_its_maximum_life<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(2, hours(3)).await;
        let alice = Scope::Owner(owner("alice"));
        let hold = place(&f, slot, "k", 1, Some("alice")).await.unwrap().hold;
        assert_eq!(hold.created_at, f.now());
        f.advance(Duration::seconds(200));
        let renewed = f.engine.renew_as(&alice, hold.hold_id, None).await.unwrap();
        assert_eq!(renewed.expires_at, f.now() + ttl());
        assert_eq!(renewed.status, HoldStatus::Held);
        f.advance(Duration::seconds(100));
        let longer = f
            .engine
            .renew_as(
                &alice,
                hold.hold_id,
                Some(std::time::Duration::from_secs(600)),
            )
            .await
            .unwrap();
        assert_eq!(longer.expires_at, f.now() + Duration::seconds(600));
        let shorter = f
            .engine
            .renew_as(
                &alice,
                hold.hold_id,
                Some(std::time::Duration::from_secs(1)),
            )
            .await
            .unwrap();
        assert_eq!(
            shorter.expires_at, longer.expires_at,
            "a renewal never shortens"
        );
        f.advance(Duration::seconds(500));
        let capped = f
            .engine
            .renew_as(
                &alice,
                hold.hold_id,
                Some(std::time::Duration::from_secs(600)),
            )
            .await
            .unwrap();
        let max_life = Duration::from_std(super::MAX_HOLD_LIFE).expect("fits");
        assert_eq!(capped.expires_at, hold.created_at + max_life);
        assert_eq!(
            f.engine.get_hold_as(&alice, hold.hold_id).await.unwrap(),
            capped
        );
        assert_eq!(f.remaining(slot).await, 1, "renewal takes no capacity");
        f.advance(max_life);
        assert_err!(
            f.engine.renew_as(&alice, hold.hold_id, None).await,
            BookingError::HoldExpired { .. }
        );
        f.assert_invariant(slot, &[hold.hold_id]).await;
    }

    /// Expired and cancelled holds cannot be renewed; a confirmed one is returned unchanged.
    pub(super) async fn renew_refuses_expired_and_cancelled_holds<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(3, hours(1)).await;
        let confirmed = f.engine.hold(slot, "c").await.unwrap().hold.hold_id;
        let cancelled = f.engine.hold(slot, "x").await.unwrap().hold.hold_id;
        let expired = f.engine.hold(slot, "e").await.unwrap().hold.hold_id;
        let confirmed = f.engine.confirm(confirmed).await.unwrap();
        f.engine.cancel(cancelled).await.unwrap();
        f.advance(Duration::seconds(10));
        assert_eq!(f.engine.renew(confirmed.hold_id).await.unwrap(), confirmed);
        assert_err!(
            f.engine.renew(cancelled).await,
            BookingError::HoldCancelled { .. }
        );
        f.advance(ttl());
        assert_err!(
            f.engine.renew(expired).await,
            BookingError::HoldExpired { .. }
        );
        assert_eq!(
            f.engine.get_hold(confirmed.hold_id).await.unwrap(),
            confirmed
        );
        assert_eq!(f.remaining(slot).await, 1);
        f.assert_invariant(slot, &[confirmed.hold_id, cancelled, expired])
            .await;
    }

    /// A request may ask for its own lifetime within the engine's bounds; outside them it is
    /// refused before the store is called.
    pub(super) async fn requested_lifetimes_are_bounded<S: Store>(store: S) {
        let f = Fixture::new(store);
        let slot = f.slot(3, hours(1)).await;
        let secs = std::time::Duration::from_secs;
        let hold = f
            .engine
            .place_hold(NewHold::new(slot, "ten-minutes").lifetime(secs(600)))
            .await
            .unwrap()
            .hold;
        assert_eq!(hold.expires_at, f.now() + Duration::seconds(600));
        for bad in [std::time::Duration::ZERO, secs(601), secs(86_400)] {
            let error = assert_err!(
                f.engine
                    .place_hold(NewHold::new(slot, "bad").lifetime(bad))
                    .await,
                BookingError::InvalidLifetime { .. }
            );
            assert_eq!(error.code(), "invalid_lifetime");
            assert_err!(
                f.engine
                    .renew_as(&Scope::Anonymous, hold.hold_id, Some(bad))
                    .await,
                BookingError::InvalidLifetime { .. }
            );
        }
        assert_eq!(f.remaining(slot).await, 2);
        assert_eq!(f.engine.get_hold(hold.hold_id).await.unwrap(), hold);
    }

    /// An owner's holds and a slot's roster come in keyset pages by id, every status resolved
    /// at now, with quantity and owner.
    pub(super) async fn owner_holds_and_rosters_page_by_id<S: Store>(store: S) {
        let f = Fixture::new(store);
        let a = f.slot(10, hours(1)).await;
        let b = f.slot(10, hours(1)).await;
        let mut alices = Vec::new();
        for (i, slot) in [a, b, a, b, a].into_iter().enumerate() {
            let quantity = i as i64 % 2 + 1;
            let key = format!("alice-{i}");
            alices.push(
                place(&f, slot, &key, quantity, Some("alice"))
                    .await
                    .unwrap()
                    .hold,
            );
            place(&f, slot, &format!("bob-{i}"), 1, Some("bob"))
                .await
                .unwrap();
            f.engine.hold(slot, &format!("anon-{i}")).await.unwrap();
        }
        alices[1] = f
            .engine
            .confirm_as(&Scope::Owner(owner("alice")), alices[1].hold_id)
            .await
            .unwrap();
        f.advance(ttl());
        let alice = owner("alice");
        let mut seen = Vec::new();
        let mut page = PageRequest::first(2);
        loop {
            let got = f.engine.owner_holds(&alice, page).await.unwrap();
            assert!(got.holds.len() <= 2);
            seen.extend(got.holds);
            match got.next_after {
                Some(after) => page = PageRequest::after(after, 2),
                None => break,
            }
        }
        let expected: Vec<_> = alices.iter().map(|h| h.clone().at(f.now())).collect();
        assert_eq!(
            seen, expected,
            "alice's holds, by id, statuses resolved at now"
        );
        assert_eq!(seen[1].status, HoldStatus::Confirmed);
        assert_eq!(seen[0].status, HoldStatus::Expired);

        let roster = f
            .engine
            .slot_holds(a, PageRequest::first(1000))
            .await
            .unwrap();
        assert_eq!(roster.next_after, None);
        assert_eq!(roster.holds.len(), 9, "three of each kind on slot a");
        assert!(roster.holds.windows(2).all(|w| w[0].hold_id < w[1].hold_id));
        assert!(roster.holds.iter().all(|h| h.slot_id == a));
        let owners: HashSet<_> = roster.holds.iter().map(|h| h.owner.clone()).collect();
        assert_eq!(owners.len(), 3, "alice, bob and anonymous");
        let after = roster.holds[3].hold_id;
        let rest = f
            .engine
            .slot_holds(a, PageRequest::after(after, 1000))
            .await
            .unwrap();
        assert_eq!(rest.holds, roster.holds[4..].to_vec());
        let nobody = f
            .engine
            .owner_holds(&owner("carol"), PageRequest::first(5))
            .await
            .unwrap();
        assert_eq!((nobody.holds.len(), nobody.next_after), (0, None));
        for limit in [0, 1001] {
            assert_err!(
                f.engine
                    .owner_holds(&alice, PageRequest::first(limit))
                    .await,
                BookingError::InvalidPage { .. }
            );
            assert_err!(
                f.engine.slot_holds(a, PageRequest::first(limit)).await,
                BookingError::InvalidPage { .. }
            );
        }
    }

    /// Owners racing on each other's holds: every foreign call is `hold_not_found`, every own
    /// call lands, and the invariant holds.
    pub(super) async fn race_owners_touch_only_their_own_holds<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slot = f.slot(40, hours(1)).await;
        let mut holds = Vec::new();
        for i in 0..20 {
            let who = if i % 2 == 0 { "alice" } else { "bob" };
            holds.push(
                place(&f, slot, &format!("k{i}"), 2, Some(who))
                    .await
                    .unwrap()
                    .hold,
            );
        }
        let tasks: Vec<_> = holds
            .iter()
            .flat_map(|hold| {
                let mine = Scope::of(hold.owner.clone());
                let theirs = Scope::Owner(owner(if hold.owner == Some(owner("alice")) {
                    "bob"
                } else {
                    "alice"
                }));
                let id = hold.hold_id;
                [(mine, true), (theirs, false)].map(|(scope, own)| {
                    let f = Arc::clone(&f);
                    tokio::spawn(async move {
                        let result = if id.0 % 2 == 0 {
                            f.engine.cancel_as(&scope, id).await
                        } else {
                            f.engine.confirm_as(&scope, id).await
                        };
                        (own, result)
                    })
                })
            })
            .collect();
        for task in tasks {
            match task.await.expect("task") {
                (true, Ok(_)) => {}
                (false, Err(BookingError::HoldNotFound { .. })) => {}
                (own, other) => panic!("own {own}: {other:?}"),
            }
        }
        let ids: Vec<_> = holds.iter().map(|h| h.hold_id).collect();
        f.assert_invariant(slot, &ids).await;
    }

    /// Finds every hold placed with one of `keys` on `slot` by replaying the keys (a replay
    /// returns the hold a lost or dropped call may have created; a key with no hold places one
    /// now, which the invariant then counts too).
    async fn discover<S: Store>(f: &Fixture<S>, slot: SlotId, keys: &[String]) -> Vec<HoldId> {
        let mut ids = Vec::new();
        for key in keys {
            match f.engine.hold(slot, key).await {
                Ok(placed) => ids.push(placed.hold.hold_id),
                Err(BookingError::SoldOut { .. }) => {}
                Err(other) => panic!("replaying {key}: {other:?}"),
            }
        }
        ids.sort();
        ids.dedup();
        ids
    }

    /// A store that fails, stalls and panics at random (before or after committing) never
    /// leaves the invariant broken or a caller waiting; errors arrive as `BookingError`s.
    pub(super) async fn faults_never_break_the_invariant_or_hang_a_caller<S: Store>(store: S) {
        use super::faults::{FaultRates, FaultyStore};
        let faulty = Arc::new(FaultyStore::new(store, FaultRates::CHAOS, 0x5eed));
        faulty.set_enabled(false);
        let f = Arc::new(Fixture::new(Arc::clone(&faulty)));
        let slot = f.slot(6, hours(1)).await;
        faulty.set_enabled(true);
        let keys: Vec<String> = (0..30).map(|i| format!("fault-{i}")).collect();
        let tasks: Vec<_> = (0..150)
            .map(|i| {
                let f = Arc::clone(&f);
                let key = keys[i % keys.len()].clone();
                tokio::spawn(async move {
                    let mut errors = Vec::new();
                    let bounded = std::time::Duration::from_secs(20);
                    let placed = tokio::time::timeout(bounded, f.engine.hold(slot, &key))
                        .await
                        .expect("a hold hung");
                    let id = match placed {
                        Ok(placed) => placed.hold.hold_id,
                        Err(error) => {
                            errors.push(error);
                            return errors;
                        }
                    };
                    let second = if i % 2 == 0 {
                        tokio::time::timeout(bounded, f.engine.confirm(id)).await
                    } else {
                        tokio::time::timeout(bounded, f.engine.cancel(id)).await
                    };
                    if let Err(error) = second.expect("a confirm or cancel hung") {
                        errors.push(error);
                    }
                    let listing = tokio::time::timeout(
                        bounded,
                        f.engine.availability(AvailabilityQuery::all()),
                    )
                    .await
                    .expect("availability hung");
                    if let Err(error) = listing {
                        errors.push(error);
                    }
                    errors
                })
            })
            .collect();
        let mut store_errors = 0;
        for task in tasks {
            for error in task.await.expect("no panic reaches the caller") {
                match error {
                    BookingError::Store(_) => store_errors += 1,
                    BookingError::SoldOut { .. }
                    | BookingError::HoldCancelled { .. }
                    | BookingError::HoldExpired { .. } => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert!(store_errors > 0, "the faults struck");
        faulty.set_enabled(false);
        let holds = discover(&f, slot, &keys).await;
        f.assert_invariant(slot, &holds).await;
    }

    /// Calls dropped part-way (at a spread of points) leave no capacity taken without a hold,
    /// and no unit returned twice; the store keeps working afterwards.
    pub(super) async fn dropped_calls_leak_no_capacity<S: Store>(store: S) {
        let f = Arc::new(Fixture::new(store));
        let slot = f.slot(4, hours(1)).await;
        let keys: Vec<String> = (0..40).map(|i| format!("drop-{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            let budget = std::time::Duration::from_micros((i as u64 * 97) % 2_000);
            let _ = tokio::time::timeout(budget, f.engine.hold(slot, key)).await;
            if let Ok(placed) = f.engine.hold(slot, key).await {
                let id = placed.hold.hold_id;
                if i % 3 == 0 {
                    let _ = tokio::time::timeout(budget, f.engine.cancel(id)).await;
                } else {
                    let _ = tokio::time::timeout(budget, f.engine.confirm(id)).await;
                }
            }
            // A dropped availability read must not wedge the cache either.
            let _ =
                tokio::time::timeout(budget, f.engine.availability(AvailabilityQuery::all())).await;
        }
        let holds = discover(&f, slot, &keys).await;
        f.assert_invariant(slot, &holds).await;
        let more = f.slot(1, hours(2)).await;
        assert!(
            f.engine.hold(more, "after-the-drops").await.is_ok(),
            "the store still works"
        );
        assert!(f
            .engine
            .availability(AvailabilityQuery::all())
            .await
            .is_ok());
    }
}

/// The one list of conformance cases: [`conformance_tests!`](crate::conformance_tests) makes a
/// `#[test]` of each, and [`cases`] a public function of each. Not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            hold_creates_a_held_hold_reserving_one_unit
            hold_replay_returns_the_current_state_and_reserves_nothing
            hold_replay_wins_over_sold_out_and_closed
            hold_key_reused_on_another_slot_changes_nothing
            hold_on_unknown_slot_is_slot_not_found
            hold_on_started_slot_is_slot_closed
            hold_on_full_slot_is_sold_out_and_reserves_nothing
            hold_with_invalid_key_is_refused
            confirm_an_active_hold
            confirm_is_idempotent
            confirm_a_cancelled_hold_fails
            confirm_fails_exactly_at_expires_at
            cancel_a_held_hold_returns_its_unit
            cancel_a_confirmed_hold_returns_its_unit
            cancel_is_idempotent
            cancel_an_expired_hold_fails
            unknown_holds_are_not_found
            expired_status_needs_no_cleanup
            expired_holds_are_reclaimed_when_the_slot_is_full
            availability_counts_expired_holds_as_free
            confirmed_holds_never_expire
            availability_lists_future_slots_in_order
            availability_query_narrows_by_starts_at
            invalid_slots_are_refused
            cancel_shows_in_cached_availability_at_once
            race_holds_on_one_slot_take_exactly_its_capacity
            race_one_key_makes_one_hold
            race_reclaim_returns_each_expired_unit_once
            race_cancels_of_one_hold_return_one_unit
            race_mixed_operations_keep_the_invariant
            faults_never_break_the_invariant_or_hang_a_caller
            dropped_calls_leak_no_capacity
            owned_holds_answer_only_in_their_owners_scope
            a_key_replays_only_the_same_request
            a_key_of_another_owner_reveals_nothing
            a_hold_takes_its_quantity_all_or_nothing
            quantities_out_of_bounds_are_refused
            cancel_and_expiry_return_every_unit_of_a_hold
            a_refused_hold_reclaims_nothing
            race_multi_unit_holds_sell_whole_holds
            renew_extends_an_active_hold_up_to_its_maximum_life
            renew_refuses_expired_and_cancelled_holds
            requested_lifetimes_are_bounded
            owner_holds_and_rosters_page_by_id
            race_owners_touch_only_their_own_holds
            availability_narrows_by_resource
            raising_capacity_adds_free_units
            lowering_capacity_takes_only_free_units
            capacity_changes_are_validated
            closed_slots_refuse_new_holds_and_keep_their_holds
            removal_needs_a_slot_with_nothing_held_or_confirmed
            operator_listing_pages_every_slot_with_its_units
            slot_changes_show_in_cached_availability_at_once
            race_lowering_capacity_while_holds_race
            race_removal_never_strands_a_booking
        }
    };
}

macro_rules! public_cases {
    (; $($case:ident)*) => {
        /// Every conformance case as a function taking a fresh store, for running one case by
        /// hand. [`conformance_tests!`](crate::conformance_tests) runs them all.
        pub mod cases {
            use crate::store::Store;
            $(
                #[doc = concat!("The case `", stringify!($case), "`.")]
                pub fn $case<S: Store>(store: S) -> impl std::future::Future<Output = ()> {
                    super::case_bodies::$case(store)
                }
            )*
        }
    };
}

crate::__conformance_case_list!(public_cases;);
