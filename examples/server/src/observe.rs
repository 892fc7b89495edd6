//! `GET /metrics`: the engine's metrics (see [`slot_booking::observe`]) in Prometheus' text
//! format, from the process's `metrics` recorder.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use slot_booking::observe;

use crate::Problem;

/// The buckets of the store latency histogram ([`observe::STORE_SECONDS`]), in seconds:
/// 100 µs to 2.5 s.
pub const STORE_SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The media type of Prometheus' text exposition format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's Prometheus recorder as the global `metrics` recorder, once (every
/// router of the process serves the same one), and describes the engine's metrics to it.
/// `None` when another global recorder was installed first: the application exports its
/// metrics itself, and `/metrics` is `not_found`.
pub fn install_metrics() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let installed = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(observe::STORE_SECONDS.to_owned()),
                    STORE_SECONDS_BUCKETS,
                )
                .and_then(PrometheusBuilder::install_recorder);
            match installed {
                Ok(handle) => {
                    observe::describe();
                    Some(handle)
                }
                Err(error) => {
                    tracing::warn!(%error, "no Prometheus recorder: /metrics is not served");
                    None
                }
            }
        })
        .as_ref()
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "observability",
    operation_id = "metrics",
    summary = "The engine's metrics",
    description = "What `slot_booking` records through the `metrics` facade, in Prometheus' text \
                   format: operations by outcome, store latency histograms, availability cache \
                   hits, misses, loads and stale serves.",
    responses(
        (status = 200, description = "The metrics.", body = String, content_type = "text/plain; version=0.0.4; charset=utf-8"),
        (status = 404, description = "`not_found`: another global `metrics` recorder was installed first; the application exports the metrics itself."),
    )
)]
pub(crate) async fn metrics() -> Response {
    match install_metrics() {
        Some(handle) => {
            handle.run_upkeep();
            ([(CONTENT_TYPE, PROMETHEUS_TEXT)], handle.render()).into_response()
        }
        None => Problem::not_found().into_response(),
    }
}
