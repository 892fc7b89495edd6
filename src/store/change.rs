//! A change of an existing hold, and of every line of its booking: confirm, cancel or renew,
//! as one rule ([`HoldChange`]) every store follows. Which holds it applies to, what it makes
//! of them, whether it gives their units back, and the event each line it changed appends.
//! A SQL store's statements say the same in their own language (a conditional update whose
//! `WHERE` is [`HoldChange::applies`] and whose `SET` is [`HoldChange::apply`]); the
//! conformance suite holds every store to it.

use crate::model::{EventKind, Hold, HoldStatus, Timestamp};

use super::error::StoreError;
use super::outcome::RenewRequest;

/// A change of an existing hold (and of every line of its booking: a booking changes only
/// when the change applies to every line, and then to all of them).
#[derive(Debug, Clone, Copy)]
pub enum HoldChange<'a> {
    /// A held hold that has not expired becomes a booking: `confirmed`.
    Confirm,
    /// A held hold that has not expired, or a confirmed one, is `cancelled`; its units go back
    /// to its slot and the slot's pools.
    Cancel,
    /// A held hold that has not expired lives longer
    /// ([`RenewRequest::renewed_expiry`]).
    Renew(&'a RenewRequest<'a>),
}

impl HoldChange<'_> {
    /// Whether the change applies to `hold` as stored at `now`.
    pub fn applies(self, hold: &Hold, now: Timestamp) -> bool {
        let active = hold.status == HoldStatus::Held && hold.expires_at > now;
        match self {
            HoldChange::Confirm | HoldChange::Renew(_) => active,
            HoldChange::Cancel => active || hold.status == HoldStatus::Confirmed,
        }
    }

    /// Makes the change of a hold it [`applies`](Self::applies) to, at `now`. Whether the hold
    /// moved: a renewal already at its maximum life leaves it as it was, and appends no event.
    pub fn apply(self, hold: &mut Hold, now: Timestamp) -> bool {
        match self {
            HoldChange::Confirm => {
                hold.status = HoldStatus::Confirmed;
                hold.confirmed_at = Some(now);
            }
            HoldChange::Cancel => {
                hold.status = HoldStatus::Cancelled;
                hold.cancelled_at = Some(now);
            }
            HoldChange::Renew(request) => {
                let renewed = request.renewed_expiry(hold);
                if renewed == hold.expires_at {
                    return false;
                }
                hold.expires_at = renewed;
            }
        }
        true
    }

    /// Whether the change gives each changed line's units back (to its slot and the slot's
    /// pools), which may serve the lines waiting for them.
    pub fn gives_back(self) -> bool {
        matches!(self, HoldChange::Cancel)
    }

    /// The event each line the change moved appends.
    pub fn event(self) -> EventKind {
        match self {
            HoldChange::Confirm => EventKind::HoldConfirmed,
            HoldChange::Cancel => EventKind::HoldCancelled,
            HoldChange::Renew(_) => EventKind::HoldRenewed,
        }
    }
}

impl RenewRequest<'_> {
    /// The renewal's lifetime and maximum life in microseconds, as SQL stores bind them.
    pub fn micros(&self) -> Result<(i64, i64), StoreError> {
        let micros = |d: chrono::Duration| {
            d.num_microseconds()
                .ok_or_else(|| StoreError::failed("a hold lifetime overflows microseconds"))
        };
        Ok((micros(self.lifetime)?, micros(self.max_life)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HoldId, SlotId};
    use crate::scope::Scope;
    use chrono::{Duration, TimeZone, Utc};

    fn at(minute: i64) -> Timestamp {
        Utc.timestamp_opt(1_800_000_000, 0)
            .single()
            .unwrap_or_default()
            + Duration::minutes(minute)
    }

    fn hold(status: HoldStatus, expires: i64) -> Hold {
        Hold {
            hold_id: HoldId(1),
            slot_id: SlotId(1),
            status,
            expires_at: at(expires),
            confirmed_at: None,
            cancelled_at: None,
            quantity: 2,
            owner: None,
            created_at: at(0),
        }
    }

    /// A renewal at minute 5 for 10 more minutes, of a hold that may live 12.
    fn renewal() -> RenewRequest<'static> {
        RenewRequest {
            hold_id: HoldId(1),
            scope: &Scope::BackOffice,
            now: at(5),
            lifetime: Duration::minutes(10),
            max_life: Duration::minutes(12),
        }
    }

    #[test]
    fn each_change_applies_to_its_holds_only() {
        let renew = renewal();
        let changes = [
            HoldChange::Confirm,
            HoldChange::Cancel,
            HoldChange::Renew(&renew),
        ];
        let active = hold(HoldStatus::Held, 10);
        let lapsed = hold(HoldStatus::Held, 5);
        let confirmed = hold(HoldStatus::Confirmed, 10);
        let applies = |h: &Hold| changes.map(|c| c.applies(h, at(5)));
        assert_eq!(applies(&active), [true, true, true]);
        assert_eq!(applies(&lapsed), [false, false, false]);
        assert_eq!(applies(&confirmed), [false, true, false]);
        assert_eq!(applies(&hold(HoldStatus::Cancelled, 10)), [false; 3]);
    }

    #[test]
    fn a_change_makes_its_hold_and_names_its_event() {
        let mut confirmed = hold(HoldStatus::Held, 10);
        assert!(HoldChange::Confirm.apply(&mut confirmed, at(5)));
        assert_eq!(
            (confirmed.status, confirmed.confirmed_at),
            (HoldStatus::Confirmed, Some(at(5)))
        );
        let mut cancelled = hold(HoldStatus::Confirmed, 10);
        assert!(HoldChange::Cancel.apply(&mut cancelled, at(6)));
        assert_eq!(
            (cancelled.status, cancelled.cancelled_at),
            (HoldStatus::Cancelled, Some(at(6)))
        );
        let renew = renewal();
        // Capped at created + max life: 12, past 10.
        let mut renewed = hold(HoldStatus::Held, 10);
        assert!(HoldChange::Renew(&renew).apply(&mut renewed, at(5)));
        assert_eq!(renewed.expires_at, at(12));
        // At its cap already: nothing moves.
        assert!(!HoldChange::Renew(&renew).apply(&mut renewed, at(5)));
        assert_eq!(renewed.expires_at, at(12));
        let events = [
            HoldChange::Confirm,
            HoldChange::Cancel,
            HoldChange::Renew(&renew),
        ];
        assert_eq!(
            events.map(HoldChange::event),
            [
                EventKind::HoldConfirmed,
                EventKind::HoldCancelled,
                EventKind::HoldRenewed
            ]
        );
        assert_eq!(events.map(HoldChange::gives_back), [false, true, false]);
        assert_eq!(renew.micros().ok(), Some((600_000_000, 720_000_000)));
    }
}
