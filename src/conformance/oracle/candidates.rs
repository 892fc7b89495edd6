//! "Any one of these" holds in the model.

use crate::model::{HoldId, SlotId, Timestamp};

use super::ops::{owner, ModelOp};
use super::reference::{Model, Seen};

impl Model {
    /// A hold on any one of several slots: candidates checked (1 to 20 distinct slots), the
    /// quantity checked, the key's hold replayed when it is a hold on a candidate of the same
    /// quantity and owner, else each candidate in turn as a hold on it alone, the first that
    /// places one taken; when none does, `no_candidate_available`.
    pub(super) fn hold_any(
        &mut self,
        op: &ModelOp,
        now: Timestamp,
        new_id: Option<HoldId>,
    ) -> Seen {
        let ModelOp::HoldAny {
            ref slots,
            key,
            quantity,
            owner: owner_number,
        } = *op
        else {
            return Seen::Error("(not a hold on any of several slots)");
        };
        let ids: Vec<SlotId> = slots.iter().map(|&slot| self.slot_id(slot)).collect();
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if ids.is_empty() || distinct.len() != ids.len() {
            return Seen::Error("invalid_candidates");
        }
        if !(1..=1000).contains(&quantity) {
            return Seen::Error("invalid_quantity");
        }
        let owner = owner(owner_number);
        if self.waiting_key(key).is_some() {
            return Seen::KeyReused(None);
        }
        if let Some(&existing) = self.keys.get(&key) {
            let hold = &self.holds[existing];
            let single = self.group(existing).len() == 1;
            if single
                && ids.contains(&hold.slot_id)
                && hold.quantity == quantity
                && hold.owner == owner
            {
                return Seen::Hold {
                    hold: hold.clone().at(now),
                    replayed: true,
                };
            }
            return Seen::KeyReused((hold.owner == owner).then_some(hold.hold_id));
        }
        for &slot in slots {
            let one = ModelOp::Hold {
                slot,
                key,
                quantity,
                owner: owner_number,
                lifetime: None,
            };
            if let seen @ Seen::Hold { .. } = self.hold(&one, now, new_id) {
                return seen;
            }
        }
        Seen::Error("no_candidate_available")
    }
}
