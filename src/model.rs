//! Domain types: slots, holds, bookings of several lines, availability, pages and the identifiers they use.
//!
//! Every timestamp is a [`Timestamp`] (UTC) truncated to whole microseconds, so that every
//! backend stores and returns exactly the same value. On the wire timestamps are RFC 3339 with
//! six fractional digits and a numeric offset: `2026-11-21T10:00:00.000000+00:00`.
//!
//! Nothing here depends on the engine or on a store: these are the words both speak.

mod booking;
mod candidates;
mod capacity;
mod event;
mod hold;
mod ids;
mod page;
mod pool;
mod slot;
mod time;
mod usage;
mod waitlist;

pub use booking::{
    canonical_lines, Booking, BookingLine, InvalidBooking, LineProblem, LineShortfall, MAX_LINES,
};
pub use candidates::{
    check_candidates, CandidateProblem, CandidateRefused, InvalidCandidates, Strategy,
    MAX_CANDIDATES,
};
pub use capacity::{CapacityChange, CapacityTerms};
pub use event::{
    Event, EventKind, EventPosition, InvalidEventPosition, NewEvent, Purged, UnknownEventKind,
};
pub use hold::{Hold, HoldStatus, UnknownStatus, MAX_QUANTITY};
pub use ids::{
    ConsumerId, EntryId, HoldId, IdempotencyKey, InvalidConsumerId, InvalidIdempotencyKey,
    InvalidLeaseHolder, InvalidOwnerId, InvalidResourceId, LeaseHolder, OwnerId, ParseIdError,
    PoolId, ResourceId, SlotId,
};
pub use page::{
    HoldPage, InvalidSlotCursor, Page, PageItem, PageRequest, SlotCursor, SlotPage,
    DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE,
};
pub use pool::{NewPool, Pool, PoolSummary, PoolUsage, MAX_POOLS_PER_SLOT};
pub use slot::{AvailabilityEntry, AvailabilityQuery, InvalidSlot, NewSlot, Slot};
pub use time::{rfc3339, truncate_to_micros, Timestamp};
pub use usage::{SlotSummary, SlotUsage};
pub use waitlist::{served, WaitlistEntry};

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn t(secs: i64) -> Timestamp {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).single().unwrap()
    }

    #[test]
    fn ids_parse_digits_only() {
        assert_eq!("42".parse::<SlotId>(), Ok(SlotId(42)));
        assert_eq!("0042".parse::<HoldId>(), Ok(HoldId(42)));
        for bad in ["", "+5", "-1", "1a", "abc", " 1", "1 ", "١"] {
            assert_eq!(
                bad.parse::<SlotId>(),
                Err(ParseIdError::NotDigits),
                "{bad:?}"
            );
        }
        assert_eq!(
            "9223372036854775808".parse::<SlotId>(),
            Err(ParseIdError::TooLarge)
        );
        assert_eq!(
            "9223372036854775807".parse::<SlotId>(),
            Ok(SlotId(i64::MAX))
        );
    }

    #[test]
    fn idempotency_key_rules() {
        assert!(IdempotencyKey::new("a").is_ok());
        assert!(IdempotencyKey::new("!~").is_ok());
        assert!(IdempotencyKey::new("k".repeat(255)).is_ok());
        assert_eq!(IdempotencyKey::new(""), Err(InvalidIdempotencyKey::Empty));
        assert_eq!(
            IdempotencyKey::new("k".repeat(256)),
            Err(InvalidIdempotencyKey::TooLong(256))
        );
        for (bad, position) in [("a b", 1), ("\t", 0), ("ké", 1), ("a\u{7f}", 1)] {
            assert_eq!(
                IdempotencyKey::new(bad),
                Err(InvalidIdempotencyKey::BadCharacter { position }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn hold_serializes_the_six_seed_fields_first() {
        let hold = Hold {
            hold_id: HoldId(7),
            slot_id: SlotId(3),
            status: HoldStatus::Confirmed,
            expires_at: t(0) + chrono::Duration::microseconds(1),
            confirmed_at: Some(t(1)),
            cancelled_at: None,
            quantity: 2,
            owner: Some(OwnerId::new("cart-9").unwrap()),
            created_at: t(-300),
        };
        let json = serde_json::to_string(&hold).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"{"hold_id":7,"slot_id":3,"status":"confirmed","#,
                r#""expires_at":"2027-01-15T08:00:00.000001+00:00","#,
                r#""confirmed_at":"2027-01-15T08:00:01.000000+00:00","cancelled_at":null,"#,
                r#""quantity":2,"owner":"cart-9","created_at":"2027-01-15T07:55:00.000000+00:00"}"#
            )
        );
        let back: Hold = serde_json::from_str(&json).unwrap();
        assert_eq!(back, hold);
    }

    #[test]
    fn owner_ids_follow_the_key_rules() {
        assert_eq!(OwnerId::new("customer-1").unwrap().as_str(), "customer-1");
        assert!(OwnerId::new("o".repeat(255)).is_ok());
        assert_eq!(
            OwnerId::new(""),
            Err(InvalidOwnerId(InvalidIdempotencyKey::Empty))
        );
        assert_eq!(
            OwnerId::new("a b").unwrap_err().to_string(),
            "invalid owner id: a character outside visible ASCII at byte 1"
        );
        assert!(serde_json::from_str::<OwnerId>(r#""x y""#).is_err());
    }

    #[test]
    fn held_becomes_expired_exactly_at_expires_at() {
        let hold = Hold {
            hold_id: HoldId(1),
            slot_id: SlotId(1),
            status: HoldStatus::Held,
            expires_at: t(10),
            confirmed_at: None,
            cancelled_at: None,
            quantity: 1,
            owner: None,
            created_at: t(0),
        };
        assert_eq!(
            hold.status_at(t(10) - chrono::Duration::microseconds(1)),
            HoldStatus::Held
        );
        assert_eq!(hold.status_at(t(10)), HoldStatus::Expired);
        let confirmed = Hold {
            status: HoldStatus::Confirmed,
            ..hold
        };
        assert_eq!(confirmed.status_at(t(100)), HoldStatus::Confirmed);
    }

    #[test]
    fn timestamps_parse_any_offset_and_truncate() {
        let parsed = rfc3339::parse("2027-01-15T09:00:00.0000019+01:00").unwrap();
        assert_eq!(parsed, t(0) + chrono::Duration::microseconds(1));
        assert_eq!(rfc3339::format(&parsed), "2027-01-15T08:00:00.000001+00:00");
    }

    #[test]
    fn new_slot_validation() {
        assert!(NewSlot::new(t(0), t(1), 1).validate().is_ok());
        assert_eq!(
            NewSlot::new(t(0), t(1), 0).validate(),
            Err(InvalidSlot::Capacity(0))
        );
        assert_eq!(
            NewSlot::new(t(1), t(1), 5).validate(),
            Err(InvalidSlot::EndsBeforeStart)
        );
    }
}
