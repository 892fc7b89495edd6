//! "Any one of these" holds: the first candidate, in the engine's order, that has the units
//! free and that no other transaction has locked is taken without waiting (`SKIP LOCKED`);
//! when none is, the core's rule ([`first_that_fits`]) tries each in turn, waiting for its
//! lock like any hold, so a candidate whose row was only busy is never refused.

use slot_booking::store::first_that_fits;
use slot_booking::{AnyHoldOutcome, AnyHoldRequest, PlaceOne};
use sqlx::Connection;

use super::*;
use crate::fragments::{now, quote};
use crate::writes::{Conn, Run};

/// The first of `$1` (slot ids, in order) with `$2` units free (its expired holds counted:
/// the hold reclaims them) that is selling at `$3` (or the server's clock) with nobody
/// waiting in its line or in the line of any of its pools, locked unless another transaction
/// holds its row: then the next. (The pools' lines are read at this statement's snapshot
/// only to pass a slot over; the hold statements decide on the locked pool rows.)
fn pick(schema: &str) -> String {
    let s = quote(schema);
    let now3 = now(3);
    format!(
        "SELECT sl.id FROM {s}.slots sl \
         WHERE sl.id = ANY($1::int8[]) AND sl.starts_at > {now3} \
           AND NOT sl.closed AND sl.removed_at IS NULL AND sl.waiting = 0 \
           AND NOT EXISTS (SELECT 1 FROM {s}.pools p \
                           WHERE p.id = ANY(sl.pools) AND p.waiting > 0 \
                             AND {s}.pool_line_head(p.id, {now3}) IS NOT NULL) \
           AND sl.remaining + coalesce((SELECT sum(h.quantity) FROM {s}.holds h \
                                        WHERE h.slot_id = sl.id AND h.status = 'held' \
                                          AND h.expires_at <= {now3}), 0) >= $2 \
         ORDER BY array_position($1::int8[], sl.id) \
         LIMIT 1 FOR NO KEY UPDATE OF sl SKIP LOCKED"
    )
}

impl Run<'_> {
    /// Places an "any one of these" hold on this connection: in one transaction, the
    /// candidate [`pick`] locks, then the hold statements on it (which find its row locked
    /// by this transaction already); a hold created or replayed is answered once the commit
    /// succeeded. Anything else (no candidate free and unlocked, a pool short, the key on
    /// another candidate) goes to [`first_that_fits`].
    pub(crate) async fn create_hold_any(
        &mut self,
        request: AnyHoldRequest<'_>,
    ) -> Result<Decided<AnyHoldOutcome>, StoreError> {
        if !self.store.fast_paths {
            return first_that_fits(self, request).await;
        }
        let slots: Vec<i64> = request.candidates.iter().map(|s| s.get()).collect();
        let now = self.now_param(request.now);
        let statement = pick(self.store.schema());
        let store = self.store.clone();
        let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
        let picked: Option<(i64,)> = sqlx::query_as(AssertSqlSafe(statement))
            .bind(&slots)
            .bind(request.quantity)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        if let Some((slot,)) = picked {
            let on = request.on(SlotId(slot));
            let placed = Run {
                store,
                conn: Conn::Caller(&mut tx),
            }
            .create_hold(on)
            .await?;
            let answer = match placed.outcome {
                HoldOutcome::Created(hold) => Some(AnyHoldOutcome::Created(hold)),
                HoldOutcome::Replayed(hold) => Some(AnyHoldOutcome::Replayed(hold)),
                _ => None,
            };
            tx.commit().await.map_err(map_err)?;
            if let Some(answer) = answer {
                return Ok(Decided::new(placed.at, answer));
            }
        } else {
            tx.rollback().await.map_err(map_err)?;
        }
        first_that_fits(self, request).await
    }
}

#[slot_booking::async_trait]
impl PlaceOne for Run<'_> {
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.create_hold(request).await
    }
}
