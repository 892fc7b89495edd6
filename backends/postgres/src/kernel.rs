//! The store's kernel: the primitives of a unit of work ([`store::Kernel`]) that the core's
//! rules are composed on, each one statement deciding nothing; and the unit of work they run
//! in ([`Unit`]).
//!
//! A unit of work is a transaction on a connection of the pool, or a savepoint inside the
//! caller's transaction (sqlx's nested `begin`). Its first statement defers the serving trigger
//! (`slot_booking.defer_serving`, migration 12) for the rest of the unit, so that the lines a
//! write frees units for are served where the core's rule says, by [`store::Kernel::serve`],
//! after the write's own events; and it reads the instant the unit decides at, the engine's or,
//! with [`PostgresStore::with_database_clock`], the server's `statement_timestamp()`, which
//! every statement of the unit is then bound. A unit dropped before it ends is rolled back by
//! sqlx before the connection's next statement, the deferral with it.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use slot_booking::events::NewEvent;
use slot_booking::store::{self, SlotEdit, Step};
use sqlx::{Connection, Transaction};

use super::*;

/// Defers the serving trigger's work for the rest of the transaction (or until
/// [`SERVE_AGAIN`]).
pub(crate) const DEFER_SERVING: &str =
    "SELECT set_config('slot_booking.defer_serving', 'on', true)";

/// Ends [`DEFER_SERVING`].
pub(crate) const SERVE_AGAIN: &str = "SELECT set_config('slot_booking.defer_serving', 'off', true)";

/// The statement that opens a unit of work: the serving trigger deferred, and the instant the
/// unit decides at (`$1`, or the server's clock when it is NULL).
const OPEN_UNIT: &str = "SELECT pg_catalog.set_config('slot_booking.defer_serving', 'on', true), \
                         coalesce($1::timestamptz, statement_timestamp()) AS now";

/// A unit of work of the store (see the module's docs).
pub(crate) struct Unit<'c> {
    tx: Transaction<'c, Postgres>,
    /// Inside the caller's transaction: the deferral is ended before the savepoint is
    /// released, or it would outlive the unit.
    caller: bool,
    /// The instant the unit decides at.
    pub(crate) now: Timestamp,
    /// On a connection of the pool, the flag that is up while the unit is open
    /// ([`Conn::unit_flag`]).
    open: Option<Arc<AtomicBool>>,
}

impl Run<'_> {
    /// Opens a unit of work on this run's connection, deciding at `now` or at the database
    /// server's clock (see the module's docs).
    pub(crate) async fn unit(&mut self, now: Timestamp) -> Result<Unit<'_>, StoreError> {
        let now = self.now_param(now);
        self.unit_at(now).await
    }

    /// Opens a unit of work deciding at `now`, or at the database server's clock (`None`).
    pub(crate) async fn unit_at(&mut self, now: Option<Timestamp>) -> Result<Unit<'_>, StoreError> {
        let caller = matches!(self.conn, Conn::Caller(_));
        let open = self.conn.unit_flag();
        if let Some(open) = &open {
            open.store(true, Ordering::Release);
        }
        let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
        let row = sqlx::query(OPEN_UNIT)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
        let now = row.try_get("now").map_err(map_err)?;
        Ok(Unit {
            tx,
            caller,
            now,
            open,
        })
    }
}

impl Unit<'_> {
    /// The kernel on the unit's connection.
    pub(crate) fn kernel<'k>(&'k mut self, inner: &'k Inner) -> Kernel<'k> {
        Kernel {
            inner,
            conn: &mut self.tx,
        }
    }

    /// Ends the unit as `step` says: its writes kept (committed, or the savepoint released) or
    /// undone. The step's value, or its error after the unit is undone.
    pub(crate) async fn finish<T>(
        self,
        step: Result<Step<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let open = self.open.clone();
        let ended = self.end(step).await;
        // Ended as asked: no longer open. A unit whose end failed leaves the flag up, so the
        // connection, whatever state the failure left it in, is closed rather than reused.
        if let (Some(open), Ok(_)) = (open, &ended) {
            open.store(false, Ordering::Release);
        }
        ended
    }

    async fn end<T>(mut self, step: Result<Step<T>, StoreError>) -> Result<T, StoreError> {
        match step {
            Ok(Step { value, keep: true }) => {
                if self.caller {
                    sqlx::query(SERVE_AGAIN)
                        .execute(&mut *self.tx)
                        .await
                        .map_err(map_err)?;
                }
                self.tx.commit().await.map_err(map_err)?;
                Ok(value)
            }
            Ok(Step { value, keep: false }) => {
                self.tx.rollback().await.map_err(map_err)?;
                Ok(value)
            }
            Err(error) => {
                // The error is the answer; a rollback that fails too (the connection is gone)
                // adds nothing to it, and sqlx rolls back before the connection's next
                // statement anyway.
                let _ = self.tx.rollback().await;
                Err(error)
            }
        }
    }
}

/// The primitives of a unit of work: the store's statements, on the unit's connection.
pub(crate) struct Kernel<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) conn: &'a mut PgConnection,
}

impl Kernel<'_> {
    async fn run(&mut self, statement: &str) -> Result<(), StoreError> {
        (&mut *self.conn)
            .execute(AssertSqlSafe(statement))
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// The holds of `ids`, in that order.
    async fn holds(&mut self, ids: &[i64]) -> Result<Vec<Hold>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(AssertSqlSafe(self.inner.sql.holds_by_ids.as_str()))
            .bind(ids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(map_err)?;
        rows.iter().map(hold_from_row).collect()
    }
}

#[async_trait]
impl store::Kernel for Kernel<'_> {
    async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.inner.sql.slot_usage.as_str()))
            .bind(slot_id.get())
            .bind(now)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        usage_from_row(&row)
    }

    async fn update_slot(
        &mut self,
        slot_id: SlotId,
        edit: SlotEdit,
        now: Timestamp,
    ) -> Result<Option<Slot>, StoreError> {
        let (sql, id) = (&self.inner.sql, slot_id.get());
        let query = match edit {
            SlotEdit::Capacity(change) => {
                let terms = change.terms();
                sqlx::query(AssertSqlSafe(sql.change_capacity.as_str()))
                    .bind(id)
                    .bind(terms.keep)
                    .bind(terms.add)
                    .bind(terms.expected)
            }
            SlotEdit::Closed(closed) => sqlx::query(AssertSqlSafe(sql.set_closed.as_str()))
                .bind(id)
                .bind(closed),
            SlotEdit::Remove => sqlx::query(AssertSqlSafe(sql.remove_slot.as_str()))
                .bind(id)
                .bind(now),
        };
        let row = query
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        row.as_ref().map(slot_from_row).transpose()
    }

    async fn reclaim_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        reclaim(self.conn, self.inner, &[], &[slot_id.get()], Some(now)).await
    }

    async fn append(&mut self, event: &NewEvent) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(self.inner.sql.append_event.as_str()))
            .bind(event.kind.as_str())
            .bind(event.slot_id.get())
            .bind(event.hold_id.map(HoldId::get))
            .bind(event.owner.as_ref().map(OwnerId::as_str))
            .bind(event.quantity)
            .bind(event.at)
            .execute(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn serve(
        &mut self,
        lines: &store::Lines,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        let mut offered: Vec<i64> = Vec::new();
        for slot_id in &lines.slots {
            let offers: Vec<i64> =
                sqlx::query_scalar(AssertSqlSafe(self.inner.sql.serve_slot.as_str()))
                    .bind(slot_id.get())
                    .bind(now)
                    .fetch_one(&mut *self.conn)
                    .await
                    .map_err(map_err)?;
            offered.extend(offers);
        }
        if !lines.pools.is_empty() {
            let pools: Vec<i64> = lines.pools.iter().map(|pool| pool.get()).collect();
            let offers: Vec<i64> =
                sqlx::query_scalar(AssertSqlSafe(self.inner.pools.serve.as_str()))
                    .bind(&[] as &[i64])
                    .bind(pools)
                    .bind(now)
                    .fetch_one(&mut *self.conn)
                    .await
                    .map_err(map_err)?;
            offered.extend(offers);
        }
        self.holds(&offered).await
    }

    async fn begin_nested(&mut self) -> Result<(), StoreError> {
        self.run(store::NESTED_BEGIN).await
    }

    async fn end_nested(&mut self, keep: bool) -> Result<(), StoreError> {
        for statement in store::nested_end(keep) {
            self.run(statement).await?;
        }
        Ok(())
    }
}

/// On `conn`: gives back the expired holds of the slots of `pools` and of `slots`, those slots
/// locked by id, then their pools (`PoolStatements::reclaim`). The holds reclaimed.
pub(crate) async fn reclaim(
    conn: &mut PgConnection,
    inner: &Inner,
    pools: &[i64],
    slots: &[i64],
    now: Option<Timestamp>,
) -> Result<Vec<Hold>, StoreError> {
    let rows = sqlx::query(AssertSqlSafe(inner.pools.reclaim.as_str()))
        .bind(pools)
        .bind(now)
        .bind(slots)
        .fetch_all(conn)
        .await
        .map_err(map_err)?;
    rows.iter().map(hold_from_row).collect()
}
