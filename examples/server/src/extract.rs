//! The extractors of the routes' path ids and headers, each refusing with its [`Problem`]:
//! [`PathId`] (`{slot}`, `{hold}`; with the engine, [`On`]), [`Caller`] (`Owner-Id`),
//! [`IdempotencyKey`] and [`LastEventId`].

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use slot_booking::model::ParseIdError;
use slot_booking::{EntryId, EventPosition, HoldId, OwnerId, PoolId, Scope, SlotId};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::Required;
use utoipa::IntoParams;

use crate::state::{Engine, OwnerSigning};
use crate::Problem;

/// An id a path captures: how it is named when it is not found.
pub(crate) trait Captured: std::str::FromStr<Err = ParseIdError> {
    /// The code of a 404 for an id too large to exist.
    const NOT_FOUND: &'static str;
    /// The resource's name in that 404's detail.
    const NAME: &'static str;
}

impl Captured for EntryId {
    const NOT_FOUND: &'static str = "entry_not_found";
    const NAME: &'static str = "waitlist entry";
}

impl Captured for SlotId {
    const NOT_FOUND: &'static str = "slot_not_found";
    const NAME: &'static str = "slot";
}

impl Captured for PoolId {
    const NOT_FOUND: &'static str = "pool_not_found";
    const NAME: &'static str = "pool";
}

impl Captured for HoldId {
    const NOT_FOUND: &'static str = "hold_not_found";
    const NAME: &'static str = "hold";
}

/// The path's one id (`{slot}` or `{hold}`): anything but digits matches no route (the
/// generic 404); digits too large for an id are a 404 of the resource itself
/// (`slot_not_found` / `hold_not_found`).
pub(crate) struct PathId<Id>(pub(crate) Id);

impl<Id: Captured, S: Send + Sync> FromRequestParts<S> for PathId<Id> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let Ok(Path(raw)) = Path::<String>::from_request_parts(parts, state).await else {
            return Err(Problem::not_found());
        };
        parse_id(&raw).map(PathId)
    }
}

/// An id a path captured, refused as [`PathId`] says.
pub(crate) fn parse_id<Id: Captured>(raw: &str) -> Result<Id, Problem> {
    raw.parse::<Id>().map_err(|error| match error {
        ParseIdError::NotDigits => Problem::not_found(),
        ParseIdError::TooLarge => {
            Problem::resource_not_found(Id::NOT_FOUND, format!("{} {raw} not found", Id::NAME))
        }
    })
}

/// A call on the one resource the path names: the engine and the id (`{slot}` or `{hold}`,
/// as [`PathId`] reads it).
pub(crate) struct On<Id> {
    pub(crate) engine: Engine,
    pub(crate) id: Id,
}

impl<Id: Captured> FromRequestParts<Engine> for On<Id> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, engine: &Engine) -> Result<Self, Problem> {
        let PathId(id) = PathId::from_request_parts(parts, engine).await?;
        let engine = engine.clone();
        Ok(On { engine, id })
    }
}

/// The value of header `name` (in any case), `None` without one. More than one is refused as
/// `refuse(several)`; one that is not visible ASCII as `refuse` with a detail saying so.
fn only_one<'h>(
    headers: &'h HeaderMap,
    name: &str,
    refuse: fn(&str) -> Problem,
    several: &str,
) -> Result<Option<&'h str>, Problem> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => value
            .to_str()
            .map(Some)
            .map_err(|_| refuse(&format!("the {name} header must be visible ASCII"))),
        (Some(_), Some(_)) => Err(refuse(several)),
    }
}

/// Who is calling: the owner named by the `Owner-Id` header (signed, when the server has an
/// [`OwnerSecret`](crate::OwnerSecret)), or an anonymous client.
pub(crate) struct Caller(pub(crate) Option<OwnerId>);

impl Caller {
    /// What the caller may see and change.
    pub(crate) fn scope(&self) -> Scope {
        Scope::of(self.0.clone())
    }
}

/// The header parameter `name`: visible ASCII characters (its description says how many: a
/// signed owner or a quoted key is longer than the 255 characters of the value it carries).
fn header_parameter(name: &str, required: Required, description: &str) -> Parameter {
    let token = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .pattern(Some("^[!-~]+$"))
        .build();
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Header)
        .required(required)
        .description(Some(description))
        .schema(Some(token))
        .build()
}

/// The `Owner-Id` header a [`Caller`] reads, optional.
impl IntoParams for Caller {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![header_parameter(
            "Owner-Id",
            Required::False,
            "Whose hold: an owner id of 1 to 255 visible ASCII characters. A hold placed with \
             it belongs to that owner and answers only with the same header (otherwise \
             `hold_not_found`); without it a client sees only holds placed without one. With \
             `OWNER_SECRET` set it must be `<owner>.<signature>` (64 lowercase hex digits) \
             signed by the application. Anything else is 400 `invalid_owner`.",
        )]
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let detail = "send at most one Owner-Id header";
        let Some(raw) = only_one(&parts.headers, "Owner-Id", Problem::bad_owner, detail)? else {
            return Ok(Caller(None));
        };
        let owner = match parts.extensions.get::<OwnerSigning>() {
            Some(OwnerSigning(Some(secret))) => secret
                .verify(raw)
                .map_err(|error| Problem::bad_owner(&error.to_string()))?,
            _ => OwnerId::new(raw).map_err(|error| Problem::bad_owner(&error.to_string()))?,
        };
        Ok(Caller(Some(owner)))
    }
}

/// The `Idempotency-Key` header, required: bare (`abc`) or as a structured-field string
/// (`"abc"`).
pub(crate) struct IdempotencyKey(pub(crate) String);

/// The `Idempotency-Key` header an [`IdempotencyKey`] reads, required.
impl IntoParams for IdempotencyKey {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![header_parameter(
            "Idempotency-Key",
            Required::True,
            "Makes the request safe to repeat: the same key again answers what the first \
             request made, with `Idempotent-Replayed: true`. Bare (`abc`) or an RFC 8941 string \
             (`\"abc\"`). Without it 400 `idempotency_key_required`; one that is not 1 to 255 \
             visible ASCII characters, or several, 400 `invalid_idempotency_key`.",
        )]
    }
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let detail = "send exactly one Idempotency-Key header";
        let Some(raw) = only_one(&parts.headers, "Idempotency-Key", Problem::bad_key, detail)?
        else {
            return Err(Problem::bad_request(
                "idempotency_key_required",
                "the Idempotency-Key header is required",
            ));
        };
        match raw.strip_prefix('"') {
            None => Ok(IdempotencyKey(raw.to_owned())),
            Some(quoted) => unquote(quoted).map(IdempotencyKey).ok_or_else(|| {
                Problem::bad_key("the quoted Idempotency-Key is not a valid string")
            }),
        }
    }
}

/// The `Last-Event-ID` header of a reconnecting change stream: the position of the last
/// change the client saw, `None` without one (or an empty one, which the SSE standard reads
/// as none). Anything else is 400 `invalid_last_event_id`.
pub(crate) struct LastEventId(pub(crate) Option<EventPosition>);

impl IntoParams for LastEventId {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![header_parameter(
            "Last-Event-ID",
            Required::False,
            "The id of the last change a reconnecting client saw (`EventSource` sends it by \
             itself): the stream resumes with the change after it. Without it (or empty) the \
             stream starts at the present; one past the log's end, too. Anything but \
             `<epoch>_<sequence>`, or several, is 400 `invalid_last_event_id`.",
        )]
    }
}

impl<S: Send + Sync> FromRequestParts<S> for LastEventId {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let detail = "send at most one Last-Event-ID header";
        let refuse: fn(&str) -> Problem = |detail| Problem::invalid_last_event_id(detail);
        let Some(raw) = only_one(&parts.headers, "Last-Event-ID", refuse, detail)? else {
            return Ok(LastEventId(None));
        };
        if raw.is_empty() {
            return Ok(LastEventId(None));
        }
        raw.parse()
            .map(|seen| LastEventId(Some(seen)))
            .map_err(|_| {
                refuse(
                    "Last-Event-ID must be the id of a change the stream sent (<epoch>_<sequence>)",
                )
            })
    }
}

/// Decodes the rest of an RFC 8941 string after its opening quote: `\"` and `\\` are the only
/// escapes, and the closing quote must end the value.
fn unquote(rest: &str) -> Option<String> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                escaped @ ('"' | '\\') => out.push(escaped),
                _ => return None,
            },
            '"' => return chars.as_str().is_empty().then_some(out),
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::unquote;

    #[test]
    fn quoted_keys_follow_rfc_8941_strings() {
        assert_eq!(unquote(r#"abc""#), Some("abc".into()));
        assert_eq!(unquote(r#"a\"b\\c""#), Some(r#"a"b\c"#.into()));
        assert_eq!(unquote(r#"abc"#), None, "no closing quote");
        assert_eq!(unquote(r#"ab"c"#), None, "text after the closing quote");
        assert_eq!(unquote(r#"a\nb""#), None, "unknown escape");
        assert_eq!(unquote(r#"""#), Some(String::new()));
    }
}
