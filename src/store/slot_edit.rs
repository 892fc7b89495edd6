//! An administrative change of a slot, the one rule a store follows: [`edit_slot`] over the
//! store's [`Kernel`], in the unit of work of the change.
//!
//! 1. The change's conditional update runs against the slot as stored. A change that takes
//!    units (a capacity lowered, a removal) takes only free ones.
//! 2. If the update changed nothing, the slot read in the unit of work says why. It is not
//!    there (none, or removed), or it already is as asked: then the change is applied, with no
//!    event, no reclaim and nothing served.
//! 3. Otherwise, for a change that takes free units, the slot's expired holds are reclaimed and
//!    the update runs once more, all or nothing: a refused change reclaims nothing.
//! 4. Changed: the change's event is appended, then the slot's line and its pools' lines are
//!    served. A raise, the reclaimed units or reopened sales may let a head in; closed sales
//!    or a removal take the slot's entries out of its pools' lines, whose next heads may be
//!    ready. The answer is the slot as the change left it, before any line took units.
//! 5. Refused: the slot's units, read in the unit of work, say it is in use (or not there).

use async_trait::async_trait;

use super::error::StoreError;
use super::kernel::{Kernel, SlotEdit};
use super::outcome::{Decided, SlotChange};
use super::serve::Lines;
use super::step::Step;
use crate::model::{CapacityChange, NewEvent, SlotId, Timestamp};

/// A store's write path that applies every [`SlotEdit`] in one place ([`edit_slot`](Self::edit_slot),
/// usually by the core's [`edit_slot`]); the three administrative writes of
/// [`SlotAdmin`](super::SlotAdmin) follow from it, for [`forward_store!`](crate::forward_store)
/// to forward to.
#[async_trait]
pub trait EditSlots: Send {
    /// Applies `edit` to slot `slot_id` at `now`, in a unit of work of its own.
    async fn edit_slot(
        &mut self,
        slot_id: SlotId,
        edit: SlotEdit,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// [`SlotAdmin::change_capacity`](super::SlotAdmin::change_capacity).
    async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        self.edit_slot(slot_id, SlotEdit::Capacity(change), now)
            .await
    }

    /// [`SlotAdmin::set_closed`](super::SlotAdmin::set_closed).
    async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        self.edit_slot(slot_id, SlotEdit::Closed(closed), now).await
    }

    /// [`SlotAdmin::remove_slot`](super::SlotAdmin::remove_slot).
    async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        self.edit_slot(slot_id, SlotEdit::Remove, now).await
    }
}

/// Applies `edit` to slot `slot_id` at `now` on a store's [`Kernel`] (see the module's docs):
/// its answer, and whether to keep the unit of work's writes.
pub async fn edit_slot<K: Kernel + ?Sized>(
    kernel: &mut K,
    slot_id: SlotId,
    edit: SlotEdit,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let mut changed = kernel.update_slot(slot_id, edit, now).await?;
    if changed.is_none() {
        let live = kernel
            .slot_usage(slot_id, now)
            .await?
            .map(|usage| usage.slot)
            .filter(|s| s.removed_at.is_none());
        match live {
            None => return Ok(Step::undo(SlotChange::NotFound)),
            Some(slot) if edit.already(&slot) => return Ok(Step::keep(SlotChange::Applied(slot))),
            Some(_) if edit.takes_free_units() => {
                // The reclaim and the update once more stay together or not at all.
                kernel.begin_nested().await?;
                if !kernel.reclaim_slot(slot_id, now).await?.is_empty() {
                    changed = kernel.update_slot(slot_id, edit, now).await?;
                }
                kernel.end_nested(changed.is_some()).await?;
            }
            Some(_) => {}
        }
    }
    if let Some(slot) = changed {
        let event = NewEvent::of_slot(edit.event(), slot.slot_id, slot.capacity, now);
        kernel.append(&event).await?;
        let mut lines = Lines::new();
        lines.slots.insert(slot_id);
        kernel.serve(&lines, now).await?;
        return Ok(Step::keep(SlotChange::Applied(slot)));
    }
    Ok(Step::undo(match kernel.slot_usage(slot_id, now).await? {
        Some(usage) if usage.slot.removed_at.is_none() => SlotChange::InUse(usage),
        _ => SlotChange::NotFound,
    }))
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::model::{Hold, Slot, SlotUsage};

    /// A slot as a store would hold it, with a script of what its updates do.
    struct Script {
        slot: Option<Slot>,
        /// What the first update and the one after the reclaim do.
        updates: Vec<bool>,
        /// Units held, for a refusal.
        held: i32,
        /// The expired holds a reclaim finds.
        expired: Vec<Hold>,
        done: Vec<String>,
    }

    fn at(seconds: i64) -> Timestamp {
        DateTime::from_timestamp(seconds, 0).unwrap()
    }

    fn slot(capacity: i32) -> Slot {
        Slot {
            slot_id: SlotId(4),
            starts_at: at(1_000),
            ends_at: at(2_000),
            capacity,
            stored_remaining: capacity,
            resource: None,
            closed: false,
            removed_at: None,
        }
    }

    fn expired_hold() -> Hold {
        Hold {
            hold_id: crate::model::HoldId(9),
            slot_id: SlotId(4),
            status: crate::model::HoldStatus::Expired,
            expires_at: at(0),
            confirmed_at: None,
            cancelled_at: None,
            quantity: 1,
            owner: None,
            created_at: at(0),
        }
    }

    #[async_trait]
    impl Kernel for Script {
        async fn slot_usage(
            &mut self,
            _: SlotId,
            _: Timestamp,
        ) -> Result<Option<SlotUsage>, StoreError> {
            self.done.push("usage".into());
            Ok(self.slot.clone().map(|slot| SlotUsage {
                slot,
                held: self.held,
                expired: 0,
            }))
        }
        async fn update_slot(
            &mut self,
            _: SlotId,
            edit: SlotEdit,
            _: Timestamp,
        ) -> Result<Option<Slot>, StoreError> {
            self.done.push("update".into());
            let applies = !self.updates.is_empty() && self.updates.remove(0);
            Ok(match (applies, edit, &mut self.slot) {
                (true, SlotEdit::Capacity(change), Some(slot)) => {
                    slot.capacity = change.applied_to(slot.capacity).unwrap() as i32;
                    Some(slot.clone())
                }
                (true, _, slot) => slot.clone(),
                (false, _, _) => None,
            })
        }
        async fn reclaim_slot(&mut self, _: SlotId, _: Timestamp) -> Result<Vec<Hold>, StoreError> {
            self.done.push("reclaim".into());
            Ok(self.expired.clone())
        }
        async fn append(&mut self, event: &NewEvent) -> Result<(), StoreError> {
            self.done.push(format!("{:?}", event.kind));
            Ok(())
        }
        async fn serve(&mut self, _: &Lines, _: Timestamp) -> Result<Vec<Hold>, StoreError> {
            self.done.push("serve".into());
            Ok(Vec::new())
        }
        async fn begin_nested(&mut self) -> Result<(), StoreError> {
            self.done.push("begin".into());
            Ok(())
        }
        async fn end_nested(&mut self, keep: bool) -> Result<(), StoreError> {
            self.done.push(if keep { "keep" } else { "undo" }.into());
            Ok(())
        }
    }

    async fn run(
        slot: Option<Slot>,
        updates: &[bool],
        edit: SlotEdit,
    ) -> (Step<SlotChange>, Vec<String>) {
        let mut script = Script {
            slot,
            updates: updates.to_vec(),
            held: 3,
            expired: vec![expired_hold()],
            done: Vec::new(),
        };
        let step = edit_slot(&mut script, SlotId(4), edit, at(0))
            .await
            .unwrap();
        (step, script.done)
    }

    #[tokio::test]
    async fn a_change_that_applies_appends_its_event_then_serves() {
        let (step, done) = run(
            Some(slot(5)),
            &[true],
            SlotEdit::Capacity(CapacityChange::To(8)),
        )
        .await;
        assert!(matches!(step.value(), SlotChange::Applied(s) if s.capacity == 8));
        assert_eq!(done, ["update", "SlotCapacityChanged", "serve"]);
    }

    #[tokio::test]
    async fn a_slot_already_as_asked_is_applied_with_nothing_written() {
        let (step, done) = run(
            Some(slot(5)),
            &[false],
            SlotEdit::Capacity(CapacityChange::To(5)),
        )
        .await;
        assert_eq!(step.value(), &SlotChange::Applied(slot(5)));
        assert_eq!(done, ["update", "usage"]);
        let (_, done) = run(Some(slot(5)), &[false], SlotEdit::Closed(false)).await;
        assert_eq!(done, ["update", "usage"], "reopening open sales");
    }

    #[tokio::test]
    async fn a_refused_change_is_tried_once_more_after_the_reclaim_then_explained() {
        let edit = SlotEdit::Capacity(CapacityChange::To(1));
        let (step, done) = run(Some(slot(5)), &[false, true], edit).await;
        assert!(matches!(step.value(), SlotChange::Applied(s) if s.capacity == 1));
        assert_eq!(
            done,
            [
                "update",
                "usage",
                "begin",
                "reclaim",
                "update",
                "keep",
                "SlotCapacityChanged",
                "serve"
            ]
        );
        let (step, done) = run(Some(slot(5)), &[false, false], edit).await;
        assert!(matches!(step.value(), SlotChange::InUse(u) if u.held == 3));
        assert_eq!(
            done,
            ["update", "usage", "begin", "reclaim", "update", "undo", "usage"]
        );
    }

    /// Nothing expired: the update is not run again, and the nested unit is undone.
    #[tokio::test]
    async fn nothing_reclaimed_refuses_without_a_second_update() {
        let mut script = Script {
            slot: Some(slot(5)),
            updates: vec![false, true],
            held: 5,
            expired: Vec::new(),
            done: Vec::new(),
        };
        let edit = SlotEdit::Remove;
        let step = edit_slot(&mut script, SlotId(4), edit, at(0))
            .await
            .unwrap();
        assert!(matches!(step.value(), SlotChange::InUse(u) if u.held == 5));
        assert!(!step.keep);
        assert_eq!(
            script.done,
            ["update", "usage", "begin", "reclaim", "undo", "usage"]
        );
    }

    #[tokio::test]
    async fn a_slot_not_there_or_removed_is_not_found() {
        let (step, done) = run(None, &[false], SlotEdit::Remove).await;
        assert_eq!(step.value(), &SlotChange::NotFound);
        assert_eq!(done, ["update", "usage"]);
        let mut removed = slot(5);
        removed.removed_at = Some(at(0));
        let (step, _) = run(Some(removed), &[false], SlotEdit::Closed(true)).await;
        assert_eq!(step.value(), &SlotChange::NotFound);
    }
}
