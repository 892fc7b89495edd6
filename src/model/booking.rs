//! Bookings of several lines: units of several slots taken, confirmed, cancelled, renewed and
//! expired together.
//!
//! A booking is stored as one hold per line, all placed in one atomic step under one
//! idempotency key and ended together. Its id is the id of its first line's hold (the line of
//! the lowest slot id), so a hold is a booking of one line and every hold id names a booking.

use serde::{Deserialize, Serialize};

use super::hold::{Hold, HoldStatus, MAX_QUANTITY};
use super::ids::{HoldId, OwnerId, SlotId};
use super::time::Timestamp;

/// The most lines one booking may have.
pub const MAX_LINES: usize = 50;

/// One line of a booking: `quantity` units of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BookingLine {
    /// The slot to take units of.
    pub slot_id: SlotId,
    /// Units of it, `1..=`[`MAX_QUANTITY`].
    pub quantity: i32,
}

impl BookingLine {
    /// `quantity` units of `slot_id`.
    pub fn new(slot_id: SlotId, quantity: i32) -> Self {
        BookingLine { slot_id, quantity }
    }

    /// The line a hold takes.
    pub fn of(hold: &Hold) -> Self {
        BookingLine::new(hold.slot_id, hold.quantity)
    }
}

/// Checks a booking's lines and puts them in the order stores take their locks in (slot id
/// ascending): 1 to [`MAX_LINES`] lines, each slot at most once, each quantity in
/// `1..=`[`MAX_QUANTITY`].
pub fn canonical_lines(mut lines: Vec<BookingLine>) -> Result<Vec<BookingLine>, InvalidBooking> {
    if lines.is_empty() {
        return Err(InvalidBooking::NoLines);
    }
    if lines.len() > MAX_LINES {
        return Err(InvalidBooking::TooManyLines(lines.len()));
    }
    if let Some(line) = lines
        .iter()
        .find(|line| !(1..=MAX_QUANTITY).contains(&line.quantity))
    {
        return Err(InvalidBooking::Quantity(*line));
    }
    lines.sort();
    if let Some(pair) = lines.windows(2).find(|w| w[0].slot_id == w[1].slot_id) {
        return Err(InvalidBooking::SlotTwice(pair[0].slot_id));
    }
    Ok(lines)
}

/// Why a booking's lines were refused before any store saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBooking {
    /// A booking needs at least one line.
    #[error("a booking needs at least one line")]
    NoLines,
    /// More than [`MAX_LINES`] lines.
    #[error("a booking has at most 50 lines, got {0}")]
    TooManyLines(usize),
    /// The same slot on two lines (ask for more units on one line instead).
    #[error("slot {0} is on two lines of the booking")]
    SlotTwice(SlotId),
    /// A line's quantity outside `1..=`[`MAX_QUANTITY`].
    #[error("line for slot {} asks for {} units; each line takes 1 to 1000", .0.slot_id, .0.quantity)]
    Quantity(BookingLine),
}

/// One line of a refused booking and why it cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineShortfall {
    /// The line's slot.
    pub slot_id: SlotId,
    /// Units the line asked for.
    pub quantity: i32,
    /// Why it cannot be had.
    pub problem: LineProblem,
}

/// Why one line of a booking cannot be had; each has the code of the same refusal of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum LineProblem {
    /// No slot has this id, or it was removed (`slot_not_found`).
    SlotNotFound,
    /// The slot has started or its sales are closed (`slot_closed`).
    SlotClosed,
    /// More units than the slot's whole capacity (`quantity_exceeds_capacity`).
    #[serde(rename = "quantity_exceeds_capacity")]
    ExceedsCapacity {
        /// The slot's capacity.
        capacity: i32,
    },
    /// Fewer units free than asked, even after reclaiming expired holds (`sold_out`).
    SoldOut {
        /// Units that were free, as the store read them (at most the quantity asked less one).
        free: i32,
    },
}

impl LineProblem {
    /// The code of the same refusal of a one-line hold.
    pub fn code(&self) -> &'static str {
        match self {
            LineProblem::SlotNotFound => "slot_not_found",
            LineProblem::SlotClosed => "slot_closed",
            LineProblem::ExceedsCapacity { .. } => "quantity_exceeds_capacity",
            LineProblem::SoldOut { .. } => "sold_out",
        }
    }
}

/// A booking as stored: its lines' holds, by slot id. Every line has the same owner, expiry,
/// creation and status transitions; the booking's id is its first line's hold id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    /// The booking's id: the hold id of its first line.
    pub booking_id: HoldId,
    /// One hold per line, by slot id ascending; never empty.
    pub lines: Vec<Hold>,
}

impl Booking {
    /// A hold as the booking of one line it is.
    pub fn of_hold(hold: Hold) -> Self {
        Booking {
            booking_id: hold.hold_id,
            lines: vec![hold],
        }
    }

    /// A booking of these line holds (in any order), or `None` if there are none.
    pub fn of_lines(mut lines: Vec<Hold>) -> Option<Self> {
        lines.sort_by_key(|hold| (hold.slot_id, hold.hold_id));
        let booking_id = lines.iter().map(|hold| hold.hold_id).min()?;
        Some(Booking { booking_id, lines })
    }

    /// The first line's hold: the booking's owner, expiry, creation and status.
    ///
    /// # Panics
    ///
    /// On a booking of no lines, which no constructor here makes and the engine never answers
    /// (a store that answers one fails the call with a store error instead).
    pub fn lead(&self) -> &Hold {
        // Never empty: every constructor refuses an empty booking.
        &self.lines[0]
    }

    /// The status clients see at `now`, the same on every line: `expired` once the booking's
    /// `expires_at` has passed while it was held (whether or not a line was reclaimed yet).
    pub fn status_at(&self, now: Timestamp) -> HoldStatus {
        self.lead().status_at(now)
    }

    /// The booking with every line's status resolved at `now`.
    pub fn at(mut self, now: Timestamp) -> Self {
        for line in &mut self.lines {
            line.status = line.status_at(now);
        }
        self
    }

    /// Who it belongs to; `None` for an anonymous booking.
    pub fn owner(&self) -> Option<&OwnerId> {
        self.lead().owner.as_ref()
    }

    /// When an unconfirmed booking stops reserving its units.
    pub fn expires_at(&self) -> Timestamp {
        self.lead().expires_at
    }

    /// Its lines as asked for, by slot id.
    pub fn booked_lines(&self) -> Vec<BookingLine> {
        self.lines.iter().map(BookingLine::of).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(slot: i64, quantity: i32) -> BookingLine {
        BookingLine::new(SlotId(slot), quantity)
    }

    #[test]
    fn lines_are_checked_and_put_in_lock_order() {
        assert_eq!(
            canonical_lines(vec![line(3, 1), line(1, 2), line(2, 1)]),
            Ok(vec![line(1, 2), line(2, 1), line(3, 1)])
        );
        assert_eq!(canonical_lines(vec![]), Err(InvalidBooking::NoLines));
        let many = (0..51).map(|i| line(i, 1)).collect();
        assert_eq!(canonical_lines(many), Err(InvalidBooking::TooManyLines(51)));
        let fifty = (0..50).map(|i| line(i, 1)).collect::<Vec<_>>();
        assert_eq!(canonical_lines(fifty.clone()).map(|l| l.len()), Ok(50));
        assert_eq!(
            canonical_lines(vec![line(2, 1), line(1, 1), line(2, 3)]),
            Err(InvalidBooking::SlotTwice(SlotId(2)))
        );
        for bad in [0, -1, 1001, i32::MIN] {
            assert_eq!(
                canonical_lines(vec![line(1, 1), line(2, bad)]),
                Err(InvalidBooking::Quantity(line(2, bad)))
            );
        }
    }
}
