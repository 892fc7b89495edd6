//! The server's OpenAPI 3.1 document, `GET /openapi.json`, made from the code that serves it.
//!
//! Every route is registered through [`Documented`], which takes only `utoipa_axum::routes!`
//! groups of handlers annotated with `#[utoipa::path]`: the annotation's path is the route's
//! path, written once, and a handler without one cannot be registered. So the document names
//! exactly the routes the router serves, administration included only when `ADMIN_TOKEN` mounts
//! it ([`Documented::behind_token`] also marks those operations with the bearer scheme and
//! their 401). [`finish`] then adds what the code around the routes decides:
//!
//! * `servers`: the `PATH_PREFIX` (or `/`), so that a path read here is called at prefix + path;
//! * `application/problem+json` with the `Problem` schema on every 4xx and 5xx answer (the one
//!   shape [`Problem`](crate::Problem) writes);
//! * the answers of what runs before any route, on every operation: 400 `invalid_body`, 408
//!   `body_timeout`, 413 `payload_too_large`, 414 `uri_too_long`, 431 `headers_too_large`;
//!   and on every operation that reads the store, 500 and 503;
//! * the `Retry-After` header on every 503, shared or an operation's own (`/changes`'
//!   `too_many_streams`), as [`Problem`](crate::Problem) sends it.
//!
//! A route that exists without the request's method answers 405 `method_not_allowed`, and a
//! path no route has 404 `not_found`: neither is an operation, so neither is in the document.
//! `HEAD` is answered wherever `GET` is (as HTTP asks), without a body; it is not listed.

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::response::{Response as ResponseDoc, ResponseBuilder};
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Components, Content, Header, OpenApi, RefOr, Required, Server, Tag};
use utoipa::OpenApi as _;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter, UtoipaMethodRouterExt};

use crate::config::AdminToken;
use crate::problem::ProblemBody;
use crate::state::Engine;
use crate::Problem;

/// The media type of every error answer.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// The name of the administration routes' security scheme.
pub(crate) const ADMIN_SCHEME: &str = "admin_token";

/// Paths whose handlers never read the store: no 500 or 503 from it.
const STORELESS: &[&str] = &["/metrics", "/openapi.json", "/"];

/// The document's frame: its info (from the crate's manifest) and the `Problem` schema.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "slot_booking example server",
        description = "Holds on time slots of limited capacity: availability, holds (the seed's \
                       four routes and their extensions), bookings of several lines, waitlists, \
                       administration (with `ADMIN_TOKEN`) and metrics. Errors are \
                       `application/problem+json` with a machine `code`."
    ),
    components(schemas(ProblemBody))
)]
struct Frame;

/// The groups the operations are listed under, with what each is about.
const TAGS: &[(&str, &str)] = &[
    (
        "availability",
        "What can be held: the cached listing of open slots.",
    ),
    (
        "holds",
        "Units of a slot held until they expire, then confirmed or cancelled. A hold answers \
         in six fields.",
    ),
    (
        "bookings",
        "Several lines held, confirmed, renewed and cancelled together.",
    ),
    (
        "waitlist",
        "A place in a slot's line; an entry offered its units is a hold of the same number.",
    ),
    (
        "administration",
        "Slots and pools, only when `ADMIN_TOKEN` is set, each route behind \
         `Authorization: Bearer <ADMIN_TOKEN>`.",
    ),
    (
        "changes",
        "Every committed change as it happens (Server-Sent Events), resuming after \
         `Last-Event-ID`.",
    ),
    ("observability", "The engine's metrics."),
    ("document", "This document."),
    (
        "page",
        "A page to try the API from a browser: the coming slots kept current from `/changes`, \
         and holds to place, confirm, renew and cancel.",
    ),
];

/// 405 `method_not_allowed` for a route that exists without the request's method.
async fn method_not_allowed() -> Problem {
    Problem::method_not_allowed()
}

/// Routes that exist only with their documentation: the one way the server registers a route.
pub(crate) struct Documented(OpenApiRouter<Engine>);

impl Documented {
    /// No routes yet, and the document's frame.
    pub(crate) fn new() -> Self {
        Documented(OpenApiRouter::with_openapi(Frame::openapi()))
    }

    /// No routes and an empty document, for a group of routes to [`merge`](Self::merge).
    pub(crate) fn group() -> Self {
        Documented(OpenApiRouter::default())
    }

    /// The operations of one path: `routes!(handler, …)` of handlers whose `#[utoipa::path]`
    /// all name that path (one group per path: `routes!` registers each of its handlers on each
    /// of its paths). Another method on the path answers 405 `method_not_allowed`.
    ///
    /// # Panics
    ///
    /// If the handlers name more than one path: a mistake in the server's code, found when the
    /// router is built.
    pub(crate) fn path(self, operations: UtoipaMethodRouter<Engine>) -> Self {
        let paths: Vec<&String> = operations.1.paths.keys().collect();
        assert_eq!(paths.len(), 1, "one path per routes! group, got {paths:?}");
        let operations = operations.map(|methods| methods.fallback(method_not_allowed));
        Documented(self.0.routes(operations))
    }

    /// These routes and `other`'s, documents merged.
    pub(crate) fn merge(self, other: Documented) -> Self {
        Documented(self.0.merge(other.0))
    }

    /// Every route so far behind `Authorization: Bearer <token>`, its 405s included (so that
    /// nobody learns without the token that the routes exist); each of their operations names
    /// the bearer scheme and its 401 `unauthorized` (with `WWW-Authenticate: Bearer`).
    pub(crate) fn behind_token(self, token: AdminToken) -> Self {
        let mut routes = self.0.layer(middleware::from_fn_with_state(
            token,
            crate::bearer::require_token,
        ));
        let api = routes.get_openapi_mut();
        for operation in operations(api) {
            operation.security = Some(vec![SecurityRequirement::new(
                ADMIN_SCHEME,
                Vec::<String>::new(),
            )]);
            let unauthorized = ResponseBuilder::new()
                .description(
                    "`unauthorized`: no `Authorization: Bearer <ADMIN_TOKEN>`, or another token.",
                )
                .header(
                    "WWW-Authenticate",
                    described(Header::default(), "`Bearer`."),
                )
                .build();
            operation
                .responses
                .responses
                .insert("401".to_owned(), RefOr::T(unauthorized));
        }
        let bearer = Http::builder()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("The server's `ADMIN_TOKEN`."))
            .build();
        api.components
            .get_or_insert_with(Components::new)
            .add_security_scheme(ADMIN_SCHEME, SecurityScheme::Http(bearer));
        Documented(routes)
    }

    /// The router and its document, as registered (see [`finish`]).
    pub(crate) fn split(self) -> (Router<Engine>, OpenApi) {
        self.0.split_for_parts()
    }
}

/// `header` with `description`.
fn described(mut header: Header, description: &str) -> Header {
    header.description = Some(description.to_owned());
    header
}

/// Every operation of `api`.
fn operations(api: &mut OpenApi) -> impl Iterator<Item = &mut Operation> {
    api.paths.paths.values_mut().flat_map(path_operations)
}

/// Every operation of one path.
fn path_operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// The answers every route can get from what runs before it, by status, with the name of the
/// reusable response in `components.responses` and its description.
const FRONT: &[(&str, &str, &str)] = &[
    (
        "400",
        "InvalidBody",
        "`invalid_body`: a body that could not be read (a broken chunked encoding).",
    ),
    (
        "408",
        "BodyTimeout",
        "`body_timeout`: the body did not arrive within `BODY_TIMEOUT_SECONDS`.",
    ),
    (
        "413",
        "PayloadTooLarge",
        "`payload_too_large`: a body over 16 KiB.",
    ),
    ("414", "UriTooLong", "`uri_too_long`: a URI over 8 KiB."),
    (
        "431",
        "HeadersTooLarge",
        "`headers_too_large`: headers over 16 KiB in all.",
    ),
];

/// The answers of a route that reads the store.
const STORE: &[(&str, &str, &str)] = &[
    (
        "500",
        "StoreFailed",
        "`store_failed`: a permanent store failure (a broken schema, a bug), or another fault \
         of the server's own; retrying repeats it. The details are in the server's log.",
    ),
    (
        "503",
        "StoreUnavailable",
        "`store_unavailable`: a transient store failure (connection lost, pool exhausted, \
         database busy); retry after `Retry-After` seconds.",
    ),
];

/// `api` as served under `prefix` (see the module docs).
pub(crate) fn finish(mut api: OpenApi, prefix: &str) -> OpenApi {
    let root = if prefix.is_empty() { "/" } else { prefix };
    let mut server = Server::new(root);
    server.description = Some("Where this server mounts its routes (`PATH_PREFIX`).".into());
    api.servers = Some(vec![server]);

    let components = api.components.get_or_insert_with(Components::new);
    for (_, name, description) in FRONT.iter().chain(STORE) {
        let mut response = problem_response(ResponseDoc::new(*description));
        if *name == "StoreUnavailable" {
            retry_after(&mut response);
        }
        components
            .responses
            .insert((*name).to_owned(), RefOr::T(response));
    }

    let mut used_tags = Vec::new();
    for (path, item) in api.paths.paths.iter_mut() {
        let reads_store = !STORELESS.contains(&path.as_str());
        for operation in path_operations(item) {
            used_tags.extend(operation.tags.iter().flatten().cloned());
            for (status, response) in operation.responses.responses.iter_mut() {
                let error = status.starts_with('4') || status.starts_with('5');
                if let (true, RefOr::T(response)) = (error, response) {
                    *response = problem_response(std::mem::take(response));
                }
            }
            if let Some(body) = operation.request_body.as_mut() {
                optional_body(body);
            }
            let responses = &mut operation.responses.responses;
            // Every 503 says when to come back, its own as well as the shared one.
            if let Some(RefOr::T(unavailable)) = responses.get_mut("503") {
                retry_after(unavailable);
            }
            let shared = FRONT.iter().chain(if reads_store { STORE } else { &[] });
            for (status, name, description) in shared {
                match responses.get_mut(*status) {
                    Some(RefOr::T(own)) => {
                        own.description = format!("{} Also {description}", own.description);
                    }
                    Some(RefOr::Ref(_)) => {}
                    None => {
                        let reference = format!("#/components/responses/{name}");
                        responses.insert(
                            (*status).to_owned(),
                            RefOr::Ref(utoipa::openapi::Ref::new(reference)),
                        );
                    }
                }
            }
        }
    }

    api.tags = Some(
        TAGS.iter()
            .filter(|(name, _)| used_tags.iter().any(|used| used == name))
            .map(|(name, description)| {
                let mut tag = Tag::new(*name);
                tag.description = Some((*description).to_owned());
                tag
            })
            .collect(),
    );
    api
}

/// `response` (a 503) with its `Retry-After` header, which [`Problem`] writes on every 503.
fn retry_after(response: &mut ResponseDoc) {
    let seconds = utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .build();
    let description = format!(
        "Seconds to wait before trying again: {}. Always sent with a 503.",
        crate::RETRY_AFTER_SECONDS
    );
    response.headers.insert(
        "Retry-After".to_owned(),
        described(Header::new(seconds), &description),
    );
}

/// A body that may be left out (`request_body(content = Option<T>)`): the schema is `T`'s, the
/// body not required. (Its JSON `null` is not `T`: the routes refuse it as `invalid_body`.)
fn optional_body(body: &mut RequestBody) {
    if matches!(body.required, Some(Required::True)) {
        return;
    }
    for content in body.content.values_mut() {
        let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema else {
            continue;
        };
        let mut kept = one_of.items.iter().filter(|item| !is_null(item));
        if let (Some(only), None, 2) = (kept.next(), kept.next(), one_of.items.len()) {
            content.schema = Some(only.clone());
        }
    }
}

/// Whether `schema` is `{"type": "null"}`.
fn is_null(schema: &RefOr<Schema>) -> bool {
    matches!(schema, RefOr::T(Schema::Object(object))
        if object.schema_type == SchemaType::Type(Type::Null))
}

/// The error answer `response` with the `Problem` schema as its `application/problem+json`
/// content, unless it has a content of its own.
fn problem_response(mut response: ResponseDoc) -> ResponseDoc {
    if response.content.is_empty() {
        let schema = RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Problem"));
        response
            .content
            .insert(PROBLEM_JSON.to_owned(), Content::new(Some(schema)));
    }
    response
}

/// The document as served, written once when the router is built.
#[derive(Clone)]
pub(crate) struct DocumentJson(Option<Bytes>);

impl DocumentJson {
    /// `api` in JSON, or nothing (logged) when it cannot be written.
    pub(crate) fn new(api: &OpenApi) -> Self {
        match serde_json::to_vec(api) {
            Ok(json) => DocumentJson(Some(Bytes::from(json))),
            Err(error) => {
                tracing::error!(%error, "cannot write the OpenAPI document");
                DocumentJson(None)
            }
        }
    }
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "document",
    operation_id = "openapi",
    summary = "This document",
    description = "The OpenAPI 3.1 document of exactly the routes this server serves \
                   (administration only when `ADMIN_TOKEN` is set); its `servers` entry is the \
                   `PATH_PREFIX` the paths are mounted under.",
    responses(
        (status = 200, description = "The document.", content_type = "application/json", body = Object),
        (status = 500, description = "`internal_error`: the document could not be written (see the server's log)."),
    )
)]
pub(crate) async fn document(Extension(document): Extension<DocumentJson>) -> Response {
    match document.0 {
        Some(json) => ([(CONTENT_TYPE, "application/json")], json).into_response(),
        None => Problem::internal("the OpenAPI document could not be written; see the server log")
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use utoipa_axum::routes;

    use super::Documented;
    use crate::holds;

    #[test]
    #[should_panic(expected = "one path per routes! group")]
    fn a_group_of_two_paths_is_refused() {
        // `routes!` would register both handlers on both paths.
        let _ = Documented::group().path(routes!(holds::get_hold, holds::confirm));
    }
}
