//! One change of all the lines of a booking, below the writes that make it: a hold's confirm,
//! cancel or renewal changes every line of its booking, on the store's connections and the
//! caller's alike.

use slot_booking::store::HoldChange;
use slot_booking::{Hold, StoreError, Timestamp};
use sqlx::sqlite::SqliteConnection;

use crate::map_err;
use crate::rows::hold_from_row;
use crate::serve::{serve_lines, Lines};
use crate::sql::Statements;
use crate::units::{give_back, log_hold, Query};

/// Runs `update`, the statement of `change` (the core's rule) of every line of a booking (it
/// returns every line it changed, all of them or none), and for each line changed, by slot id,
/// gives its units back (when the change does) and appends the change's event at `now`; then a cancel serves, by slot id, the line of each slot that got units back while
/// anyone waits in it and the lines of its pools, in the same unit of work (its offers logged
/// after the cancel's events).
/// The lines changed, by slot id: none when the change did not apply.
pub(crate) async fn change_lines(
    sql: &Statements,
    conn: &mut SqliteConnection,
    update: Query<'_>,
    change: HoldChange<'_>,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let rows = update.fetch_all(&mut *conn).await.map_err(map_err)?;
    let mut lines = rows
        .iter()
        .map(hold_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    lines.sort_by_key(|hold| (hold.slot_id, hold.hold_id));
    let mut lined = Lines::new();
    for hold in &lines {
        if change.gives_back()
            && give_back(sql, conn, i64::from(hold.quantity), hold.slot_id.get()).await?
        {
            lined.slot_and_pools(sql, conn, hold.slot_id).await?;
        }
        log_hold(sql, conn, change.event(), hold, now).await?;
    }
    if !lined.is_empty() {
        serve_lines(sql, conn, &lined, now).await?;
    }
    Ok(lines)
}
