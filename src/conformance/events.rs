//! Conformance cases for the event log of an [`EventStore`]: one event per committed change
//! and none for a refusal, consumers that resume where they acknowledged, reclaiming expired
//! holds exactly once with racing reclaimers, bounded purges, and readers that never skip an
//! event while writers race. [`event_conformance_tests!`](crate::event_conformance_tests)
//! runs them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chrono::Duration;

use super::support::{consumer, hours};
use super::Fixture;
use crate::engine::NewHold;
use crate::events::{Event, EventKind, EventPosition, EventStore, Purged};
use crate::model::{ConsumerId, HoldId, OwnerId, SlotId};
use crate::scope::Scope;

impl<S: crate::Store + EventStore> Fixture<S> {
    /// Every event after `name`'s cursor, acknowledging them as it goes, `batch` at a time.
    pub async fn drain_events(&self, name: &ConsumerId, batch: u32) -> Vec<Event> {
        let mut all = Vec::new();
        loop {
            let read = self
                .engine
                .read_events(name, batch)
                .await
                .expect("read_events");
            assert!(read.len() <= batch as usize, "a read over its limit");
            let Some(last) = read.last() else {
                return all;
            };
            self.engine
                .acknowledge_events(name, last.position)
                .await
                .expect("acknowledge_events");
            all.extend(read);
        }
    }

    /// The kinds of the events `name` has not acknowledged yet, acknowledging them.
    async fn new_kinds(&self, name: &ConsumerId) -> Vec<EventKind> {
        self.drain_events(name, 1000)
            .await
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }
}

fn assert_ascending(events: &[Event]) {
    for pair in events.windows(2) {
        assert!(
            pair[0].position < pair[1].position,
            "positions not ascending: {} then {}",
            pair[0].position,
            pair[1].position
        );
    }
}

/// Each committed change appends one event carrying the slot, the hold, its owner, its units
/// and the time of the change; replays, repeated confirms and cancels, and no-op slot changes
/// append nothing.
pub async fn every_change_appends_one_event<S: crate::Store + EventStore>(store: S) {
    use EventKind::*;
    let f = Fixture::new(store);
    let log = consumer("log");
    let slot = f.slot(5, hours(2)).await;
    let created_at = f.now();
    let events = f.drain_events(&log, 1000).await;
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].kind, events[0].slot_id, events[0].hold_id),
        (SlotCreated, slot, None)
    );
    assert_eq!((events[0].quantity, events[0].at), (5, created_at));

    f.advance(Duration::seconds(1));
    let owner = OwnerId::new("alice").unwrap();
    let scope = Scope::Owner(owner.clone());
    let placed = f
        .engine
        .place_hold(NewHold::new(slot, "k1").quantity(2).owner(owner.clone()))
        .await
        .unwrap()
        .hold;
    let events = f.drain_events(&log, 1000).await;
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        (e.kind, e.slot_id, e.hold_id, e.owner.as_ref(), e.quantity),
        (HoldPlaced, slot, Some(placed.hold_id), Some(&owner), 2)
    );
    assert_eq!(e.at, f.now());

    // A replay changes nothing.
    f.engine
        .place_hold(NewHold::new(slot, "k1").quantity(2).owner(owner.clone()))
        .await
        .unwrap();
    assert_eq!(f.new_kinds(&log).await, []);

    f.advance(Duration::seconds(1));
    f.engine.renew(&scope, placed.hold_id, None).await.unwrap();
    f.engine.confirm(&scope, placed.hold_id).await.unwrap();
    f.engine.confirm(&scope, placed.hold_id).await.unwrap();
    f.engine.cancel(&scope, placed.hold_id).await.unwrap();
    f.engine.cancel(&scope, placed.hold_id).await.unwrap();
    let events = f.drain_events(&log, 1000).await;
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [HoldRenewed, HoldConfirmed, HoldCancelled]);
    assert!(events
        .iter()
        .all(|e| e.hold_id == Some(placed.hold_id) && e.owner.as_ref() == Some(&owner)));
    assert!(events.iter().all(|e| e.quantity == 2 && e.at == f.now()));

    f.engine.change_capacity(slot, 7).await.unwrap();
    f.engine.change_capacity(slot, 7).await.unwrap();
    f.engine.close_sales(slot).await.unwrap();
    f.engine.close_sales(slot).await.unwrap();
    f.engine.reopen_sales(slot).await.unwrap();
    f.engine.remove_slot(slot).await.unwrap();
    let events = f.drain_events(&log, 1000).await;
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [SlotCapacityChanged, SlotClosed, SlotReopened, SlotRemoved]
    );
    assert!(events
        .iter()
        .all(|e| e.slot_id == slot && e.hold_id.is_none() && e.quantity == 7));
}

/// Refused requests append nothing: sold out, a reused key, a closed slot, an expired hold's
/// confirm, a lowering that does not fit, a removal of a slot in use.
pub async fn refusals_append_no_event<S: crate::Store + EventStore>(store: S) {
    let f = Fixture::new(store);
    let log = consumer("log");
    let slot = f.slot(1, hours(2)).await;
    let other = f.slot(1, hours(2)).await;
    let short = f.minute_hold(slot, "short").await;
    let kept = f.engine.hold(other, "kept").await.unwrap().hold;
    f.drain_events(&log, 1000).await;

    assert!(f.engine.hold(other, "late").await.is_err(), "sold out");
    assert!(f.engine.hold(other, "short").await.is_err(), "key reused");
    assert!(f.engine.change_capacity(other, 0).await.is_err());
    assert!(f.engine.remove_slot(other).await.is_err());
    f.advance(Duration::seconds(61));
    assert!(
        f.engine
            .confirm(&Scope::Anonymous, short.hold_id)
            .await
            .is_err(),
        "expired"
    );
    assert!(
        f.engine
            .cancel(&Scope::Anonymous, short.hold_id)
            .await
            .is_err(),
        "expired"
    );
    f.engine.close_sales(slot).await.unwrap();
    assert_eq!(f.new_kinds(&log).await, [EventKind::SlotClosed]);
    assert!(f.engine.hold(slot, "closed").await.is_err(), "closed");
    assert_eq!(f.new_kinds(&log).await, []);
    // The kept hold is untouched by it all.
    assert!(f
        .engine
        .confirm(&Scope::Anonymous, kept.hold_id)
        .await
        .is_ok());
    assert_eq!(f.new_kinds(&log).await, [EventKind::HoldConfirmed]);
}

/// A consumer reads from its acknowledged position: what it read but did not acknowledge
/// comes again (after a crash, to a new engine on the same store), what it acknowledged never
/// does; consumers are independent and a cursor never moves back.
pub async fn consumers_resume_where_they_acknowledged<S: crate::Store + EventStore>(store: S) {
    let f = Fixture::new(store);
    let (mailer, board) = (consumer("mailer"), consumer("dashboard"));
    assert_eq!(
        f.engine.store().consumer_position(&mailer).await.unwrap(),
        None
    );
    let slot = f.slot(10, hours(2)).await;
    for key in ["a", "b", "c", "d"] {
        f.engine.hold(slot, key).await.unwrap();
    }
    let first = f.engine.read_events(&mailer, 2).await.unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].kind, EventKind::SlotCreated);
    // Not acknowledged: the same two again.
    assert_eq!(f.engine.read_events(&mailer, 2).await.unwrap(), first);
    f.engine
        .acknowledge_events(&mailer, first[0].position)
        .await
        .unwrap();
    // "Crash": a new engine on the same store resumes after the acknowledged one.
    let store = f.engine.store();
    let again = store.read_events(&mailer, 10).await.unwrap();
    assert_eq!(again.len(), 4);
    assert_eq!(again[0], first[1]);
    assert_ascending(&again);
    let last = again[3].position;
    f.engine.acknowledge_events(&mailer, last).await.unwrap();
    assert_eq!(store.consumer_position(&mailer).await.unwrap(), Some(last));
    // Never backwards.
    f.engine
        .acknowledge_events(&mailer, first[0].position)
        .await
        .unwrap();
    assert_eq!(store.consumer_position(&mailer).await.unwrap(), Some(last));
    assert_eq!(f.engine.read_events(&mailer, 10).await.unwrap(), []);
    // Another consumer starts at the beginning.
    let all = f.engine.read_events(&board, 100).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(&all[1..], &again[..]);
    // A new change reaches both.
    f.engine.hold(slot, "e").await.unwrap();
    assert_eq!(f.engine.read_events(&mailer, 10).await.unwrap().len(), 1);
    assert_eq!(f.engine.read_events(&board, 100).await.unwrap().len(), 6);
    // Limits outside 1..=1000 are refused.
    assert!(f.engine.read_events(&mailer, 0).await.is_err());
    assert!(f.engine.read_events(&mailer, 1001).await.is_err());
}

/// A follower that keeps its own position reads what a consumer at that position would:
/// from any position on, in order, within its limit; the log's end is after every event
/// read, and a read after it returns exactly the changes made since.
pub async fn followers_read_after_any_position<S: crate::Store + EventStore>(store: S) {
    let f = Fixture::new(store);
    let start = f.engine.event_log_end().await.unwrap();
    assert_eq!(f.engine.read_events_after(start, 10).await.unwrap(), []);
    let slot = f.slot(10, hours(2)).await;
    let a = f.engine.hold(slot, "a").await.unwrap().hold;
    f.engine.hold(slot, "b").await.unwrap();
    f.engine
        .confirm(&Scope::Anonymous, a.hold_id)
        .await
        .unwrap();
    let all = f.drain_events(&consumer("all"), 1000).await;
    assert_eq!(f.engine.read_events_after(start, 100).await.unwrap(), all);
    assert_eq!(
        f.engine
            .read_events_after(EventPosition::START, 100)
            .await
            .unwrap(),
        all
    );
    for (i, event) in all.iter().enumerate() {
        let next = f.engine.read_events_after(event.position, 2).await.unwrap();
        assert_eq!(
            next[..],
            all[(i + 1).min(all.len())..(i + 3).min(all.len())]
        );
    }
    let end = f.engine.event_log_end().await.unwrap();
    assert!(
        end >= all[all.len() - 1].position,
        "{end} before the last event"
    );
    assert_eq!(f.engine.read_events_after(end, 10).await.unwrap(), []);
    // What happens next is read after the end, whoever else reads or acknowledges.
    f.engine.cancel(&Scope::Anonymous, a.hold_id).await.unwrap();
    f.drain_events(&consumer("all"), 1000).await;
    let next = f.engine.read_events_after(end, 10).await.unwrap();
    assert_eq!(
        next.iter().map(|e| (e.kind, e.hold_id)).collect::<Vec<_>>(),
        [(EventKind::HoldCancelled, Some(a.hold_id))]
    );
    assert!(f.engine.event_log_end().await.unwrap() >= next[0].position);
    // The end is after what committed before it, read or not.
    f.engine.hold(slot, "c").await.unwrap();
    let end = f.engine.event_log_end().await.unwrap();
    assert_eq!(f.engine.read_events_after(end, 10).await.unwrap(), []);
    let unread = f.drain_events(&consumer("all"), 1000).await;
    assert_eq!(unread.len(), 1);
    assert!(unread[0].position <= end, "{unread:?} after {end}");
    // Nothing is registered for a follower.
    assert_eq!(
        f.engine.read_events(&consumer("new"), 100).await.unwrap(),
        [all, next, unread].concat()
    );
    assert!(f.engine.read_events_after(end, 0).await.is_err());
    assert!(f.engine.read_events_after(end, 1001).await.is_err());
}

/// `reclaim_expired` marks expired holds, bounded per call, gives their units back and
/// appends one `hold_expired` event each; active and confirmed holds stay. A hold reclaimed
/// lazily by a hold on a full slot yields its one event too.
pub async fn reclaiming_expired_holds_yields_one_event_each<S: crate::Store + EventStore>(
    store: S,
) {
    let f = Fixture::new(store);
    let log = consumer("log");
    let slot = f.slot(4, hours(2)).await;
    let short =
        |key: &'static str| NewHold::new(slot, key).lifetime(std::time::Duration::from_secs(60));
    let mut expiring = Vec::new();
    for key in ["x1", "x2", "x3"] {
        expiring.push(f.engine.place_hold(short(key)).await.unwrap().hold.hold_id);
    }
    let booked = f.engine.place_hold(short("booked")).await.unwrap().hold;
    f.engine
        .confirm(&Scope::Anonymous, booked.hold_id)
        .await
        .unwrap();
    f.drain_events(&log, 1000).await;
    f.advance(Duration::seconds(61));
    assert_eq!(f.remaining(slot).await, 0, "not reclaimed before a write");

    let first = f.engine.reclaim_expired(2).await.unwrap();
    assert_eq!(first.len(), 2);
    let second = f.engine.reclaim_expired(2).await.unwrap();
    assert_eq!(second.len(), 1);
    assert!(f.engine.reclaim_expired(2).await.unwrap().is_empty());
    let reclaimed: BTreeSet<HoldId> = first.iter().chain(&second).map(|h| h.hold_id).collect();
    assert_eq!(reclaimed, expiring.iter().copied().collect());
    assert!(first
        .iter()
        .chain(&second)
        .all(|h| h.status == crate::HoldStatus::Expired));
    assert_eq!(f.remaining(slot).await, 3);
    let events = f.drain_events(&log, 1000).await;
    assert!(events.iter().all(|e| e.kind == EventKind::HoldExpired));
    let evented: BTreeSet<HoldId> = events.iter().filter_map(|e| e.hold_id).collect();
    assert_eq!((events.len(), evented), (3, reclaimed));

    // Lazily: a full slot reclaims for a new hold, one event per reclaimed hold.
    let full = f.slot(1, hours(2)).await;
    let lapsed = f.minute_hold(full, "lapsed").await;
    f.advance(Duration::seconds(61));
    f.drain_events(&log, 1000).await;
    f.engine.hold(full, "fresh").await.unwrap();
    let events = f.drain_events(&log, 1000).await;
    let seen: Vec<_> = events.iter().map(|e| (e.kind, e.hold_id)).collect();
    assert_eq!(seen[0], (EventKind::HoldExpired, Some(lapsed.hold_id)));
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].0, EventKind::HoldPlaced);
    assert!(f.engine.reclaim_expired(10).await.unwrap().is_empty());
    assert!(f.engine.reclaim_expired(0).await.is_err());
}

/// Eight reclaimers race over 120 expired holds on six slots, while holds on those slots
/// reclaim lazily: every expired hold is reported by exactly one caller and has exactly one
/// `hold_expired` event.
pub async fn race_reclaimers_expire_each_hold_once<S: crate::Store + EventStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let log = consumer("log");
    let mut slots = Vec::new();
    let mut expiring = BTreeSet::new();
    for s in 0..6 {
        let slot = f.slot(20, hours(2)).await;
        slots.push(slot);
        for h in 0..20 {
            let request = NewHold::new(slot, format!("x{s}-{h}"))
                .lifetime(std::time::Duration::from_secs(60));
            expiring.insert(f.engine.place_hold(request).await.unwrap().hold.hold_id);
        }
    }
    f.drain_events(&log, 1000).await;
    f.advance(Duration::seconds(61));

    let mut tasks = Vec::new();
    for _ in 0..8 {
        let f = Arc::clone(&f);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = f.engine.reclaim_expired(7).await.expect("reclaim_expired");
                if batch.is_empty() {
                    return (mine, Vec::new());
                }
                mine.extend(batch.into_iter().map(|h| h.hold_id));
            }
        }));
    }
    for (i, slot) in slots.iter().copied().enumerate() {
        let f = Arc::clone(&f);
        tasks.push(tokio::spawn(async move {
            let mut placed = Vec::new();
            for k in 0..5 {
                if let Ok(p) = f.engine.hold(slot, &format!("new{i}-{k}")).await {
                    placed.push(p.hold.hold_id);
                }
            }
            (Vec::new(), placed)
        }));
    }
    let mut reported = Vec::new();
    let mut placed = BTreeSet::new();
    for task in tasks {
        let (mine, new) = task.await.expect("task");
        reported.extend(mine);
        placed.extend(new);
    }
    let unique: BTreeSet<HoldId> = reported.iter().copied().collect();
    assert_eq!(unique.len(), reported.len(), "a hold reported twice");
    assert!(unique.is_subset(&expiring));
    assert_eq!(placed.len(), 30, "every new hold found its unit");

    let events = f.drain_events(&log, 1000).await;
    assert_ascending(&events);
    let mut expired_events = Vec::new();
    for event in &events {
        match event.kind {
            EventKind::HoldExpired => expired_events.extend(event.hold_id),
            EventKind::HoldPlaced => assert!(placed.contains(&event.hold_id.unwrap_or(HoldId(0)))),
            other => panic!("unexpected {other}"),
        }
    }
    let evented: BTreeSet<HoldId> = expired_events.iter().copied().collect();
    assert_eq!(evented.len(), expired_events.len(), "two events for a hold");
    assert_eq!(evented, expiring, "every expired hold has its event");
    for slot in slots {
        assert_eq!(f.remaining(slot).await, 15);
    }
}

/// Purging deletes cancelled and expired holds older than the age, at most `limit` a call,
/// never confirmed or held ones; a purged hold's key is free again; events go only once every
/// consumer has acknowledged them.
pub async fn purge_deletes_old_history_in_bounded_batches<S: crate::Store + EventStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(10, hours(48)).await;
    let lapsing = |key: &str| NewHold::new(slot, key).lifetime(std::time::Duration::from_secs(60));
    let mut ended = Vec::new();
    for key in ["c1", "c2", "c3"] {
        let hold = f.engine.place_hold(lapsing(key)).await.unwrap().hold;
        f.engine
            .cancel(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap();
        ended.push(hold.hold_id);
    }
    let expired = f.engine.place_hold(lapsing("e1")).await.unwrap().hold;
    let booked = f.engine.place_hold(lapsing("b1")).await.unwrap().hold;
    f.engine
        .confirm(&Scope::Anonymous, booked.hold_id)
        .await
        .unwrap();
    f.advance(Duration::seconds(61));
    assert_eq!(f.engine.reclaim_expired(10).await.unwrap().len(), 1);
    ended.push(expired.hold_id);
    let held = f.engine.hold(slot, "h1").await.unwrap().hold;
    // A consumer counts for retention once it has a cursor: acknowledging the start registers it.
    let reader = consumer("reader");
    f.engine
        .acknowledge_events(&reader, EventPosition::START)
        .await
        .unwrap();
    let events_so_far = f.engine.read_events(&reader, 1000).await.unwrap();
    let age = std::time::Duration::from_secs(3600);

    // Nothing is old enough yet.
    assert_eq!(f.engine.purge(age, 100).await.unwrap(), Purged::default());
    f.advance(Duration::hours(2));
    // The reader acknowledged nothing: holds go, events stay.
    let first = f.engine.purge(age, 3).await.unwrap();
    assert_eq!(
        first,
        Purged {
            holds: 3,
            events: 0
        }
    );
    let second = f.engine.purge(age, 3).await.unwrap();
    assert_eq!(
        second,
        Purged {
            holds: 1,
            events: 0
        }
    );
    for hold_id in &ended {
        let found = f.engine.get_hold(&Scope::Anonymous, *hold_id).await;
        assert!(found.is_err(), "purged hold {hold_id} still there");
    }
    assert!(f
        .engine
        .get_hold(&Scope::Anonymous, booked.hold_id)
        .await
        .is_ok());
    assert!(f
        .engine
        .get_hold(&Scope::Anonymous, held.hold_id)
        .await
        .is_ok());
    // A purged hold's key places a new hold.
    let again = f.engine.hold(slot, "c1").await.unwrap();
    assert!(!again.replayed && !ended.contains(&again.hold.hold_id));

    // Acknowledged events older than the age go, a batch at a time.
    let through = events_so_far[5].position;
    f.engine.acknowledge_events(&reader, through).await.unwrap();
    assert_eq!(f.engine.purge(age, 4).await.unwrap().events, 4);
    assert_eq!(f.engine.purge(age, 4).await.unwrap().events, 2);
    assert_eq!(f.engine.purge(age, 4).await.unwrap(), Purged::default());
    let left = f.engine.read_events(&reader, 1000).await.unwrap();
    let kept = events_so_far.len() - 6;
    assert_eq!(
        left[..kept],
        events_so_far[6..],
        "unacknowledged events kept"
    );
    assert_eq!(
        (left.len(), left[kept].hold_id),
        (kept + 1, Some(again.hold.hold_id)),
        "and the new hold's"
    );
    assert!(f.engine.purge(age, 0).await.is_err());
}

/// Writers race on many slots while a consumer reads and acknowledges in small batches, and
/// a follower reads on from the last position it got: each sees every committed event
/// exactly once, in ascending positions, the same events a fresh reader finds afterwards.
pub async fn race_a_consumer_never_skips_an_event<S: crate::Store + EventStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let mut slots = Vec::new();
    for _ in 0..8 {
        slots.push(f.slot(1000, hours(2)).await);
    }
    let follower = consumer("follower");
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (f, done, follower) = (Arc::clone(&f), Arc::clone(&done), follower.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let batch = f.engine.read_events(&follower, 7).await.expect("read");
                if let Some(last) = batch.last() {
                    f.engine
                        .acknowledge_events(&follower, last.position)
                        .await
                        .expect("acknowledge");
                }
                let empty = batch.is_empty();
                seen.extend(batch);
                if finished && empty {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let positional = {
        let (f, done) = (Arc::clone(&f), Arc::clone(&done));
        tokio::spawn(async move {
            let mut seen: Vec<Event> = Vec::new();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let after = seen.last().map_or(EventPosition::START, |e| e.position);
                let batch = f.engine.read_events_after(after, 5).await.expect("read");
                let empty = batch.is_empty();
                seen.extend(batch);
                if finished && empty {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (f, slots) = (Arc::clone(&f), slots.clone());
            tokio::spawn(async move {
                for i in 0..40 {
                    let slot: SlotId = slots[(w + i) % slots.len()];
                    let hold = f
                        .engine
                        .hold(slot, &format!("w{w}-{i}"))
                        .await
                        .expect("hold")
                        .hold;
                    if i % 3 == 0 {
                        f.engine
                            .cancel(&Scope::Anonymous, hold.hold_id)
                            .await
                            .expect("cancel");
                    } else if i % 3 == 1 {
                        f.engine
                            .confirm(&Scope::Anonymous, hold.hold_id)
                            .await
                            .expect("confirm");
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    let seen = reader.await.expect("reader");
    assert_ascending(&seen);
    let fresh = f.drain_events(&consumer("fresh"), 50).await;
    assert_eq!(
        seen.len(),
        fresh.len(),
        "the follower missed or repeated events"
    );
    assert_eq!(seen, fresh);
    let followed = positional.await.expect("positional follower");
    assert_eq!(
        followed, fresh,
        "a follower by position missed or repeated events"
    );
    // 8 slots created, 320 holds placed, of which i % 3 == 0 cancelled (14 of 40 per writer)
    // and i % 3 == 1 confirmed (13 of 40).
    assert_eq!(fresh.len(), 8 + 320 + 8 * 14 + 8 * 13);
}

/// A hold purged while it was the newest leaves its id behind for good: the next hold gets a
/// higher one, so a client still holding the purged id can never reach another's hold with it.
pub async fn a_purged_holds_id_is_never_given_again<S: crate::Store + EventStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(10, hours(48)).await;
    let older = f.engine.hold(slot, "older").await.unwrap().hold;
    let newest = f.engine.hold(slot, "newest").await.unwrap().hold;
    for hold in [&older, &newest] {
        f.engine
            .cancel(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap();
    }
    f.advance(Duration::hours(2));
    let purged = f
        .engine
        .purge(std::time::Duration::from_secs(3600), 100)
        .await
        .unwrap();
    assert_eq!(purged.holds, 2);
    let next = f.engine.hold(slot, "next").await.unwrap().hold;
    assert!(
        next.hold_id > newest.hold_id,
        "the new hold took {}, at or below the purged {}",
        next.hold_id,
        newest.hold_id
    );
    assert_err!(
        f.engine.get_hold(&Scope::Anonymous, newest.hold_id).await,
        crate::BookingError::HoldNotFound { .. }
    );
}
