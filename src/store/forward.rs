//! [`forward_store!`](crate::forward_store): a store's traits implemented by handing every
//! call to another implementation, the one place each forwarding signature is written.

/// Implements store traits for a type by handing every call to another implementation.
///
/// `forward_store!(impl[GENERICS] TRAIT, TRAIT… for TYPE, |this| TARGET)` implements each
/// named trait for `TYPE`; every method evaluates `TARGET` (an expression of `this`, which is
/// `self`) and calls the method of the same name on it. An optional last argument,
/// `|call| WRAP`, wraps each call: `call` is the target's future and `WRAP` an expression
/// that awaits it (the default is `call.await`). `TARGET` may itself await and use `?`
/// (`StoreError`), so it can acquire a connection for the call.
///
/// The traits: [`HoldStore`](crate::HoldStore), [`BookingStore`](crate::BookingStore), [`PoolStore`](crate::PoolStore), [`WaitlistStore`](crate::WaitlistStore), [`SlotAdmin`](crate::SlotAdmin),
/// [`HoldQueries`](crate::HoldQueries), [`EventStore`](crate::EventStore) (methods on
/// `&self`), [`TransactionWrites`](crate::TransactionWrites) and
/// [`TransactionBookings`](crate::TransactionBookings) and [`TransactionPools`](crate::TransactionPools) (on `&mut self`).
///
/// A wrapper store that counts every call, in a few lines:
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use slot_booking::{forward_store, BookingEngine, MemoryStore};
///
/// struct Counting<S> {
///     inner: S,
///     calls: AtomicU64,
/// }
///
/// forward_store!(
///     impl[S: slot_booking::Store] HoldStore, SlotAdmin, HoldQueries for Counting<S>,
///     |this| { this.calls.fetch_add(1, Ordering::Relaxed); &this.inner }
/// );
///
/// # tokio_test::block_on(async {
/// let engine = BookingEngine::new(Counting { inner: MemoryStore::new(), calls: AtomicU64::new(0) });
/// let start = chrono::Utc::now() + chrono::Duration::days(1);
/// let slot = engine
///     .create_slot(slot_booking::NewSlot::new(start, start + chrono::Duration::hours(1), 2))
///     .await?;
/// engine.hold(slot.slot_id, "k").await?;
/// assert_eq!(engine.store().calls.load(Ordering::Relaxed), 2);
/// # Ok::<(), slot_booking::BookingError>(())
/// # }).unwrap();
/// ```
#[macro_export]
macro_rules! forward_store {
    (impl $generics:tt $($trait:ident),+ for $ty:ty, |$this:ident| $get:expr) => {
        $crate::forward_store!(impl $generics $($trait),+ for $ty, |$this| $get, |call| call.await);
    };
    (impl $generics:tt $($trait:ident),+ for $ty:ty, |$this:ident| $get:expr, |$call:ident| $wrap:expr) => {
        $(
            $crate::forward_store!(@$trait $generics $ty; $this; $get; $call; $wrap);
        )+
    };
    // One method: `self` named `$this`, the target evaluated, the call made and wrapped.
    (@call $self_:ident; $this:ident; $get:expr; $call:ident; $wrap:expr; $method:ident($($arg:ident),*)) => {{
        let $this = $self_;
        #[allow(unused_mut)]
        let mut target = $get;
        let $call = target.$method($($arg),*);
        $wrap
    }};
    (@HoldStore [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::HoldStore for $ty {
            async fn create_slot(&self, slot: &$crate::NewSlot, now: $crate::Timestamp) -> Result<$crate::Slot, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_slot(slot, now))
            }
            async fn get_slot(&self, slot_id: $crate::SlotId) -> Result<Option<$crate::Slot>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_slot(slot_id))
            }
            async fn availability(&self, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::AvailabilityEntry>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; availability(now))
            }
            async fn pools(&self, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::PoolUsage>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; pools(now))
            }
            async fn create_hold(&self, request: $crate::HoldRequest<'_>) -> Result<$crate::Decided<$crate::HoldOutcome>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_hold(request))
            }
            async fn create_hold_any(&self, request: $crate::AnyHoldRequest<'_>) -> Result<$crate::Decided<$crate::AnyHoldOutcome>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_hold_any(request))
            }
            async fn confirm_hold(&self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; confirm_hold(hold_id, scope, now))
            }
            async fn cancel_hold(&self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; cancel_hold(hold_id, scope, now))
            }
            async fn renew_hold(&self, request: $crate::RenewRequest<'_>) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; renew_hold(request))
            }
            async fn get_hold(&self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::Hold>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_hold(hold_id, scope, now))
            }
        }
    };
    (@BookingStore [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::BookingStore for $ty {
            async fn create_booking(&self, request: $crate::BookingRequest<'_>) -> Result<$crate::Decided<$crate::BookingOutcome>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_booking(request))
            }
            async fn get_booking(&self, booking_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_booking(booking_id, scope, now))
            }
            async fn confirm_booking(&self, booking_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; confirm_booking(booking_id, scope, now))
            }
            async fn cancel_booking(&self, booking_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; cancel_booking(booking_id, scope, now))
            }
            async fn renew_booking(&self, request: $crate::RenewRequest<'_>) -> Result<$crate::Decided<$crate::Transition<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; renew_booking(request))
            }
        }
    };
    (@PoolStore [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::PoolStore for $ty {
            async fn create_pool(&self, pool: &$crate::NewPool, now: $crate::Timestamp) -> Result<$crate::Pool, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_pool(pool, now))
            }
            async fn get_pool(&self, pool_id: $crate::PoolId, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::PoolUsage>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_pool(pool_id, now))
            }
            async fn attach_slot(&self, pool_id: $crate::PoolId, slot_id: $crate::SlotId, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::PoolChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; attach_slot(pool_id, slot_id, now))
            }
            async fn detach_slot(&self, pool_id: $crate::PoolId, slot_id: $crate::SlotId, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::PoolChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; detach_slot(pool_id, slot_id, now))
            }
            async fn change_pool_capacity(&self, pool_id: $crate::PoolId, change: $crate::CapacityChange, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::PoolChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; change_pool_capacity(pool_id, change, now))
            }
        }
    };
    (@WaitlistStore [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::WaitlistStore for $ty {
            async fn join_waitlist(&self, request: $crate::JoinRequest<'_>) -> Result<$crate::Decided<$crate::JoinOutcome>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; join_waitlist(request))
            }
            async fn leave_waitlist(&self, entry_id: $crate::EntryId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::WaitlistEntry>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; leave_waitlist(entry_id, scope, now))
            }
            async fn waitlist_entry(&self, entry_id: $crate::EntryId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<($crate::WaitlistEntry, u32)>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; waitlist_entry(entry_id, scope, now))
            }
        }
    };
    (@TransactionPools [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::TransactionPools for $ty {
            async fn get_pool(&mut self, pool_id: $crate::PoolId, now: $crate::Timestamp) -> Result<Option<$crate::PoolUsage>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_pool(pool_id, now))
            }
            async fn slot_usage(&mut self, slot_id: $crate::SlotId, now: $crate::Timestamp) -> Result<Option<$crate::SlotUsage>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; slot_usage(slot_id, now))
            }
        }
    };
    (@SlotAdmin [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::SlotAdmin for $ty {
            async fn change_capacity(&self, slot_id: $crate::SlotId, change: $crate::CapacityChange, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; change_capacity(slot_id, change, now))
            }
            async fn set_closed(&self, slot_id: $crate::SlotId, closed: bool, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; set_closed(slot_id, closed, now))
            }
            async fn remove_slot(&self, slot_id: $crate::SlotId, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; remove_slot(slot_id, now))
            }
            async fn list_slots(&self, filter: &$crate::AvailabilityQuery, page: $crate::PageRequest<$crate::SlotCursor>, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::SlotUsage>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; list_slots(filter, page, now))
            }
        }
    };
    (@HoldQueries [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::HoldQueries for $ty {
            async fn owner_holds(&self, owner: &$crate::OwnerId, page: $crate::PageRequest, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::Hold>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; owner_holds(owner, page, now))
            }
            async fn slot_holds(&self, slot_id: $crate::SlotId, page: $crate::PageRequest, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::Hold>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; slot_holds(slot_id, page, now))
            }
        }
    };
    (@EventStore [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::EventStore for $ty {
            async fn read_events(&self, consumer: &$crate::ConsumerId, limit: u32) -> Result<Vec<$crate::Event>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; read_events(consumer, limit))
            }
            async fn read_events_after(&self, after: $crate::EventPosition, limit: u32) -> Result<Vec<$crate::Event>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; read_events_after(after, limit))
            }
            async fn event_log_end(&self) -> Result<$crate::EventPosition, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; event_log_end())
            }
            async fn acknowledge(&self, consumer: &$crate::ConsumerId, through: $crate::EventPosition) -> Result<(), $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; acknowledge(consumer, through))
            }
            async fn consumer_position(&self, consumer: &$crate::ConsumerId) -> Result<Option<$crate::EventPosition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; consumer_position(consumer))
            }
            async fn lease_consumer(&self, consumer: &$crate::ConsumerId, holder: &$crate::LeaseHolder, now: $crate::Timestamp, until: $crate::Timestamp) -> Result<bool, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; lease_consumer(consumer, holder, now, until))
            }
            async fn release_consumer(&self, consumer: &$crate::ConsumerId, holder: &$crate::LeaseHolder) -> Result<(), $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; release_consumer(consumer, holder))
            }
            async fn acknowledge_leased(&self, consumer: &$crate::ConsumerId, holder: &$crate::LeaseHolder, through: $crate::EventPosition) -> Result<bool, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; acknowledge_leased(consumer, holder, through))
            }
            async fn reclaim_expired(&self, now: $crate::Timestamp, limit: u32) -> Result<Vec<$crate::Hold>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; reclaim_expired(now, limit))
            }
            async fn purge(&self, before: $crate::Timestamp, limit: u32) -> Result<$crate::Purged, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; purge(before, limit))
            }
        }
    };
    (@TransactionBookings [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::TransactionBookings for $ty {
            async fn create_booking(&mut self, request: $crate::BookingRequest<'_>) -> Result<$crate::Decided<$crate::BookingOutcome>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_booking(request))
            }
            async fn get_booking(&mut self, booking_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_booking(booking_id, scope, now))
            }
            async fn confirm_booking(&mut self, booking_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; confirm_booking(booking_id, scope, now))
            }
            async fn cancel_booking(&mut self, booking_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; cancel_booking(booking_id, scope, now))
            }
            async fn renew_booking(&mut self, request: $crate::RenewRequest<'_>) -> Result<$crate::Decided<$crate::Transition<$crate::Booking>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; renew_booking(request))
            }
        }
    };
    (@TransactionWrites [$($generics:tt)*] $ty:ty; $this:ident; $get:expr; $call:ident; $wrap:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::TransactionWrites for $ty {
            async fn create_hold(&mut self, request: $crate::HoldRequest<'_>) -> Result<$crate::Decided<$crate::HoldOutcome>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_hold(request))
            }
            async fn confirm_hold(&mut self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; confirm_hold(hold_id, scope, now))
            }
            async fn cancel_hold(&mut self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; cancel_hold(hold_id, scope, now))
            }
            async fn renew_hold(&mut self, request: $crate::RenewRequest<'_>) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; renew_hold(request))
            }
            async fn get_hold(&mut self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::Hold>>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; get_hold(hold_id, scope, now))
            }
            async fn create_slot(&mut self, slot: &$crate::NewSlot, now: $crate::Timestamp) -> Result<$crate::Slot, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; create_slot(slot, now))
            }
            async fn change_capacity(&mut self, slot_id: $crate::SlotId, change: $crate::CapacityChange, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; change_capacity(slot_id, change, now))
            }
            async fn set_closed(&mut self, slot_id: $crate::SlotId, closed: bool, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; set_closed(slot_id, closed, now))
            }
            async fn remove_slot(&mut self, slot_id: $crate::SlotId, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; remove_slot(slot_id, now))
            }
            async fn acknowledge(&mut self, consumer: &$crate::ConsumerId, holder: Option<&$crate::LeaseHolder>, through: $crate::EventPosition) -> Result<bool, $crate::StoreError> {
                $crate::forward_store!(@call self; $this; $get; $call; $wrap; acknowledge(consumer, holder, through))
            }
        }
    };
}
