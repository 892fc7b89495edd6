//! What the tests observe with: a metrics recorder and a tracing subscriber that keep
//! everything recorded, and a runtime that runs a test under both.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Subscriber;
use tracing::{Event, Metadata as SpanMetadata};

use crate::observe::{OPERATIONS, STORE_SECONDS};

/// A metric as the test recorder names it: `name{label=value,...}`.
fn metric(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// Counters and histograms by name and labels.
#[derive(Default)]
pub(super) struct TestRecorder {
    counters: Mutex<BTreeMap<String, Arc<TestCounter>>>,
    histograms: Mutex<BTreeMap<String, Arc<TestHistogram>>>,
}

#[derive(Default)]
struct TestCounter(AtomicU64);

impl CounterFn for TestCounter {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct TestHistogram(Mutex<Vec<f64>>);

impl HistogramFn for TestHistogram {
    fn record(&self, value: f64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(value);
    }
}

/// A key's labels, as `(label, value)` pairs.
pub(super) fn labels_of(key: &Key) -> Vec<(&str, &str)> {
    key.labels().map(|l| (l.key(), l.value())).collect()
}

fn name_of(key: &Key) -> String {
    metric(key.name(), &labels_of(key))
}

/// The metric of `key` in `metrics`, registered on first use.
fn registered<M: Default>(metrics: &Mutex<BTreeMap<String, Arc<M>>>, key: &Key) -> Arc<M> {
    Arc::clone(metrics.lock().unwrap().entry(name_of(key)).or_default())
}

impl TestRecorder {
    pub(super) fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .lock()
            .unwrap()
            .get(&metric(name, labels))
            .map_or(0, |c| c.0.load(Ordering::Relaxed))
    }

    pub(super) fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.histograms
            .lock()
            .unwrap()
            .get(&metric(name, labels))
            .map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
    }

    /// The [`OPERATIONS`] count of `operation` ending in `outcome`.
    pub(super) fn operations(&self, operation: &str, outcome: &str) -> u64 {
        self.counter(
            OPERATIONS,
            &[("operation", operation), ("outcome", outcome)],
        )
    }

    /// The [`STORE_SECONDS`] samples of `operation`.
    pub(super) fn store_samples(&self, operation: &str) -> Vec<f64> {
        self.samples(STORE_SECONDS, &[("operation", operation)])
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(registered(&self.counters, key))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(registered(&self.histograms, key))
    }
}

/// A span as the test subscriber saw it: name, parent's name, and fields as text.
#[derive(Debug, Clone, Default)]
pub(super) struct SeenSpan {
    pub(super) name: &'static str,
    pub(super) parent: Option<&'static str>,
    pub(super) fields: BTreeMap<&'static str, String>,
}

impl tracing::field::Visit for SeenSpan {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.fields.insert(field.name(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.fields.insert(field.name(), value.to_owned());
    }
}

/// Every span created while it is the default subscriber, with its recorded fields.
#[derive(Clone, Default)]
pub(super) struct SpanLog {
    spans: Arc<Mutex<Vec<SeenSpan>>>,
    /// The entered spans, innermost last (ids are indexes + 1).
    stack: Arc<Mutex<Vec<u64>>>,
}

impl SpanLog {
    pub(super) fn named(&self, name: &str) -> Vec<SeenSpan> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// The field `field` of each span named `name`, in order.
    pub(super) fn field(&self, name: &str, field: &str) -> Vec<String> {
        self.named(name)
            .iter()
            .map(|s| s.fields[field].clone())
            .collect()
    }
}

impl Subscriber for SpanLog {
    fn enabled(&self, _: &SpanMetadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut spans = self.spans.lock().unwrap();
        let parent = match attributes.parent() {
            Some(parent) => Some(parent.into_u64()),
            None if attributes.is_contextual() => self.stack.lock().unwrap().last().copied(),
            None => None,
        };
        let mut span = SeenSpan {
            name: attributes.metadata().name(),
            parent: parent.map(|p| spans[p as usize - 1].name),
            ..SeenSpan::default()
        };
        attributes.record(&mut span);
        spans.push(span);
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        values.record(&mut spans[span.into_u64() as usize - 1]);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, span: &Id) {
        self.stack.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut stack = self.stack.lock().unwrap();
        if let Some(i) = stack.iter().rposition(|s| *s == span.into_u64()) {
            stack.remove(i);
        }
    }
}

/// Runs `test` on a current-thread runtime (so every task stays on this thread) with the
/// test recorder and span log as this thread's defaults.
pub(super) fn observed<F: Future<Output = ()>>(
    test: impl FnOnce() -> F,
) -> (TestRecorder, SpanLog) {
    let recorder = TestRecorder::default();
    let spans = SpanLog::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    {
        let _spans = tracing::subscriber::set_default(spans.clone());
        metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    }
    (recorder, spans)
}
