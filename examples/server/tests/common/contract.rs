//! Every response a test gets through [`send`](super::send) or [`read`](super::read), checked
//! against the OpenAPI document the same server serves (`GET {prefix}/openapi.json`): the
//! status is documented for the operation (method and path template matched against the
//! request's path), the content type is the documented one, and a JSON body validates against
//! the documented schema. Schemas are checked closed: every object that lists `properties`
//! gets `unevaluatedProperties: false`, so a field the document does not name fails too.
//! The headers a response declares are checked too: each one sent must match its schema, and
//! an error answer (4xx, 5xx; a 503's `Retry-After`, a 401's `WWW-Authenticate`) must send
//! every header its response declares.
//!
//! The events of a `text/event-stream` answer are checked one by one ([`Contract::check_event`])
//! against the schema the document gives that content: one event (`event`, `id`, `data`), and
//! its `data`, JSON text, against the `contentSchema` of the branch it matched.
//!
//! A path no operation has must get the router's 404 `not_found`, and a documented path with
//! another method 405 `method_not_allowed` (401 first on a path behind the admin token); either
//! may also be refused before routing (400 `invalid_body`, 408, 413, 414, 431).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::{json, Value};

/// The answers of what runs before the routes, on any path.
const FRONT: &[(u16, &str)] = &[
    (400, "invalid_body"),
    (408, "body_timeout"),
    (413, "payload_too_large"),
    (414, "uri_too_long"),
    (431, "headers_too_large"),
];

/// One response of the document: its bodies by media type (`None`: not checked as JSON).
type Bodies = BTreeMap<String, Option<Arc<jsonschema::Validator>>>;

/// One documented response.
struct Response {
    /// Its description, which names (in backticks) every problem `code` it may carry.
    description: String,
    bodies: Bodies,
    /// The headers it declares (lower case), each with its schema.
    headers: Vec<(String, Option<Arc<jsonschema::Validator>>)>,
    /// The schema of one event of its `text/event-stream` body, if it has one.
    events: Option<Events>,
}

/// The schema of one event of a stream: the whole (a closed `oneOf` of the event's kinds, or
/// one kind), and per kind its own schema and the `contentSchema` of its `data`.
struct Events {
    whole: Arc<jsonschema::Validator>,
    branches: Vec<(
        Arc<jsonschema::Validator>,
        Option<Arc<jsonschema::Validator>>,
    )>,
}

/// One documented operation.
struct Operation {
    method: String,
    template: Vec<String>,
    /// Behind the admin token (`security`).
    secured: bool,
    /// By status key (`"200"`, `"4XX"`, `"default"`).
    responses: BTreeMap<String, Response>,
}

/// A document, ready to check responses against.
pub struct Contract {
    /// `servers[0].url` without its trailing `/`.
    pub prefix: String,
    operations: Vec<Operation>,
    problem: Arc<jsonschema::Validator>,
}

/// What a response was: the request's method and path, and the answer.
pub struct Exchange<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub content_type: Option<&'a str>,
    pub headers: &'a axum::http::HeaderMap,
    pub body: &'a [u8],
}

impl Contract {
    /// The contract of the document `text` (kept per document: every test's router serves one
    /// of a few).
    pub fn of(text: &[u8]) -> Arc<Contract> {
        static KEPT: OnceLock<Mutex<HashMap<Vec<u8>, Arc<Contract>>>> = OnceLock::new();
        let kept = KEPT.get_or_init(Mutex::default);
        if let Some(contract) = kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(text)
        {
            return Arc::clone(contract);
        }
        let document: Value = serde_json::from_slice(text).expect("the document is JSON");
        let contract = Arc::new(Contract::new(&document));
        kept.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(text.to_vec(), Arc::clone(&contract));
        contract
    }

    /// The contract of the document of the server's default configuration, for an answer from
    /// outside any document's prefix.
    pub fn default_document() -> Arc<Contract> {
        let api = slot_booking_server::openapi(&slot_booking_server::Config::default());
        Contract::of(&serde_json::to_vec(&api).expect("the document serializes"))
    }

    fn new(document: &Value) -> Contract {
        let schemas = closed_components(document);
        let mut compiled: HashMap<String, Arc<jsonschema::Validator>> = HashMap::new();
        let mut validator = |schema: &Value| {
            let key = schema.to_string();
            let found = compiled.entry(key).or_insert_with(|| {
                let mut closed = schema.clone();
                close(&mut closed, false);
                let Value::Object(mut root) = closed else {
                    panic!("a schema that is not an object: {schema}");
                };
                root.insert("components".into(), json!({ "schemas": schemas }));
                let built = jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .should_validate_formats(true)
                    .build(&Value::Object(root))
                    .unwrap_or_else(|error| panic!("schema {schema} does not compile: {error}"));
                Arc::new(built)
            });
            Arc::clone(found)
        };
        let problem = validator(&json!({ "$ref": "#/components/schemas/Problem" }));
        let mut operations = Vec::new();
        let paths = document["paths"].as_object().expect("paths");
        for (path, item) in paths {
            for (method, operation) in item.as_object().expect("a path item") {
                if !is_method(method) {
                    continue;
                }
                let mut responses = BTreeMap::new();
                let documented = operation["responses"].as_object().expect("responses");
                for (status, response) in documented {
                    let response = resolve(document, response);
                    let mut bodies = Bodies::new();
                    let mut events = None;
                    if let Some(content) = response["content"].as_object() {
                        for (media_type, media) in content {
                            let schema = media
                                .get("schema")
                                .filter(|_| is_json(media_type))
                                .map(&mut validator);
                            bodies.insert(media_type.clone(), schema);
                            if let (Some(schema), true) =
                                (media.get("schema"), is_event_stream(media_type))
                            {
                                events = Some(event_schema(document, schema, &mut validator));
                            }
                        }
                    }
                    let headers = response["headers"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(name, header)| {
                            let schema = header.get("schema").map(&mut validator);
                            (name.to_ascii_lowercase(), schema)
                        })
                        .collect();
                    let description = response["description"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    responses.insert(
                        status.clone(),
                        Response {
                            description,
                            bodies,
                            headers,
                            events,
                        },
                    );
                }
                operations.push(Operation {
                    method: method.clone(),
                    template: segments(path),
                    secured: operation.get("security").is_some(),
                    responses,
                });
            }
        }
        let prefix = document["servers"][0]["url"]
            .as_str()
            .expect("servers[0].url")
            .trim_end_matches('/')
            .to_owned();
        Contract {
            prefix,
            operations,
            problem,
        }
    }

    /// The operations whose template `path` (under the document's prefix) matches, and the
    /// one among them of `method` (`HEAD` is `GET`'s), the most literal first.
    fn operation(&self, method: &str, path: &str) -> (Vec<&Operation>, Option<&Operation>) {
        let path = segments(path);
        let matching: Vec<&Operation> = self
            .operations
            .iter()
            .filter(|operation| matches(&operation.template, &path))
            .collect();
        let method = method.to_ascii_lowercase();
        let wanted = if method == "head" { "get" } else { &method };
        let operation = matching
            .iter()
            .filter(|operation| operation.method == wanted)
            .max_by_key(|operation| literal_segments(&operation.template))
            .copied();
        (matching, operation)
    }

    /// Whether `event`, one event of the stream `method path` answered `status` with (an
    /// object of its fields: `event` if any, `id`, `data` as the text it carried), is what
    /// the document says that stream's events are; else why not.
    pub fn check_event(
        &self,
        method: &str,
        path: &str,
        status: u16,
        event: &Value,
    ) -> Result<(), String> {
        let rest = self
            .within(path)
            .ok_or_else(|| format!("{path} is outside the document's prefix"))?;
        let (_, operation) = self.operation(method, rest);
        let operation = operation.ok_or_else(|| format!("{method} {path} is no operation"))?;
        let events = operation
            .responses
            .get(&status.to_string())
            .and_then(|response| response.events.as_ref())
            .ok_or_else(|| format!("{method} {path} {status} documents no event stream"))?;
        let context = format!("{method} {path}: the event {event}");
        let errors: Vec<String> = events
            .whole
            .iter_errors(event)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        if !errors.is_empty() {
            return Err(format!(
                "{context} is not what the document says: {errors:?}"
            ));
        }
        let (_, content) = events
            .branches
            .iter()
            .find(|(branch, _)| branch.is_valid(event))
            .ok_or_else(|| format!("{context} matches none of the document's events"))?;
        let Some(content) = content else {
            return Ok(());
        };
        let text = event["data"].as_str().unwrap_or_default();
        let data: Value = serde_json::from_str(text)
            .map_err(|error| format!("{context}: its data is not JSON: {error}"))?;
        let errors: Vec<String> = content
            .iter_errors(&data)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{context}: its data is not what the document's contentSchema says: {errors:?}"
            ))
        }
    }

    /// Whether `exchange` is what the document says; else why not.
    pub fn check(&self, exchange: &Exchange<'_>) -> Result<(), String> {
        let method = exchange.method.to_ascii_lowercase();
        let Some(rest) = self.within(exchange.path) else {
            return self.refusal(exchange, &[(404, "not_found")]);
        };
        // `HEAD` is answered as `GET`, without a body.
        let head = method == "head";
        let (matching, operation) = self.operation(&method, rest);
        let Some(operation) = operation else {
            if matching.is_empty() {
                return self.refusal(exchange, &[(404, "not_found")]);
            }
            let mut allowed = vec![(405, "method_not_allowed")];
            if matching.iter().any(|operation| operation.secured) {
                allowed.push((401, "unauthorized"));
            }
            return self.refusal(exchange, &allowed);
        };
        let status = exchange.status.to_string();
        let range = format!("{}XX", exchange.status / 100);
        let response = operation
            .responses
            .get(&status)
            .or_else(|| operation.responses.get(&range))
            .or_else(|| operation.responses.get("default"))
            .ok_or_else(|| {
                format!(
                    "{} {} answered {}, which the document does not list for it",
                    exchange.method, exchange.path, exchange.status
                )
            })?;
        check_headers(response, exchange)?;
        // A problem's code is one its response names: a refusal no description mentions is
        // drift, as a status none lists is.
        if exchange.content_type == Some("application/problem+json") {
            let body: Value = serde_json::from_slice(exchange.body).unwrap_or(Value::Null);
            let code = body["code"].as_str().unwrap_or_default();
            if !response.description.contains(&format!("`{code}`")) {
                return Err(format!(
                    "{} {} answered {} `{code}`, which its response's description does not \
                     name: {:?}",
                    exchange.method, exchange.path, exchange.status, response.description
                ));
            }
        }
        let bodies = &response.bodies;
        if head || bodies.is_empty() {
            return if exchange.body.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} {} answered {} with a body the document does not have",
                    exchange.method, exchange.path, exchange.status
                ))
            };
        }
        let content_type = exchange.content_type.unwrap_or_default();
        let (_, schema) = bodies
            .iter()
            .find(|(media_type, _)| same_media_type(media_type, content_type))
            .ok_or_else(|| {
                format!(
                    "{} {} answered {} as {content_type:?}; the document has {:?}",
                    exchange.method,
                    exchange.path,
                    exchange.status,
                    bodies.keys().collect::<Vec<_>>()
                )
            })?;
        match schema {
            Some(schema) => validate(schema, exchange),
            None => std::str::from_utf8(exchange.body)
                .map(drop)
                .map_err(|_| format!("{} {}: not text", exchange.method, exchange.path)),
        }
    }

    /// Whether `exchange`, for a path outside any document's prefix, is the router's 404
    /// `not_found` (or a refusal of what runs before the routes).
    pub fn check_outside(&self, exchange: &Exchange<'_>) -> Result<(), String> {
        self.refusal(exchange, &[(404, "not_found")])
    }

    /// The rest of `path` after the document's prefix, if it is under it.
    fn within<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.prefix.is_empty() {
            return Some(path);
        }
        let rest = path.strip_prefix(self.prefix.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }

    /// Whether `exchange` is a problem with one of `allowed`'s statuses and codes, or a refusal
    /// of what runs before the routes.
    fn refusal(&self, exchange: &Exchange<'_>, allowed: &[(u16, &str)]) -> Result<(), String> {
        let body: Value = serde_json::from_slice(exchange.body).unwrap_or(Value::Null);
        let code = body["code"].as_str().unwrap_or_default();
        let expected = allowed
            .iter()
            .chain(FRONT)
            .any(|&(status, wanted)| status == exchange.status && wanted == code);
        if !expected || exchange.content_type != Some("application/problem+json") {
            return Err(format!(
                "{} {} is no documented operation: wanted one of {allowed:?}, got {} {body}",
                exchange.method, exchange.path, exchange.status
            ));
        }
        validate(&self.problem, exchange)
    }
}

/// `exchange`'s headers against those `response` declares: each one sent matches its schema
/// (an integer's value read as one), and an error answer sends every one.
fn check_headers(response: &Response, exchange: &Exchange<'_>) -> Result<(), String> {
    let context = format!(
        "{} {} answered {}",
        exchange.method, exchange.path, exchange.status
    );
    for (name, schema) in &response.headers {
        let Some(value) = exchange.headers.get(name.as_str()) else {
            if exchange.status >= 400 {
                return Err(format!(
                    "{context} without the {name} header the document declares"
                ));
            }
            continue;
        };
        let Some(schema) = schema else {
            continue;
        };
        let text = value
            .to_str()
            .map_err(|_| format!("{context} with a {name} that is not text"))?;
        // A header is text; a number is compared as one when it reads as one.
        let value = text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::from(text));
        let errors: Vec<String> = schema.iter_errors(&value).map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            return Err(format!(
                "{context} with {name}: {text:?}, which the document's schema refuses: {errors:?}"
            ));
        }
    }
    Ok(())
}

/// The schema of one event of a stream, from the `schema` of its `text/event-stream` content
/// (its `$ref` resolved; a `oneOf` is one branch per kind of event).
fn event_schema(
    document: &Value,
    schema: &Value,
    validator: &mut impl FnMut(&Value) -> Arc<jsonschema::Validator>,
) -> Events {
    let whole = validator(schema);
    let resolved = resolve(document, schema);
    let branches: Vec<Value> = match resolved["oneOf"].as_array() {
        Some(branches) => branches.clone(),
        None => vec![resolved.clone()],
    };
    let branches = branches
        .iter()
        .map(|branch| {
            let branch = resolve(document, branch);
            let content = branch["properties"]["data"]
                .get("contentSchema")
                .map(&mut *validator);
            (validator(branch), content)
        })
        .collect();
    Events { whole, branches }
}

/// `exchange`'s JSON body against `schema`.
fn validate(schema: &jsonschema::Validator, exchange: &Exchange<'_>) -> Result<(), String> {
    let body: Value = serde_json::from_slice(exchange.body)
        .map_err(|error| format!("{} {}: not JSON: {error}", exchange.method, exchange.path))?;
    let errors: Vec<String> = schema
        .iter_errors(&body)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} {} answered {} with a body the document's schema refuses: {errors:?}\n{body}",
            exchange.method, exchange.path, exchange.status
        ))
    }
}

/// `response` (or a schema), or what its `$ref` names.
fn resolve<'d>(document: &'d Value, response: &'d Value) -> &'d Value {
    match response["$ref"].as_str() {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local $ref");
            document
                .pointer(pointer)
                .unwrap_or_else(|| panic!("{reference} resolves to nothing"))
        }
        None => response,
    }
}

/// The document's schemas, closed.
fn closed_components(document: &Value) -> Value {
    let mut schemas = document["components"]["schemas"].clone();
    if let Value::Object(schemas) = &mut schemas {
        for schema in schemas.values_mut() {
            close(schema, false);
        }
    }
    schemas
}

/// Adds `unevaluatedProperties: false` to every object schema in `schema` that lists
/// `properties` and says nothing of others, except the branches of an `allOf` (whose
/// properties another branch may list).
fn close(schema: &mut Value, in_all_of: bool) {
    let Value::Object(object) = schema else {
        return;
    };
    let open = !object.contains_key("additionalProperties")
        && !object.contains_key("unevaluatedProperties");
    if object.contains_key("properties") && open && !in_all_of {
        object.insert("unevaluatedProperties".into(), Value::Bool(false));
    }
    for (keyword, value) in object.iter_mut() {
        match (keyword.as_str(), value) {
            ("properties", Value::Object(properties)) => {
                properties.values_mut().for_each(|p| close(p, false))
            }
            ("items" | "additionalProperties" | "not", value) => close(value, false),
            ("oneOf" | "anyOf" | "prefixItems", Value::Array(branches)) => {
                branches.iter_mut().for_each(|b| close(b, false))
            }
            ("allOf", Value::Array(branches)) => branches.iter_mut().for_each(|b| close(b, true)),
            _ => {}
        }
    }
}

fn is_method(key: &str) -> bool {
    matches!(
        key,
        "get" | "put" | "post" | "delete" | "options" | "head" | "patch" | "trace"
    )
}

fn is_event_stream(media_type: &str) -> bool {
    media_type.split(';').next().unwrap_or_default().trim() == "text/event-stream"
}

fn is_json(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or_default().trim();
    essence == "application/json" || essence.ends_with("+json")
}

/// Whether a response's `Content-Type` is the documented `media_type`: the same value, or,
/// when the document gives no parameters, the same type and subtype.
fn same_media_type(media_type: &str, content_type: &str) -> bool {
    if media_type.contains(';') {
        media_type == content_type
    } else {
        content_type.split(';').next().unwrap_or_default().trim() == media_type
    }
}

/// A path's segments (after the leading `/`).
pub fn segments(path: &str) -> Vec<String> {
    let path = path.split('?').next().unwrap_or_default();
    path.strip_prefix('/')
        .unwrap_or(path)
        .split('/')
        .map(str::to_owned)
        .collect()
}

/// Whether `path` matches `template`: literal segments equal, `{name}` any non-empty one.
pub fn matches(template: &[String], path: &[String]) -> bool {
    template.len() == path.len()
        && template.iter().zip(path).all(|(want, got)| {
            if want.starts_with('{') && want.ends_with('}') {
                !got.is_empty()
            } else {
                want == got
            }
        })
}

fn literal_segments(template: &[String]) -> usize {
    template.iter().filter(|s| !s.starts_with('{')).count()
}

/// The prefixes under which a server answering `path` may serve its document: the root, then
/// each leading run of `path`'s segments.
pub fn candidate_prefixes(path: &str) -> Vec<String> {
    let mut prefixes = vec![String::new()];
    let mut prefix = String::new();
    let parts = segments(path);
    for segment in parts.iter().take(parts.len().saturating_sub(1)) {
        prefix.push('/');
        prefix.push_str(segment);
        prefixes.push(prefix.clone());
    }
    prefixes
}
