//! Administration: closing and reopening sales, changing a slot's capacity and removing it,
//! each by the core's rule ([`edit_slot`]); attaching a slot to a pool, detaching it and
//! changing a pool's capacity, each attempt by the core's rule ([`edit_pool`]). Both run over
//! the store's kernel (`kernel.rs`, its pool primitives in `pools.rs`), in a unit of work of
//! the one write path ([`Run`]).

use super::*;
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
        let inner = Arc::clone(&self.store.inner);
        let mut unit = self.unit(now).await?;
        let now = unit.now;
        let step = edit_slot(&mut unit.kernel(&inner), slot_id, edit, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }
}

/// A pool's administrative changes, each attempt by the core's rule over the store's kernel
/// in a unit of work of the one write path.
#[async_trait]
impl EditPools for Run<'_> {
    async fn decided_at(&mut self, now: Timestamp) -> Result<Timestamp, StoreError> {
        self.instant(now).await
    }

    async fn edit_pool_once(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        attempt: PoolAttempt,
        now: Timestamp,
    ) -> Result<PoolEdited, StoreError> {
        // `now` is the instant the change decides at already (`decided_at`).
        let inner = Arc::clone(&self.store.inner);
        let mut unit = self.unit_at(Some(now)).await?;
        let step = edit_pool(&mut unit.kernel(&inner), pool_id, edit, attempt, now).await;
        unit.finish(step).await
    }
}

impl Run<'_> {
    /// The instant to decide at: `now`, or the database server's clock's.
    pub(crate) async fn instant(&mut self, now: Timestamp) -> Result<Timestamp, StoreError> {
        if !self.store.uses_database_clock() {
            return Ok(now);
        }
        sqlx::query_scalar("SELECT statement_timestamp()")
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)
    }
}
