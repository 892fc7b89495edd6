//! [`Kernel`]: the primitives of a store's unit of work that the core's rules are composed on.
//!
//! A store offers them over its unit of work (a transaction of its own, or a savepoint in the
//! caller's) and decides nothing: each primitive runs its statement and says what it did (by
//! rows affected and constraints), and the rules in the core decide what to do next. A rule
//! composed on them is written once for every store that offers them: today the
//! administrative changes of a slot ([`edit_slot`](super::edit_slot)) and, with the
//! primitives of a [`PoolKernel`](super::PoolKernel), of a pool
//! ([`edit_pool`](super::edit_pool)).

use async_trait::async_trait;

use super::error::StoreError;
use super::serve::Lines;
use crate::model::{CapacityChange, EventKind, Hold, NewEvent, Slot, SlotId, SlotUsage, Timestamp};

/// An administrative change of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotEdit {
    /// Its capacity changed, taking free units only.
    Capacity(CapacityChange),
    /// Its sales closed (`true`) or reopened (`false`).
    Closed(bool),
    /// The slot archived, no unit of it held or confirmed.
    Remove,
}

impl SlotEdit {
    /// The event the change appends when it changes the slot.
    pub fn event(&self) -> EventKind {
        match self {
            SlotEdit::Capacity(_) => EventKind::SlotCapacityChanged,
            SlotEdit::Closed(true) => EventKind::SlotClosed,
            SlotEdit::Closed(false) => EventKind::SlotReopened,
            SlotEdit::Remove => EventKind::SlotRemoved,
        }
    }

    /// Whether `slot`, as stored, already is as the change asks (its update then changes
    /// nothing, and the change is applied as it is). A live slot is never removed already.
    pub fn already(&self, slot: &Slot) -> bool {
        match self {
            SlotEdit::Capacity(change) => change.leaves(slot.capacity),
            SlotEdit::Closed(closed) => slot.closed == *closed,
            SlotEdit::Remove => false,
        }
    }

    /// Whether the change takes units, and so may be refused while they are held: then the
    /// slot's expired holds are reclaimed before it is refused.
    pub fn takes_free_units(&self) -> bool {
        !matches!(self, SlotEdit::Closed(_))
    }
}

/// The primitives of one unit of work of a store (see the module's docs).
#[async_trait]
pub trait Kernel: Send {
    /// The slot with its held and expired units at `now`, removed or not.
    async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError>;

    /// Runs `edit`'s conditional update of the slot's row at `now`: the slot as the change
    /// left it, if it changed the row (a live slot, not already as asked; a change that takes
    /// units finds them free).
    async fn update_slot(
        &mut self,
        slot_id: SlotId,
        edit: SlotEdit,
        now: Timestamp,
    ) -> Result<Option<Slot>, StoreError>;

    /// Reclaims the held holds of slot `slot_id` expired by `now`, its row locked first (the
    /// store's lock order): `hold_expired` each, their units back to the slot and its pools.
    /// The holds reclaimed.
    async fn reclaim_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError>;

    /// Appends `event` to the event log.
    async fn append(&mut self, event: &NewEvent) -> Result<(), StoreError>;

    /// Serves `lines` at `now` to a fixpoint ([`serve_lines`](super::serve_lines)): the line
    /// of each of its slots with the lines of that slot's pools, and the line of each of its
    /// pools. The offers made, in the order made.
    async fn serve(&mut self, lines: &Lines, now: Timestamp) -> Result<Vec<Hold>, StoreError>;

    /// Begins a nested unit (a savepoint): the writes from here to
    /// [`end_nested`](Self::end_nested) stay or are undone together.
    async fn begin_nested(&mut self) -> Result<(), StoreError>;

    /// Ends the nested unit begun last: its writes stay (`keep`) or are undone.
    async fn end_nested(&mut self, keep: bool) -> Result<(), StoreError>;
}

/// The SQL that begins a nested unit ([`Kernel::begin_nested`]): a savepoint, as SQLite,
/// PostgreSQL and MariaDB/MySQL spell it.
pub const NESTED_BEGIN: &str = "SAVEPOINT slot_booking_nested";

/// The SQL that ends the nested unit begun by [`NESTED_BEGIN`] ([`Kernel::end_nested`]): its
/// writes kept (`keep`), or undone first.
pub fn nested_end(keep: bool) -> &'static [&'static str] {
    const RELEASE: &str = "RELEASE SAVEPOINT slot_booking_nested";
    if keep {
        &[RELEASE]
    } else {
        &["ROLLBACK TO SAVEPOINT slot_booking_nested", RELEASE]
    }
}
