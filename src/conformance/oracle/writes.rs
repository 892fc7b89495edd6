//! The writes of a sequence, run through the engine or inside a caller's transaction and
//! through the model side by side, and what the store answered as the model would say it.

use chrono::Duration;

use crate::engine::{BookingEngine, NewHold};
use crate::error::BookingError;
use crate::model::{Hold, HoldId, NewSlot, Slot, SlotId, Timestamp};
use crate::scope::Scope;
use crate::store::Store;
use crate::transaction::{TransactionWrites, Within};

use super::ops::{duration_of, owner, resource, ModelOp};
use super::reference::{Model, ModelSlot, Seen};

pub(super) fn seen_hold(result: Result<crate::HoldPlaced, BookingError>) -> Seen {
    match result {
        Ok(placed) => Seen::Hold {
            hold: placed.hold,
            replayed: placed.replayed,
        },
        Err(BookingError::IdempotencyKeyReused {
            existing_hold_id, ..
        }) => Seen::KeyReused(existing_hold_id),
        Err(error) => Seen::Error(error.code()),
    }
}

fn seen_slot(result: Result<Slot, BookingError>) -> Seen {
    match result {
        Ok(slot) => Seen::Slot(slot),
        Err(BookingError::CapacityTaken { taken, .. }) => Seen::CapacityTaken(taken),
        Err(BookingError::CapacityChanged { actual, .. }) => Seen::CapacityChanged(actual),
        Err(BookingError::SlotInUse {
            held, confirmed, ..
        }) => Seen::InUse(held, confirmed),
        Err(error) => Seen::Error(error.code()),
    }
}

fn seen_transition(result: Result<Hold, BookingError>) -> Seen {
    match result {
        Ok(hold) => Seen::Hold {
            hold,
            replayed: false,
        },
        Err(error) => Seen::Error(error.code()),
    }
}

/// The writes a sequence makes: through the engine, or inside a caller's transaction
/// ([`Within`]).
pub(super) trait Writer {
    async fn place_hold(&mut self, request: NewHold) -> Result<crate::HoldPlaced, BookingError>;
    async fn confirm(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError>;
    async fn cancel(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError>;
    async fn renew(
        &mut self,
        scope: &Scope,
        hold: HoldId,
        lifetime: Option<std::time::Duration>,
    ) -> Result<Hold, BookingError>;
    async fn get_hold(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError>;
    async fn create_slot(&mut self, slot: NewSlot) -> Result<Slot, BookingError>;
    async fn change_capacity(
        &mut self,
        slot: SlotId,
        change: crate::CapacityChange,
    ) -> Result<Slot, BookingError>;
    async fn close_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError>;
    async fn reopen_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError>;
    async fn remove_slot(&mut self, slot: SlotId) -> Result<Slot, BookingError>;
}

/// Forwards every [`Writer`] method to the type's own method of the same name.
macro_rules! writer {
    (impl[$($generics:tt)*] for $ty:ty) => {
        impl<$($generics)*> Writer for $ty {
            async fn place_hold(&mut self, request: NewHold) -> Result<crate::HoldPlaced, BookingError> {
                (*self).place_hold(request).await
            }
            async fn confirm(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError> {
                (*self).confirm(scope, hold).await
            }
            async fn cancel(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError> {
                (*self).cancel(scope, hold).await
            }
            async fn renew(&mut self, scope: &Scope, hold: HoldId, lifetime: Option<std::time::Duration>) -> Result<Hold, BookingError> {
                (*self).renew(scope, hold, lifetime).await
            }
            async fn get_hold(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError> {
                (*self).get_hold(scope, hold).await
            }
            async fn create_slot(&mut self, slot: NewSlot) -> Result<Slot, BookingError> {
                (*self).create_slot(slot).await
            }
            async fn change_capacity(&mut self, slot: SlotId, change: crate::CapacityChange) -> Result<Slot, BookingError> {
                (*self).change_capacity(slot, change).await
            }
            async fn close_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError> {
                (*self).close_sales(slot).await
            }
            async fn reopen_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError> {
                (*self).reopen_sales(slot).await
            }
            async fn remove_slot(&mut self, slot: SlotId) -> Result<Slot, BookingError> {
                (*self).remove_slot(slot).await
            }
        }
    };
}

writer!(impl[S: Store] for &BookingEngine<S>);

writer!(impl[S: Store, W: TransactionWrites] for Within<'_, S, W>);

/// Whether `op` writes (or reads one hold): what a transaction may run.
pub(super) fn is_write(op: &ModelOp) -> bool {
    matches!(
        op,
        ModelOp::CreateSlot { .. }
            | ModelOp::SetCapacity { .. }
            | ModelOp::SetClosed { .. }
            | ModelOp::Remove { .. }
            | ModelOp::Hold { .. }
            | ModelOp::Confirm { .. }
            | ModelOp::Cancel { .. }
            | ModelOp::Renew { .. }
            | ModelOp::Get { .. }
    )
}

/// Runs the write `op` through `writer` and the model: the model's expectation and what the
/// writer gave.
pub(super) async fn write_step(
    writer: &mut impl Writer,
    model: &mut Model,
    op: &ModelOp,
    now: Timestamp,
) -> (Seen, Seen) {
    match *op {
        ModelOp::CreateSlot {
            capacity,
            starts_in,
            resource: resource_number,
        } => {
            let starts_at = now + Duration::seconds(starts_in);
            let ends_at = starts_at + Duration::hours(1);
            let mut new = NewSlot::new(starts_at, ends_at, capacity);
            new.resource = resource(resource_number);
            match writer.create_slot(new).await {
                Ok(slot) => {
                    let expected = ModelSlot {
                        id: slot.slot_id,
                        starts_at,
                        ends_at,
                        capacity,
                        remaining: capacity,
                        resource: resource(resource_number),
                        closed: false,
                        removed_at: None,
                    };
                    let seen = (Seen::Slot(expected.as_slot()), Seen::Slot(slot));
                    model.slots.push(expected);
                    seen
                }
                Err(error) => (Seen::Done, Seen::Error(error.code())),
            }
        }
        ModelOp::SetCapacity { slot, change } => {
            let actual = seen_slot(writer.change_capacity(model.slot_id(slot), change).await);
            (model.set_capacity(slot, change, now), actual)
        }
        ModelOp::SetClosed { slot, closed } => {
            let slot_id = model.slot_id(slot);
            let result = if closed {
                writer.close_sales(slot_id).await
            } else {
                writer.reopen_sales(slot_id).await
            };
            (model.set_closed(slot, closed, now), seen_slot(result))
        }
        ModelOp::Remove { slot } => {
            let actual = seen_slot(writer.remove_slot(model.slot_id(slot)).await);
            (model.remove(slot, now), actual)
        }
        ModelOp::Hold {
            slot,
            key,
            quantity,
            owner: owner_number,
            lifetime,
        } => {
            let mut request =
                NewHold::new(model.slot_id(slot), format!("key-{key}")).quantity(quantity);
            if let Some(owner) = owner(owner_number) {
                request = request.owner(owner);
            }
            if let Some(lifetime) = duration_of(lifetime) {
                request = request.lifetime(lifetime);
            }
            let actual = seen_hold(writer.place_hold(request).await);
            let new_id = match &actual {
                Seen::Hold {
                    hold,
                    replayed: false,
                } => Some(hold.hold_id),
                _ => None,
            };
            (model.hold(op, now, new_id), actual)
        }
        ModelOp::Confirm { hold, scope } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(writer.confirm(&scope, model.hold_id(hold)).await);
            (model.confirm(hold, &scope, now), actual)
        }
        ModelOp::Cancel { hold, scope } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(writer.cancel(&scope, model.hold_id(hold)).await);
            (model.cancel(hold, &scope, now), actual)
        }
        ModelOp::Renew {
            hold,
            scope,
            lifetime,
        } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(
                writer
                    .renew(&scope, model.hold_id(hold), duration_of(lifetime))
                    .await,
            );
            (model.renew(hold, &scope, lifetime, now), actual)
        }
        ModelOp::Get { hold, scope } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(writer.get_hold(&scope, model.hold_id(hold)).await);
            (model.get(hold, &scope, now), actual)
        }
        _ => (Seen::Done, Seen::Error("(not a write)")),
    }
}
