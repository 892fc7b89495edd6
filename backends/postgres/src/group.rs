//! Group commit of a slot's holds: concurrent holds of one slot decided in one statement.
//!
//! Every hold of a slot decrements the slot's one row, so on one hot slot (a flash sale) the
//! holds queue for that row's lock, one statement and one commit each. Holds placed through
//! the pool therefore go through a [`GroupCommit`] with a lane per slot: a hold that finds no
//! other hold of its slot being placed runs the fast statement alone, as before (one round
//! trip); the holds that arrive meanwhile wait, and the next of them to get the lane runs
//! [`GroupStatements::take`] for all of them at once: one statement, one commit, one wait for
//! the row's lock.
//!
//! The statement decides by the rows it locked and wrote, as the fast statement does: it locks
//! the slot's row if the slot is selling with no pool and no line (re-checked on the row's
//! latest version), and takes the requests, in the order they arrived, whose running total of
//! units fits the `remaining` it locked; only those are decremented, inserted (each with its
//! `hold_placed` event) and given their keys. A request it did not take (short of units, its
//! key already in use, the slot not selling, or the key twice in the group) is answered
//! [`Grouped::Alone`]: its caller runs the fast statement alone, whose refusal and reclaim are
//! the ones every hold has. A key taken by a concurrent statement after this one's snapshot
//! fails the whole statement (nothing of it stays) and every request of the group goes alone.
//! Nothing is answered before the statement has committed (it is a transaction of its own).
//!
//! Holds inside the caller's transaction ([`PostgresStore::on`]) are never grouped: they are
//! the caller's to commit.

use std::collections::HashSet;

use slot_booking::store::GroupCommit;
use slot_booking::{Decided, Hold, HoldRequest, StoreError, Timestamp};
use sqlx::postgres::types::PgInterval;
use sqlx::{AssertSqlSafe, Row};

use crate::fragments::{append_events, now, HOLD_COLUMNS};
use crate::rows::{decided, hold_from_row, interval};
use crate::writes::{Conn, Insert, Run};
use crate::{is_unique_violation, map_err, PostgresStore};

/// The most holds one statement takes; the rest wait for the next.
pub(crate) const MAX_GROUP: usize = 256;

/// The store's group commit: a lane per slot id.
pub(crate) type HoldGroups = GroupCommit<i64, Wanted, Grouped>;

/// A hold request as a group takes it.
#[derive(Debug)]
pub(crate) struct Wanted {
    key: String,
    quantity: i32,
    owner: Option<String>,
    now: Timestamp,
    lifetime: PgInterval,
}

/// What the fast path of a hold on the pool did.
#[derive(Debug)]
pub(crate) enum Grouped {
    /// Decided: alone, by the fast statement, or taken by a group.
    Done(Insert),
    /// Not taken by its group: to run the fast statement alone.
    Alone,
}

/// The statement of a group, built once per store with its schema name.
#[derive(Debug)]
pub(crate) struct GroupStatements {
    /// `$1` slot id, `$2` keys, `$3` quantities, `$4` owners, `$5` lifetimes (arrays, one
    /// element per request, in arrival order), `$6` now (NULL: the database's clock). One row
    /// per hold taken: its columns, its key and the instant decided at.
    pub(crate) take: String,
}

impl GroupStatements {
    pub(crate) fn new(s: &str) -> Self {
        let now = now(6);
        let events = append_events(
            s,
            &format!(
                "SELECT 'hold_placed', slot_id, id, owner, quantity, {now} FROM ins ORDER BY id"
            ),
        );
        GroupStatements {
            // `req`: the requests whose key is not in use at the statement's snapshot. `sl`:
            // the slot's row, locked, if it is selling to newcomers (re-checked on its latest
            // version once locked). `t`: the requests whose running total fits the `remaining`
            // the lock returned. The new `remaining` is computed from that locked value, which
            // nobody changes while the lock is held (see `sql.rs`, "Deciding on the locked
            // row"), and `capacity` is written from it too: the update checks the CHECK
            // constraints first on a projection from the row as of its snapshot, and the locked
            // `remaining` beside a snapshot's `capacity` fails `remaining <= capacity` after a
            // concurrent raise (see `sql.rs`, `change_capacity`). The keys last, as in the
            // fast statement, and in key order: two groups of two slots whose keys overlap (a
            // client retrying on another slot) wait for each other's keys in one order, never
            // in a circle (the lock order is the slot's row, then the keys by key).
            take: format!(
                "WITH req AS ( \
                     SELECT r.key, r.quantity, r.owner, r.lifetime, r.n \
                     FROM unnest($2::text[], $3::int4[], $4::text[], $5::interval[]) \
                          WITH ORDINALITY AS r(key, quantity, owner, lifetime, n) \
                     WHERE NOT EXISTS ( \
                         SELECT 1 FROM {s}.hold_keys k WHERE k.idempotency_key = r.key)), \
                 sl AS ( \
                     SELECT id, remaining, capacity FROM {s}.slots \
                     WHERE id = $1 AND starts_at > {now} AND NOT closed \
                       AND removed_at IS NULL AND cardinality(pools) = 0 AND waiting = 0 \
                     FOR NO KEY UPDATE), \
                 t AS ( \
                     SELECT q.key, q.quantity, q.owner, q.lifetime, q.n \
                     FROM (SELECT req.*, sum(req.quantity) OVER (ORDER BY req.n) AS upto \
                           FROM req) q, sl \
                     WHERE q.upto <= sl.remaining), \
                 dec AS ( \
                     UPDATE {s}.slots s \
                     SET remaining = (sl.remaining - (SELECT sum(t.quantity) FROM t))::int4, \
                         capacity = sl.capacity \
                     FROM sl WHERE s.id = sl.id AND EXISTS (SELECT 1 FROM t) \
                     RETURNING s.id), \
                 ins AS ( \
                     INSERT INTO {s}.holds \
                         (slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                          owner) \
                     SELECT dec.id, t.key, 'held', {now} + t.lifetime, {now}, t.quantity, \
                            t.owner \
                     FROM dec, t ORDER BY t.n \
                     RETURNING {HOLD_COLUMNS}, idempotency_key), \
                 ev AS ({events}), \
                 k AS ( \
                     INSERT INTO {s}.hold_keys (idempotency_key, hold_id) \
                     SELECT idempotency_key, id FROM ins ORDER BY idempotency_key) \
                 SELECT {HOLD_COLUMNS}, idempotency_key, {now} AS decided_at FROM ins"
            ),
        }
    }
}

impl Run<'_> {
    /// A hold's fast statement on the pool: alone when no other hold of its slot is being
    /// placed by this store, else in a group with the holds of that slot waiting meanwhile.
    pub(crate) async fn fast_hold(
        &mut self,
        request: &HoldRequest<'_>,
        statement: &str,
    ) -> Result<Insert, StoreError> {
        // A hold waiting for its group holds no connection: the group's statement takes one
        // of the pool's, which the waiting callers must not have taken all of.
        if let Conn::Pooled(_, conn, _) = &mut self.conn {
            *conn = None;
        }
        let store = self.store.clone();
        let slot_id = request.slot_id.get();
        let wanted = Wanted {
            key: request.key.as_str().to_owned(),
            quantity: request.quantity,
            owner: request.owner.map(|owner| owner.as_str().to_owned()),
            now: request.now,
            lifetime: interval(request.expires_at - request.now)?,
        };
        let grouped = store
            .inner
            .groups
            .submit(
                slot_id,
                wanted,
                |_| async {
                    Ok(Grouped::Done(
                        self.try_insert_hold(statement, request).await?,
                    ))
                },
                |group| take(store.clone(), slot_id, group),
            )
            .await?;
        match grouped {
            Grouped::Done(insert) => Ok(insert),
            Grouped::Alone => self.try_insert_hold(statement, request).await,
        }
    }
}

/// Runs a group's statement on a connection of the pool: each request's answer, in order.
async fn take(
    store: PostgresStore,
    slot_id: i64,
    group: Vec<Wanted>,
) -> Result<Vec<Result<Grouped, StoreError>>, StoreError> {
    // A key twice in the group: its first request is taken or not, the others go alone (and
    // find the first one's hold, or its key free).
    let mut seen = HashSet::new();
    let first: Vec<bool> = group.iter().map(|w| seen.insert(w.key.as_str())).collect();
    let taking = group.iter().zip(&first).filter(|(_, first)| **first);
    let (mut keys, mut quantities, mut owners, mut lifetimes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (wanted, _) in taking {
        keys.push(wanted.key.as_str());
        quantities.push(wanted.quantity);
        owners.push(wanted.owner.as_deref());
        lifetimes.push(wanted.lifetime);
    }
    // The group is decided at one instant, its latest request's: every request was in flight
    // then.
    let now = group.iter().map(|w| w.now).max();
    let rows = sqlx::query(AssertSqlSafe(store.inner.groups_sql.take.as_str()))
        .bind(slot_id)
        .bind(&keys)
        .bind(&quantities)
        .bind(&owners)
        .bind(&lifetimes)
        .bind(now.and_then(|now| store.now_param(now)))
        .fetch_all(&store.pool)
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        // A key of the group inserted by another statement since this one's snapshot: the
        // statement changed nothing; each request goes alone.
        Err(error) if is_unique_violation(&error) => {
            return Ok(group.iter().map(|_| Ok(Grouped::Alone)).collect());
        }
        Err(error) => return Err(map_err(error)),
    };
    let mut taken = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let key: String = row.try_get("idempotency_key").map_err(map_err)?;
        let hold: Decided<Hold> = decided(row, hold_from_row(row)?)?;
        taken.insert(key, hold);
    }
    Ok(group
        .iter()
        .zip(first)
        .map(|(wanted, first)| {
            Ok(match taken.remove(wanted.key.as_str()) {
                Some(hold) if first => Grouped::Done(Insert::Created(hold)),
                _ => Grouped::Alone,
            })
        })
        .collect())
}
