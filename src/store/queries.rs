//! [`HoldQueries`]: pages of holds, a customer's and a slot's roster.

use async_trait::async_trait;

use super::error::StoreError;
use super::outcome::Decided;
use crate::model::{Hold, OwnerId, PageRequest, SlotId, Timestamp};

/// Pages of holds by id: an owner's holds, a slot's roster. Each is a keyset read through an
/// index, so a page costs the same however deep it is.
#[async_trait]
pub trait HoldQueries: Send + Sync + 'static {
    /// The holds of `owner` with ids after `page.after`, by id, at most `page.limit`, as
    /// stored, read through an index on `(owner, id)`.
    async fn owner_holds(
        &self,
        owner: &OwnerId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError>;

    /// The holds of `slot_id` (every owner's) with ids after `page.after`, by id, at most
    /// `page.limit`, as stored, read through an index on `(slot_id, id)`.
    async fn slot_holds(
        &self,
        slot_id: SlotId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError>;
}
