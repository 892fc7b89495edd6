//! The store's kernel: the primitives of a unit of work ([`store::Kernel`]) that the core's
//! rules are composed on, each one statement (or one store function) deciding nothing.

use async_trait::async_trait;
use slot_booking::events::NewEvent;
use slot_booking::store::{self, SlotEdit};
use slot_booking::{Hold, Slot, SlotId, SlotUsage, StoreError, Timestamp};
use sqlx::mysql::MySqlConnection;
use sqlx::AssertSqlSafe;

use crate::fragments::bind_capacity;
use crate::map_err;
use crate::reads::{get_slot, slot_usage};
use crate::rows::to_micros;
use crate::serve::{serve, Lines};
use crate::sql::Statements;
use crate::writes::{append_event, reclaim_slot};

/// A unit of work of the store: its statements, on the connection the unit is in.
pub(crate) struct Kernel<'a> {
    pub(crate) sql: &'a Statements,
    pub(crate) conn: &'a mut MySqlConnection,
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
        let query = match edit {
            SlotEdit::Capacity(change) => {
                let query = sqlx::query(AssertSqlSafe(sql.change_capacity.as_str()));
                bind_capacity(query, change, id, 3)
            }
            SlotEdit::Closed(closed) => sqlx::query(AssertSqlSafe(sql.set_closed.as_str()))
                .bind(closed)
                .bind(id)
                .bind(closed),
            SlotEdit::Remove => sqlx::query(AssertSqlSafe(sql.remove_slot.as_str()))
                .bind(to_micros(now))
                .bind(id),
        };
        let done = query.execute(&mut *self.conn).await.map_err(map_err)?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        // Matched: the slot as the change left it, removed or not.
        match get_slot(self.sql, self.conn, slot_id).await? {
            Some(slot) => Ok(Some(slot)),
            None => Err(StoreError::failed("a slot changed, then not found")),
        }
    }

    async fn reclaim_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        reclaim_slot(self.sql, self.conn, slot_id, now).await
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
            each.pool(pool_id.get());
        }
        serve(self.sql, self.conn, each, now).await
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
