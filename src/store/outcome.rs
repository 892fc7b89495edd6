//! The words of the store contract: the requests the engine hands a store and the outcomes a
//! store answers with, each decided in one atomic step.

use crate::model::{Hold, HoldId, IdempotencyKey, OwnerId, Slot, SlotId, SlotUsage, Timestamp};
use crate::scope::Scope;

/// A request to place a hold, as the engine hands it to the store (every field validated).
#[derive(Debug, Clone, Copy)]
pub struct HoldRequest<'a> {
    /// The slot to take units of.
    pub slot_id: SlotId,
    /// The client's idempotency key.
    pub key: &'a IdempotencyKey,
    /// Who the hold will belong to; `None` for an anonymous hold.
    pub owner: Option<&'a OwnerId>,
    /// Units to take, all or none: `1..=`[`MAX_QUANTITY`](crate::model::MAX_QUANTITY).
    pub quantity: i32,
    /// The engine's current time; the slot must start after it. Stored as `created_at`.
    pub now: Timestamp,
    /// When the new hold will expire (`now` plus the hold's lifetime).
    pub expires_at: Timestamp,
}

impl HoldRequest<'_> {
    /// Whether `hold`, the hold this request's key already belongs to, is this very request
    /// made again: same slot, same quantity, same owner.
    pub fn is_replay_of(&self, hold: &Hold) -> bool {
        hold.slot_id == self.slot_id
            && hold.quantity == self.quantity
            && hold.owner.as_ref() == self.owner
    }
}

/// A request to renew a hold, as the engine hands it to the store.
#[derive(Debug, Clone, Copy)]
pub struct RenewRequest<'a> {
    /// The hold to renew.
    pub hold_id: HoldId,
    /// Whose holds the caller may renew.
    pub scope: &'a Scope,
    /// The engine's current time.
    pub now: Timestamp,
    /// The new lifetime, counted from `now`.
    pub lifetime: chrono::Duration,
    /// The longest a hold may live, counted from its `created_at`.
    pub max_life: chrono::Duration,
}

impl RenewRequest<'_> {
    /// The `expires_at` a renewal gives `hold`: `now + lifetime`, but never past
    /// `created_at + max_life` and never earlier than it already was (a renewal does not
    /// shorten a hold). Stores compute the same in their own language.
    pub fn renewed_expiry(&self, hold: &Hold) -> Timestamp {
        let wanted = self.now + self.lifetime;
        let cap = hold.created_at + self.max_life;
        wanted.min(cap).max(hold.expires_at)
    }
}

/// A store's answer together with the instant it was decided at.
///
/// A store that takes its time from the engine sets `at` to the `now` it was given; one that
/// keeps its own clock sets it to that clock's reading for the decision. The engine resolves
/// every hold status in the answer at `at`, so a hold is never "expired" by one clock and
/// "held" by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided<T> {
    /// The instant the store decided at.
    pub at: Timestamp,
    /// What it decided.
    pub outcome: T,
}

impl<T> Decided<T> {
    /// An answer decided at `at`.
    pub fn new(at: Timestamp, outcome: T) -> Self {
        Decided { at, outcome }
    }

    /// The answer without its instant.
    pub fn into_outcome(self) -> T {
        self.outcome
    }

    /// The same instant with another outcome.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decided<U> {
        Decided {
            at: self.at,
            outcome: f(self.outcome),
        }
    }
}

/// What a store knows of a slot when it explains a refused hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLimits {
    /// When the slot starts.
    pub starts_at: Timestamp,
    /// Its capacity.
    pub capacity: i32,
    /// Whether its sales are closed.
    pub closed: bool,
    /// Whether it has been removed.
    pub removed: bool,
}

impl SlotLimits {
    /// The limits of `slot`.
    pub fn of(slot: &Slot) -> Self {
        SlotLimits {
            starts_at: slot.starts_at,
            capacity: slot.capacity,
            closed: slot.closed,
            removed: slot.removed_at.is_some(),
        }
    }
}

/// What [`HoldStore::create_hold`](super::HoldStore::create_hold) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// Units were taken and a new hold stored.
    Created(Hold),
    /// The key already belongs to a hold made by this same request (same slot, quantity and
    /// owner); nothing changed. The hold is returned as stored now.
    Replayed(Hold),
    /// The key already belongs to a hold made by another request; nothing changed. The hold is
    /// given only when it has the caller's owner (or both are anonymous): a hold of somebody
    /// else is never revealed.
    KeyReused(Option<Hold>),
    /// The slot has not enough free units, even after reclaiming expired holds; nothing
    /// changed.
    SoldOut,
    /// More units than the slot's whole capacity were asked for; nothing changed.
    ExceedsCapacity {
        /// The slot's capacity.
        capacity: i32,
    },
    /// No slot has this id, or it has been removed.
    SlotNotFound,
    /// The slot has already started (`starts_at <= now`) or its sales are closed; nothing
    /// changed.
    SlotClosed,
}

impl HoldOutcome {
    /// The answer to a hold request that stored nothing, from what the store reads after its
    /// writes changed nothing: the hold the key already belongs to, if any (a key in use wins
    /// over every other answer), else the requested slot's limits, if the slot exists.
    /// Every backend explains a refusal the same way through this.
    pub fn refused(
        request: &HoldRequest<'_>,
        key_holder: Option<Hold>,
        slot: Option<SlotLimits>,
    ) -> HoldOutcome {
        match (key_holder, slot) {
            (Some(hold), _) if request.is_replay_of(&hold) => HoldOutcome::Replayed(hold),
            (Some(hold), _) if hold.owner.as_ref() == request.owner => {
                HoldOutcome::KeyReused(Some(hold))
            }
            (Some(_), _) => HoldOutcome::KeyReused(None),
            (None, None) => HoldOutcome::SlotNotFound,
            (None, Some(slot)) if slot.removed => HoldOutcome::SlotNotFound,
            (None, Some(slot)) if slot.closed || slot.starts_at <= request.now => {
                HoldOutcome::SlotClosed
            }
            (None, Some(slot)) if request.quantity > slot.capacity => {
                HoldOutcome::ExceedsCapacity {
                    capacity: slot.capacity,
                }
            }
            (None, Some(_)) => HoldOutcome::SoldOut,
        }
    }
}

/// What [`HoldStore::confirm_hold`](super::HoldStore::confirm_hold), [`HoldStore::cancel_hold`](super::HoldStore::cancel_hold) or [`HoldStore::renew_hold`](super::HoldStore::renew_hold) did.
/// The same for a whole booking ([`BookingStore`](super::BookingStore)) with `T` =
/// [`Booking`](crate::model::Booking).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition<T = Hold> {
    /// The hold changed; here it is after the change.
    Applied(T),
    /// The hold exists in the caller's scope but was not in a state the operation applies to;
    /// nothing changed. Here it is as stored now. The engine decides what that means for the
    /// caller.
    NotApplied(T),
    /// No hold has this id in the caller's scope.
    NotFound,
}

/// What an administrative change of a slot ([`SlotAdmin::change_capacity`](super::SlotAdmin::change_capacity), [`SlotAdmin::set_closed`](super::SlotAdmin::set_closed),
/// [`SlotAdmin::remove_slot`](super::SlotAdmin::remove_slot)) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotChange {
    /// The slot changed (or already was as asked, for closing and reopening); here it is now.
    Applied(Slot),
    /// The change would take units that are held or confirmed; nothing changed. The slot and
    /// its units as read right after, for the engine to say how many are taken.
    InUse(SlotUsage),
    /// No slot has this id, or it has been removed.
    NotFound,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HoldStatus, IdempotencyKey};
    use chrono::{Duration, TimeZone, Utc};

    #[test]
    fn a_refusal_is_explained_key_first_then_by_the_slot() {
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let key = IdempotencyKey::new("k").unwrap();
        let alice = OwnerId::new("alice").unwrap();
        let request = HoldRequest {
            slot_id: SlotId(1),
            key: &key,
            owner: Some(&alice),
            quantity: 2,
            now,
            expires_at: now + Duration::minutes(5),
        };
        let holder = |slot, quantity, owner: Option<&str>| Hold {
            hold_id: HoldId(9),
            slot_id: SlotId(slot),
            status: HoldStatus::Held,
            expires_at: now,
            confirmed_at: None,
            cancelled_at: None,
            quantity,
            owner: owner.map(|o| OwnerId::new(o).unwrap()),
            created_at: now,
        };
        let limits = |starts_at, capacity| {
            Some(SlotLimits {
                starts_at,
                capacity,
                closed: false,
                removed: false,
            })
        };
        let later = now + Duration::hours(1);
        assert_eq!(
            HoldOutcome::refused(&request, Some(holder(1, 2, Some("alice"))), limits(now, 5)),
            HoldOutcome::Replayed(holder(1, 2, Some("alice"))),
            "a replay wins over a started slot"
        );
        for (slot, quantity) in [(2, 2), (1, 1)] {
            assert_eq!(
                HoldOutcome::refused(&request, Some(holder(slot, quantity, Some("alice"))), None),
                HoldOutcome::KeyReused(Some(holder(slot, quantity, Some("alice")))),
                "the owner's own hold on slot {slot}, quantity {quantity}"
            );
        }
        for other in [None, Some("bob")] {
            assert_eq!(
                HoldOutcome::refused(&request, Some(holder(1, 2, other)), limits(later, 5)),
                HoldOutcome::KeyReused(None),
                "somebody else's hold ({other:?}) is never revealed"
            );
        }
        assert_eq!(
            HoldOutcome::refused(&request, None, None),
            HoldOutcome::SlotNotFound
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, limits(now, 1)),
            HoldOutcome::SlotClosed
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, limits(later, 1)),
            HoldOutcome::ExceedsCapacity { capacity: 1 }
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, limits(later, 2)),
            HoldOutcome::SoldOut
        );
        let closed = limits(later, 5).map(|l| SlotLimits { closed: true, ..l });
        assert_eq!(
            HoldOutcome::refused(&request, None, closed),
            HoldOutcome::SlotClosed,
            "closed sales refuse like a started slot"
        );
        let removed = limits(later, 5).map(|l| SlotLimits {
            removed: true,
            closed: true,
            ..l
        });
        assert_eq!(
            HoldOutcome::refused(&request, None, removed),
            HoldOutcome::SlotNotFound,
            "a removed slot is gone for clients"
        );
        assert_eq!(
            HoldOutcome::refused(&request, Some(holder(1, 2, Some("alice"))), removed),
            HoldOutcome::Replayed(holder(1, 2, Some("alice"))),
            "a replay still wins"
        );
    }

    #[test]
    fn a_renewal_moves_expiry_forward_within_the_maximum_life() {
        let created = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let hold = Hold {
            hold_id: HoldId(1),
            slot_id: SlotId(1),
            status: HoldStatus::Held,
            expires_at: created + Duration::minutes(5),
            confirmed_at: None,
            cancelled_at: None,
            quantity: 1,
            owner: None,
            created_at: created,
        };
        let renew = |after_minutes, lifetime_minutes| {
            RenewRequest {
                hold_id: HoldId(1),
                scope: &Scope::Anonymous,
                now: created + Duration::minutes(after_minutes),
                lifetime: Duration::minutes(lifetime_minutes),
                max_life: Duration::minutes(20),
            }
            .renewed_expiry(&hold)
        };
        assert_eq!(renew(4, 5), created + Duration::minutes(9));
        assert_eq!(renew(4, 30), created + Duration::minutes(20), "capped");
        assert_eq!(renew(1, 1), hold.expires_at, "never shortened");
    }
}
