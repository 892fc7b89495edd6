//! Conformance cases for calls cut midway: a web framework drops a handler's future when its
//! client hangs up, at whatever await point the call had reached. A store's call dropped at
//! any await point, on the store's pool or in the caller's transaction, must leave nothing the
//! application can observe: no half-written step, no session setting, no transaction or
//! savepoint the application did not open, no lock.
//!
//! Each case cuts every write of a list at each of its await points in turn (the call is
//! polled until it has waited `n` times, then dropped, for `n = 0, 1, …` until it finishes
//! uncut), then lets the application write on the same connection (a store for these cases
//! has a pool of one connection) and checks every slot's and pool's invariant.
//! [`cut_conformance_tests!`](crate::cut_conformance_tests) runs them.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use async_trait::async_trait;
use futures::future::BoxFuture;

use super::kit::SlotTally;
use super::support::{hours, ttl};
use super::Fixture;
use crate::bookings::NewBooking;
use crate::engine::NewHold;
use crate::model::{
    BookingLine, CapacityChange, HoldId, HoldStatus, IdempotencyKey, NewPool, NewSlot, PageRequest,
    PoolId, SlotId,
};
use crate::scope::Scope;
use crate::store::{
    BookingRequest, BookingStore, HoldRequest, PoolStore, RenewRequest, Store, TransactionBookings,
    TransactionalStore,
};

/// The most await points a case cuts one write at before it counts the write as endless.
const MOST_CUTS: usize = 400;

/// What the cut cases need of the application beside a store: an ordinary write of its own,
/// such as an `INSERT` into a table of its own, which must work on the connection a cut call
/// used.
#[async_trait]
pub trait Application<S: TransactionalStore>: Clone + Send + Sync + 'static {
    /// The application's own write inside `transaction`, a transaction of `store`, run
    /// through [`EngineTransaction::run`](crate::EngineTransaction::run).
    fn write_in<'t>(
        &self,
        store: &S,
        transaction: &'t mut S::Transaction,
    ) -> BoxFuture<'t, Result<(), String>>;

    /// The application's own write in a transaction of its own, on a connection of `store`'s
    /// pool (its only one, in these cases).
    async fn write_on_pool(&self, store: &S) -> Result<(), String>;
}

/// Polls `call` until it has waited `waits` times, then drops it. `Some` with its answer when
/// it finished first.
pub async fn cut_after<F: Future>(call: F, waits: usize) -> Option<F::Output> {
    let mut call = pin!(call);
    let mut waited = 0;
    std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
        Poll::Ready(answer) => Poll::Ready(Some(answer)),
        Poll::Pending if waited == waits => Poll::Ready(None),
        Poll::Pending => {
            waited += 1;
            Poll::Pending
        }
    })
    .await
}

/// The writes a case cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Hold,
    HoldReclaiming,
    Book,
    Confirm,
    Cancel,
    Renew,
    ConfirmBooking,
    CancelBooking,
    CreateSlot,
    ChangeCapacity,
    Close,
    Remove,
}

const WRITES: [Write; 12] = [
    Write::Hold,
    Write::HoldReclaiming,
    Write::Book,
    Write::Confirm,
    Write::Cancel,
    Write::Renew,
    Write::ConfirmBooking,
    Write::CancelBooking,
    Write::CreateSlot,
    Write::ChangeCapacity,
    Write::Close,
    Write::Remove,
];

/// What each trial starts from, committed: slot `a` in pool `pool` with a held hold and a
/// booking over `a` and `b`; `full`, of one unit taken by an expired hold; `c` and `d` empty.
struct Scene {
    a: SlotId,
    b: SlotId,
    full: SlotId,
    c: SlotId,
    d: SlotId,
    pool: PoolId,
    hold: HoldId,
    booking: HoldId,
}

impl Scene {
    fn slots(&self) -> [SlotId; 5] {
        [self.a, self.b, self.full, self.c, self.d]
    }
}

async fn scene<S: Store + BookingStore + PoolStore>(f: &Fixture<S>, trial: &str) -> Scene {
    let a = f.slot(4, hours(2)).await;
    let b = f.slot(4, hours(3)).await;
    let full = f.slot(1, hours(4)).await;
    let c = f.slot(2, hours(5)).await;
    let d = f.slot(2, hours(6)).await;
    let pool = f
        .engine
        .create_pool(NewPool::new(5))
        .await
        .expect("create_pool")
        .pool_id;
    f.engine.attach_slot(pool, a).await.expect("attach_slot");
    let short = NewHold::new(full, format!("{trial}-short")).lifetime(super::MIN_REQUESTED_TTL);
    f.engine.place_hold(short).await.expect("a short hold");
    let hold = f
        .engine
        .hold(a, &format!("{trial}-hold"))
        .await
        .expect("hold")
        .hold
        .hold_id;
    let booking = f
        .engine
        .book(
            NewBooking::new(format!("{trial}-booking"))
                .line(a, 1)
                .line(b, 1),
        )
        .await
        .expect("book")
        .booking
        .booking_id;
    // The short hold expires; the others live on.
    f.advance(chrono::Duration::seconds(2));
    Scene {
        a,
        b,
        full,
        c,
        d,
        pool,
        hold,
        booking,
    }
}

/// Checks every slot's invariant, the pool's, and that the booking over `c` and `d` (a cut
/// [`Write::Book`]) is whole or absent.
async fn check<S: Store + PoolStore>(f: &Fixture<S>, scene: &Scene, context: &str) {
    let store = f.engine.store();
    let now = f.now();
    let mut lines = Vec::new();
    for slot_id in scene.slots() {
        let slot = f.stored_slot(slot_id).await;
        let holds = store
            .slot_holds(slot_id, PageRequest::first(1000), now)
            .await
            .expect("slot_holds")
            .outcome;
        if let Err(broken) = SlotTally::of(&slot, &holds, now).check() {
            panic!("{context}: slot {slot_id}: {broken}");
        }
        if slot_id == scene.c || slot_id == scene.d {
            lines.push(holds.len());
        }
        if slot_id == scene.a {
            let pool = store
                .get_pool(scene.pool, now)
                .await
                .expect("get_pool")
                .outcome
                .expect("the pool");
            let units = |status: HoldStatus, active: bool| -> i32 {
                holds
                    .iter()
                    .filter(|h| h.status == status && (h.expires_at > now) == active)
                    .map(|h| h.quantity)
                    .sum()
            };
            let confirmed =
                units(HoldStatus::Confirmed, true) + units(HoldStatus::Confirmed, false);
            assert_eq!(
                (pool.held, pool.expired, pool.confirmed()),
                (
                    units(HoldStatus::Held, true),
                    units(HoldStatus::Held, false),
                    confirmed
                ),
                "{context}: the pool's units (held, expired, confirmed) against its slot's holds"
            );
        }
    }
    assert_eq!(
        lines[0], lines[1],
        "{context}: a booking over two slots is whole or absent"
    );
}

/// Each write (holds, bookings, confirms, cancels, renewals, slot changes), in a transaction the application shares with the engine
/// ([`EngineTransaction`](crate::EngineTransaction)), cut at each of its await points: the
/// transaction stays usable (the application writes in it and commits it, or drops it), the
/// connection then takes the application's own write, and no half-written step is left.
pub async fn cut_calls_in_the_callers_transaction_leave_nothing<S, A>(store: S, app: A)
where
    S: Store + BookingStore + PoolStore + TransactionalStore,
    for<'t> S::Writes<'t>: TransactionBookings,
    A: Application<S>,
{
    let f = Fixture::new(store);
    let mut trials = 0;
    for write in WRITES {
        for commit in [true, false] {
            for waits in 0..MOST_CUTS {
                trials += 1;
                let name = format!("c{trials}");
                let scene = scene(&f, &name).await;
                let context = format!("{write:?} cut after {waits} waits, commit {commit}");
                let mut tx = f.engine.transaction().await.expect("transaction");
                let start = f.now() + hours(9);
                let call = async {
                    match write {
                        Write::Hold => tx
                            .place_hold(NewHold::new(scene.a, format!("{name}-h")).quantity(2))
                            .await
                            .map(drop),
                        Write::HoldReclaiming => {
                            tx.hold(scene.full, &format!("{name}-r")).await.map(drop)
                        }
                        Write::Book => tx
                            .book(
                                NewBooking::new(format!("{name}-b"))
                                    .line(scene.c, 1)
                                    .line(scene.d, 1),
                            )
                            .await
                            .map(drop),
                        Write::Confirm => tx.confirm(&Scope::Anonymous, scene.hold).await.map(drop),
                        Write::Cancel => tx.cancel(&Scope::Anonymous, scene.hold).await.map(drop),
                        Write::Renew => tx
                            .renew(&Scope::Anonymous, scene.hold, None)
                            .await
                            .map(drop),
                        Write::ConfirmBooking => tx
                            .confirm_booking(&Scope::Anonymous, scene.booking)
                            .await
                            .map(drop),
                        Write::CancelBooking => tx
                            .cancel_booking(&Scope::Anonymous, scene.booking)
                            .await
                            .map(drop),
                        Write::CreateSlot => tx
                            .create_slot(NewSlot::new(start, start + hours(1), 3))
                            .await
                            .map(drop),
                        Write::ChangeCapacity => tx
                            .change_capacity(scene.b, CapacityChange::By(2))
                            .await
                            .map(drop),
                        Write::Close => tx.close_sales(scene.a).await.map(drop),
                        Write::Remove => tx.remove_slot(scene.c).await.map(drop),
                    }
                };
                let finished = match cut_after(call, waits).await {
                    Some(answer) => {
                        answer.unwrap_or_else(|e| panic!("{context}: uncut, {e:?}"));
                        true
                    }
                    None => false,
                };
                if commit {
                    // A second cut, at the first wait of the next call (it may wait for the
                    // cut call to hand the transaction back): nothing of it is lost either.
                    let (first, store) = (app.clone(), f.engine.store_handle());
                    let _ = cut_after(
                        tx.run(move |transaction| first.write_in(&store, transaction)),
                        0,
                    )
                    .await;
                    let (second, store) = (app.clone(), f.engine.store_handle());
                    tx.run(move |transaction| second.write_in(&store, transaction))
                        .await
                        .unwrap_or_else(|e| {
                            panic!("{context}: the transaction after the cut: {e:?}")
                        })
                        .unwrap_or_else(|e| {
                            panic!("{context}: the application's write in its transaction: {e}")
                        });
                    tx.commit()
                        .await
                        .unwrap_or_else(|e| panic!("{context}: the commit: {e:?}"));
                } else {
                    drop(tx);
                }
                app.write_on_pool(f.engine.store())
                    .await
                    .unwrap_or_else(|e| {
                        panic!("{context}: the application's next write on the connection: {e}")
                    });
                check(&f, &scene, &context).await;
                if finished {
                    break;
                }
                assert!(waits + 1 < MOST_CUTS, "{context}: the call never finished");
            }
        }
    }
    println!("{trials} calls in a transaction, each cut at one await point or run whole");
}

/// Each write (as above) as a call of the store on its pool, cut at each of its await
/// points: the connection then takes the application's own write, and no half-written step is
/// left.
pub async fn cut_calls_on_the_pool_leave_nothing<S, A>(store: S, app: A)
where
    S: Store + BookingStore + PoolStore + TransactionalStore,
    A: Application<S>,
{
    cut_store_calls(store, &OnPool(app)).await;
}

/// [`cut_calls_on_the_pool_leave_nothing`] for a store with no connections (the memory
/// store's): after each cut, the store's next write works and no half-written step is left.
pub async fn cut_calls_leave_nothing<S>(store: S)
where
    S: Store + BookingStore + PoolStore,
{
    cut_store_calls(store, &NoConnection).await;
}

/// The application's write after a cut call of the store.
#[async_trait]
trait NextWrite<S>: Send + Sync {
    async fn write(&self, store: &S) -> Result<(), String>;
}

/// An [`Application`]'s write on the store's pool.
struct OnPool<A>(A);

#[async_trait]
impl<S: TransactionalStore, A: Application<S>> NextWrite<S> for OnPool<A> {
    async fn write(&self, store: &S) -> Result<(), String> {
        self.0.write_on_pool(store).await
    }
}

/// No connection to write on: the store's next write (each trial's scene) is the check.
struct NoConnection;

#[async_trait]
impl<S: Sync> NextWrite<S> for NoConnection {
    async fn write(&self, _store: &S) -> Result<(), String> {
        Ok(())
    }
}

async fn cut_store_calls<S>(store: S, next: &dyn NextWrite<S>)
where
    S: Store + BookingStore + PoolStore,
{
    let f = Fixture::new(store);
    let mut trials = 0;
    for write in WRITES {
        for waits in 0..MOST_CUTS {
            trials += 1;
            let name = format!("p{trials}");
            let scene = scene(&f, &name).await;
            let context = format!("{write:?} on the pool, cut after {waits} waits");
            let store = f.engine.store();
            let now = f.now();
            let key = |suffix: &str| {
                IdempotencyKey::new(format!("{name}-{suffix}")).expect("a valid key")
            };
            let (hold_key, reclaim_key, booking_key) = (key("h"), key("r"), key("b"));
            let lines = [BookingLine::new(scene.c, 1), BookingLine::new(scene.d, 1)];
            let expires_at = now + ttl();
            let renewal = RenewRequest {
                hold_id: scene.hold,
                scope: &Scope::Anonymous,
                now,
                lifetime: ttl(),
                max_life: chrono::Duration::from_std(super::MAX_HOLD_LIFE).expect("fits"),
            };
            let start = now + hours(9);
            let new_slot = NewSlot::new(start, start + hours(1), 3);
            let call = async {
                let done: Result<(), crate::StoreError> = match write {
                    Write::Hold => store
                        .create_hold(HoldRequest {
                            slot_id: scene.a,
                            key: &hold_key,
                            owner: None,
                            quantity: 2,
                            now,
                            expires_at,
                        })
                        .await
                        .map(drop),
                    Write::HoldReclaiming => store
                        .create_hold(HoldRequest {
                            slot_id: scene.full,
                            key: &reclaim_key,
                            owner: None,
                            quantity: 1,
                            now,
                            expires_at,
                        })
                        .await
                        .map(drop),
                    Write::Book => store
                        .create_booking(BookingRequest {
                            key: &booking_key,
                            owner: None,
                            lines: &lines,
                            now,
                            expires_at,
                        })
                        .await
                        .map(drop),
                    Write::Confirm => store
                        .confirm_hold(scene.hold, &Scope::Anonymous, now)
                        .await
                        .map(drop),
                    Write::Cancel => store
                        .cancel_hold(scene.hold, &Scope::Anonymous, now)
                        .await
                        .map(drop),
                    Write::Renew => store.renew_hold(renewal).await.map(drop),
                    Write::ConfirmBooking => store
                        .confirm_booking(scene.booking, &Scope::Anonymous, now)
                        .await
                        .map(drop),
                    Write::CancelBooking => store
                        .cancel_booking(scene.booking, &Scope::Anonymous, now)
                        .await
                        .map(drop),
                    Write::CreateSlot => store.create_slot(&new_slot, now).await.map(drop),
                    Write::ChangeCapacity => store
                        .change_capacity(scene.b, CapacityChange::By(2), now)
                        .await
                        .map(drop),
                    Write::Close => store.set_closed(scene.a, true, now).await.map(drop),
                    Write::Remove => store.remove_slot(scene.c, now).await.map(drop),
                };
                done
            };
            let finished = match cut_after(call, waits).await {
                Some(answer) => {
                    answer.unwrap_or_else(|e| panic!("{context}: uncut, {e:?}"));
                    true
                }
                None => false,
            };
            next.write(store).await.unwrap_or_else(|e| {
                panic!("{context}: the application's next write on the connection: {e}")
            });
            check(&f, &scene, &context).await;
            if finished {
                break;
            }
            assert!(waits + 1 < MOST_CUTS, "{context}: the call never finished");
        }
    }
    println!("{trials} store calls, each cut at one await point or run whole");
}
