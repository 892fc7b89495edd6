//! Conformance cases for consumers shared by several instances: a lease has one holder at a
//! time and passes on when it lapses or is released; an acknowledgement by a holder whose
//! lease was taken over moves nothing; three instances racing, stopping and stalling handle
//! every event exactly once; and an acknowledgement made inside the caller's transaction moves
//! the cursor only when it commits.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Duration;

use super::support::consumer;
use super::Fixture;
use crate::error::BookingError;
use crate::events::{EventPosition, EventStore};
use crate::model::{ConsumerId, LeaseHolder, SlotId};
use crate::transaction::TransactionalStore;

/// The lease the cases take.
const LEASE: std::time::Duration = std::time::Duration::from_secs(10);

fn holder(name: &str) -> LeaseHolder {
    LeaseHolder::new(name).expect("a valid holder")
}

/// A lapsed lease: a moment past [`LEASE`].
fn lapse() -> Duration {
    Duration::from_std(LEASE).expect("fits") + Duration::milliseconds(1)
}

/// One holder at a time: taken when free, extended by its holder, refused to others while it
/// lasts, taken over once it lapsed or was released; a release by another holder does
/// nothing; the holder whose lease was taken over can no longer acknowledge, and the cursor
/// stays where the new holder finds it.
pub async fn a_lease_has_one_holder_at_a_time<S: crate::Store + EventStore>(store: S) {
    let f = Fixture::new(store);
    let mailer = consumer("mailer");
    let (a, b) = (holder("instance-a"), holder("instance-b"));
    let store = f.engine.store();
    let slot = f.slot(5, Duration::hours(2)).await;
    f.engine.hold(slot, "k1").await.expect("hold");

    assert!(f.engine.lease_consumer(&mailer, &a, LEASE).await.unwrap());
    // A lease registers the consumer at the start.
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(EventPosition::START)
    );
    assert!(!f.engine.lease_consumer(&mailer, &b, LEASE).await.unwrap());
    f.advance(Duration::seconds(9));
    assert!(
        f.engine.lease_consumer(&mailer, &a, LEASE).await.unwrap(),
        "the holder extends its lease"
    );
    f.advance(Duration::seconds(9));
    assert!(
        !f.engine.lease_consumer(&mailer, &b, LEASE).await.unwrap(),
        "the extended lease still lasts"
    );
    let read = f.engine.read_events(&mailer, 10).await.unwrap();
    assert_eq!(read.len(), 2);
    f.engine
        .acknowledge_leased(&mailer, &a, read[0].position)
        .await
        .unwrap();
    assert!(matches!(
        f.engine
            .acknowledge_leased(&mailer, &b, read[1].position)
            .await,
        Err(BookingError::LeaseLost { .. })
    ));
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(read[0].position),
        "a refused acknowledgement moves nothing"
    );

    // A stops without releasing: once its lease lapses, B takes over and A is fenced off.
    f.advance(lapse());
    assert!(f.engine.lease_consumer(&mailer, &b, LEASE).await.unwrap());
    assert!(!f.engine.lease_consumer(&mailer, &a, LEASE).await.unwrap());
    let err = f
        .engine
        .acknowledge_leased(&mailer, &a, read[1].position)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "lease_lost");
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(read[0].position)
    );
    // B reads from the cursor A left: the event A could not acknowledge comes again.
    let again = f.engine.read_events(&mailer, 10).await.unwrap();
    assert_eq!(again, read[1..]);

    // A release by a non-holder does nothing; the holder's passes the lease on at once.
    f.engine.release_consumer(&mailer, &a).await.unwrap();
    assert!(!f.engine.lease_consumer(&mailer, &a, LEASE).await.unwrap());
    f.engine.release_consumer(&mailer, &b).await.unwrap();
    assert!(f.engine.lease_consumer(&mailer, &a, LEASE).await.unwrap());
    assert!(f
        .engine
        .acknowledge_leased(&mailer, &a, again[0].position)
        .await
        .is_ok());
    // Leases are per consumer.
    assert!(f
        .engine
        .lease_consumer(&consumer("board"), &b, LEASE)
        .await
        .unwrap());
    // Bounds: no zero or day-long-plus lease.
    assert!(f
        .engine
        .lease_consumer(&mailer, &a, std::time::Duration::ZERO)
        .await
        .is_err());
}

/// Three instances share one consumer while writers append events. Each takes the lease
/// before every read, "handles" a batch (its effect counts only if the fenced acknowledgement
/// then succeeds, as an effect committed with it would), and now and then stops without
/// releasing (a crash: the clock moves past its lease so another takes over) or stalls past
/// its lease before acknowledging (another may take over and handle the same batch; the
/// staller's acknowledgement must then fail). Every event is handled exactly once.
pub async fn race_three_instances_handle_each_event_once<S: crate::Store + EventStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let mailer = consumer("mailer");
    let mut slots: Vec<SlotId> = Vec::new();
    for _ in 0..4 {
        // Far enough ahead that the clock's jumps never reach it.
        slots.push(f.slot(1000, Duration::days(30)).await);
    }
    let handled = Arc::new(Mutex::new(Vec::<EventPosition>::new()));
    let goal = Arc::new(AtomicUsize::new(usize::MAX));
    let instances: Vec<_> = (0..3)
        .map(|i| {
            let (f, mailer, handled) = (Arc::clone(&f), mailer.clone(), Arc::clone(&handled));
            let goal = Arc::clone(&goal);
            tokio::spawn(async move {
                let mut generation = 0;
                let mut me = holder(&format!("instance-{i}-{generation}"));
                let mut turns = 0_u32;
                loop {
                    let done = handled.lock().expect("handled").len();
                    if done >= goal.load(Ordering::SeqCst) {
                        return;
                    }
                    turns += 1;
                    assert!(turns < 200_000, "instance {i} made no progress");
                    if !f.engine.lease_consumer(&mailer, &me, LEASE).await.unwrap() {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    let batch = f.engine.read_events(&mailer, 5).await.unwrap();
                    let Some(last) = batch.last().map(|e| e.position) else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    match turns % 7 {
                        // A crash: the batch is never acknowledged, the lease never released.
                        3 => {
                            f.advance(lapse());
                            generation += 1;
                            me = holder(&format!("instance-{i}-{generation}"));
                            continue;
                        }
                        // A stall past the lease: another instance may take over meanwhile.
                        5 => {
                            f.advance(lapse());
                            tokio::task::yield_now().await;
                        }
                        _ => {}
                    }
                    match f.engine.acknowledge_leased(&mailer, &me, last).await {
                        Ok(()) => handled
                            .lock()
                            .expect("handled")
                            .extend(batch.iter().map(|e| e.position)),
                        Err(BookingError::LeaseLost { .. }) => {}
                        Err(other) => panic!("acknowledge: {other}"),
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (f, slots) = (Arc::clone(&f), slots.clone());
            tokio::spawn(async move {
                // Holds only: the clock jumps while they are written, and a hold is placed
                // whatever the time (a confirm could find its hold expired).
                for i in 0..40 {
                    let slot = slots[(w + i) % slots.len()];
                    f.engine
                        .hold(slot, &format!("w{w}-{i}"))
                        .await
                        .expect("hold");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    let all = f.drain_events(&consumer("auditor"), 100).await;
    // 4 slots, 120 holds.
    assert_eq!(all.len(), 4 + 120);
    goal.store(all.len(), Ordering::SeqCst);
    for instance in instances {
        instance.await.expect("instance");
    }
    let handled = handled.lock().expect("handled").clone();
    let distinct: BTreeSet<_> = handled.iter().copied().collect();
    assert_eq!(handled.len(), distinct.len(), "an event was handled twice");
    let expected: BTreeSet<_> = all.iter().map(|e| e.position).collect();
    assert_eq!(distinct, expected, "handled events differ from the log");
}

/// Whether `consumer`'s cursor is at `position` (`None`: no cursor).
async fn cursor_at<S: crate::Store + EventStore>(
    f: &Fixture<S>,
    consumer: &ConsumerId,
    position: EventPosition,
) -> Option<bool> {
    let cursor = f.engine.store().consumer_position(consumer).await;
    cursor.expect("consumer_position").map(|at| at == position)
}

/// Acknowledges `through` for `consumer` inside a transaction of the store's (fenced by
/// `holder`'s lease when given), then commits or rolls back: the acknowledgement's answer.
async fn acknowledge_in_transaction<S>(
    f: &Fixture<S>,
    consumer: &ConsumerId,
    holder: Option<&LeaseHolder>,
    through: EventPosition,
    commit: bool,
) -> Result<(), BookingError>
where
    S: crate::Store + TransactionalStore + EventStore,
{
    let store = f.engine.store();
    let mut tx = store.begin().await.expect("begin");
    let mut within = f.engine.within(store.writes(&mut tx));
    let answer = match holder {
        Some(holder) => within.acknowledge_leased(consumer, holder, through).await,
        None => within.acknowledge_events(consumer, through).await,
    };
    drop(within);
    if commit {
        store.commit(tx).await.expect("commit");
    } else {
        store.rollback(tx).await.expect("rollback");
    }
    answer
}

/// An acknowledgement through an [`EngineTransaction`](crate::EngineTransaction) moves the cursor when the caller's
/// transaction commits and never when it rolls back; a fenced one by a holder whose lease was
/// taken over answers `lease_lost` inside the transaction and moves nothing.
pub async fn acknowledgements_commit_with_the_callers_transaction<S>(store: S)
where
    S: crate::Store + TransactionalStore + EventStore,
{
    let f = Fixture::new(store);
    let mailer = consumer("mailer");
    let slot = f.slot(5, Duration::hours(2)).await;
    f.engine.hold(slot, "k1").await.expect("hold");
    let read = f.engine.read_events(&mailer, 10).await.unwrap();
    assert_eq!(read.len(), 2);
    let (first, second) = (read[0].position, read[1].position);
    let (a, b) = (holder("instance-a"), holder("instance-b"));

    // Unfenced: rolled back, nothing; committed, the cursor moves.
    assert!(acknowledge_in_transaction(&f, &mailer, None, first, false)
        .await
        .is_ok());
    assert_eq!(
        cursor_at(&f, &mailer, first).await,
        None,
        "rolled back: no cursor"
    );
    assert!(acknowledge_in_transaction(&f, &mailer, None, first, true)
        .await
        .is_ok());
    assert_eq!(cursor_at(&f, &mailer, first).await, Some(true));

    // Leased: the holder's acknowledgement moves nothing when rolled back.
    assert!(f.engine.lease_consumer(&mailer, &a, LEASE).await.unwrap());
    assert!(
        acknowledge_in_transaction(&f, &mailer, Some(&a), second, false)
            .await
            .is_ok()
    );
    assert_eq!(cursor_at(&f, &mailer, first).await, Some(true));
    // B takes over after A's lease lapsed: A's acknowledgement in its transaction is refused
    // (and moves nothing even if the transaction commits); B's commits.
    f.advance(lapse());
    assert!(f.engine.lease_consumer(&mailer, &b, LEASE).await.unwrap());
    let refused = acknowledge_in_transaction(&f, &mailer, Some(&a), second, true).await;
    assert_eq!(refused.map_err(|e| e.code()), Err("lease_lost"));
    assert_eq!(cursor_at(&f, &mailer, first).await, Some(true));
    assert!(
        acknowledge_in_transaction(&f, &mailer, Some(&b), second, true)
            .await
            .is_ok()
    );
    assert_eq!(cursor_at(&f, &mailer, second).await, Some(true));
}
