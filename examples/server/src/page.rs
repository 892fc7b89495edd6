//! `GET /`: a page to try the server from a browser (`page/index.html`, `page/page.css`,
//! `page/page.js`, built into the binary; no build step, nothing fetched from elsewhere).
//!
//! The page lists the coming slots with their free units, follows `GET /changes` to keep them
//! current, and places, confirms, renews and cancels holds through the same routes as any
//! client, showing each refusal by its problem `code`. It finds the routes from its own
//! address, so it works under `PATH_PREFIX` too (at `/api` and `/api/`, say).
//!
//! The document is put together once: the style and the script go inline into the HTML, and
//! the `Content-Security-Policy` allows exactly those two (by their SHA-256), requests to the
//! page's own origin and nothing else — no other script, style, frame or form target.

use std::sync::LazyLock;

use axum::body::Body;
use axum::http::header::{
    ALLOW, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::HeaderValue;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sha2::{Digest, Sha256};

use crate::state::PathPrefix;
use crate::Problem;

/// The HTML, with the markers the style and the script replace.
const HTML: &str = include_str!("../page/index.html");
/// The page's style sheet.
const CSS: &str = include_str!("../page/page.css");
/// The page's script.
const JS: &str = include_str!("../page/page.js");

/// Where the style goes in [`HTML`].
const STYLE_MARKER: &str = "<!-- page.css -->";
/// Where the script goes in [`HTML`].
const SCRIPT_MARKER: &str = "<!-- page.js -->";

/// The document and its `Content-Security-Policy`.
struct Page {
    html: String,
    policy: HeaderValue,
}

static PAGE: LazyLock<Page> = LazyLock::new(|| {
    let html = HTML
        .replacen(STYLE_MARKER, &format!("<style>{CSS}</style>"), 1)
        .replacen(SCRIPT_MARKER, &format!("<script>{JS}</script>"), 1);
    let policy = format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        source_hash(JS),
        source_hash(CSS),
    );
    Page {
        html,
        // Only ASCII goes into the policy: the hashes are base64.
        policy: HeaderValue::try_from(policy)
            .unwrap_or(HeaderValue::from_static("default-src 'none'")),
    }
});

/// What answers a request no route took: the page at `{PATH_PREFIX}/` (the nested routes have
/// it at `{PATH_PREFIX}` only, but the document's server and path, `/`, meet with the slash),
/// where another method is 405; anything else is 404 `not_found`.
pub(crate) async fn or_not_found(
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    method: Method,
    uri: Uri,
) -> Response {
    let at_page = !prefix.is_empty() && uri.path().strip_prefix(&*prefix) == Some("/");
    if !at_page {
        return Problem::not_found().into_response();
    }
    if method == Method::GET {
        index().await
    } else if method == Method::HEAD {
        let (parts, _) = index().await.into_parts();
        Response::from_parts(parts, Body::empty())
    } else {
        let mut refused = Problem::method_not_allowed().into_response();
        refused
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET,HEAD"));
        refused
    }
}

/// `GET /`: the page.
#[utoipa::path(
    get,
    path = "/",
    tag = "page",
    operation_id = "page",
    summary = "A page to try the API from a browser",
    description = "Plain HTML with its script and style inline (allowed by hash in its \
                   `Content-Security-Policy`; nothing is loaded from elsewhere). It lists the \
                   coming slots with their free units, follows `GET /changes` to keep them \
                   current, and places, confirms, renews and cancels holds through the routes \
                   of this document, which it finds from its own address (under \
                   `PATH_PREFIX` too).",
    responses(
        (status = 200, description = "The page.", body = String, content_type = "text/html; charset=utf-8"),
    )
)]
pub(crate) async fn index() -> Response {
    let page = &*PAGE;
    (
        [
            (
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            // Always asked again (a new server may serve a new page), but may be revalidated.
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (CONTENT_SECURITY_POLICY, page.policy.clone()),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        page.html.clone(),
    )
        .into_response()
}

/// A CSP source for an inline element whose content is `text`: `sha256-<base64 digest>`.
fn source_hash(text: &str) -> String {
    format!("sha256-{}", base64(&Sha256::digest(text.as_bytes())))
}

/// Standard base64 (RFC 4648, with padding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_as_rfc_4648_says() {
        // RFC 4648, section 10.
        for (input, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), encoded, "{input:?}");
        }
    }

    #[test]
    fn the_style_and_the_script_are_inline_and_allowed_by_hash() {
        assert_eq!(HTML.matches(STYLE_MARKER).count(), 1);
        assert_eq!(HTML.matches(SCRIPT_MARKER).count(), 1);
        let page = &*PAGE;
        assert!(page.html.contains(&format!("<style>{CSS}</style>")));
        assert!(page.html.contains(&format!("<script>{JS}</script>")));
        assert!(!page.html.contains(STYLE_MARKER) && !page.html.contains(SCRIPT_MARKER));
        let policy = page.policy.to_str().unwrap();
        assert!(policy.contains(&format!("script-src '{}'", source_hash(JS))));
        assert!(policy.contains(&format!("style-src '{}'", source_hash(CSS))));
        // Nothing is loaded from anywhere but the page's own origin.
        assert!(!page.html.contains("http://") && !page.html.contains("https://"));
    }
}
