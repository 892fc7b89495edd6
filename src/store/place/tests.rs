//! Scripted tests of the placement rule: a kernel answered from a script, and what the rule
//! asked of it.

use std::collections::HashMap;

use chrono::DateTime;

use super::*;
use crate::model::{
    HoldStatus, IdempotencyKey, LineProblem, LineShortfall, NewEvent, Pool, PoolUsage, Slot,
    SlotUsage,
};
use crate::store::kernel::{Kernel, SlotEdit};
use crate::store::pool_edit::{Membership, PoolEdit};
use crate::store::serve::Lines;

const NOW: i64 = 1_000_000;

fn at(micros: i64) -> Timestamp {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// A store in memory, without undo: slots' and pools' remaining units, each pool's slots,
/// the keys in use; what was asked of it, in order.
#[derive(Default)]
struct Script {
    slots: BTreeMap<SlotId, i32>,
    pools: BTreeMap<PoolId, (i32, Vec<SlotId>)>,
    keys: HashMap<String, KeyHolder>,
    refill: Option<Refill>,
    next_id: i64,
    done: Vec<String>,
}

impl Script {
    fn pools_of(&self, slot: SlotId) -> Vec<PoolId> {
        let of =
            |(id, (_, slots)): (&PoolId, &(i32, Vec<SlotId>))| slots.contains(&slot).then_some(*id);
        self.pools.iter().filter_map(of).collect()
    }
}

#[async_trait]
impl Kernel for Script {
    async fn slot_usage(
        &mut self,
        _: SlotId,
        _: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        unreachable!("a placement reads no slot's usage")
    }
    async fn update_slot(
        &mut self,
        _: SlotId,
        _: SlotEdit,
        _: Timestamp,
    ) -> Result<Option<Slot>, StoreError> {
        unreachable!("a placement updates no slot")
    }
    async fn reclaim_slot(&mut self, slot: SlotId, _: Timestamp) -> Result<Vec<Hold>, StoreError> {
        self.done.push(format!("reclaim {}", slot.get()));
        Ok(Vec::new())
    }
    async fn append(&mut self, _: &NewEvent) -> Result<(), StoreError> {
        unreachable!("a placement's events are its rows'")
    }
    async fn serve(&mut self, _: &Lines, _: Timestamp) -> Result<Vec<Hold>, StoreError> {
        unreachable!("a placement frees nothing")
    }
    async fn begin_nested(&mut self) -> Result<(), StoreError> {
        unreachable!("a placement nests no unit")
    }
    async fn end_nested(&mut self, _: bool) -> Result<(), StoreError> {
        unreachable!("a placement nests no unit")
    }
}

#[async_trait]
impl PoolKernel for Script {
    async fn pool_usage(
        &mut self,
        pool: PoolId,
        _: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError> {
        Ok(self.pools.get(&pool).map(|(remaining, slots)| PoolUsage {
            pool: Pool {
                pool_id: pool,
                capacity: 10,
                stored_remaining: *remaining,
                slots: slots.clone(),
            },
            held: 10 - remaining,
            expired: 0,
        }))
    }
    async fn membership(&mut self, _: PoolId, _: SlotId) -> Result<Membership, StoreError> {
        unreachable!("a placement changes no pool")
    }
    async fn update_pool(
        &mut self,
        _: PoolId,
        _: PoolEdit,
        _: Timestamp,
    ) -> Result<bool, StoreError> {
        unreachable!("a placement changes no pool")
    }
    async fn reclaim_pool(
        &mut self,
        _: PoolId,
        _: Option<SlotId>,
        _: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        unreachable!("a placement refills through `refill_pools`")
    }
}

#[async_trait]
impl PlaceKernel for Script {
    async fn lock_accounts(&mut self, slots: &[SlotId]) -> Result<(), StoreError> {
        self.done.push(format!("lock {}", slots.len()));
        Ok(())
    }
    async fn place(&mut self, row: &NewLine<'_>) -> Result<Placed, StoreError> {
        self.done.push(format!("place {}", row.slot_id.get()));
        if self.keys.contains_key(row.key) {
            return Ok(Placed::KeyTaken);
        }
        let q = row.quantity;
        if self.slots.get(&row.slot_id).is_none_or(|left| *left < q) {
            return Ok(Placed::SlotShort);
        }
        let pools = self.pools_of(row.slot_id);
        if let Some(short) = pools.iter().find(|pool| self.pools[*pool].0 < q) {
            return Ok(Placed::PoolShort(Some(*short)));
        }
        for pool in pools {
            if let Some((left, _)) = self.pools.get_mut(&pool) {
                *left -= q;
            }
        }
        if let Some(left) = self.slots.get_mut(&row.slot_id) {
            *left -= q;
        }
        self.next_id += 1;
        let hold = Hold {
            hold_id: HoldId(self.next_id),
            slot_id: row.slot_id,
            status: HoldStatus::Held,
            expires_at: row.expires_at,
            confirmed_at: None,
            cancelled_at: None,
            quantity: q,
            owner: row.owner.cloned(),
            created_at: row.now,
        };
        let holder = KeyHolder::Booking(Booking::of_hold(hold.clone()));
        self.keys.insert(row.key.to_owned(), holder);
        Ok(Placed::Created(hold))
    }
    async fn mark_booking(&mut self, booking: HoldId) -> Result<(), StoreError> {
        self.done.push(format!("mark {}", booking.get()));
        Ok(())
    }
    async fn refill_pools(
        &mut self,
        _: &NewLine<'_>,
        short: Option<PoolId>,
    ) -> Result<Refill, StoreError> {
        self.done
            .push(format!("refill {:?}", short.map(PoolId::get)));
        Ok(self.refill.unwrap_or(Refill::Nothing))
    }
    async fn key_holder(&mut self, key: &str) -> Result<KeyHolder, StoreError> {
        self.done.push("key".into());
        Ok(self.keys.get(key).cloned().unwrap_or(KeyHolder::Free))
    }
    async fn slot_state(
        &mut self,
        slot: SlotId,
        _: Timestamp,
    ) -> Result<Option<(SlotLimits, i64)>, StoreError> {
        let limits = SlotLimits {
            starts_at: at(NOW * 10),
            capacity: 10,
            closed: false,
            removed: false,
        };
        Ok(self.slots.get(&slot).map(|left| (limits, i64::from(*left))))
    }
    async fn pools_of_slot(&mut self, slot: SlotId) -> Result<Vec<PoolId>, StoreError> {
        Ok(self.pools_of(slot))
    }
}

fn booking<'a>(key: &'a IdempotencyKey, lines: &'a [BookingLine]) -> BookingRequest<'a> {
    BookingRequest {
        key,
        owner: None,
        lines,
        now: at(NOW),
        expires_at: at(NOW * 2),
    }
}

fn line(slot: i64, quantity: i32) -> BookingLine {
    BookingLine {
        slot_id: SlotId(slot),
        quantity,
    }
}

fn key(key: &str) -> IdempotencyKey {
    IdempotencyKey::new(key).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_refused_booking_counts_its_own_placed_units_free_and_reads_no_key() {
    let mut script = Script {
        slots: BTreeMap::from([(SlotId(1), 2), (SlotId(2), 0)]),
        ..Script::default()
    };
    let (k, lines) = (key("k"), [line(1, 2), line(2, 1)]);
    let step = place_booking(&mut script, &booking(&k, &lines), false).await;
    let Ok(Step { value, keep: false }) = step else {
        panic!("{step:?}")
    };
    // Line 1 took its two units in the unit, which the undo gives back: it is no problem.
    let short = vec![LineShortfall {
        slot_id: SlotId(2),
        quantity: 1,
        problem: LineProblem::SoldOut { free: 0 },
    }];
    assert_eq!(value, Placing::Done(BookingOutcome::Refused(short)));
    // The first line placed holds the key: nobody else can.
    assert!(
        !script.done.contains(&"key".to_owned()),
        "{:?}",
        script.done
    );
    let expected = ["lock 2", "place 1", "place 2", "reclaim 2"];
    assert_eq!(script.done, expected);
}

#[tokio::test]
async fn a_pool_refilled_apart_asks_for_every_pool_of_the_booking() {
    let mut script = Script {
        slots: BTreeMap::from([(SlotId(1), 5), (SlotId(2), 5)]),
        pools: BTreeMap::from([
            (PoolId(8), (5, vec![SlotId(2)])),
            (PoolId(7), (0, vec![SlotId(1)])),
        ]),
        refill: Some(Refill::InOwnStep),
        ..Script::default()
    };
    let (k, lines) = (key("k"), [line(1, 1), line(2, 1)]);
    let step = place_booking(&mut script, &booking(&k, &lines), false).await;
    let pools = vec![PoolId(7), PoolId(8)];
    assert!(matches!(step, Ok(Step { value: Placing::Refill(ref p), keep: false }) if *p == pools));
    // Run again after the refill: the pool still short refuses, and no refill is asked.
    script.done.clear();
    let step = place_booking(&mut script, &booking(&k, &lines), true).await;
    assert!(matches!(
        step,
        Ok(Step {
            value: Placing::Done(BookingOutcome::Refused(_)),
            keep: false
        })
    ));
    assert!(!script.done.iter().any(|done| done.starts_with("refill")));
}

#[tokio::test]
async fn a_hold_short_answers_its_key_first() {
    let mut script = Script {
        slots: BTreeMap::from([(SlotId(1), 1)]),
        ..Script::default()
    };
    let k = key("k");
    let request = HoldRequest {
        slot_id: SlotId(1),
        key: &k,
        owner: None,
        quantity: 1,
        now: at(NOW),
        expires_at: at(NOW * 2),
    };
    let first = place_hold(&mut script, &request, false).await;
    assert!(matches!(
        first,
        Ok(Step {
            value: Placing::Done(HoldOutcome::Created(_)),
            keep: true
        })
    ));
    // The same request on a slot now short: the key's hold answers, a replay.
    let again = place_hold(&mut script, &request, false).await;
    let replayed = matches!(
        again,
        Ok(Step {
            value: Placing::KeyTaken,
            keep: false
        })
    );
    assert!(replayed, "{again:?}");
    let Ok(holder) = script.key_holder("k").await else {
        panic!("no holder")
    };
    assert!(matches!(
        hold_key_answer(&request, holder),
        HoldOutcome::Replayed(_)
    ));
    // Another key on the short slot: refused as sold out, the key read first.
    let other = key("other");
    let request = HoldRequest {
        key: &other,
        ..request
    };
    script.done.clear();
    let refused = place_hold(&mut script, &request, false).await;
    assert!(matches!(
        refused,
        Ok(Step {
            value: Placing::Done(HoldOutcome::SoldOut),
            keep: false
        })
    ));
    assert_eq!(script.done, ["place 1", "reclaim 1", "key"]);
}
