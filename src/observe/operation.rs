//! [`Operation`]: the engine's operations as spans and metrics name them, with their spans
//! and their static metric keys.

use metrics::{Key, Label};
use tracing::field::Empty;
use tracing::{Level, Span};

use super::catalogue::{OK, OPERATIONS, OPERATION_LABEL, OUTCOME_LABEL, STORE_SECONDS};
use super::outcome::OUTCOMES;

/// The static keys of `name` with the `operation` label and, for each index, the `outcome`
/// label of that [`OUTCOMES`] entry.
macro_rules! outcome_keys {
    ($name:expr, $operation:literal, [$($outcome:literal),*]) => {
        [$(Key::from_static_parts($name, {
            const LABELS: &[Label] = &[
                Label::from_static_parts(OPERATION_LABEL, $operation),
                Label::from_static_parts(OUTCOME_LABEL, OUTCOMES[$outcome]),
            ];
            LABELS
        })),*]
    };
}

/// Declares [`Operation`], its names and spans, and every key labelled with an operation
/// (one for each index of [`OUTCOMES`] given).
macro_rules! operations {
    (
        outcomes: $outcomes:tt;
        $($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*
    ) => {
        /// An engine operation, as spans and metrics name it. Calls on the caller's
        /// transaction ([`EngineTransaction`](crate::EngineTransaction)) are the operation of the same name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Operation {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Operation {
            /// Every operation.
            pub const ALL: &'static [Operation] = &[$(Operation::$variant),*];

            /// The operation's name: its span's name and its `operation` label.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Operation::$variant => $name,)*
                }
            }

            /// A new span for one call of this operation (disabled unless a subscriber wants
            /// `slot_booking` at `DEBUG`).
            fn span(self) -> Span {
                match self {
                    $(Operation::$variant => tracing::debug_span!(
                        target: "slot_booking",
                        $name,
                        slot_id = Empty,
                        hold_id = Empty,
                        outcome = Empty,
                        store_us = Empty,
                        replayed = Empty,
                        cache = Empty,
                        transaction = Empty,
                    ),)*
                }
            }
        }

        /// [`STORE_SECONDS`] of each operation, by [`Operation`] index.
        pub(super) static STORE_KEYS: [Key; Operation::ALL.len()] = [$(Key::from_static_parts(STORE_SECONDS, {
            const LABELS: &[Label] = &[Label::from_static_parts(OPERATION_LABEL, $name)];
            LABELS
        })),*];

        /// [`OPERATIONS`] of each operation and outcome, by [`Operation`] and [`OUTCOMES`]
        /// index.
        pub(super) static OPERATION_KEYS: [[Key; OUTCOMES.len()]; Operation::ALL.len()] =
            [$(outcome_keys!(OPERATIONS, $name, $outcomes)),*];
    };
}

operations! {
    // Every index of OUTCOMES, in order: the keys they build are an array of OUTCOMES.len(),
    // so the compiler refuses a list too short or too long.
    outcomes: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31];
    /// [`BookingEngine::availability`](crate::BookingEngine::availability).
    Availability => "availability",
    /// [`BookingEngine::place_hold`](crate::BookingEngine::place_hold) (and `hold`).
    Hold => "hold",
    /// [`BookingEngine::confirm`](crate::BookingEngine::confirm).
    Confirm => "confirm",
    /// [`BookingEngine::cancel`](crate::BookingEngine::cancel).
    Cancel => "cancel",
    /// [`BookingEngine::renew`](crate::BookingEngine::renew).
    Renew => "renew",
    /// [`BookingEngine::get_hold`](crate::BookingEngine::get_hold).
    GetHold => "get_hold",
    /// [`BookingEngine::hold_any`](crate::BookingEngine::hold_any).
    HoldAny => "hold_any",
    /// [`BookingEngine::join_waitlist`](crate::BookingEngine::join_waitlist).
    JoinWaitlist => "join_waitlist",
    /// [`BookingEngine::leave_waitlist`](crate::BookingEngine::leave_waitlist).
    LeaveWaitlist => "leave_waitlist",
    /// [`BookingEngine::waitlist_entry`](crate::BookingEngine::waitlist_entry).
    WaitlistEntry => "waitlist_entry",
    /// [`BookingEngine::book`](crate::BookingEngine::book).
    Book => "book",
    /// [`BookingEngine::get_booking`](crate::BookingEngine::get_booking).
    GetBooking => "get_booking",
    /// [`BookingEngine::confirm_booking`](crate::BookingEngine::confirm_booking).
    ConfirmBooking => "confirm_booking",
    /// [`BookingEngine::cancel_booking`](crate::BookingEngine::cancel_booking).
    CancelBooking => "cancel_booking",
    /// [`BookingEngine::renew_booking`](crate::BookingEngine::renew_booking).
    RenewBooking => "renew_booking",
    /// [`BookingEngine::owner_holds`](crate::BookingEngine::owner_holds).
    OwnerHolds => "owner_holds",
    /// [`BookingEngine::slot_holds`](crate::BookingEngine::slot_holds).
    SlotHolds => "slot_holds",
    /// [`BookingEngine::create_slot`](crate::BookingEngine::create_slot).
    CreateSlot => "create_slot",
    /// [`BookingEngine::change_capacity`](crate::BookingEngine::change_capacity).
    ChangeCapacity => "change_capacity",
    /// [`BookingEngine::close_sales`](crate::BookingEngine::close_sales).
    CloseSales => "close_sales",
    /// [`BookingEngine::reopen_sales`](crate::BookingEngine::reopen_sales).
    ReopenSales => "reopen_sales",
    /// [`BookingEngine::remove_slot`](crate::BookingEngine::remove_slot).
    RemoveSlot => "remove_slot",
    /// [`BookingEngine::get_slot`](crate::BookingEngine::get_slot).
    GetSlot => "get_slot",
    /// [`BookingEngine::list_slots`](crate::BookingEngine::list_slots).
    ListSlots => "list_slots",
    /// [`BookingEngine::create_pool`](crate::BookingEngine::create_pool).
    CreatePool => "create_pool",
    /// [`BookingEngine::get_pool`](crate::BookingEngine::get_pool).
    GetPool => "get_pool",
    /// [`BookingEngine::attach_slot`](crate::BookingEngine::attach_slot).
    AttachSlot => "attach_slot",
    /// [`BookingEngine::detach_slot`](crate::BookingEngine::detach_slot).
    DetachSlot => "detach_slot",
    /// [`BookingEngine::change_pool_capacity`](crate::BookingEngine::change_pool_capacity).
    ChangePoolCapacity => "change_pool_capacity",
    /// [`BookingEngine::read_events`](crate::BookingEngine::read_events).
    ReadEvents => "read_events",
    /// [`BookingEngine::acknowledge_events`](crate::BookingEngine::acknowledge_events).
    AcknowledgeEvents => "acknowledge_events",
    /// [`BookingEngine::lease_consumer`](crate::BookingEngine::lease_consumer).
    LeaseConsumer => "lease_consumer",
    /// [`BookingEngine::release_consumer`](crate::BookingEngine::release_consumer).
    ReleaseConsumer => "release_consumer",
    /// [`BookingEngine::reclaim_expired`](crate::BookingEngine::reclaim_expired).
    ReclaimExpired => "reclaim_expired",
    /// [`BookingEngine::purge`](crate::BookingEngine::purge).
    Purge => "purge",
}

impl Operation {
    #[inline]
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Whether any `tracing` subscriber may want the engine's (`DEBUG`) spans: tracing's global
/// level filter, one atomic load. Otherwise an operation makes no span at all: not even a
/// disabled one, which tracing's `log` feature (on as soon as any crate in the build asks for
/// it, sqlx does) would check against the `log` crate's level on every enter and exit.
#[inline]
pub(super) fn listening() -> bool {
    Level::DEBUG <= tracing::level_filters::STATIC_MAX_LEVEL
        && Level::DEBUG <= tracing::level_filters::LevelFilter::current()
}

/// The [`OPERATIONS`] key of `operation` ending in `outcome`; `None` for an outcome without a
/// static key.
pub(super) fn operation_key(operation: Operation, outcome: &str) -> Option<&'static Key> {
    let keys = &OPERATION_KEYS[operation.index()];
    if outcome == OK {
        return Some(&keys[0]);
    }
    let i = OUTCOMES.iter().position(|known| *known == outcome)?;
    Some(&keys[i])
}

/// `span` if a subscriber records it.
pub(super) fn enabled(span: Span) -> Option<Span> {
    Some(span).filter(|span| !span.is_disabled())
}

impl Operation {
    /// The operation's span, if a subscriber records it.
    #[cold]
    #[inline(never)]
    pub(super) fn enabled_span(self) -> Option<Span> {
        enabled(self.span())
    }
}
