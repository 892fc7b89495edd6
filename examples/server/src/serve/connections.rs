//! Which connections are open and which of them is idle: the registry [`Connections`] the
//! acceptor asks for room at the limit, and each connection's [`Activity`], kept up to date
//! by the wrappers of `tracked.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Every connection being served, for finding the longest-idle one at the limit.
#[derive(Default)]
pub(super) struct Connections {
    live: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Ticks at every connection going idle: a smaller `idle_since` has been idle longer.
    idle_clock: AtomicU64,
    /// Whether a newcomer is waiting for room (connections going idle then say so).
    waiting: AtomicBool,
    went_idle: Notify,
    /// Signalled whenever a connection ends.
    ended: Notify,
}

impl Connections {
    fn live(&self) -> MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        // Nothing panics while holding the lock; a poisoned map is still a valid map.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn register(&self) -> Arc<Activity> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new(id));
        self.live().insert(id, Arc::clone(&activity));
        activity
    }

    pub(super) fn deregister(&self, id: u64) {
        self.live().remove(&id);
        self.ended.notify_waiters();
    }

    pub(super) fn open(&self) -> usize {
        self.live().len()
    }

    pub(super) async fn all_closed(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so an end between the look and the wait is not lost.
            ended.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            ended.await;
        }
    }

    /// A permit to serve one more connection: at once below the limit; at the limit, after
    /// asking the longest-idle connection to close (when there is one, or as soon as one goes
    /// idle) and waiting for a connection to end.
    pub(super) async fn room_for_one(&self, permits: &Arc<Semaphore>) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(permits).try_acquire_owned() {
            return permit;
        }
        self.waiting.store(true, Ordering::SeqCst);
        let mut asked = false;
        let permit = loop {
            let went_idle = self.went_idle.notified();
            asked = asked || self.close_longest_idle();
            tokio::select! {
                permit = Arc::clone(permits).acquire_owned() => match permit {
                    Ok(permit) => break permit,
                    // The semaphore is never closed.
                    Err(_) => std::future::pending().await,
                },
                () = went_idle => {}
            }
        };
        self.waiting.store(false, Ordering::SeqCst);
        permit
    }

    /// Asks the connection idle the longest to close; false when none is idle.
    fn close_longest_idle(&self) -> bool {
        let live = self.live();
        loop {
            let Some(victim) = live
                .values()
                .filter(|activity| activity.phase.load(Ordering::SeqCst) == IDLE)
                .min_by_key(|activity| activity.idle_since.load(Ordering::SeqCst))
            else {
                return false;
            };
            // It may have started a request since the look: then look again.
            if victim
                .phase
                .compare_exchange(IDLE, CLOSING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                tracing::debug!(
                    connection = victim.id,
                    "at the connection limit: closing the longest-idle keep-alive connection"
                );
                victim.close.notify_one();
                return true;
            }
        }
    }

    /// Called by a connection that just went idle.
    fn on_idle(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            self.went_idle.notify_one();
        }
    }
}

/// In a request or response, or not yet through its first one.
const BUSY: u8 = 0;
/// The last response written, nothing received since.
const IDLE: u8 = 1;
/// Chosen to make room: closing.
const CLOSING: u8 = 2;

/// One connection's progress, kept by its socket ([`Tracked`](super::tracked::Tracked)), its service and bodies
/// ([`TrackedService`](super::tracked::TrackedService)), read by the acceptor at the limit. One request at a time: hyper
/// serves HTTP/1.1 requests in order.
pub(super) struct Activity {
    pub(super) id: u64,
    phase: AtomicU8,
    idle_since: AtomicU64,
    /// The current request has been received whole (head and body).
    request_received: AtomicBool,
    /// Bytes have arrived since then: the next request has begun.
    read_since_request: AtomicBool,
    /// The current response's body has ended (written once the socket is flushed).
    response_ended: AtomicBool,
    /// Notified when the connection is to close (chosen to make room).
    pub(super) close: Notify,
}

impl Activity {
    fn new(id: u64) -> Activity {
        Activity {
            id,
            phase: AtomicU8::new(BUSY),
            idle_since: AtomicU64::new(0),
            request_received: AtomicBool::new(false),
            read_since_request: AtomicBool::new(false),
            response_ended: AtomicBool::new(false),
            close: Notify::new(),
        }
    }

    /// The socket gave bytes: a request (or its body) is arriving.
    pub(super) fn on_bytes(&self) {
        if self.request_received.load(Ordering::Relaxed) {
            self.read_since_request.store(true, Ordering::Relaxed);
        }
        // Idle no more; a connection already chosen to close stays so (hyper lets a request
        // it has read the head of finish first).
        let _ = self
            .phase
            .compare_exchange(IDLE, BUSY, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// hyper has a request head and calls the service.
    pub(super) fn on_request(&self, body_ended: bool) {
        self.read_since_request.store(false, Ordering::Relaxed);
        self.response_ended.store(false, Ordering::Relaxed);
        self.request_received.store(body_ended, Ordering::Relaxed);
    }

    pub(super) fn on_request_body_end(&self) {
        self.request_received.store(true, Ordering::Relaxed);
    }

    pub(super) fn on_response_end(&self) {
        self.response_ended.store(true, Ordering::Relaxed);
    }

    /// Everything hyper had to write has been written: idle if the response ended, the
    /// request was received whole and nothing has arrived since.
    pub(super) fn on_flushed(&self, connections: &Connections) {
        if !self.response_ended.load(Ordering::Relaxed)
            || !self.request_received.load(Ordering::Relaxed)
            || self.read_since_request.load(Ordering::Relaxed)
        {
            return;
        }
        let tick = connections.idle_clock.fetch_add(1, Ordering::Relaxed);
        self.idle_since.store(tick, Ordering::SeqCst);
        if self
            .phase
            .compare_exchange(BUSY, IDLE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            connections.on_idle();
        }
    }
}
