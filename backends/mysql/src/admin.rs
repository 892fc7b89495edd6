//! Slot administration: closing and reopening sales, changing a capacity and removing a slot,
//! each by the core's rule ([`edit_slot`](slot_booking::store::edit_slot)) over the store's
//! kernel ([`Kernel`](crate::kernel::Kernel), whose updates of the slot's row are decided by
//! the rows they matched), in a unit of work of the one write path (`run.rs`).

use async_trait::async_trait;
use slot_booking::store::{edit_slot, EditSlots, SlotEdit};
use slot_booking::{Decided, SlotChange, SlotId, StoreError, Timestamp};

use crate::kernel::Kernel;
use crate::run::{in_unit, Run};

#[async_trait]
impl EditSlots for Run<'_> {
    async fn edit_slot(
        &mut self,
        slot_id: SlotId,
        edit: SlotEdit,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = self.statements();
        let done = in_unit!(self, |conn| async move {
            let mut kernel = Kernel { sql, conn };
            edit_slot(&mut kernel, slot_id, edit, now).await
        })?;
        Ok(Decided::new(now, done))
    }
}

/// Binds a capacity change's statement (`change_capacity`, `change_pool_capacity`): the new
/// capacity's terms ([`CAPACITY_AFTER`](crate::fragments::CAPACITY_AFTER)) for each place
/// `SET` names it, the row's id, the capacity expected twice, then the terms for each later
/// place the `WHERE` names the new capacity (`places` of them).
pub(crate) fn bind_capacity<'q>(
    query: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    change: slot_booking::CapacityChange,
    id: i64,
    places: usize,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let terms = change.terms();
    let mut query = query
        .bind(terms.keep)
        .bind(terms.add)
        .bind(terms.keep)
        .bind(terms.add)
        .bind(id)
        .bind(terms.expected)
        .bind(terms.expected);
    for _ in 0..places {
        query = query.bind(terms.keep).bind(terms.add);
    }
    query
}
