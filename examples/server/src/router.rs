//! The routes and what is layered around them: [`router`], [`router_with_config`] and the
//! document of the same routes, [`openapi`].

use std::sync::Arc;

use axum::{middleware, Extension, Router};
use utoipa_axum::routes;

use crate::openapi::{finish, DocumentJson, Documented};
use crate::state::{Engine, OwnerSigning, PathPrefix};
use crate::{
    admin, availability, bookings, holds, install_metrics, live, observe, page, waitlists, Config,
};

/// The routes, at the root of the path space, with the default limits.
pub fn router(engine: Engine) -> Router {
    router_with_config(engine, &Config::default())
}

/// Every route `config` mounts, each registered with its documentation ([`Documented`]): the
/// public routes, `/metrics`, `/openapi.json`, and administration when `config.admin_token` is
/// set.
fn routes(config: &Config) -> Documented {
    let mut routes = Documented::new()
        .path(routes!(availability::availability))
        .path(routes!(holds::hold))
        .path(routes!(holds::confirm))
        .path(routes!(holds::get_hold, holds::cancel))
        .path(routes!(holds::renew))
        .path(routes!(holds::list_holds, holds::hold_any))
        .path(routes!(waitlists::join))
        .path(routes!(waitlists::get_entry, waitlists::leave))
        .path(routes!(bookings::book))
        .path(routes!(bookings::get_booking, bookings::cancel))
        .path(routes!(bookings::confirm))
        .path(routes!(bookings::renew))
        .path(routes!(live::changes))
        .path(routes!(observe::metrics))
        .path(routes!(crate::openapi::document))
        .path(routes!(page::index));
    if let Some(token) = &config.admin_token {
        routes = routes.merge(admin::routes(token.clone()));
    }
    routes
}

/// The OpenAPI 3.1 document of the routes [`router_with_config`] serves with `config`: the
/// one it serves at `GET {PATH_PREFIX}/openapi.json`.
pub fn openapi(config: &Config) -> utoipa::openapi::OpenApi {
    let (_, api) = routes(config).split();
    finish(api, config.path_prefix.trim_end_matches('/'))
}

/// The routes under `config.path_prefix` (validated by [`Config`]), with its body timeout, and
/// the administration routes when `config.admin_token` is set (without it they do not exist:
/// `/admin/...` is `not_found` like any unknown path), `/metrics` (installing the process's
/// Prometheus recorder if no router has yet: [`install_metrics`]) and `/openapi.json`, the
/// document of exactly these routes ([`openapi`]).
pub fn router_with_config(engine: Engine, config: &Config) -> Router {
    install_metrics();
    let prefix = config.path_prefix.trim_end_matches('/');
    let pages = Arc::new(availability::Pages::new(
        config.availability_page_limit,
        prefix,
    ));
    let (routes, api) = routes(config).split();
    let document = DocumentJson::new(&finish(api, prefix));
    let routes = routes
        .layer(Extension(pages))
        .layer(Extension(document))
        .with_state(engine);
    let app = if prefix.is_empty() {
        routes
    } else {
        Router::new().nest(prefix, routes)
    };
    let (body_timeout, request_log) = (config.body_timeout, config.request_log);
    app.fallback(page::or_not_found)
        .layer(middleware::from_fn(move |request, next| {
            crate::middleware::front(request, next, body_timeout, request_log)
        }))
        .layer(Extension(PathPrefix(Arc::from(prefix))))
        // Half the connections at most follow the change stream; the rest stay for the API.
        .layer(Extension(live::Changes::new(config.max_connections / 2)))
        .layer(Extension(OwnerSigning(
            config.owner_secret.clone().map(Arc::new),
        )))
}
