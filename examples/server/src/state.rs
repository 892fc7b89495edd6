//! What the routes share besides the request: the engine (the router's state) and what
//! [`router_with_config`](crate::router_with_config) layers in as request extensions.

use std::sync::Arc;

use slot_booking::{BookingEngine, BookingStore, EventStore, PoolStore, Store, WaitlistStore};

use crate::OwnerSecret;

/// What the server asks of a store: the hold lifecycle, administration, queries
/// ([`Store`]), bookings of several lines ([`BookingStore`]), pools ([`PoolStore`]),
/// waitlists ([`WaitlistStore`]) and the event log the change stream follows
/// ([`EventStore`]). Implemented for every type that has them (the in-memory, SQLite,
/// PostgreSQL and MariaDB/MySQL stores).
pub trait ServerStore: Store + BookingStore + PoolStore + WaitlistStore + EventStore {}

impl<T: Store + BookingStore + PoolStore + WaitlistStore + EventStore + ?Sized> ServerStore for T {}

/// The engine the router serves: any store behind a trait object.
pub type Engine = BookingEngine<Arc<dyn ServerStore>>;

/// Where the routes are mounted, for the `Location` of a new hold or slot.
#[derive(Debug, Clone)]
pub(crate) struct PathPrefix(pub(crate) Arc<str>);

/// The secret `Owner-Id` values must be signed with, if any
/// ([`Config::owner_secret`](crate::Config::owner_secret)).
#[derive(Clone)]
pub(crate) struct OwnerSigning(pub(crate) Option<Arc<OwnerSecret>>);
