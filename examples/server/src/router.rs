//! The routes and what is layered around them: [`router`] and [`router_with_config`].

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{middleware, Extension, Router};

use crate::state::{Engine, OwnerSigning, PathPrefix};
use crate::{
    admin, availability, bookings, holds, install_metrics, live, observe, waitlists, Config,
    Problem,
};

/// The routes, at the root of the path space, with the default limits.
pub fn router(engine: Engine) -> Router {
    router_with_config(engine, &Config::default())
}

/// 405 for a route that exists without the request's method.
async fn method_not_allowed() -> Problem {
    Problem::method_not_allowed()
}

/// The routes under `config.path_prefix` (validated by [`Config`]), with its body timeout, and
/// the administration routes when `config.admin_token` is set (without it they do not exist:
/// `/admin/...` is `not_found` like any unknown path), and `/metrics` (installing the
/// process's Prometheus recorder if no router has yet: [`install_metrics`]).
pub fn router_with_config(engine: Engine, config: &Config) -> Router {
    install_metrics();
    let prefix = config.path_prefix.trim_end_matches('/');
    let pages = Arc::new(availability::Pages::new(
        config.availability_page_limit,
        prefix,
    ));
    let mut routes = Router::new()
        .route(
            "/slots/availability",
            get(move |engine, params| {
                availability::availability(engine, Arc::clone(&pages), params)
            }),
        )
        .route("/slots/{slot}/hold", post(holds::hold))
        .route("/holds/{hold}/confirm", post(holds::confirm))
        .route("/holds/{hold}", get(holds::get_hold).delete(holds::cancel))
        .route("/holds/{hold}/renew", post(holds::renew))
        .route("/holds", get(holds::list_holds).post(holds::hold_any))
        .route("/slots/{slot}/waitlist", post(waitlists::join))
        .route(
            "/waitlist/{entry}",
            get(waitlists::get_entry).delete(waitlists::leave),
        )
        .route("/bookings", post(bookings::book))
        .route(
            "/bookings/{hold}",
            get(bookings::get_booking).delete(bookings::cancel),
        )
        .route("/bookings/{hold}/confirm", post(bookings::confirm))
        .route("/bookings/{hold}/renew", post(bookings::renew))
        .route("/changes", get(live::changes))
        .route("/metrics", get(observe::metrics))
        .route("/", get(crate::page::index));
    if let Some(token) = &config.admin_token {
        routes = routes.merge(admin::routes(token.clone(), method_not_allowed));
    }
    let routes = routes
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(engine);
    let app = if prefix.is_empty() {
        routes
    } else {
        Router::new().nest(prefix, routes)
    };
    let (body_timeout, request_log) = (config.body_timeout, config.request_log);
    app.fallback(|| async { Problem::not_found() })
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
