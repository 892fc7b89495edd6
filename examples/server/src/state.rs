//! What the routes share besides the request: the engine (the router's state) and what
//! [`router_with_config`](crate::router_with_config) layers in as request extensions.

use std::sync::Arc;

use slot_booking::{BookingEngine, Store};

use crate::OwnerSecret;

/// The engine the router serves: any store behind a trait object.
pub type Engine = BookingEngine<Arc<dyn Store>>;

/// Where the routes are mounted, for the `Location` of a new hold or slot.
#[derive(Debug, Clone)]
pub(crate) struct PathPrefix(pub(crate) Arc<str>);

/// The secret `Owner-Id` values must be signed with, if any
/// ([`Config::owner_secret`](crate::Config::owner_secret)).
#[derive(Clone)]
pub(crate) struct OwnerSigning(pub(crate) Option<Arc<OwnerSecret>>);
