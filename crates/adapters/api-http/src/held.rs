//! The requests that hold their connection for a run's life, `POST /run` and `POST
//! /run/stream`, answered without hyper's connection (ADR-129).
//!
//! hyper's HTTP/1 connection keeps an 8 KiB read buffer and an 8 KiB write buffer for as
//! long as it is open, whatever it is waiting for; no option sizes them. A blocking run
//! holds its connection until the run ends, so those 17 KiB were most of what a run in
//! flight through `POST /run` cost (issue #45, docs/BENCHMARKS.md). Here the first request
//! of each connection is read by [`first`]: when it is one of these two, whole and plain
//! (HTTP/1.1, a `Content-Length` body within the server's limit, no `Expect`, no
//! `Transfer-Encoding`, no upgrade), [`serve`] answers it with the same router, holding only
//! the socket while the run goes on, and closes the connection after the answer
//! (`Connection: close`, so a client's next request opens a new one). Every other request,
//! and every request after the first on a connection, is hyper's, which is handed the bytes
//! already read ([`Rewind`]) in one piece, so it parses the head in one read as it would
//! from the socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, Uri, Version, header};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tower::Service;

/// The largest head read to tell a held request from others: a longer one is hyper's
/// (whose own limit is larger, and which answers what it cannot take).
const MAX_HEAD: usize = 16 * 1024;
/// The most header fields a held request may have (else hyper's).
const MAX_HEADERS: usize = 64;
/// How much one read of the head takes from the socket.
const READ_CHUNK: usize = 4096;

/// The paths whose requests hold their connection for a run's life.
const HELD_PATHS: [&str; 2] = ["/run", "/run/stream"];

/// The first request of a connection, as far as [`first`] read it.
#[derive(Debug)]
pub(crate) enum First {
    /// A held request: its head, its body's length, and the bytes of the body already read.
    Held {
        head: Box<Request<()>>,
        length: usize,
        body: Vec<u8>,
    },
    /// Anything else: hyper serves the connection, starting with these bytes.
    Other(Vec<u8>),
    /// The client closed the connection before sending anything.
    Closed,
}

/// Reads the first request's head from `stream` and says whether it is a held request.
/// Nothing is allocated until bytes arrive, so an idle connection costs only its socket.
pub(crate) async fn first(stream: &TcpStream, max_body: usize) -> io::Result<First> {
    let mut read = Vec::new();
    loop {
        stream.readable().await?;
        let got = {
            let mut chunk = [0u8; READ_CHUNK];
            match stream.try_read(&mut chunk) {
                Ok(n) => {
                    read.extend_from_slice(&chunk[..n]);
                    n
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if got == 0 {
            return Ok(if read.is_empty() {
                First::Closed
            } else {
                First::Other(read)
            });
        }
        match classify(&read, max_body) {
            Sniffed::Partial if read.len() < MAX_HEAD => {}
            Sniffed::Partial | Sniffed::Other => return Ok(First::Other(read)),
            Sniffed::Held {
                head,
                head_len,
                length,
            } => {
                let body = read.split_off(head_len);
                return Ok(First::Held { head, length, body });
            }
        }
    }
}

/// What the bytes read so far say.
#[derive(Debug)]
enum Sniffed {
    /// The head is not whole yet.
    Partial,
    /// Not a held request (or not one this path takes): hyper's.
    Other,
    Held {
        head: Box<Request<()>>,
        head_len: usize,
        length: usize,
    },
}

fn classify(bytes: &[u8], max_body: usize) -> Sniffed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    let head_len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Sniffed::Partial,
        // Too many fields, or not HTTP: hyper answers it.
        Err(_) => return Sniffed::Other,
    };
    let (Some("POST"), Some(target), Some(1)) = (parsed.method, parsed.path, parsed.version) else {
        return Sniffed::Other;
    };
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    if !HELD_PATHS.contains(&path) {
        return Sniffed::Other;
    }
    let Ok(uri) = target.parse::<Uri>() else {
        return Sniffed::Other;
    };
    let mut head = Request::new(());
    *head.method_mut() = Method::POST;
    *head.uri_mut() = uri;
    *head.version_mut() = Version::HTTP_11;
    let mut length = None;
    for field in parsed.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(field.name.as_bytes()),
            HeaderValue::from_bytes(field.value),
        ) else {
            return Sniffed::Other;
        };
        if name == header::CONTENT_LENGTH {
            // One length, of digits only (a second, even equal, is hyper's to judge).
            let digits = field.value;
            if length.is_some() || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Sniffed::Other;
            }
            length = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<usize>().ok());
            if length.is_none() {
                return Sniffed::Other;
            }
        } else if name == header::TRANSFER_ENCODING
            || name == header::EXPECT
            || name == header::UPGRADE
        {
            return Sniffed::Other;
        }
        head.headers_mut().append(name, value);
    }
    match length {
        Some(length) if length <= max_body => Sniffed::Held {
            head: Box::new(head),
            head_len,
            length,
        },
        // No length (an empty body is `Content-Length: 0`), or too long: hyper's, whose
        // answer (411, 413 through the router's limit) stays the one clients get.
        _ => Sniffed::Other,
    }
}

/// Answers one held request on `stream` with `app`, then closes the connection. While the
/// run goes on the connection holds only its socket; a client that closes it stops the
/// answer as hyper does (the run goes on, docs/HTTP.md).
pub(crate) async fn serve(
    mut stream: TcpStream,
    mut app: crate::App,
    head: Box<Request<()>>,
    length: usize,
    mut body: Vec<u8>,
    idle: std::time::Duration,
) {
    if let Err(e) = read_body(&mut stream, length, &mut body, idle).await {
        tracing::trace!(error = %e, "a held request's body could not be read");
        return;
    }
    // Bytes past the body (a pipelined request) are dropped: the answer closes the
    // connection, and a client sends its next request again on a new one.
    body.truncate(length);
    let request = head.map(|()| Body::from(body));
    // Called here, not through `oneshot`, so the request is not kept in this future beside
    // the router's for the run's life. A router is always ready (axum's `poll_ready` answers
    // at once); asked anyway, as tower's contract wants.
    let ready = Service::<Request<Body>>::poll_ready(
        &mut app,
        &mut Context::from_waker(std::task::Waker::noop()),
    );
    debug_assert!(ready.is_ready(), "axum's router is always ready");
    let answered = {
        let answering = std::pin::pin!(app.call(request));
        answer(&stream, answering).await
    };
    let Some(response) = answered else {
        return;
    };
    if let Err(e) = write_response(&mut stream, response).await {
        tracing::trace!(error = %e, "a held request's answer could not be written");
    }
}

/// Reads the rest of a body of `length` bytes. The buffer grows with what arrives, not with
/// what the head announced: a client that sends a head and no body costs no more than its
/// bytes, and one that stops sending for `idle` is disconnected.
async fn read_body(
    stream: &mut TcpStream,
    length: usize,
    body: &mut Vec<u8>,
    idle: std::time::Duration,
) -> io::Result<()> {
    use tokio::io::AsyncReadExt;
    while body.len() < length {
        let want = length - body.len();
        let mut taken = (&mut *stream).take(want as u64);
        let got = tokio::time::timeout(idle, taken.read_buf(body))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the body stopped coming"))??;
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// The router's answer, or `None` when the client closed the connection first.
async fn answer<F>(stream: &TcpStream, mut answering: Pin<&mut F>) -> Option<Response<Body>>
where
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>>,
{
    loop {
        tokio::select! {
            answered = answering.as_mut() => {
                // The router's error type is `Infallible`.
                return match answered {
                    Ok(response) => Some(response),
                    Err(never) => match never {},
                };
            }
            ready = stream.readable() => {
                if ready.is_err() {
                    return None;
                }
                let mut probe = [0u8; 1024];
                match stream.try_read(&mut probe) {
                    // The client is gone: stop answering, as hyper does.
                    Ok(0) => return None,
                    // More bytes (a pipelined request): dropped like any bytes past the body,
                    // and the close is still watched for behind them; the answer closes the
                    // connection and the client sends that request again on a new one.
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return None,
                }
            }
        }
    }
}

/// Writes `response` as HTTP/1.1 with `Connection: close`: its length when the body knows it,
/// else the body runs to the connection's end (an SSE stream, frame by frame as it comes).
async fn write_response(stream: &mut TcpStream, response: Response<Body>) -> io::Result<()> {
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let bodiless = status.is_informational()
        || status == axum::http::StatusCode::NO_CONTENT
        || status == axum::http::StatusCode::NOT_MODIFIED;
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    let mut has_length = false;
    for (name, value) in &parts.headers {
        if name == header::CONNECTION || name == header::TRANSFER_ENCODING {
            continue;
        }
        has_length |= name == header::CONTENT_LENGTH;
        push_field(&mut head, name.as_str(), value.as_bytes());
    }
    if !has_length
        && !bodiless
        && let Some(length) = body.size_hint().exact()
    {
        push_field(&mut head, "content-length", length.to_string().as_bytes());
    }
    if !parts.headers.contains_key(header::DATE) {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        push_field(&mut head, "date", date.as_bytes());
    }
    push_field(&mut head, "connection", b"close");
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await?;
    drop(head);
    if !bodiless {
        let mut frames = body.into_data_stream();
        while let Some(frame) = frames.next().await {
            let data = frame.map_err(io::Error::other)?;
            stream.write_all(&data).await?;
        }
    }
    stream.shutdown().await
}

fn push_field(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// A connection whose first bytes were already read: they are read again first, in one
/// piece, then the socket.
pub(crate) struct Rewind {
    read: Vec<u8>,
    at: usize,
    stream: TcpStream,
}

impl Rewind {
    pub(crate) fn new(read: Vec<u8>, stream: TcpStream) -> Self {
        Self {
            read,
            at: 0,
            stream,
        }
    }
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.read.len() {
            let n = buf.remaining().min(this.read.len() - this.at);
            buf.put_slice(&this.read[this.at..this.at + n]);
            this.at += n;
            if this.at == this.read.len() {
                // Given back once read: hyper has the bytes now.
                this.read = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(bytes: &[u8]) -> Option<(Box<Request<()>>, usize, usize)> {
        match classify(bytes, 1024) {
            Sniffed::Held {
                head,
                head_len,
                length,
            } => Some((head, head_len, length)),
            _ => None,
        }
    }

    #[test]
    fn a_plain_post_to_run_or_run_stream_is_held() {
        let bytes = b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let (head, head_len, length) = held(bytes).expect("held");
        assert_eq!(head.uri(), "/run");
        assert_eq!(head.headers()["content-type"], "application/json");
        assert_eq!((head_len, length), (bytes.len() - 2, 2));
        let stream = b"POST /run/stream?x=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(held(stream).expect("held").0.uri(), "/run/stream?x=1");
    }

    #[test]
    fn everything_else_is_left_to_hyper() {
        for bytes in [
            &b"GET /run HTTP/1.1\r\ncontent-length: 0\r\n\r\n"[..],
            b"POST /runs HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            b"POST /run/streams HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            b"POST /run HTTP/1.0\r\ncontent-length: 0\r\n\r\n",
            b"POST /run HTTP/1.1\r\n\r\n",
            b"POST /run HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST /run HTTP/1.1\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n",
            b"POST /run HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n",
            b"POST /run HTTP/1.1\r\ncontent-length: +2\r\n\r\n",
            b"POST /run HTTP/1.1\r\ncontent-length: 2000\r\n\r\n",
            b"POST /run HTTP/1.1\r\nupgrade: websocket\r\ncontent-length: 0\r\n\r\n",
            b"\x16\x03\x01 not http",
        ] {
            assert!(
                matches!(classify(bytes, 1024), Sniffed::Other),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert!(matches!(
            classify(b"POST /run HTTP/1.1\r\ncontent-le", 1024),
            Sniffed::Partial
        ));
    }
}
