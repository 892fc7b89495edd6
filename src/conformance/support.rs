//! Small helpers the case bodies share: durations, owner, consumer and resource ids, a hold of
//! some units for an owner, and the outcome of racing holds.

use std::sync::Arc;

use chrono::Duration;

use super::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{ConsumerId, Hold, OwnerId, ResourceId, SlotId};
use crate::store::HoldStore;

pub(super) fn hours(n: i64) -> Duration {
    Duration::hours(n)
}

pub(super) fn ttl() -> Duration {
    Duration::from_std(super::HOLD_TTL).expect("ttl fits")
}

pub(super) fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).expect("a valid owner id")
}

pub(super) fn consumer(name: &str) -> ConsumerId {
    ConsumerId::new(name).expect("a valid consumer id")
}

pub(super) fn resource(name: &str) -> ResourceId {
    ResourceId::new(name).expect("a valid resource id")
}

/// A hold of `quantity` units for `owner` (or anonymous) with `key`.
pub(super) async fn place<S: HoldStore>(
    f: &Fixture<S>,
    slot: SlotId,
    key: &str,
    quantity: i32,
    who: Option<&str>,
) -> Result<crate::HoldPlaced, BookingError> {
    let mut request = NewHold::new(slot, key).quantity(quantity);
    if let Some(who) = who {
        request = request.owner(owner(who));
    }
    f.engine.place_hold(request).await
}

/// Waits for holds placed in a race: the holds they placed, in the order of `tasks`, and how
/// many were sold out. Any other outcome panics, after `context`.
pub(super) async fn join_racing_holds(
    tasks: Vec<tokio::task::JoinHandle<Result<crate::HoldPlaced, BookingError>>>,
    context: &str,
) -> (Vec<Hold>, usize) {
    let (mut placed, mut sold_out) = (Vec::new(), 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(won) => placed.push(won.hold),
            Err(BookingError::SoldOut { .. }) => sold_out += 1,
            Err(other) => panic!("{context}unexpected {other:?}"),
        }
    }
    (placed, sold_out)
}

/// Races a one-unit anonymous hold on `slot` for each of `keys`, all spawned at once, and
/// waits for them as [`join_racing_holds`] does.
pub(super) async fn race_holds<S: HoldStore>(
    f: &Arc<Fixture<S>>,
    slot: SlotId,
    keys: impl IntoIterator<Item = String>,
) -> (Vec<Hold>, usize) {
    let tasks: Vec<_> = keys
        .into_iter()
        .map(|key| {
            let f = Arc::clone(f);
            tokio::spawn(async move { f.engine.hold(slot, &key).await })
        })
        .collect();
    join_racing_holds(tasks, "").await
}

/// The ids of `holds`, in order.
pub(super) fn ids(holds: &[Hold]) -> Vec<crate::model::HoldId> {
    holds.iter().map(|h| h.hold_id).collect()
}
