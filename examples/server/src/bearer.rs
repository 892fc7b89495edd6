//! The gate of the administration routes: `Authorization: Bearer <ADMIN_TOKEN>`, checked by
//! a layer over them (see [`Documented::behind_token`](crate::openapi::Documented::behind_token)).

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::AdminToken;
use crate::Problem;

/// Lets a request through only with `Authorization: Bearer <token>` (scheme in any case);
/// anything else is 401 `unauthorized` with `WWW-Authenticate: Bearer`.
pub(crate) async fn require_token(
    State(token): State<AdminToken>,
    request: Request,
    next: Next,
) -> Response {
    if presented_token(request.headers()).is_some_and(|presented| token.matches(presented)) {
        next.run(request).await
    } else {
        Problem::unauthorized().into_response()
    }
}

/// The token of the one `Authorization: Bearer <token>` header, if there is exactly one.
fn presented_token(headers: &HeaderMap) -> Option<&[u8]> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let value = value.as_bytes();
    let (scheme, token) = value.split_at_checked(b"Bearer ".len())?;
    scheme
        .eq_ignore_ascii_case(b"Bearer ")
        .then(|| token.trim_ascii_start())
}
