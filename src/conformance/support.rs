//! Small helpers the case bodies share: durations, owner and resource ids, and a hold of some
//! units for an owner.

use chrono::Duration;

use super::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{OwnerId, ResourceId, SlotId};
use crate::store::Store;

pub(super) fn hours(n: i64) -> Duration {
    Duration::hours(n)
}

pub(super) fn ttl() -> Duration {
    Duration::from_std(super::HOLD_TTL).expect("ttl fits")
}

pub(super) fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).expect("a valid owner id")
}

pub(super) fn resource(name: &str) -> ResourceId {
    ResourceId::new(name).expect("a valid resource id")
}

/// A hold of `quantity` units for `owner` (or anonymous) with `key`.
pub(super) async fn place<S: Store>(
    f: &Fixture<S>,
    slot: SlotId,
    key: &str,
    quantity: i64,
    who: Option<&str>,
) -> Result<crate::HoldPlaced, BookingError> {
    let mut request = NewHold::new(slot, key).quantity(quantity);
    if let Some(who) = who {
        request = request.owner(owner(who));
    }
    f.engine.place_hold(request).await
}
