//! What a hold costs in statements, counted from sqlx's own log: sqlx emits one tracing event
//! (target `sqlx::query`) per statement it runs, on the connection's worker thread, so a
//! process-wide subscriber records them. sqlx runs `BEGIN`, `COMMIT` and `ROLLBACK` as worker
//! commands it does not log; every slow path of a hold runs the logged reclaim `UPDATE`, so a
//! hold whose only logged statement is its `INSERT` opened no transaction either.

mod common;

use slot_booking::{HoldStore, SlotAdmin};
use std::future::Future;
use std::sync::{Mutex, OnceLock};

use common::*;
use slot_booking::{HoldOutcome, HoldRequest, IdempotencyKey, NewSlot, SlotId};
use slot_booking_sqlite::SqliteStore;
use sqlx::Connection;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The statements sqlx logged since the last [`take`].
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The tests of this binary share the one log: each holds this while it counts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Records the summary (first words) of every `sqlx::query` event; ignores everything else.
struct StatementRecorder;

struct Summary(Option<String>);

impl Visit for Summary {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl Subscriber for StatementRecorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut summary = Summary(None);
        event.record(&mut summary);
        let statement = summary.0.unwrap_or_else(|| "?".to_owned());
        LOGGED.lock().unwrap().push(statement);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

fn install_recorder() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(StatementRecorder).unwrap();
    });
}

fn take() -> Vec<String> {
    std::mem::take(&mut *LOGGED.lock().unwrap())
}

/// The first word of each statement logged.
fn verbs(logged: &[String]) -> Vec<String> {
    logged
        .iter()
        .map(|s| s.split_whitespace().next().unwrap_or("").to_owned())
        .collect()
}

/// Runs `op` through `store`, then waits for its statements' log events: sqlx logs a
/// statement when the worker drops it, which may be just after the caller saw its result, and
/// a worker handles one command at a time, so once a ping on the same connection (the store's
/// only one) is answered every statement sent before it has been logged. The ping itself is not
/// logged.
async fn logged<T>(store: &SqliteStore, op: impl Future<Output = T>) -> (T, Vec<String>) {
    take();
    let out = op.await;
    let mut conn = store.pool().acquire().await.unwrap();
    conn.ping().await.unwrap();
    (out, take())
}

/// The slots of one test, each full or refusing for one reason, on a store with a single
/// connection (an in-memory database: no other connection opens and logs its pragmas).
struct Fixture {
    store: SqliteStore,
    /// Capacity 1, its unit held until `at(300)`.
    full: SlotId,
    /// Capacity 2, one unit held: a request for 2 finds too few.
    short: SlotId,
    /// Capacity 1, its unit held by a hold that expires at `at(-1)`.
    expired: SlotId,
    /// Capacity 1, its unit held, sales closed.
    closed: SlotId,
    /// Capacity 1, its unit held, starting at `at(1)`.
    starting: SlotId,
    /// Capacity 1, removed (nothing held, as a removal requires).
    removed: SlotId,
}

async fn fixture() -> Fixture {
    install_recorder();
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let full = slot(&store, 1).await;
    let short = slot(&store, 2).await;
    let expired = slot(&store, 1).await;
    let closed = slot(&store, 1).await;
    let removed = slot(&store, 1).await;
    let starting = store
        .create_slot(&NewSlot::new(at(1), at(7200), 1), at(-100))
        .await
        .unwrap()
        .slot_id;
    for (slot_id, k) in [
        (full, "full-held"),
        (short, "short-held"),
        (closed, "closed-held"),
    ] {
        created(hold(&store, slot_id, k, at(0)).await);
    }
    let k = key("starting-held");
    created(
        store
            .create_hold(request(starting, &k, at(-100)))
            .await
            .unwrap()
            .outcome,
    );
    let k = key("expired-held");
    let mut early = request(expired, &k, at(-10));
    early.expires_at = at(-1);
    created(store.create_hold(early).await.unwrap().outcome);
    store.set_closed(closed, true, at(0)).await.unwrap();
    store.remove_slot(removed, at(0)).await.unwrap();
    Fixture {
        store,
        full,
        short,
        expired,
        closed,
        starting,
        removed,
    }
}

/// A hold request at `at(1)`.
fn at_1<'a>(slot_id: SlotId, k: &'a IdempotencyKey, quantity: i32) -> HoldRequest<'a> {
    HoldRequest {
        quantity,
        ..request(slot_id, k, at(1))
    }
}

/// Every refused (or reclaiming) case, its request and the outcome it must get.
fn cases(f: &Fixture) -> Vec<(&'static str, SlotId, &'static str, i32)> {
    vec![
        ("sold out", f.full, "new-key", 1),
        ("too few for the quantity", f.short, "new-key-2", 2),
        ("replay on a full slot", f.full, "full-held", 1),
        ("key reused on a full slot", f.full, "short-held", 1),
        ("full with an expired hold", f.expired, "after-expiry", 1),
        ("closed", f.closed, "new-key-3", 1),
        ("started", f.starting, "new-key-4", 1),
        ("removed", f.removed, "new-key-5", 1),
        ("over capacity", f.full, "new-key-6", 2),
        ("no such slot", SlotId(999), "new-key-7", 1),
    ]
}

/// Whether `outcome` is the one case `name` must get.
fn expected(name: &str, f: &Fixture, outcome: &HoldOutcome) -> bool {
    match name {
        "sold out" | "too few for the quantity" => matches!(outcome, HoldOutcome::SoldOut),
        "replay on a full slot" => {
            matches!(outcome, HoldOutcome::Replayed(h) if h.slot_id == f.full)
        }
        "key reused on a full slot" => matches!(outcome, HoldOutcome::KeyReused(Some(_))),
        "full with an expired hold" => {
            matches!(outcome, HoldOutcome::Created(h) if h.slot_id == f.expired)
        }
        "closed" | "started" => matches!(outcome, HoldOutcome::SlotClosed),
        "removed" | "no such slot" => matches!(outcome, HoldOutcome::SlotNotFound),
        "over capacity" => matches!(outcome, HoldOutcome::ExceedsCapacity { capacity: 1 }),
        other => panic!("unknown case {other}"),
    }
}

/// A refusal on a sold-out slot (no expired hold, the key free, the slot selling, the
/// quantity within its capacity) is one statement, the hold's `INSERT`, through the pool; every
/// other refusal still gets its own outcome, through the slow path where it needs one.
#[tokio::test]
async fn a_sold_out_refusal_is_one_statement_through_the_pool() {
    let _serial = SERIAL.lock().await;
    let f = fixture().await;
    for (name, slot_id, k, quantity) in cases(&f) {
        let k = key(k);
        let (outcome, statements) = logged(&f.store, async {
            let request = at_1(slot_id, &k, quantity);
            f.store.create_hold(request).await.unwrap().outcome
        })
        .await;
        check(name, &f, &outcome, &statements);
        assert!(expected(name, &f, &outcome), "{name}: {outcome:?}");
    }
    for slot_id in [f.full, f.short, f.expired, f.closed, f.starting] {
        assert_invariant(f.store.pool(), slot_id).await;
    }
}

/// The statements a case may cost: the sold-out refusals exactly their `INSERT`; the others
/// more (they read the key, or reclaim and explain).
fn check(name: &str, f: &Fixture, outcome: &HoldOutcome, statements: &[String]) {
    let verbs = verbs(statements);
    match name {
        "sold out" | "too few for the quantity" => {
            assert_eq!(verbs, ["INSERT"], "{name}: {statements:?}");
            assert!(
                statements[0].contains(&format!("{}holds", f.store.table_prefix())),
                "{name}: {statements:?}"
            );
        }
        // The key's hold is read to answer, after the insert (and the reclaim-and-retry the
        // insert could not rule out: the key is taken, so the trigger leaves it to the store).
        "replay on a full slot" | "key reused on a full slot" => {
            assert!(verbs.len() > 1, "{name}: {statements:?}");
        }
        _ => assert!(verbs.len() > 1, "{name}: {outcome:?} {statements:?}"),
    }
}

/// The same through `SqliteStore::on` inside the caller's `BEGIN IMMEDIATE` transaction: the
/// sold-out refusal is the `INSERT` alone (no savepoint is needed around one statement, which
/// an abort undoes by itself), the transaction stays usable, and every other case gets its
/// outcome.
#[tokio::test]
async fn a_sold_out_refusal_is_one_statement_in_the_callers_transaction() {
    let _serial = SERIAL.lock().await;
    let f = fixture().await;
    let mut tx = f.store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    for (name, slot_id, k, quantity) in cases(&f) {
        let k = key(k);
        let writes = &mut f.store.on(&mut tx);
        take();
        let outcome =
            slot_booking::TransactionWrites::create_hold(writes, at_1(slot_id, &k, quantity))
                .await
                .unwrap()
                .outcome;
        writes.connection().ping().await.unwrap();
        let statements = take();
        check(name, &f, &outcome, &statements);
        assert!(expected(name, &f, &outcome), "{name}: {outcome:?}");
    }
    // The refusals left the caller's transaction usable and changed nothing; the one hold the
    // reclaim made commits with it.
    tx.commit().await.unwrap();
    for slot_id in [f.full, f.short, f.expired, f.closed, f.starting] {
        assert_invariant(f.store.pool(), slot_id).await;
    }
    assert_eq!(counts(f.store.pool(), f.full).await, (1, 0, 1, 0));
    assert_eq!(counts(f.store.pool(), f.expired).await, (1, 0, 1, 0));
}

/// The before: with migration 5's trigger (one abort message for every refusal) the same
/// sold-out refusal takes the slow path: the insert, then in a unit of work the insert again,
/// the reclaim (which finds nothing, so no third insert), the key's reads (a hold's, a waiting
/// entry's) and the slot's read (plus `BEGIN IMMEDIATE` and `ROLLBACK`, which sqlx does not
/// log).
#[tokio::test]
async fn with_a_single_abort_message_a_sold_out_refusal_takes_the_slow_path() {
    let _serial = SERIAL.lock().await;
    let f = fixture().await;
    let migration_4_trigger = "DROP TRIGGER slot_booking_holds_take_a_unit; \
        CREATE TRIGGER slot_booking_holds_take_a_unit BEFORE INSERT ON slot_booking_holds \
        WHEN NEW.status = 'held' \
        BEGIN \
            UPDATE slot_booking_slots SET remaining = remaining - NEW.quantity \
            WHERE id = NEW.slot_id AND remaining >= NEW.quantity \
              AND starts_at > NEW.created_at AND closed = 0 AND removed_at IS NULL; \
            SELECT RAISE(ABORT, 'slot_booking: no unit to hold') WHERE changes() = 0; \
        END;";
    sqlx::raw_sql(migration_4_trigger)
        .execute(f.store.pool())
        .await
        .unwrap();
    let k = key("new-key");
    let (outcome, statements) = logged(&f.store, async {
        let request = at_1(f.full, &k, 1);
        f.store.create_hold(request).await.unwrap().outcome
    })
    .await;
    assert!(matches!(outcome, HoldOutcome::SoldOut), "{outcome:?}");
    assert_eq!(
        verbs(&statements),
        ["INSERT", "INSERT", "UPDATE", "SELECT", "SELECT", "SELECT"],
        "{statements:?}"
    );
}

/// On a database file, holds run on the store's own writer connection (outside the pool): a
/// sold-out refusal is its `INSERT` alone there too. That connection cannot be pinged from
/// here, so a hold that succeeds follows the refusal on it: sqlx logs a statement before it
/// ends the call's stream, and a worker handles one call at a time, so once the second call
/// returned both are logged. Two holds, two statements.
#[tokio::test]
async fn a_sold_out_refusal_is_one_statement_on_the_writer_connection() {
    let _serial = SERIAL.lock().await;
    install_recorder();
    let db = TempDb::new("statements_file");
    let store = db.store().await;
    let full = slot(&store, 1).await;
    let open = slot(&store, 5).await;
    created(hold(&store, full, "full-held", at(0)).await);
    created(hold(&store, open, "warm-up", at(0)).await);
    take();
    let k = key("refused");
    let refused = store.create_hold(at_1(full, &k, 1)).await.unwrap().outcome;
    assert!(matches!(refused, HoldOutcome::SoldOut), "{refused:?}");
    created(hold(&store, open, "after", at(1)).await);
    let statements = take();
    assert_eq!(verbs(&statements), ["INSERT", "INSERT"], "{statements:?}");
}
