//! A reusable test suite for [`Store`](crate::Store) implementations (feature `conformance`).
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
//!
//! The suite's parts: [`cases`], every case of [`conformance_tests!`](crate::conformance_tests)
//! grouped by the part of the store contract it exercises (lifecycle, queries,
//! administration); [`events`] and [`leases`], the cases of an
//! [`EventStore`](crate::events::EventStore); [`transactions`], those of a
//! [`TransactionalStore`](crate::TransactionalStore); [`oracle`], the property tests against a
//! reference model; [`Fixture`], the engine every case runs on; and [`kit`] and [`faults`],
//! helpers for a store's own tests.

use std::future::Future;
use std::time::Duration;

use crate::store::HoldStore;

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

pub mod cases;
pub mod cuts;
pub mod events;
pub mod faults;
mod fixture;
pub mod kit;
pub mod leases;
pub mod oracle;
mod support;
pub mod transactions;

pub use cases::check_hold_store;
pub use fixture::{epoch, Fixture};

/// How long one case may run before it counts as hung.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Random sequences [`conformance_tests!`](crate::conformance_tests) runs against the model
/// per store (`PROPTEST_CASES` overrides it).
pub const MODEL_CASES: u32 = 256;

/// Random transaction sequences [`transaction_conformance_tests!`](crate::transaction_conformance_tests)
/// runs against the model per store (`PROPTEST_CASES` overrides it).
pub const TRANSACTION_MODEL_CASES: u32 = 64;

/// Random sequences with bookings of several lines
/// [`booking_conformance_tests!`](crate::booking_conformance_tests) runs against the model per
/// store (`PROPTEST_CASES` overrides it).
pub const BOOKING_MODEL_CASES: u32 = 128;

/// Random sequences [`pool_conformance_tests!`](crate::pool_conformance_tests) runs against the
/// model per store (`PROPTEST_CASES` overrides it).
pub const POOL_MODEL_CASES: u32 = 128;

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
    S: HoldStore,
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
    S: HoldStore,
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
    (optional: $factory:expr) => {
        $crate::__lifecycle_case_list!($crate::__conformance_case_tests; $factory, cases);
        $crate::__query_case_list!($crate::__conformance_case_tests; $factory, cases);
        $crate::__admin_case_list!($crate::__conformance_case_tests; $factory, cases);

        $crate::__conformance_property_test!(
            /// Random operation sequences against the sequential model.
            model_based_sequences,
            $factory,
            $crate::conformance::oracle::check,
            $crate::conformance::MODEL_CASES,
            40
        );

        $crate::__conformance_property_test!(
            /// Random concurrent batches: the invariant and every success hold after each batch.
            concurrent_random_batches,
            $factory,
            $crate::conformance::oracle::check_concurrent,
            $crate::conformance::CONCURRENT_CASES
        );
    };
    ($factory:expr) => {
        $crate::conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Expands to one `#[test]` per event conformance case, for a store implementing
/// [`EventStore`](crate::events::EventStore); same forms as
/// [`conformance_tests!`](crate::conformance_tests).
#[macro_export]
macro_rules! event_conformance_tests {
    (optional: $factory:expr) => {
        $crate::__conformance_case_tests!($factory, events;
            every_change_appends_one_event
            refusals_append_no_event
            consumers_resume_where_they_acknowledged
            followers_read_after_any_position
            reclaiming_expired_holds_yields_one_event_each
            race_reclaimers_expire_each_hold_once
            purge_deletes_old_history_in_bounded_batches
            a_purged_holds_id_is_never_given_again
            race_a_consumer_never_skips_an_event
        );
        $crate::__conformance_case_tests!($factory, leases;
            a_lease_has_one_holder_at_a_time
            race_three_instances_handle_each_event_once
        );

        $crate::__conformance_property_test!(
            /// Random sequences with reclaims, the event log checked against the model's changes.
            model_based_events,
            $factory,
            $crate::conformance::oracle::check_events,
            $crate::conformance::EVENT_MODEL_CASES,
            40
        );
    };
    ($factory:expr) => {
        $crate::event_conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Expands to one `#[test]` per booking case, for a store implementing
/// [`BookingStore`](crate::BookingStore) and [`SlotAdmin`](crate::SlotAdmin): bookings of
/// several lines, all or none, changed whole, replayed by key, raced. Same forms as
/// [`conformance_tests!`](crate::conformance_tests); the `events,` forms (`events, $factory`,
/// `events, optional: $factory`) add the cases that read the event log, for a store that is
/// also an [`EventStore`](crate::EventStore). `transactions, optional: $factory` makes the
/// cases of bookings inside the caller's transaction, for a
/// [`TransactionalStore`](crate::TransactionalStore) whose writes have
/// [`TransactionBookings`](crate::TransactionBookings).
#[macro_export]
macro_rules! booking_conformance_tests {
    (transactions, optional: $factory:expr) => {
        $crate::__conformance_case_tests!($factory, transactions;
            bookings_commit_with_the_callers_transaction
            an_engine_sees_its_own_commit_at_once
        );
    };
    (transactions, $factory:expr) => {
        $crate::booking_conformance_tests!(transactions, optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
    (events, optional: $factory:expr) => {
        $crate::booking_conformance_tests!(optional: $factory);
        $crate::__booking_event_case_list!($crate::__conformance_case_tests; $factory, cases);

        $crate::__conformance_property_test!(
            /// Random sequences with bookings and reclaims, the event log checked against the
            /// model's changes.
            model_based_booking_events,
            $factory,
            $crate::conformance::oracle::check_booking_events,
            $crate::conformance::EVENT_MODEL_CASES,
            40
        );
    };
    (events, $factory:expr) => {
        $crate::booking_conformance_tests!(events, optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
    (optional: $factory:expr) => {
        $crate::__booking_case_list!($crate::__conformance_case_tests; $factory, cases);

        $crate::__conformance_property_test!(
            /// Random sequences with bookings against the sequential model.
            model_based_bookings,
            $factory,
            $crate::conformance::oracle::check_bookings,
            $crate::conformance::BOOKING_MODEL_CASES,
            40
        );

        $crate::__conformance_property_test!(
            /// Random concurrent batches of bookings and whole-booking changes: every booking
            /// whole, every success shown, every invariant held after each batch.
            concurrent_random_booking_batches,
            $factory,
            $crate::conformance::oracle::check_concurrent_bookings,
            $crate::conformance::CONCURRENT_CASES
        );
    };
    ($factory:expr) => {
        $crate::booking_conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Expands to one `#[test]` per pool case, for a store implementing
/// [`PoolStore`](crate::PoolStore), [`BookingStore`](crate::BookingStore) and
/// [`SlotAdmin`](crate::SlotAdmin): capacities shared by several slots, taken with every unit
/// of their slots, given back with them, shown in availability, raced; plus the model-based
/// tests with pools. Same forms as [`conformance_tests!`](crate::conformance_tests);
/// `transactions, optional: $factory` makes the case of units read inside the caller's
/// transaction, for a [`TransactionalStore`](crate::TransactionalStore) whose writes have
/// [`TransactionPools`](crate::TransactionPools).
#[macro_export]
macro_rules! pool_conformance_tests {
    (transactions, optional: $factory:expr) => {
        $crate::__conformance_case_tests!($factory, transactions;
            pools_read_in_the_callers_transaction
        );
    };
    (transactions, $factory:expr) => {
        $crate::pool_conformance_tests!(transactions, optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
    (optional: $factory:expr) => {
        $crate::__pool_case_list!($crate::__conformance_case_tests; $factory, cases);
        $crate::__pool_model_tests!($factory);
    };
    ($factory:expr) => {
        $crate::pool_conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Expands to one `#[test]` per waitlist case, for a store implementing
/// [`WaitlistStore`](crate::WaitlistStore), [`SlotAdmin`](crate::SlotAdmin),
/// [`EventStore`](crate::EventStore) and [`PoolStore`](crate::PoolStore): lines served in
/// strict order in the step that frees units, offers expiring to the next, priority, leaving,
/// replays and refusals, a race of cancels and newcomers, and the model-based sequences with
/// waitlist steps. Same forms as
/// [`conformance_tests!`](crate::conformance_tests).
#[macro_export]
macro_rules! waitlist_conformance_tests {
    (optional: $factory:expr) => {
        $crate::__waitlist_case_list!($crate::__conformance_case_tests; $factory, cases);

        $crate::__conformance_property_test!(
            /// Random sequences with joins, leaves, places and reclaims against the model.
            model_based_waitlists,
            $factory,
            $crate::conformance::oracle::check_waitlists,
            $crate::conformance::BOOKING_MODEL_CASES,
            40
        );

        $crate::__conformance_property_test!(
            /// Random sequences with pools, bookings and waitlists against the model.
            model_based_pool_waitlists,
            $factory,
            $crate::conformance::oracle::check_pool_waitlists,
            $crate::conformance::BOOKING_MODEL_CASES,
            40
        );
    };
    ($factory:expr) => {
        $crate::waitlist_conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// The model-based tests of [`pool_conformance_tests!`](crate::pool_conformance_tests). Not
/// part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __pool_model_tests {
    ($factory:expr) => {
        $crate::__conformance_property_test!(
            /// Random sequences with bookings and pools against the sequential model.
            model_based_pools,
            $factory,
            $crate::conformance::oracle::check_pools,
            $crate::conformance::POOL_MODEL_CASES,
            40
        );

        $crate::__conformance_property_test!(
            /// Random concurrent batches of bookings over slots sharing pools: every slot's
            /// and pool's invariant after each batch.
            concurrent_random_pool_batches,
            $factory,
            $crate::conformance::oracle::check_concurrent_pools,
            $crate::conformance::CONCURRENT_CASES
        );
    };
}

/// Expands to one `#[test]` per case of the hold lifecycle alone (slots, availability, holds,
/// confirms, cancels, renewals, owners' scopes, quantities, their races, faults and dropped
/// calls), each on a fresh store from `$factory`: for a store that implements only
/// [`HoldStore`](crate::HoldStore). A store with every capability runs
/// [`conformance_tests!`](crate::conformance_tests), which includes these. The `optional:`
/// form is as there.
#[macro_export]
macro_rules! hold_store_conformance_tests {
    (optional: $factory:expr) => {
        $crate::__lifecycle_case_list!($crate::__conformance_case_tests; $factory, cases);
    };
    ($factory:expr) => {
        $crate::hold_store_conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Expands to one `#[test]` per transaction case, each on a fresh
/// [`TransactionalStore`](crate::TransactionalStore) from `$factory`, like
/// [`conformance_tests!`](crate::conformance_tests) (including the `optional:` form).
#[macro_export]
macro_rules! transaction_conformance_tests {
    (optional: $factory:expr) => {
        $crate::__conformance_property_test!(
            /// Random transactions against the sequential model: each commits all its writes
            /// or, rolled back, none.
            model_based_transactions,
            $factory,
            $crate::conformance::oracle::check_transactional,
            $crate::conformance::TRANSACTION_MODEL_CASES
        );

        $crate::__conformance_case_tests!($factory, transactions;
            transactional_writes_commit_together
            a_rolled_back_transaction_leaves_nothing
            a_refusal_inside_a_transaction_leaves_it_usable
            race_transactions_never_oversell
        );
        // An acknowledgement commits with the caller's transaction, or not at all.
        $crate::__conformance_case_tests!($factory, leases;
            acknowledgements_commit_with_the_callers_transaction
        );
    };
    ($factory:expr) => {
        $crate::transaction_conformance_tests!(optional: || {
            let store = ($factory)();
            async move { Some(store.await) }
        });
    };
}

/// Expands to the cases of [`cuts`](crate::conformance::cuts): every write cut at each of
/// its await points, on the pool and in the caller's transaction, then the application's own
/// write on the same connection. `$factory` yields an optional store whose pool has one
/// connection; `$app` is an [`Application`](crate::conformance::cuts::Application) of it.
#[macro_export]
macro_rules! cut_conformance_tests {
    (optional: $factory:expr, $app:expr) => {
        #[test]
        fn cut_calls_in_the_callers_transaction_leave_nothing() {
            $crate::conformance::run_optional(
                "cut_calls_in_the_callers_transaction_leave_nothing",
                $factory,
                |store| {
                    $crate::conformance::cuts::cut_calls_in_the_callers_transaction_leave_nothing(
                        store, $app,
                    )
                },
            );
        }

        #[test]
        fn cut_calls_on_the_pool_leave_nothing() {
            $crate::conformance::run_optional(
                "cut_calls_on_the_pool_leave_nothing",
                $factory,
                |store| $crate::conformance::cuts::cut_calls_on_the_pool_leave_nothing(store, $app),
            );
        }
    };
}

/// One `#[test]` per case named, each running `conformance::$module::$case` through
/// [`run_optional`] on a store from the optional factory `$factory`. Used by the test macros
/// above; not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case_tests {
    ($factory:expr, $module:ident; $($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run_optional(
                    stringify!($case),
                    $factory,
                    $crate::conformance::$module::$case,
                );
            }
        )*
    };
}

/// A `#[test]` named `$name` that runs the property `$check` (a function of the model taking
/// a store factory, then `$args`) when the optional factory `$factory` yields a store here, and
/// skips it with a notice when not. Used by the test macros above; not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_property_test {
    ($(#[$doc:meta])* $name:ident, $factory:expr, $check:path, $($args:expr),+) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            if $crate::conformance::__configured($factory) {
                $check(
                    || async { ($factory)().await.expect("the store was configured a moment ago") },
                    $($args),+
                );
            }
        }
    };
}

/// Whether an optional factory yields a store here (printing a skip notice if not). Used by
/// [`conformance_tests!`](crate::conformance_tests); not part of the API.
#[doc(hidden)]
pub fn __configured<S, F, Fut>(factory: F) -> bool
where
    S: HoldStore,
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
