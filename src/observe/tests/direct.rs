//! [`Direct`]: the memory store's writes, as if on a transaction of the caller's.

use crate::model::{ConsumerId, Hold, HoldId, LeaseHolder, NewSlot, Slot, SlotId, Timestamp};
use crate::{
    Decided, EventPosition, EventStore, HoldOutcome, HoldRequest, HoldStore, MemoryStore,
    RenewRequest, Scope, SlotAdmin, SlotChange, StoreError, TransactionWrites, Transition,
};

/// The memory store's writes, as if on a transaction of the caller's.
pub(super) struct Direct<'s>(pub(super) &'s MemoryStore);

/// Implements [`TransactionWrites`] for [`Direct`]: each method listed calls the memory
/// store's method of the same name with the same arguments; the methods in braces after the
/// list are written out.
macro_rules! delegate_writes {
    (
        $(fn $method:ident($($arg:ident: $type:ty),*) -> $output:ty;)*
        { $($written_out:tt)* }
    ) => {
        #[async_trait::async_trait]
        impl TransactionWrites for Direct<'_> {
            $(async fn $method(&mut self, $($arg: $type),*) -> Result<$output, StoreError> {
                self.0.$method($($arg),*).await
            })*
            $($written_out)*
        }
    };
}

delegate_writes! {
    fn create_hold(request: HoldRequest<'_>) -> Decided<HoldOutcome>;
    fn confirm_hold(hold_id: HoldId, scope: &Scope, now: Timestamp) -> Decided<Transition>;
    fn cancel_hold(hold_id: HoldId, scope: &Scope, now: Timestamp) -> Decided<Transition>;
    fn renew_hold(request: RenewRequest<'_>) -> Decided<Transition>;
    fn get_hold(hold_id: HoldId, scope: &Scope, now: Timestamp) -> Decided<Option<Hold>>;
    fn create_slot(slot: &NewSlot, now: Timestamp) -> Slot;
    fn change_capacity(slot_id: SlotId, change: crate::CapacityChange, now: Timestamp) -> Decided<SlotChange>;
    fn set_closed(slot_id: SlotId, closed: bool, now: Timestamp) -> Decided<SlotChange>;
    fn remove_slot(slot_id: SlotId, now: Timestamp) -> Decided<SlotChange>;
    {
        async fn acknowledge(
            &mut self,
            consumer: &ConsumerId,
            holder: Option<&LeaseHolder>,
            through: EventPosition,
        ) -> Result<bool, StoreError> {
            match holder {
                Some(holder) => self.0.acknowledge_leased(consumer, holder, through).await,
                None => self.0.acknowledge(consumer, through).await.map(|()| true),
            }
        }
    }
}
