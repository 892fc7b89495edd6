//! Sell limited capacity in time slots — clinic appointments, class seats, delivery windows,
//! event tickets — without ever overselling.
//!
//! Clients read **availability** (optionally of one resource: a room, a class, a doctor),
//! place a temporary **hold** on one or several units of a slot
//! (idempotent by a key of their choosing, optionally owned by a customer, session or cart),
//! then **confirm**, **cancel** or **renew** it. Operators change capacities, close and
//! reopen sales, remove slots and list them all ([`admin`]). [`BookingEngine`] holds the rules
//! and a single-flight availability cache; a [`Store`] holds the data and makes each operation
//! atomic. Stores: [`MemoryStore`] (this crate), SQLite (`slot_booking_sqlite`), PostgreSQL
//! (`slot_booking_postgres`) and MariaDB/MySQL, Galera clusters included (`slot_booking_mysql`),
//! the last three on sqlx.
//!
//! ```
//! use chrono::{Duration, Utc};
//! use slot_booking::{AvailabilityQuery, BookingEngine, HoldStatus, MemoryStore, NewSlot, Scope};
//!
//! # tokio_test::block_on(async {
//! let engine = BookingEngine::new(MemoryStore::new());
//! let starts_at = Utc::now() + Duration::days(1);
//! let slot = engine
//!     .create_slot(NewSlot::new(starts_at, starts_at + Duration::hours(1), 20))
//!     .await?;
//!
//! // Reserves one unit for 5 minutes. The same key again returns the same hold.
//! let placed = engine.hold(slot.slot_id, "order-1234").await?;
//! let again = engine.hold(slot.slot_id, "order-1234").await?;
//! assert!(again.replayed && again.hold.hold_id == placed.hold.hold_id);
//!
//! let booked = engine.confirm(&Scope::Anonymous, placed.hold.hold_id).await?;
//! assert_eq!(booked.status, HoldStatus::Confirmed);
//! let listing = engine.availability(AvailabilityQuery::all()).await?;
//! assert_eq!(listing[0].remaining, 19);
//! # Ok::<(), slot_booking::BookingError>(())
//! # }).unwrap();
//! ```
//!
//! # Outcomes
//!
//! Every refusal is a [`BookingError`] with a stable [`code`](BookingError::code); nothing is
//! changed by a call that fails.
//!
//! | operation | situation | result | code |
//! |---|---|---|---|
//! | [`hold`](BookingEngine::hold) | a unit is free | a new hold, `held` until `expires_at = now + hold lifetime` | — |
//! | | same key, same slot, quantity and owner again | the existing hold in its current state, `replayed: true`; nothing more reserved | — |
//! | | same key, another slot or quantity (same owner) | error naming the key's hold | `idempotency_key_reused` |
//! | | same key, another owner (or anonymous vs owned) | error naming nothing of that hold | `idempotency_key_reused` |
//! | | no such slot | error | `slot_not_found` |
//! | | the slot has started (`starts_at <= now`) | error | `slot_closed` |
//! | | fewer free units than asked, even after reclaiming expired holds | error; nothing reserved, nothing reclaimed | `sold_out` |
//! | | more units than the slot's capacity | error | `quantity_exceeds_capacity` |
//! | | key not 1–255 visible ASCII characters | error; the store is not called | `invalid_idempotency_key` |
//! | [`place_hold`](BookingEngine::place_hold) | quantity outside 1–1000 | error; the store is not called | `invalid_quantity` |
//! | | lifetime outside the engine's bounds | error; the store is not called | `invalid_lifetime` |
//! | [`confirm`](BookingEngine::confirm) | an active held hold | `confirmed`, `confirmed_at = now` | — |
//! | | a confirmed hold | unchanged (idempotent) | — |
//! | | a cancelled hold | error | `hold_cancelled` |
//! | | an expired hold | error | `hold_expired` |
//! | [`cancel`](BookingEngine::cancel) | an active held or a confirmed hold | `cancelled`, `cancelled_at = now`, unit given back | — |
//! | | a cancelled hold | unchanged (idempotent) | — |
//! | | an expired hold | error | `hold_expired` |
//! | [`renew`](BookingEngine::renew) | an active held hold | `expires_at = now + lifetime`, capped at `created_at + max hold life`, never shortened | — |
//! | | a confirmed hold | unchanged | — |
//! | | a cancelled / an expired hold | error | `hold_cancelled` / `hold_expired` |
//! | confirm, cancel, renew, [`get_hold`](BookingEngine::get_hold) | no such hold, or one outside the caller's [`Scope`] | error (the same for both) | `hold_not_found` |
//! | [`owner_holds`](BookingEngine::owner_holds), [`slot_holds`](BookingEngine::slot_holds) | a page by id | up to `limit` holds after `after`, statuses resolved at now | — |
//! | | `limit` outside 1–1000 | error | `invalid_page` |
//! | [`create_slot`](BookingEngine::create_slot) | `ends_at <= starts_at` or capacity < 1 | error | `invalid_slot` |
//! | [`hold`](BookingEngine::hold) | the slot's sales are closed | error | `slot_closed` |
//! | | the slot was removed | error | `slot_not_found` |
//! | [`change_capacity`](BookingEngine::change_capacity) | raised, or lowered within the free units (expired holds reclaimed if that makes it fit) | the slot, `remaining` moved by the same amount (plus any units reclaimed) | — |
//! | | lowered below the units held or confirmed | error with the units taken; nothing changes | `capacity_taken` |
//! | | capacity outside `1..=i32::MAX` | error; the store is not called | `invalid_slot` |
//! | [`close_sales`](BookingEngine::close_sales), [`reopen_sales`](BookingEngine::reopen_sales) | any slot not removed | the slot (idempotent); a closed slot leaves availability | — |
//! | [`remove_slot`](BookingEngine::remove_slot) | no active held and no confirmed unit | the slot archived with `removed_at`; its holds stay | — |
//! | | units held or confirmed | error with both counts; nothing changes | `slot_in_use` |
//! | capacity, close, reopen, remove | no such slot, or removed | error | `slot_not_found` |
//! | [`list_slots`](BookingEngine::list_slots) | a page by `(starts_at, id)` | every slot (past, closed, removed) with units free, held, confirmed | — |
//! | [`availability`](BookingEngine::availability) | `from` after `to` | error | `invalid_query` |
//! | any | the store failed and may recover (connection lost, pool exhausted, busy) | error; nothing half done | `store_unavailable` |
//! | any | the store failed for good (broken schema, a store bug or panic) | error; nothing half done | `store_failed` |
//!
//! # Guarantees
//!
//! - **No oversell.** A hold takes its `quantity` units, all or none, by one conditional
//!   decrement (`remaining = remaining - q WHERE remaining >= q`) decided by the rows it
//!   affected, never by a read made before it. Per slot, at every instant,
//!   `remaining + Σ quantity(stored held) + Σ quantity(confirmed) == capacity` and
//!   `remaining >= 0`.
//! - **Owners.** A hold placed with an [`OwnerId`] is read, confirmed, cancelled and renewed
//!   only in that owner's [`Scope`] (or [`Scope::BackOffice`]); every call on an existing
//!   hold names its scope (`confirm(&scope, id)`), and [`Scope::Anonymous`] — the seed's
//!   client — sees only holds without an owner. The scope is part of each store's
//!   conditional write.
//! - **Idempotent holds.** A unique constraint on the idempotency key: two holds with one key
//!   never both exist.
//! - **Expiry needs no background job.** A hold stops reserving its unit when `expires_at`
//!   passes: availability counts expired holds as free, and a hold that finds a slot full first
//!   reclaims that slot's expired holds (again decided by rows affected). Confirmed holds never
//!   expire.
//! - **Administration never takes a sold unit.** Lowering a capacity or removing a slot takes
//!   free units only, decided by one conditional write on the slot row (`remaining` cannot go
//!   below zero; removal needs `remaining == capacity`), never by counting holds first.
//!   Removal archives: no booking is ever deleted.
//! - **A client sees its own change.** Confirm, cancel and every slot change (create, capacity,
//!   close, reopen, remove) invalidate the cached availability after their write committed,
//!   never before. Placing a hold does not: the
//!   listing is advisory, the decrement is the authority.
//! - **Bounded staleness.** Availability is cached for the cache period (10 s by default) and is
//!   never older than [`max_age`](EngineBuilder::max_age) (twice the period, 20 s, by default).
//!   However many readers arrive, one store read is in flight at a time; past the period, readers
//!   get the previous listing at once while it runs.
//! - **Writes run to the end.** A caller that goes away mid-call never leaves a write half done
//!   or the cache stale: the engine runs each write on the caller's task while the caller waits
//!   (no hop to another task), and finishes the rest of the write and its invalidation on a
//!   task of its own if the caller goes away.
//!
//! # Time
//!
//! The engine reads its [`Clock`] once per operation and passes that instant to the store.
//! Statuses are resolved at the instant the store decided at ([`Decided::at`]). With several
//! application servers on one database, each server's clock decides for its own requests: a
//! server whose clock runs ahead reclaims holds early and refuses confirms that are still in
//! time; one that runs behind confirms holds that have expired and accepts holds on slots that
//! have started, each by the size of the skew. The PostgreSQL store can take every instant from
//! the database server's clock instead (`PostgresStore::with_database_clock` in
//! `slot_booking_postgres`), so all servers agree; keep servers' clocks synchronised otherwise.
//!
//! ## Testing expiry
//!
//! Drive hold lifetimes with a [`ManualClock`] (`EngineBuilder::clock`): advancing it expires
//! holds at once. The availability cache ages by tokio's clock, not the engine's: in a test,
//! either build the engine with `cache_period(Duration::ZERO)` so every read goes to the store,
//! or run on tokio's paused clock (`#[tokio::test(start_paused = true)]`) and
//! `tokio::time::advance` it together with the manual clock.
//!
//! ```
//! use std::time::Duration;
//! use chrono::{TimeZone, Utc};
//! use slot_booking::{BookingEngine, BookingError, Clock, ManualClock, MemoryStore, NewSlot, Scope};
//!
//! # tokio_test::block_on(async {
//! let clock = ManualClock::new(Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap());
//! let engine = BookingEngine::builder(MemoryStore::new())
//!     .clock(clock.clone())
//!     .cache_period(Duration::ZERO)
//!     .build();
//! let start = clock.now() + chrono::Duration::hours(1);
//! let slot = engine.create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 1)).await?;
//! let hold = engine.hold(slot.slot_id, "k").await?.hold;
//! clock.advance(chrono::Duration::minutes(11));
//! let late = engine.confirm(&Scope::Anonymous, hold.hold_id).await;
//! assert!(matches!(late, Err(BookingError::HoldExpired { .. })));
//! # Ok::<(), BookingError>(())
//! # }).unwrap();
//! ```
//!
//! # Inside your own transaction
//!
//! [`BookingEngine::transaction`] opens a transaction of the store for the engine's writes,
//! with the same validation, rules and errors, and the application's own statements
//! ([`EngineTransaction::run`]), so a confirm and the application's own order row commit or
//! roll back together; the engine's listing shows the change once the commit succeeded, and a
//! call cut midway (a request the client left) is finished, not left half done. See
//! [`transaction`].
//!
//! # Every instance sees every commit
//!
//! Each engine caches availability in its own process. A store that can report commits made
//! elsewhere offers a [`ChangeFeed`](changes::ChangeFeed) (PostgreSQL: `LISTEN`/`NOTIFY`
//! merged with its event log; MariaDB: the event log, [`changes::EventLogFeed`]; SQLite:
//! `PRAGMA data_version`), each of which sees every committed change of the store's writes,
//! holds and bookings included; [`changes::follow_changes`] turns its notices into
//! invalidations of an engine's cache, coalesced, and treats any doubt (a lost connection) as
//! "everything changed". See [`changes`].
//!
//! # Events after commit
//!
//! A store that keeps an event log ([`EventStore`]) appends an [`Event`] in
//! the same atomic step as each change it commits. [`BookingEngine::read_events`] and
//! [`BookingEngine::acknowledge_events`] give each named consumer at-least-once delivery from
//! a cursor stored with the data; [`BookingEngine::reclaim_expired_every`] turns expiries into
//! `hold_expired` events without a job scheduler, and [`BookingEngine::purge`] bounds the
//! history kept. Several instances share a consumer through its lease
//! ([`BookingEngine::lease_consumer`]), and an acknowledgement can commit inside the
//! application's own transaction ([`EngineTransaction::acknowledge_leased`]), so each event is handled
//! once. See [`events`], [`consumers`] and [`reclaimer`].
//!
//! # Observability
//!
//! Every operation runs in a [`tracing`] span (`DEBUG`, target `slot_booking`: slot and hold
//! ids, outcome code, time awaiting the store) and is counted through the [`metrics`] facade
//! by operation and outcome, with store latency histograms and the availability cache's hits,
//! misses, loads and stale serves. The engine installs nothing: with no subscriber and no
//! recorder, nothing is recorded and the cost is a few atomic loads. Names and labels are in
//! [`observe`].
//!
//! # Stores
//!
//! A store is a translation of each operation into one atomic step of its storage, by
//! capability: [`HoldStore`] (the hold lifecycle, eight methods: all a store needs),
//! [`SlotAdmin`], [`HoldQueries`], [`EventStore`], [`TransactionWrites`]; [`Store`] names the
//! first three together. [Writing a store](store#writing-a-store) shows a complete one, run
//! against the conformance cases; [`forward_store!`] writes a wrapper store (metrics, fault
//! injection) in a line per trait. The `conformance` feature ships the suite every store here
//! runs — `slot_booking::conformance_tests!`, or `hold_store_conformance_tests!` for the
//! lifecycle alone — so a third-party store can prove the same behaviour, races included.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Doc tests (the README's included) may not drop a value whose drop stops work, such as a
// `Follower` or a `Reclaimer`, nor an unused `Result`.
#![doc(test(attr(deny(unused_must_use))))]

pub mod admin;
mod answers;
pub mod availability;
pub mod bookings;
pub mod cache;
pub mod candidates;
pub mod changes;
pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod consumers;
pub mod engine;
pub mod error;
pub mod events;
pub mod holds;
pub mod memory;
pub mod model;
pub mod observe;
pub mod pools;
pub mod reclaimer;
pub mod scope;
pub mod store;
pub mod transaction;
pub mod waitlists;

pub use availability::{Availability, AvailabilitySnapshot};
pub use bookings::{BookingPlaced, NewBooking};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{BookingEngine, EngineBuilder, HoldPlaced, NewHold};
pub use error::BookingError;
pub use memory::MemoryStore;
pub use model::{
    AvailabilityEntry, AvailabilityQuery, Booking, BookingLine, CapacityChange, ConsumerId, Event,
    EventKind, EventPosition, Hold, HoldId, HoldPage, HoldStatus, IdempotencyKey, LeaseHolder,
    NewSlot, OwnerId, Page, PageItem, PageRequest, Purged, ResourceId, Slot, SlotCursor, SlotId,
    SlotPage, SlotSummary, SlotUsage, Timestamp,
};
pub use model::{CandidateProblem, CandidateRefused, Strategy, MAX_CANDIDATES};
pub use model::{EntryId, WaitlistEntry};
pub use model::{LineProblem, LineShortfall};
pub use model::{NewPool, Pool, PoolId, PoolSummary, PoolUsage, MAX_POOLS_PER_SLOT};
pub use scope::Scope;
pub use store::{
    AnyHoldOutcome, AnyHoldRequest, BookingOutcome, BookingRequest, BookingStore, Decided,
    EventStore, HoldOutcome, HoldQueries, HoldRequest, HoldStore, PlaceOne, PoolChange, PoolStore,
    RenewRequest, SlotAdmin, SlotChange, SlotLimits, Store, StoreError, StoreErrorKind,
    TransactionBookings, TransactionPools, TransactionWrites, TransactionalStore, Transition,
};
pub use store::{JoinOutcome, JoinRequest, WaitlistStore};
pub use transaction::EngineTransaction;

/// The attribute the store traits are written with (re-exported, so a store needs no
/// dependency of its own on `async-trait`).
pub use async_trait::async_trait;

/// What [`forward_store!`] expands to needs; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
}

/// The README's code blocks, compiled and run as doc tests so the README stays true (those
/// marked `no_run`, which need a PostgreSQL server, are compiled only). `tests/readme.rs`
/// fails if a Rust block is fenced so that it would not be compiled.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
