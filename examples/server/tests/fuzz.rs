//! Arbitrary requests at the router: whatever the path, method, headers or body, the answer is
//! never a 5xx and nothing panics.

use slot_booking_server::ServerStore;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request};
use proptest::prelude::*;
use slot_booking::{BookingEngine, MemoryStore, NewSlot};
use tower::ServiceExt;

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("slots".to_owned()),
        Just("holds".to_owned()),
        Just("availability".to_owned()),
        Just("hold".to_owned()),
        Just("confirm".to_owned()),
        Just(String::new()),
        "[0-9]{1,25}",
        "[+-]?[0-9]{1,4}",
        "%[0-9A-Fa-f]{2}[0-9]?",
        "[a-zA-Z0-9._~!$&'()*+,;=:@-]{1,10}",
    ]
}

fn uri() -> impl Strategy<Value = String> {
    let path = prop::collection::vec(segment(), 0..5).prop_map(|s| format!("/{}", s.join("/")));
    let query = prop::option::of(prop_oneof![
        "(from|to)=[0-9TZ:.+-]{0,30}",
        "(from|to)=2030-01-0[1-9]T0[0-9]:00:00Z(&(from|to)=2030-01-0[1-9]T00:00:00Z)?",
        "[a-z=&%0-9]{0,20}",
    ]);
    (path, query).prop_map(|(path, query)| match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    })
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::DELETE),
        Just(Method::PUT),
        Just(Method::PATCH),
        Just(Method::HEAD),
        Just(Method::OPTIONS),
        "[A-Z]{1,8}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap_or(Method::TRACE)),
    ]
}

fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[!-~]{0,300}".prop_map(String::into_bytes),
        "\"[ -~]{0,40}\"?".prop_map(String::into_bytes),
        prop::collection::vec(prop_oneof![32u8..127, 128u8..=255], 0..64),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(Vec::new()),
        2 => prop::collection::vec(any::<u8>(), 0..64),
        1 => (16_000usize..17_000).prop_map(|n| vec![b'x'; n]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 768,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_requests_never_get_a_5xx(
        method in method(),
        uri in uri(),
        keys in prop::collection::vec(header_bytes(), 0..3),
        body in body(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
            let engine = BookingEngine::new(store);
            let start = chrono::Utc::now() + chrono::Duration::hours(1);
            for capacity in [1, 3] {
                engine
                    .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), capacity))
                    .await
                    .unwrap();
            }
            let Ok(mut request) = Request::builder().method(method.clone()).uri(&uri).body(Body::from(body)) else {
                return Ok(()); // not a request a client could send
            };
            for key in &keys {
                if let Ok(value) = HeaderValue::from_bytes(key) {
                    request.headers_mut().append("idempotency-key", value);
                }
            }
            let response = slot_booking_server::router(engine).oneshot(request).await.unwrap();
            let status = response.status();
            prop_assert!(status.as_u16() < 500, "{method} {uri} {keys:?} gave {status}");
            if !status.is_success() && method != Method::HEAD {
                prop_assert_eq!(
                    response.headers().get("content-type").map(|v| v.as_bytes()),
                    Some(&b"application/problem+json"[..]),
                    "{} {}", method, uri
                );
            }
            Ok(())
        })?;
    }
}
