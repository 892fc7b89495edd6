//! The OpenAPI document against the router that serves it (`oneshot`, an in-memory store): the
//! document is OpenAPI 3.1 with every `$ref` resolving; every operation it names reaches its
//! handler, every other method on its paths is 405, and the paths it does not name are the
//! router's unknown-route 404; it follows `PATH_PREFIX` and `ADMIN_TOKEN`; and the server's
//! code registers routes only with their documentation.
//!
//! The responses of the other test binaries are checked against the same document
//! (`tests/common/contract.rs`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request};
use axum::Router;
use common::contract::{Contract, Exchange};
use http_body_util::BodyExt;
use serde_json::Value;
use slot_booking::{BookingEngine, MemoryStore};
use slot_booking_server::{router_with_config, AdminToken, Config, Engine, ServerStore};
use tower::ServiceExt;

const TOKEN: &str = "test-admin-token-0123456789";

/// Every method a request can have here; `CONNECT` is not routed by axum at all.
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
];

fn engine() -> Engine {
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    BookingEngine::new(store)
}

/// The configurations the tests cover: with and without administration, at the root and
/// under a prefix.
fn configs() -> Vec<Config> {
    let mut configs = Vec::new();
    for prefix in ["", "/api/v1"] {
        for admin in [false, true] {
            configs.push(Config {
                path_prefix: prefix.to_owned(),
                admin_token: admin.then(|| AdminToken::new(TOKEN).unwrap()),
                ..Config::default()
            });
        }
    }
    configs
}

/// One answer: status, headers, body.
struct Answer {
    status: u16,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn content_type(&self) -> Option<&str> {
        self.headers
            .get("content-type")
            .map(|value| value.to_str().unwrap())
    }
}

async fn call(router: &Router, method: &str, uri: &str, token: bool) -> Answer {
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri);
    if token {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    // A stream of events does not end: its head is the answer.
    let stream = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let body = if stream {
        Vec::new()
    } else {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        body.to_vec()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// The router of `config` and the document it serves.
async fn served(config: &Config) -> (Router, Value) {
    let router = router_with_config(engine(), config);
    let answer = call(
        &router,
        "GET",
        &format!("{}/openapi.json", config.path_prefix),
        false,
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type(), Some("application/json"));
    (router, answer.json())
}

/// Every documented operation: path template, method (upper case), whether it is behind
/// the token.
fn operations(document: &Value) -> Vec<(String, String, bool)> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if METHODS.contains(&method.to_ascii_uppercase().as_str()) {
                let secured = operation.get("security").is_some();
                operations.push((path.clone(), method.to_ascii_uppercase(), secured));
            }
        }
    }
    operations
}

/// `template` with every `{name}` replaced by an id nothing has.
fn placeholder(template: &str) -> String {
    let mut path = String::new();
    for segment in template.split('/').skip(1) {
        path.push('/');
        if segment.starts_with('{') {
            path.push_str("987654");
        } else {
            path.push_str(segment);
        }
    }
    path
}

/// Every string value of key `key` anywhere in `value`.
fn strings_of<'v>(value: &'v Value, key: &str, found: &mut Vec<&'v str>) {
    match value {
        Value::Object(object) => {
            for (name, inner) in object {
                if name == key {
                    if let Value::String(text) = inner {
                        found.push(text);
                    }
                }
                strings_of(inner, key, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| strings_of(item, key, found)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_openapi_3_1_with_every_ref_resolving() {
    for config in configs() {
        let (_, document) = served(&config).await;
        let context = format!("prefix {:?}", config.path_prefix);
        assert!(
            document["openapi"].as_str().unwrap().starts_with("3.1."),
            "{context}"
        );
        assert!(document["info"]["title"].is_string(), "{context}");
        assert!(document["info"]["version"].is_string(), "{context}");
        let top: BTreeSet<&str> = document
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let allowed = [
            "openapi",
            "info",
            "jsonSchemaDialect",
            "servers",
            "paths",
            "webhooks",
            "components",
            "security",
            "tags",
            "externalDocs",
        ];
        assert!(top.iter().all(|key| allowed.contains(key)), "{top:?}");

        // The same document `slot_booking_server::openapi` builds.
        let built = serde_json::to_value(slot_booking_server::openapi(&config)).unwrap();
        assert_eq!(document, built, "{context}");

        let mut references = Vec::new();
        strings_of(&document, "$ref", &mut references);
        assert!(!references.is_empty());
        for reference in references {
            let pointer = reference
                .strip_prefix('#')
                .unwrap_or_else(|| panic!("{reference}: only references inside the document"));
            assert!(
                document.pointer(pointer).is_some(),
                "{reference} resolves to nothing"
            );
        }

        let mut operation_ids = BTreeSet::new();
        let tags: BTreeSet<&str> = document["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tag| tag["name"].as_str().unwrap())
            .collect();
        for (path, item) in document["paths"].as_object().unwrap() {
            assert!(path.starts_with('/'), "{path}");
            let names: BTreeSet<String> = path
                .split('/')
                .filter(|s| s.starts_with('{'))
                .map(|s| s.trim_matches(|c| c == '{' || c == '}').to_owned())
                .collect();
            for (method, operation) in item.as_object().unwrap() {
                assert!(
                    METHODS.contains(&method.to_ascii_uppercase().as_str()),
                    "{method}"
                );
                let id = operation["operationId"].as_str().unwrap();
                assert!(
                    operation_ids.insert(id.to_owned()),
                    "operationId {id} twice"
                );
                for tag in operation["tags"].as_array().unwrap() {
                    assert!(
                        tags.contains(tag.as_str().unwrap()),
                        "{tag} is not declared"
                    );
                }
                let parameters = operation["parameters"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let in_path: BTreeSet<String> = parameters
                    .iter()
                    .filter(|p| p["in"] == "path")
                    .map(|p| {
                        assert_eq!(p["required"], true, "{path}: a path parameter is required");
                        p["name"].as_str().unwrap().to_owned()
                    })
                    .collect();
                assert_eq!(in_path, names, "{method} {path}: the path's parameters");
                let mut seen = BTreeSet::new();
                for parameter in &parameters {
                    let place = parameter["in"].as_str().unwrap();
                    assert!(["path", "query", "header", "cookie"].contains(&place));
                    assert!(parameter["schema"].is_object(), "{parameter}");
                    let name = parameter["name"].as_str().unwrap().to_ascii_lowercase();
                    assert!(
                        seen.insert((place, name)),
                        "{method} {path}: {parameter} twice"
                    );
                }
                let responses = operation["responses"].as_object().unwrap();
                assert!(!responses.is_empty(), "{method} {path}");
                for (status, response) in responses {
                    let valid = status == "default"
                        || (status.len() == 3
                            && (status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s))
                                || status.ends_with("XX")));
                    assert!(valid, "{method} {path}: status {status}");
                    let response = match response["$ref"].as_str() {
                        Some(reference) => document.pointer(&reference[1..]).unwrap(),
                        None => response,
                    };
                    assert!(
                        response["description"].is_string(),
                        "{method} {path} {status}"
                    );
                }
                if let Some(requirements) = operation["security"].as_array() {
                    for requirement in requirements {
                        for scheme in requirement.as_object().unwrap().keys() {
                            let declared = &document["components"]["securitySchemes"][scheme];
                            assert!(declared.is_object(), "security scheme {scheme}");
                        }
                    }
                }
            }
        }

        // Every schema is a valid JSON Schema (draft 2020-12, OpenAPI 3.1's dialect).
        for (name, schema) in document["components"]["schemas"].as_object().unwrap() {
            if let Err(error) = jsonschema::draft202012::meta::validate(schema) {
                panic!("schema {name} is not a valid JSON Schema: {error}");
            }
        }
    }
}

#[tokio::test]
async fn every_documented_operation_reaches_its_handler() {
    for config in configs() {
        let (router, document) = served(&config).await;
        let contract = Contract::of(&serde_json::to_vec(&document).unwrap());
        let prefix = &config.path_prefix;
        let unknown = call(&router, "GET", &format!("{prefix}/no/such/route"), false).await;
        assert_eq!(
            (unknown.status, unknown.json()["code"].as_str()),
            (404, Some("not_found"))
        );
        let operations = operations(&document);
        let expected = if config.admin_token.is_some() { 33 } else { 20 };
        assert_eq!(operations.len(), expected);
        for (template, method, secured) in operations {
            let uri = format!("{prefix}{}", placeholder(&template));
            let answer = call(&router, &method, &uri, secured).await;
            let context = format!("{method} {uri}: {} {}", answer.status, answer.json());
            // Not the router's answer to a path it does not serve, nor to a method it does not
            // serve there: the handler answered.
            assert!(
                (answer.status, &answer.body) != (unknown.status, &unknown.body),
                "{context}"
            );
            assert_ne!(answer.status, 405, "{context}");
            let exchange = Exchange {
                method: &method,
                path: &uri,
                status: answer.status,
                content_type: answer.content_type(),
                headers: &answer.headers,
                body: &answer.body,
            };
            contract
                .check(&exchange)
                .unwrap_or_else(|drift| panic!("{drift}"));
            if secured {
                let without = call(&router, &method, &uri, false).await;
                assert_eq!(without.status, 401, "{method} {uri} without the token");
            }
            if method == "GET" {
                let head = call(&router, "HEAD", &uri, secured).await;
                assert_eq!(head.status, answer.status, "HEAD {uri}");
                assert!(head.body.is_empty(), "HEAD {uri}");
            }
        }
    }
}

#[tokio::test]
async fn other_methods_on_documented_paths_are_405() {
    for config in configs() {
        let (router, document) = served(&config).await;
        let mut methods: BTreeMap<String, (BTreeSet<String>, bool)> = BTreeMap::new();
        for (template, method, secured) in operations(&document) {
            let entry = methods.entry(template).or_default();
            entry.0.insert(method);
            entry.1 |= secured;
        }
        for (template, (documented, secured)) in methods {
            let uri = format!("{}{}", config.path_prefix, placeholder(&template));
            let mut allowed = documented.clone();
            if allowed.contains("GET") {
                allowed.insert("HEAD".to_owned());
            }
            for method in METHODS.iter().filter(|m| !allowed.contains(**m)) {
                let answer = call(&router, method, &uri, secured).await;
                let context = format!("{method} {uri}: {}", answer.json());
                assert_eq!(answer.status, 405, "{context}");
                if *method != "HEAD" {
                    assert_eq!(answer.json()["code"], "method_not_allowed", "{context}");
                }
                let allow: BTreeSet<String> = answer.headers["allow"]
                    .to_str()
                    .unwrap()
                    .split(',')
                    .map(|m| m.trim().to_owned())
                    .collect();
                assert_eq!(allow, allowed, "{context}: Allow");
                if secured {
                    let without = call(&router, method, &uri, false).await;
                    assert_eq!(without.status, 401, "{method} {uri} without the token");
                }
            }
        }
    }
}

#[tokio::test]
async fn paths_the_document_does_not_name_are_the_unknown_route() {
    for config in configs() {
        let (router, document) = served(&config).await;
        let prefix = &config.path_prefix;
        let unknown = call(&router, "GET", &format!("{prefix}/no/such/route"), false).await;
        let templates: BTreeSet<String> = operations(&document).into_iter().map(|o| o.0).collect();
        let mut undocumented = vec!["/".to_owned(), "/admin".to_owned(), "/slots".to_owned()];
        for template in &templates {
            let path = placeholder(template);
            undocumented.push(format!("{path}/"));
            undocumented.push(format!("{path}/more"));
        }
        if config.admin_token.is_none() {
            let with_admin = Config {
                admin_token: Some(AdminToken::new(TOKEN).unwrap()),
                ..config.clone()
            };
            let (_, full) = served(&with_admin).await;
            for (template, _, _) in operations(&full) {
                if !templates.contains(&template) {
                    undocumented.push(placeholder(&template));
                }
            }
        }
        for path in undocumented.into_iter().filter(|path| {
            let segments = common::contract::segments(path);
            !templates
                .iter()
                .any(|t| common::contract::matches(&common::contract::segments(t), &segments))
        }) {
            for method in METHODS {
                let answer = call(&router, method, &format!("{prefix}{path}"), true).await;
                assert_eq!(answer.status, 404, "{method} {prefix}{path}");
                if method != "HEAD" {
                    assert_eq!(answer.body, unknown.body, "{method} {prefix}{path}");
                }
            }
        }
        if !prefix.is_empty() {
            // Nothing outside the prefix, the document included.
            for path in ["/openapi.json", "/slots/availability", "/metrics"] {
                assert_eq!(call(&router, "GET", path, true).await.status, 404, "{path}");
            }
        }
    }
}

#[tokio::test]
async fn the_document_follows_the_prefix_and_the_admin_token() {
    for config in configs() {
        let (_, document) = served(&config).await;
        let expected_server = if config.path_prefix.is_empty() {
            "/"
        } else {
            "/api/v1"
        };
        assert_eq!(document["servers"][0]["url"], expected_server);
        let paths: Vec<&String> = document["paths"].as_object().unwrap().keys().collect();
        let admin = paths.iter().filter(|p| p.starts_with("/admin")).count();
        let schemes = &document["components"]["securitySchemes"];
        if config.admin_token.is_some() {
            assert_eq!(admin, 10, "{paths:?}");
            assert_eq!(schemes["admin_token"]["scheme"], "bearer");
            let tags: Vec<&Value> = document["tags"].as_array().unwrap().iter().collect();
            assert!(tags.iter().any(|t| t["name"] == "administration"));
        } else {
            assert_eq!(admin, 0, "{paths:?}");
            assert!(schemes.is_null(), "{schemes}");
            let tags = document["tags"].as_array().unwrap();
            assert!(tags.iter().all(|t| t["name"] != "administration"));
        }
        // The seed's four routes, as the seed has them.
        for (path, method) in [
            ("/slots/availability", "get"),
            ("/slots/{slot}/hold", "post"),
            ("/holds/{hold}/confirm", "post"),
            ("/holds/{hold}", "delete"),
        ] {
            assert!(
                document["paths"][path][method].is_object(),
                "{method} {path}"
            );
        }
        let hold = &document["components"]["schemas"]["Hold"];
        let mut fields: Vec<&str> = hold["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, common::HOLD_FIELDS);
        assert_eq!(hold["properties"].as_object().unwrap().len(), 6);
    }
}

/// The server's sources register routes only through `Documented::path` (`routes!` groups of
/// `#[utoipa::path]` handlers): no `axum::routing` helpers, no `.route(…)`, and
/// `OpenApiRouter`, whose `.route` adds an undocumented route, only inside `openapi.rs`.
#[test]
fn routes_are_registered_only_with_their_documentation() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src];
    let mut sources = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            // The code, without its comments and unit tests.
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap();
            let code: Vec<&str> = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect();
            sources.push((path.clone(), code.join("\n")));
        }
    }
    assert!(sources.len() > 10);
    let mut groups = 0;
    for (path, text) in &sources {
        let name = path.file_name().unwrap().to_str().unwrap();
        for forbidden in [
            "axum::routing",
            ".route(",
            ".route_service(",
            ".nest_service(",
            ".fallback_service(",
        ] {
            assert!(!text.contains(forbidden), "{name} has {forbidden}");
        }
        if name != "openapi.rs" {
            assert!(!text.contains("OpenApiRouter"), "{name} has OpenApiRouter");
        }
        for (at, _) in text.match_indices("routes!(") {
            let before = text[..at].trim_end();
            assert!(
                before.ends_with(".path("),
                "{name}: routes! outside Documented::path"
            );
            groups += 1;
        }
    }
    // One group per path of the document with administration.
    let config = Config {
        admin_token: Some(AdminToken::new(TOKEN).unwrap()),
        ..Config::default()
    };
    let document = serde_json::to_value(slot_booking_server::openapi(&config)).unwrap();
    assert_eq!(
        groups,
        document["paths"].as_object().unwrap().len(),
        "routes! groups"
    );
}

/// Every 503 the document lists, shared (`store_unavailable`) or an operation's own
/// (`/changes`' `too_many_streams`), declares the `Retry-After` the server sends with it, a
/// whole number of seconds.
#[tokio::test]
async fn every_503_declares_its_retry_after() {
    for config in configs() {
        let (_, document) = served(&config).await;
        let mut unavailable = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let Some(response) = operation["responses"].get("503") else {
                    continue;
                };
                let response = match response["$ref"].as_str() {
                    Some(reference) => document.pointer(&reference[1..]).unwrap(),
                    None => response,
                };
                let header = &response["headers"]["Retry-After"];
                assert_eq!(header["schema"]["type"], "integer", "{method} {path}");
                unavailable += 1;
            }
        }
        assert!(unavailable > 10, "{unavailable} operations answer 503");
        assert!(
            document["paths"]["/changes"]["get"]["responses"]["503"]["headers"]["Retry-After"]
                .is_object()
        );
    }
}

/// A problem body with `status` and `code`.
fn problem(status: u16, code: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": status,
        "detail": "try again later",
        "code": code,
    }))
    .unwrap()
}

/// The contract the other binaries check every response against holds a 503 to the header
/// its response declares: without `Retry-After`, or with one that is not a number of seconds,
/// it is drift; a shared 503 and an operation's own alike.
#[tokio::test]
async fn the_contract_refuses_a_503_without_its_retry_after() {
    let (_, document) = served(&Config::default()).await;
    let contract = Contract::of(&serde_json::to_vec(&document).unwrap());
    for (path, code) in [
        ("/changes", "too_many_streams"),
        ("/slots/availability", "store_unavailable"),
        ("/holds/1", "store_unavailable"),
    ] {
        let body = problem(503, code);
        for (retry_after, valid) in [(None, false), (Some("soon"), false), (Some("1"), true)] {
            let mut headers = axum::http::HeaderMap::new();
            if let Some(value) = retry_after {
                headers.insert("retry-after", value.parse().unwrap());
            }
            let exchange = Exchange {
                method: "GET",
                path,
                status: 503,
                content_type: Some("application/problem+json"),
                headers: &headers,
                body: &body,
            };
            let checked = contract.check(&exchange);
            assert_eq!(
                checked.is_ok(),
                valid,
                "{path} {retry_after:?}: {checked:?}"
            );
        }
    }
}

/// The schema the document gives the change stream's events names every kind of change the
/// log has, and refuses what the stream never sends: a change with a field more or less, a
/// kind or a time it does not write, an id that is no position, a change named `reset` or a
/// reset without its name, a field SSE has but the stream does not send. (The events the
/// stream does send are checked against it in `tests/changes.rs`.)
#[tokio::test]
async fn the_change_events_schema_refuses_what_the_stream_does_not_send() {
    let (_, document) = served(&Config::default()).await;
    let kinds: BTreeSet<&str> = document["components"]["schemas"]["Change"]["properties"]["kind"]
        ["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kind| kind.as_str().unwrap())
        .collect();
    let all: BTreeSet<&str> = slot_booking::EventKind::ALL
        .iter()
        .map(|kind| kind.as_str())
        .collect();
    assert_eq!(kinds, all);
    let media = &document["paths"]["/changes"]["get"]["responses"]["200"]["content"];
    assert_eq!(
        media["text/event-stream"]["schema"]["$ref"],
        "#/components/schemas/ChangeEvent"
    );

    let contract = Contract::of(&serde_json::to_vec(&document).unwrap());
    let change = serde_json::json!({
        "position": "0_7", "kind": "hold_placed", "slot_id": 3, "quantity": 2,
        "at": "2030-06-01T08:00:00.000000+00:00",
    });
    let event = |name: Option<&str>, id: &str, data: &Value| {
        let mut event = serde_json::json!({ "id": id, "data": data.to_string() });
        if let Some(name) = name {
            event["event"] = name.into();
        }
        event
    };
    let check = |event: &Value| contract.check_event("GET", "/changes", 200, event);
    assert_eq!(check(&event(None, "0_7", &change)), Ok(()));
    let reset = serde_json::json!({ "position": "0_9", "kind": "reset" });
    assert_eq!(check(&event(Some("reset"), "0_9", &reset)), Ok(()));

    let mut refused = Vec::new();
    for (field, value) in [
        ("hold_id", Value::from(5)),
        ("kind", "hold_lost".into()),
        ("at", "yesterday".into()),
        ("slot_id", "3".into()),
        ("quantity", Value::Null),
    ] {
        let mut data = change.clone();
        data[field] = value;
        refused.push(event(None, "0_7", &data));
    }
    let mut without_at = change.clone();
    without_at.as_object_mut().unwrap().remove("at");
    refused.push(event(None, "0_7", &without_at));
    refused.push(event(None, "seven", &change));
    refused.push(event(Some("reset"), "0_7", &change));
    refused.push(event(None, "0_9", &reset));
    refused.push(event(Some("update"), "0_7", &change));
    let mut with_retry = event(None, "0_7", &change);
    with_retry["retry"] = "1000".into();
    refused.push(with_retry);
    refused.push(serde_json::json!({ "id": "0_7", "data": "{not json" }));
    for event in refused {
        assert!(check(&event).is_err(), "{event} was accepted");
    }
}
