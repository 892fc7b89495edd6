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
