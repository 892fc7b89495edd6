//! [`Scope`]: whose holds an operation on an existing hold may touch.

use crate::model::{Hold, OwnerId};

/// Whose holds a call on an existing hold (read, confirm, cancel, renew) may act on.
///
/// A hold outside the caller's scope answers exactly like a hold that does not exist
/// (`hold_not_found`), so a client cannot learn which ids are in use by probing them. Stores
/// put the scope into the condition of their write, so it is decided by the same rows affected
/// as everything else.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// An anonymous client: holds placed without an owner only. What the seed's service and
    /// [`BookingEngine::confirm`](crate::BookingEngine::confirm) and friends use.
    Anonymous,
    /// A client that presents this owner id: that owner's holds only.
    Owner(OwnerId),
    /// Trusted server code acting on any hold whatever its owner: administration and
    /// back-office tools. Never for a request a client sent.
    BackOffice,
}

impl Scope {
    /// The scope of a client that may or may not present an owner id.
    pub fn of(owner: Option<OwnerId>) -> Scope {
        owner.map_or(Scope::Anonymous, Scope::Owner)
    }

    /// Whether `hold` is inside this scope.
    pub fn admits(&self, hold: &Hold) -> bool {
        match self {
            Scope::Anonymous => hold.owner.is_none(),
            Scope::Owner(owner) => hold.owner.as_ref() == Some(owner),
            Scope::BackOffice => true,
        }
    }

    /// The scope as a SQL predicate's two parameters: `any` and `owner`, for
    /// `(any OR owner IS NOT DISTINCT FROM <column>)` (SQLite: `(?any OR owner IS ?owner)`).
    /// An anonymous scope is `(false, None)`: only holds whose owner is NULL.
    pub fn as_filter(&self) -> (bool, Option<&str>) {
        match self {
            Scope::Anonymous => (false, None),
            Scope::Owner(owner) => (false, Some(owner.as_str())),
            Scope::BackOffice => (true, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HoldId, HoldStatus, SlotId};
    use chrono::{TimeZone, Utc};

    #[test]
    fn each_scope_admits_its_holds_only() {
        let at = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let hold = |owner: Option<&str>| Hold {
            hold_id: HoldId(1),
            slot_id: SlotId(1),
            status: HoldStatus::Held,
            expires_at: at,
            confirmed_at: None,
            cancelled_at: None,
            quantity: 1,
            owner: owner.map(|o| OwnerId::new(o).unwrap()),
            created_at: at,
        };
        let alice = Scope::Owner(OwnerId::new("alice").unwrap());
        assert!(Scope::Anonymous.admits(&hold(None)));
        assert!(!Scope::Anonymous.admits(&hold(Some("alice"))));
        assert!(alice.admits(&hold(Some("alice"))));
        assert!(!alice.admits(&hold(Some("bob"))));
        assert!(!alice.admits(&hold(None)));
        assert!(Scope::BackOffice.admits(&hold(None)));
        assert!(Scope::BackOffice.admits(&hold(Some("bob"))));
        assert_eq!(Scope::of(None), Scope::Anonymous);
        assert_eq!(alice.as_filter(), (false, Some("alice")));
    }
}
