//! Slot administration: closing and reopening sales, changing a capacity and removing a slot,
//! each taking only free units, on the one write path ([`Run`]).

use super::*;
use slot_booking::CapacityChange;

impl Run<'_> {
    /// Runs a slot change's conditional update (`fast`, returning the slot and `decided_at` if
    /// it changed it), then, if it changed nothing and there is one, the statement that
    /// reclaims expired holds first (`reclaim`, returning the slot, `applied` and
    /// `decided_at`), each with `$1` the slot, `$2` now and, for a capacity `change`, its terms
    /// as `$3` keep, `$4` add, `$5` expected; when neither applied, reads the slot's usage to
    /// say why.
    pub(crate) async fn change_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
        change: Option<CapacityChange>,
        fast: &str,
        reclaim: &str,
    ) -> Result<Decided<SlotChange>, StoreError> {
        for (sql, reclaiming) in [(fast, false), (reclaim, true)] {
            let mut query = sqlx::query(AssertSqlSafe(sql))
                .bind(slot_id.get())
                .bind(self.now_param(now));
            if let Some(change) = change {
                let terms = change.terms();
                query = query.bind(terms.keep).bind(terms.add).bind(terms.expected);
            }
            let Some(row) = query
                .fetch_optional(self.conn.get().await?)
                .await
                .map_err(map_err)?
            else {
                continue;
            };
            // The fast statement returns a row only when it applied the change; the reclaiming
            // one also when it gave back reclaimed units without applying it.
            let applied = !reclaiming || row.try_get::<bool, _>("applied").map_err(map_err)?;
            if applied {
                return decided(&row, SlotChange::Applied(slot_from_row(&row)?));
            }
        }
        self.refused_change(slot_id, now).await
    }

    /// Says why a capacity change or a removal changed nothing: the slot is missing or removed,
    /// or units are in use (the slot and its held units as read now). One read, after the
    /// writes.
    pub(crate) async fn refused_change(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().slot_usage.as_str()))
            .bind(slot_id.get())
            .bind(self.now_param(now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let change = match usage_from_row(&row)? {
            Some(usage) if usage.slot.removed_at.is_none() => SlotChange::InUse(usage),
            _ => SlotChange::NotFound,
        };
        decided(&row, change)
    }

    pub(crate) async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql;
        self.change_slot(
            slot_id,
            now,
            Some(change),
            &sql.capacity_fast,
            &sql.capacity_reclaim,
        )
        .await
    }

    pub(crate) async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().set_closed.as_str()))
            .bind(slot_id.get())
            .bind(self.now_param(now))
            .bind(closed)
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let change = match optional_slot(&row)? {
            Some(slot) => SlotChange::Applied(slot),
            None => SlotChange::NotFound,
        };
        decided(&row, change)
    }

    pub(crate) async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql;
        self.change_slot(slot_id, now, None, &sql.remove_fast, &sql.remove_reclaim)
            .await
    }
}
