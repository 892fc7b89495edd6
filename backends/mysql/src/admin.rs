//! Administration: closing and reopening sales, changing a slot's capacity and removing it,
//! each by the core's rule ([`edit_slot`](slot_booking::store::edit_slot)); attaching a slot
//! to a pool, detaching it and changing a pool's capacity, each attempt by the core's rule
//! ([`edit_pool`](slot_booking::store::edit_pool)). Both run over the store's kernel
//! ([`Kernel`](crate::kernel::Kernel), whose updates are decided by the rows they matched; its
//! pool primitives in `pools.rs`), in a unit of work of the one write path (`run.rs`).

use async_trait::async_trait;
use slot_booking::store::{
    edit_pool, edit_slot, EditPools, EditSlots, PoolAttempt, PoolEdit, PoolEdited, SlotEdit,
};
use slot_booking::{Decided, PoolId, SlotChange, SlotId, StoreError, Timestamp};

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

/// A pool's administrative changes, each attempt by the core's rule over the store's kernel
/// in a unit of work of the one write path.
#[async_trait]
impl EditPools for Run<'_> {
    async fn edit_pool_once(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        attempt: PoolAttempt,
        now: Timestamp,
    ) -> Result<PoolEdited, StoreError> {
        let sql = self.statements();
        in_unit!(self, |conn| async move {
            let mut kernel = Kernel { sql, conn };
            edit_pool(&mut kernel, pool_id, edit, attempt, now).await
        })
    }
}
