//! Administration: closing and reopening sales, changing a slot's capacity and removing it,
//! each by the core's rule ([`edit_slot`]); attaching a slot to a pool, detaching it and
//! changing a pool's capacity, each attempt by the core's rule ([`edit_pool`]). Both run over
//! the store's kernel (its pool primitives in `pools.rs`), in a unit of work of the one write
//! path ([`Run`]).

use super::*;
use crate::kernel::Kernel;
use crate::run::Run;
use slot_booking::store::{
    edit_pool, edit_slot, EditPools, EditSlots, PoolAttempt, PoolEdit, PoolEdited, SlotEdit,
};
use slot_booking::{PoolId, SlotChange};

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
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let mut kernel = Kernel {
            sql: &sql,
            conn: unit.connection(),
        };
        let step = edit_pool(&mut kernel, pool_id, edit, attempt, now).await;
        unit.finish(step).await
    }
}
