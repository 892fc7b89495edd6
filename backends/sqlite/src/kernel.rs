//! The store's kernel: the primitives of a unit of work ([`store::Kernel`]) that the core's
//! rules are composed on, each one statement (or one store function) deciding nothing.

use async_trait::async_trait;
use slot_booking::events::NewEvent;
use slot_booking::store::{self, SlotEdit};
use slot_booking::{Hold, Slot, SlotId, SlotUsage, StoreError, Timestamp};
use sqlx::{AssertSqlSafe, SqliteConnection};

use crate::map_err;
use crate::reads::slot_usage;
use crate::rows::{slot_from_row, to_micros};
use crate::serve::{serve_lines, Lines};
use crate::sql::Statements;
use crate::units::{append_event, reclaim};

/// A unit of work of the store: its statements, on the connection the unit is in.
pub(crate) struct Kernel<'a> {
    pub(crate) sql: &'a Statements,
    pub(crate) conn: &'a mut SqliteConnection,
}

impl Kernel<'_> {
    async fn run(&mut self, statement: &str) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(statement))
            .execute(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}

#[async_trait]
impl store::Kernel for Kernel<'_> {
    async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        slot_usage(self.sql, self.conn, slot_id, now).await
    }

    async fn update_slot(
        &mut self,
        slot_id: SlotId,
        edit: SlotEdit,
        now: Timestamp,
    ) -> Result<Option<Slot>, StoreError> {
        let (sql, id) = (self.sql, slot_id.get());
        // Each returns the slot as it changed it, and no row when it changed none.
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
                .bind(to_micros(now)),
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
        let statement = &self.sql.reclaim_expired;
        reclaim(self.sql, statement, self.conn, slot_id.get(), now).await
    }

    async fn append(&mut self, event: &NewEvent) -> Result<(), StoreError> {
        append_event(self.sql, self.conn, event).await
    }

    async fn serve(
        &mut self,
        lines: &store::Lines,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        let mut each = Lines::new();
        for slot_id in &lines.slots {
            each.slot_and_pools(self.sql, self.conn, *slot_id).await?;
        }
        for pool_id in &lines.pools {
            each.pool(*pool_id);
        }
        serve_lines(self.sql, self.conn, &each, now).await
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
