//! Query strings: the [`QueryParams`] extractor (an unreadable query is `invalid_query`) and
//! the values the routes' parameters share: times, resources, cursors and pages of holds.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use slot_booking::model::rfc3339;
use slot_booking::{HoldId, PageRequest, ResourceId, SlotCursor, Timestamp};
use utoipa::IntoParams;

use crate::Problem;

/// The route's parameters `T` from the query string; one it cannot read is 400
/// `invalid_query`.
pub(crate) struct QueryParams<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let Query(params) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(QueryParams(params))
    }
}

/// `?after=&limit=` of a page of holds (another parameter is `invalid_query`).
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageParams {
    /// The `next_after` of the previous page: holds after this id.
    #[param(value_type = Option<i64>)]
    after: Option<String>,
    /// Holds in the page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

impl PageParams {
    /// A page of holds by id (`limit` checked by the engine).
    pub(crate) fn page(self) -> Result<PageRequest, Problem> {
        let after = self
            .after
            .map(|raw| {
                raw.parse::<HoldId>().map_err(|_| {
                    Problem::invalid_query(format!("`after` must be a hold id, got {raw:?}"))
                })
            })
            .transpose()?;
        Ok(PageRequest {
            after,
            limit: self.limit.unwrap_or(slot_booking::model::DEFAULT_PAGE_SIZE),
        })
    }
}

/// A `resource` parameter; not a resource id is `invalid_resource`.
pub(crate) fn parse_resource(raw: &str) -> Result<ResourceId, Problem> {
    ResourceId::new(raw)
        .map_err(|error| Problem::bad_request("invalid_resource", error.to_string()))
}

/// The time parameter `name`, if given; not RFC 3339 is `invalid_query`.
pub(crate) fn parse_time(name: &str, raw: Option<&str>) -> Result<Option<Timestamp>, Problem> {
    raw.map(|raw| {
        rfc3339::parse(raw).map_err(|_| {
            Problem::invalid_query(format!(
                "`{name}` must be an RFC 3339 timestamp, got {raw:?}"
            ))
        })
    })
    .transpose()
}

/// An `after` slot cursor (`<microseconds>_<slot id>`), if given; else `invalid_query`.
pub(crate) fn parse_cursor(raw: Option<&str>) -> Result<Option<SlotCursor>, Problem> {
    raw.map(str::parse::<SlotCursor>)
        .transpose()
        .map_err(|error| Problem::invalid_query(format!("`after`: {error}")))
}
