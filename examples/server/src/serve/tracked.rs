//! The wrappers that keep a connection's [`Activity`] up to date: its socket ([`Tracked`]),
//! its service ([`TrackedService`]) and its request and response bodies ([`Signalling`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::connections::{Activity, Connections};

/// A connection's socket, telling its [`Activity`] when bytes arrive and when everything
/// written has been flushed.
pub(super) struct Tracked {
    pub(super) stream: TcpStream,
    pub(super) activity: Arc<Activity>,
    pub(super) connections: Arc<Connections>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_bytes();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    /// hyper flushes the socket once its own buffer has been written out whole.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.activity.on_flushed(&self.connections);
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The router, telling the connection's [`Activity`] when a request arrives, when its body
/// has been received and when the response's body ends.
pub(super) struct TrackedService {
    pub(super) app: TowerToHyperService<Router>,
    pub(super) activity: Arc<Activity>,
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Signalling<Body>>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for TrackedService {
    type Response = Response<Signalling<Body>>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.activity.on_request(request.body().is_end_stream());
        let activity = Arc::clone(&self.activity);
        let request = request.map(|body| Signalling {
            body,
            activity: Arc::clone(&activity),
            ended: Activity::on_request_body_end,
        });
        let response = self.app.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Signalling {
                body,
                activity,
                ended: Activity::on_response_end,
            }))
        })
    }
}

/// A body that tells its connection's [`Activity`] when it has ended (`ended`): a request's
/// when it has been received whole, a response's when hyper has it all.
pub(super) struct Signalling<B> {
    body: B,
    activity: Arc<Activity>,
    ended: fn(&Activity),
}

impl<B: HttpBody + Unpin> HttpBody for Signalling<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            (self.ended)(&self.activity);
        }
        polled
    }

    /// hyper asks before polling (an empty body is never polled) and after each frame.
    fn is_end_stream(&self) -> bool {
        let ended = self.body.is_end_stream();
        if ended {
            (self.ended)(&self.activity);
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
