//! Every error answer of the server, in one place: [`Problem`], an `application/problem+json`
//! body (RFC 9457) with a machine `code`, and the status and code of each failure — the
//! engine's [`BookingError`]s, the extractors' rejections and the server's own refusals
//! (request limits, authorization, routing). A handler returns `Result<_, Problem>` and
//! writes `?`; no other module picks an error status.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use slot_booking::{BookingError, CandidateRefused, LineShortfall};
use utoipa::ToSchema;

use crate::{MAX_BODY_BYTES, MAX_HEADER_BYTES, MAX_URI_BYTES};

/// Seconds a client is told to wait after a 503.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// An `application/problem+json` error response (RFC 9457) with a machine `code`.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    code: &'static str,
    detail: String,
    /// `lines_unavailable`'s extension member: every line that cannot be had.
    lines: Option<Vec<LineShortfall>>,
    /// `no_candidate_available`'s extension member: every candidate and why.
    candidates: Option<Vec<CandidateRefused>>,
}

/// The body of a [`Problem`], and the `Problem` schema of the OpenAPI document (every 4xx and
/// 5xx answer of a route is one).
#[derive(Serialize, ToSchema)]
#[schema(as = Problem)]
pub(crate) struct ProblemBody<'a> {
    /// Always `about:blank`: `code` says what happened.
    #[schema(value_type = String, example = "about:blank")]
    r#type: &'static str,
    /// The status code's reason phrase (`Not Found`, `Conflict`).
    #[schema(value_type = String, example = "Conflict")]
    title: &'a str,
    /// The response's status code.
    #[schema(example = 409)]
    status: u16,
    /// What went wrong, for a person.
    #[schema(value_type = String, example = "slot 1 is sold out")]
    detail: &'a str,
    /// What went wrong, for a program: a stable snake_case code (`sold_out`,
    /// `hold_not_found`, `invalid_body`, `not_found`, `method_not_allowed`, …; each
    /// response's description names the codes it can carry).
    #[schema(value_type = String, example = "sold_out")]
    code: &'a str,
    /// With `lines_unavailable` only: every line of the booking that cannot be had.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<crate::schemas::LineShortfall>, required = false)]
    lines: Option<&'a [LineShortfall]>,
    /// With `no_candidate_available` only: every candidate slot and why it could not be had.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<crate::schemas::CandidateRefused>, required = false)]
    candidates: Option<&'a [CandidateRefused]>,
}

impl Problem {
    /// A problem with the given status, code and human-readable detail.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Problem {
            status,
            code,
            detail: detail.into(),
            lines: None,
            candidates: None,
        }
    }

    /// A 400 problem with the given code and detail.
    pub(crate) fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// 404 `not_found`: no route, or a path that names nothing.
    pub(crate) fn not_found() -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }

    /// 404 with the resource's own code (`slot_not_found`, `hold_not_found`).
    pub(crate) fn resource_not_found(code: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::NOT_FOUND, code, detail)
    }

    /// 405 `method_not_allowed`: a route that exists without the request's method.
    pub(crate) fn method_not_allowed() -> Self {
        Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this method is not allowed on this resource",
        )
    }

    /// 401 `unauthorized`, with `WWW-Authenticate: Bearer`: an administration route without
    /// the token.
    pub(crate) fn unauthorized() -> Self {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send Authorization: Bearer <ADMIN_TOKEN>",
        )
    }

    /// 400 `invalid_query`: a query string the route cannot read.
    pub(crate) fn invalid_query(detail: impl Into<String>) -> Self {
        Problem::bad_request("invalid_query", detail)
    }

    /// 400 `invalid_body`: a body the route cannot read.
    pub(crate) fn invalid_body(detail: impl Into<String>) -> Self {
        Problem::bad_request("invalid_body", detail)
    }

    /// 400 `invalid_idempotency_key`.
    pub(crate) fn bad_key(detail: &str) -> Self {
        Problem::bad_request("invalid_idempotency_key", detail)
    }

    /// 400 `invalid_owner`.
    pub(crate) fn bad_owner(detail: &str) -> Self {
        Problem::bad_request("invalid_owner", detail)
    }

    /// 414 `uri_too_long`: a URI over [`MAX_URI_BYTES`].
    pub(crate) fn uri_too_long() -> Self {
        Problem::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("request URIs are limited to {MAX_URI_BYTES} bytes"),
        )
    }

    /// 431 `headers_too_large`: headers over [`MAX_HEADER_BYTES`] in all.
    pub(crate) fn headers_too_large() -> Self {
        Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("request headers are limited to {MAX_HEADER_BYTES} bytes in all"),
        )
    }

    /// 413 `payload_too_large`: a body over [`MAX_BODY_BYTES`].
    pub(crate) fn payload_too_large() -> Self {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
        )
    }

    /// 408 `body_timeout`: a body that did not arrive within `timeout`.
    pub(crate) fn body_timeout(timeout: Duration) -> Self {
        Problem::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the request body did not arrive within {} seconds",
                timeout.as_secs()
            ),
        )
    }

    /// 400 `invalid_last_event_id`: a `Last-Event-ID` that is not a change stream's id.
    pub(crate) fn invalid_last_event_id(detail: impl Into<String>) -> Self {
        Problem::bad_request("invalid_last_event_id", detail)
    }

    /// 503 `too_many_streams` with `Retry-After`: every change stream the server allows is
    /// open.
    pub(crate) fn too_many_streams() -> Self {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "the server has as many change streams open as it allows; try again later",
        )
    }

    /// 500 `internal_error`: a fault of the server's own (the details are in its log).
    pub(crate) fn internal(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", detail)
    }
}

/// A query string the route's parameters cannot be read from: `invalid_query`.
impl From<QueryRejection> for Problem {
    fn from(rejection: QueryRejection) -> Self {
        Problem::invalid_query(rejection.body_text())
    }
}

impl From<BookingError> for Problem {
    fn from(error: BookingError) -> Self {
        let status = match &error {
            BookingError::SlotNotFound { .. }
            | BookingError::HoldNotFound { .. }
            | BookingError::EntryNotFound { .. }
            | BookingError::PoolNotFound { .. } => StatusCode::NOT_FOUND,
            BookingError::SlotClosed { .. }
            | BookingError::SoldOut { .. }
            | BookingError::HoldCancelled { .. }
            | BookingError::HoldExpired { .. }
            | BookingError::CapacityTaken { .. }
            | BookingError::CapacityChanged { .. }
            | BookingError::SlotInUse { .. }
            | BookingError::LinesUnavailable { .. }
            | BookingError::NoCandidateAvailable { .. }
            | BookingError::PoolInUse { .. }
            | BookingError::PoolCapacityChanged { .. }
            | BookingError::TooManyPools { .. } => StatusCode::CONFLICT,
            BookingError::IdempotencyKeyReused { .. }
            | BookingError::QuantityExceedsCapacity { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            BookingError::InvalidIdempotencyKey(_)
            | BookingError::InvalidSlot(_)
            | BookingError::InvalidQuery
            | BookingError::InvalidQuantity { .. }
            | BookingError::InvalidLifetime { .. }
            | BookingError::InvalidOwner(_)
            | BookingError::InvalidPage { .. }
            | BookingError::InvalidBooking(_)
            | BookingError::InvalidCandidates(_)
            | BookingError::InvalidPool { .. } => StatusCode::BAD_REQUEST,
            // A transient failure is worth a retry (503 + Retry-After); anything else is a
            // fault a retry only repeats (500, no Retry-After).
            BookingError::Store(store) if store.is_transient() => {
                tracing::warn!(error = %store, "store unavailable");
                StatusCode::SERVICE_UNAVAILABLE
            }
            BookingError::Store(store) => {
                tracing::error!(error = %store, "store failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let detail = match &error {
            // Store details (addresses, SQL) stay in the log.
            BookingError::Store(store) if store.is_transient() => {
                "the booking store is unavailable; retry shortly".to_owned()
            }
            BookingError::Store(_) => "the booking store failed; see the server log".to_owned(),
            other => other.to_string(),
        };
        let mut problem = Problem::new(status, error.code(), detail);
        match error {
            BookingError::LinesUnavailable { lines } => problem.lines = Some(lines),
            BookingError::NoCandidateAvailable { candidates } => {
                problem.candidates = Some(candidates)
            }
            _ => {}
        }
        problem
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ProblemBody {
            r#type: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            code: self.code,
            lines: self.lines.as_deref(),
            candidates: self.candidates.as_deref(),
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (self.status, json).into_response();
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
