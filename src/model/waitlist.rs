//! Waitlists: requests that wait in line for a slot's units, served by priority, then
//! arrival, in strict order (the head waits until its whole quantity is free; nobody behind
//! it is served first, and no newcomer takes units while anyone waits).

use serde::{Deserialize, Serialize};

use super::hold::Hold;
use super::ids::{EntryId, HoldId, OwnerId, SlotId};
use super::time::{rfc3339, Timestamp};

/// A request waiting in a slot's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitlistEntry {
    /// The entry's id; the hold offered to it will have the same number.
    pub entry_id: EntryId,
    /// The slot it waits for.
    pub slot_id: SlotId,
    /// Units it wants, all together.
    pub quantity: i32,
    /// Who it belongs to (and the offer will); `None` for anonymous.
    pub owner: Option<OwnerId>,
    /// Higher is served first; equal priorities by arrival.
    pub priority: i32,
    /// When it joined.
    #[serde(with = "rfc3339")]
    pub joined_at: Timestamp,
    /// How long the hold offered to it lasts unconfirmed (its offer window), in whole
    /// microseconds.
    pub offer_micros: i64,
}

impl WaitlistEntry {
    /// The hold this entry is offered when its units free up, at `now`: held, owned by the
    /// entry's owner, for its offer window.
    pub fn offer(&self, now: Timestamp) -> Hold {
        Hold {
            hold_id: HoldId(self.entry_id.0),
            slot_id: self.slot_id,
            status: super::hold::HoldStatus::Held,
            expires_at: now + chrono::Duration::microseconds(self.offer_micros),
            confirmed_at: None,
            cancelled_at: None,
            quantity: self.quantity,
            owner: self.owner.clone(),
            created_at: now,
        }
    }

    /// The order a slot's line is served in: higher priority first, then earlier arrival
    /// (entry ids are assigned in arrival order).
    pub fn line_order(&self) -> (std::cmp::Reverse<i32>, EntryId) {
        (std::cmp::Reverse(self.priority), self.entry_id)
    }
}

/// How many entries at the head of a line (in [`WaitlistEntry::line_order`]) `free` units
/// serve, in strict order: each whole, in turn, until one does not fit. The one rule of
/// promotion; every store serves its lines by it.
pub fn served<'a>(free: i32, line: impl IntoIterator<Item = &'a WaitlistEntry>) -> usize {
    let mut left = free;
    let mut served = 0;
    for entry in line {
        if entry.quantity > left {
            break;
        }
        left -= entry.quantity;
        served += 1;
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn entry(id: i64, quantity: i32) -> WaitlistEntry {
        WaitlistEntry {
            entry_id: EntryId(id),
            slot_id: SlotId(1),
            quantity,
            owner: None,
            priority: 0,
            joined_at: Utc.timestamp_opt(1_900_000_000, 0).single().unwrap(),
            offer_micros: 1,
        }
    }

    #[test]
    fn the_head_waits_for_its_whole_quantity_and_nobody_passes_it() {
        let line = [entry(1, 2), entry(2, 1), entry(3, 1)];
        assert_eq!(
            served(1, &line),
            0,
            "the head wants 2: the one behind waits too"
        );
        assert_eq!(served(2, &line), 1);
        assert_eq!(served(3, &line), 2);
        assert_eq!(served(10, &line), 3);
        assert_eq!(served(0, &[]), 0);
    }
}
