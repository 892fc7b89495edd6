//! `GET /slots/availability`: the engine's cached listing, in pages of at most the server's
//! [`Config::availability_page_limit`](crate::Config::availability_page_limit), serialized
//! once per cached snapshot.
//!
//! * Without `limit` and `after` the body is the seed's `{"slots":[...]}`: every entry when
//!   there are no more than the page maximum, else the first page of them, with a
//!   `Link: <…>; rel="next"` header (RFC 8288) whose URL asks for the next one.
//! * With `limit` (1 to the maximum) or `after` (the `next_after` of the previous page: the
//!   last entry's `<microseconds>_<slot id>`, the operator's slot cursor), the body is
//!   `{"slots":[...],"next_after":cursor}`, `next_after` `null` on the last page; the `Link`
//!   header comes whenever entries remain.
//!
//! A page is a slice of the one listing the engine cached (the cursor is a position in the
//! listing's order, `starts_at` then `slot_id`, so a page after a reload starts where the
//! previous one ended): no page costs a store read the cache would not. Bodies are kept,
//! as bytes, for as long as the snapshot they were cut from is the engine's latest, so a
//! cache hit serializes nothing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LINK};
use axum::http::HeaderValue;
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};
use slot_booking::{AvailabilityEntry, AvailabilityQuery, AvailabilitySnapshot, SlotCursor};
use utoipa::{IntoParams, ToSchema};

use crate::params::{parse_cursor, parse_resource, parse_time, QueryParams};
use crate::{Engine, Problem};

/// Most bytes of bodies kept for one snapshot; past it the kept bodies are dropped and
/// collecting starts over (many different `from`/`to` windows, say).
pub const MAX_KEPT_BODY_BYTES: usize = 32 * 1024 * 1024;

/// What the route needs besides the engine: the page maximum and the bodies of the latest
/// snapshot.
pub(crate) struct Pages {
    max: u32,
    prefix: Arc<str>,
    bodies: Mutex<Kept>,
}

/// The serialized bodies of one snapshot, by the page they show.
#[derive(Default)]
struct Kept {
    snapshot: Option<Arc<AvailabilitySnapshot>>,
    bodies: HashMap<PageKey, Bytes>,
    bytes: usize,
}

/// A page of the kept snapshot: where its entries lie in the snapshot's memory (which the
/// kept `Arc` holds still, so an address names the same entries for as long as it is kept),
/// how many there are, and the body's shape. The `next_after` of a body is its last
/// entry's position when `more`, so the key decides every byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct PageKey {
    first: usize,
    len: usize,
    paged: bool,
    more: bool,
}

impl Pages {
    /// Pages of at most `max` entries, under the routes' `prefix` (for the `Link` URL).
    pub(crate) fn new(max: u32, prefix: &str) -> Pages {
        Pages {
            max,
            prefix: Arc::from(prefix),
            bodies: Mutex::new(Kept::default()),
        }
    }

    /// The body of `page` of `snapshot`, serialized now or kept from an earlier request.
    fn body(
        &self,
        snapshot: &Arc<AvailabilitySnapshot>,
        page: &[AvailabilityEntry],
        paged: bool,
        more: bool,
    ) -> Result<Bytes, Problem> {
        let key = PageKey {
            first: page.as_ptr() as usize,
            len: page.len(),
            paged,
            more,
        };
        {
            let kept = self.bodies.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(snapshot_kept) = &kept.snapshot {
                if Arc::ptr_eq(snapshot_kept, snapshot) {
                    if let Some(body) = kept.bodies.get(&key) {
                        return Ok(body.clone());
                    }
                }
            }
        }
        let body = Bytes::from(serialize(page, paged, more)?);
        let mut kept = self.bodies.lock().unwrap_or_else(PoisonError::into_inner);
        let same = kept
            .snapshot
            .as_ref()
            .is_some_and(|kept| Arc::ptr_eq(kept, snapshot));
        if !same {
            // Only a newer snapshot replaces the kept one: a request still holding an older
            // one (it read the cache just before a reload) does not bring it back.
            if kept
                .snapshot
                .as_ref()
                .is_some_and(|kept| kept.read_at > snapshot.read_at)
            {
                return Ok(body);
            }
            *kept = Kept {
                snapshot: Some(Arc::clone(snapshot)),
                ..Kept::default()
            };
        }
        if kept.bytes + body.len() > MAX_KEPT_BODY_BYTES {
            kept.bodies.clear();
            kept.bytes = 0;
        }
        if body.len() <= MAX_KEPT_BODY_BYTES {
            kept.bytes += body.len();
            kept.bodies.insert(key, body.clone());
        }
        Ok(body)
    }
}

/// The seed's listing body.
#[derive(Serialize)]
struct Listing<'a> {
    slots: &'a [AvailabilityEntry],
}

/// A page asked for with `limit` or `after`; its schema, `Availability`, is also the seed's
/// listing's (without `next_after`).
#[derive(Serialize, ToSchema)]
#[schema(as = Availability)]
struct Page<'a> {
    /// The open slots, by `starts_at` then `slot_id`.
    #[schema(value_type = Vec<crate::schemas::AvailabilityEntry>)]
    slots: &'a [AvailabilityEntry],
    /// Only when the request had `limit` or `after`: the `after` of the next page
    /// (`<microseconds>_<slot id>`), `null` on the last one.
    #[schema(value_type = Option<String>, required = false)]
    next_after: Option<SlotCursor>,
}

fn serialize(page: &[AvailabilityEntry], paged: bool, more: bool) -> Result<Vec<u8>, Problem> {
    let written = if paged {
        let next_after = page.last().filter(|_| more).map(cursor);
        serde_json::to_vec(&Page {
            slots: page,
            next_after,
        })
    } else {
        serde_json::to_vec(&Listing { slots: page })
    };
    written.map_err(|error| {
        tracing::error!(%error, "cannot serialize availability");
        Problem::internal("the listing could not be written; see the server log")
    })
}

/// The position of `entry` in the listing's order.
fn cursor(entry: &AvailabilityEntry) -> SlotCursor {
    SlotCursor {
        starts_at: entry.starts_at,
        slot_id: entry.slot_id,
    }
}

/// `?from=&to=&resource=&limit=&after=` (other parameters are ignored).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Params {
    /// Only slots starting at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<String>,
    /// Only slots starting before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<String>,
    /// Only this resource's slots (1–255 visible ASCII characters).
    resource: Option<String>,
    /// Entries in the page, 1 to `AVAILABILITY_PAGE_LIMIT` (asks for a page: the body adds
    /// `next_after`).
    #[param(minimum = 1)]
    limit: Option<u32>,
    /// The `next_after` of the previous page (asks for a page).
    after: Option<String>,
}

/// `GET /slots/availability`.
#[utoipa::path(
    get,
    path = "/slots/availability",
    tag = "availability",
    operation_id = "availability",
    summary = "The open slots and their free units",
    description = "The engine's cached listing of slots that have not started, are not closed \
                   and not removed, in pages of at most `AVAILABILITY_PAGE_LIMIT` entries.",
    params(Params),
    responses(
        (status = 200, description = "The listing, or a page of it.", body = Page,
            headers(
                ("Cache-Control" = String, description = "`max-age=N`: how long the listing is served from the cache."),
                ("Link" = String, description = "`<…>; rel=\"next\"`, when more entries remain: the next page's URL."),
            )),
        (status = 400, description = "`invalid_query` (a `from`, `to` or `after` that cannot be read, a `limit` that is not a number), `invalid_page` (a `limit` out of range), `invalid_resource`."),
    )
)]
pub(crate) async fn availability(
    State(engine): State<Engine>,
    Extension(pages): Extension<Arc<Pages>>,
    QueryParams(params): QueryParams<Params>,
) -> Result<Response, Problem> {
    let query = AvailabilityQuery {
        from: parse_time("from", params.from.as_deref())?,
        to: parse_time("to", params.to.as_deref())?,
        resource: params.resource.as_deref().map(parse_resource).transpose()?,
    };
    let limit = match params.limit {
        None => pages.max,
        Some(limit) if (1..=pages.max).contains(&limit) => limit,
        Some(limit) => {
            return Err(Problem::bad_request(
                "invalid_page",
                format!("`limit` must be between 1 and {}, got {limit}", pages.max),
            ))
        }
    };
    let after = parse_cursor(params.after.as_deref())?;
    let listing = engine.availability(query).await?;
    let entries = listing.entries();
    let start = after.map_or(0, |after| {
        entries.partition_point(|entry| cursor(entry) <= after)
    });
    let end = start
        .saturating_add(usize::try_from(limit).unwrap_or(usize::MAX))
        .min(entries.len());
    let page = &entries[start..end];
    let more = end < entries.len();
    let paged = params.limit.is_some() || after.is_some();
    let body = pages.body(listing.snapshot(), page, paged, more)?;

    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, max_age(listing.fresh_for().as_secs()));
    if let Some(last) = page.last().filter(|_| more) {
        let link = next_link(&pages.prefix, &params, cursor(last));
        // Every byte of the link is percent-encoded ASCII: it always makes a header value.
        if let Ok(link) = HeaderValue::try_from(link) {
            headers.insert(LINK, link);
        }
    }
    Ok(response)
}

/// `max-age=<seconds>`.
fn max_age(seconds: u64) -> HeaderValue {
    let mut value = String::with_capacity(16);
    let _ = write!(value, "max-age={seconds}");
    HeaderValue::try_from(value).unwrap_or(HeaderValue::from_static("max-age=0"))
}

/// `<{prefix}/slots/availability?from=…&to=…&resource=…&limit=…&after=…>; rel="next"`, with
/// the request's own narrowing and limit.
fn next_link(prefix: &str, params: &Params, after: SlotCursor) -> String {
    let mut url = format!("<{prefix}/slots/availability?");
    for (name, value) in [
        ("from", params.from.as_deref()),
        ("to", params.to.as_deref()),
        ("resource", params.resource.as_deref()),
    ] {
        if let Some(value) = value {
            url.push_str(name);
            url.push('=');
            percent_encode(value, &mut url);
            url.push('&');
        }
    }
    if let Some(limit) = params.limit {
        let _ = write!(url, "limit={limit}&");
    }
    let _ = write!(url, "after={after}>; rel=\"next\"");
    url
}

/// Appends `value` with every byte but RFC 3986's unreserved characters percent-encoded.
fn percent_encode(value: &str, out: &mut String) {
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::percent_encode;

    #[test]
    fn only_unreserved_characters_stay_as_they_are() {
        let mut out = String::new();
        percent_encode("2030-01-01T10:00:00+02:00 a/b~c_d.e", &mut out);
        assert_eq!(out, "2030-01-01T10%3A00%3A00%2B02%3A00%20a%2Fb~c_d.e");
    }
}
