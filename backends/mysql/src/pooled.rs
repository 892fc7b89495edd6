//! The store's own connections, taken from its pool and closed, not returned, when a call is
//! cut midway.
//!
//! sqlx's MySQL connections are not cancel-safe: a query whose future is dropped while it
//! waits for the server leaves the connection out of step with its protocol (a result half
//! read, a `BEGIN` the server ran but the driver never counted). Returned to the pool, such a
//! connection answers its next statement with the previous one's leftovers, or waits forever in
//! the ping sqlx sends before reusing it, holding its place in the pool: a pool of one hung for
//! good after a hold was cut eight round trips in (`tests/cuts.rs`). [`Pooled`] closes a
//! connection whose use did not finish: the server rolls back whatever it had open and frees
//! its locks, and the pool opens a fresh connection when one is needed.

use std::ops::{Deref, DerefMut};

use slot_booking::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::pool::PoolConnection;
use sqlx::MySql;

use crate::{map_err, MySqlStore};

/// A connection of the store's pool that goes back to it only after [`Pooled::done`]; dropped
/// before, it is closed.
pub(crate) struct Pooled {
    conn: PoolConnection<MySql>,
    done: bool,
}

impl Pooled {
    /// Takes a connection of `store`'s pool.
    pub(crate) async fn acquire(store: &MySqlStore) -> Result<Self, StoreError> {
        let conn = store.pool().acquire().await.map_err(map_err)?;
        Ok(Pooled { conn, done: false })
    }

    /// The use finished (its last answer read): the connection may go back to the pool.
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Deref for Pooled {
    type Target = MySqlConnection;

    fn deref(&self) -> &MySqlConnection {
        &self.conn
    }
}

impl DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut MySqlConnection {
        &mut self.conn
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if !self.done {
            self.conn.close_on_drop();
        }
    }
}
