//! Slot administration: closing and reopening sales, changing a capacity and removing a slot,
//! each by the core's rule ([`edit_slot`]) over the store's kernel, in a unit of work of the
//! one write path ([`Run`]).

use super::*;
use crate::kernel::Kernel;
use crate::run::Run;
use slot_booking::store::{edit_slot, EditSlots, SlotEdit};
use slot_booking::SlotChange;

#[async_trait]
impl EditSlots for Run<'_> {
    async fn edit_slot(
        &mut self,
        slot_id: SlotId,
        edit: SlotEdit,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let mut kernel = Kernel {
            sql: &sql,
            conn: unit.connection(),
        };
        let step = edit_slot(&mut kernel, slot_id, edit, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }
}
