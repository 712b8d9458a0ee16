//! A small HTTP/1.1 client for model servers at `http://` addresses (ADR-127): the local
//! servers the fabric is built for (Ollama, llama.cpp, vLLM), where a run in flight spends
//! its life waiting for one answer.
//!
//! Why not reqwest here: every request in flight through reqwest and hyper holds hyper's
//! connection buffers (an 8 KiB write buffer made with the connection, an 8 KiB read buffer,
//! a dispatch channel) and the request body until the answer ends, about 40 KiB a run that
//! no option sizes (docs/BENCHMARKS.md). This client writes the request, drops it, and holds
//! nothing but the socket until the server has something to read; then it reads what is
//! there. Pieces of an answer are read into a buffer on the stack and copied out at their
//! size.
//!
//! What it speaks: one request at a time per connection, answers framed by
//! `Content-Length`, `chunked` or the connection's end, `1xx` answers skipped, keep-alive
//! connections kept for the next request (at most [`IDLE_MAX`], for [`IDLE_FOR`]). What it
//! leaves to reqwest (the transport picks): TLS, proxies, credentials in the address,
//! addresses that are not plain ASCII. It follows no redirect: a model server that
//! redirects a `POST` is misconfigured, and the status names where it points.

use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Most idle connections a client keeps for later requests.
const IDLE_MAX: usize = 64;
/// How long an idle connection is kept (reqwest's default too).
const IDLE_FOR: Duration = Duration::from_secs(90);
/// The largest answer head read; a server sending more is not a model server.
const MAX_HEAD: usize = 64 * 1024;
/// The most header lines an answer may have.
const MAX_HEADERS: usize = 64;
/// The most bytes one read takes from the socket.
const READ_PIECE: usize = 8 * 1024;
/// The longest line of a chunked body's framing (a size and its extensions).
const MAX_CHUNK_LINE: usize = 4 * 1024;

/// Why a request failed, in the words the transport maps onto `ChatError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlainError {
    /// No connection could be made.
    Connect(String),
    /// The server sent nothing for the read timeout.
    Timeout,
    /// The connection failed or ended part-way.
    Broken(String),
    /// The server's answer is not HTTP/1.1 as this client reads it.
    Malformed(String),
    /// The request itself cannot be written (a header value with a line break).
    Request(String),
}

/// Whether `base_url` is one this client serves: `http://`, no credentials in it, plain
/// printable ASCII, and no proxy configured for plain HTTP in the environment (reqwest
/// honours those, so it keeps them).
pub(crate) fn serves(base_url: &str) -> bool {
    let Some(target) = Target::of(base_url) else {
        return false;
    };
    let proxied = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()));
    !proxied && !target.authority.contains('@')
}

/// Where a URL points: the `host[:port]` to connect to and the request target.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    authority: &'a str,
    path: Cow<'a, str>,
}

impl<'a> Target<'a> {
    fn of(url: &'a str) -> Option<Self> {
        let rest = url.strip_prefix("http://")?;
        if !rest.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let rest = rest.split('#').next().unwrap_or(rest);
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() {
            return None;
        }
        let path = match path.as_bytes().first() {
            None => Cow::Borrowed("/"),
            Some(b'?') => Cow::Owned(format!("/{path}")),
            Some(_) => Cow::Borrowed(path),
        };
        Some(Self { authority, path })
    }

    /// The address to connect to: the authority, with port 80 when it names none.
    fn address(&self) -> Cow<'a, str> {
        let has_port = match self.authority.rfind(']') {
            // `[::1]:8080`: a port follows the bracket.
            Some(bracket) => self.authority[bracket..].contains(':'),
            None => self.authority.contains(':'),
        };
        if has_port {
            Cow::Borrowed(self.authority)
        } else {
            Cow::Owned(format!("{}:80", self.authority))
        }
    }
}

/// A connection kept for the next request.
#[derive(Debug)]
struct Idle {
    authority: Box<str>,
    stream: TcpStream,
    since: Instant,
}

type IdleList = Arc<Mutex<Vec<Idle>>>;

/// The client: its timeouts and its idle connections.
#[derive(Debug, Clone)]
pub(crate) struct Plain {
    idle: IdleList,
    connect_timeout: Duration,
    read_timeout: Duration,
}

/// One request's parts besides its method and URL.
pub(crate) struct Request<'a> {
    /// Header lines besides `Host`, `Content-Length` and `User-Agent`: name, value, and
    /// whether the value is secret (this client logs no header either way).
    pub(crate) headers: &'a [(&'static str, String, bool)],
    /// Makes the body, for each time the request is written: it is dropped as soon as it
    /// is, so a run waiting for its answer holds none of it.
    pub(crate) body: &'a (dyn Fn() -> Result<Option<Bytes>, PlainError> + Sync),
}

/// An answer's status and head, with its body still to read.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// The `Retry-After` header's value, if any.
    pub(crate) retry_after: Option<String>,
    pub(crate) body: Body,
}

impl Plain {
    pub(crate) fn new(connect_timeout: Duration, read_timeout: Duration) -> Self {
        Self {
            idle: Arc::default(),
            connect_timeout,
            read_timeout,
        }
    }

    /// Sends one request and reads the answer's head. A kept connection the server closed
    /// meanwhile fails before any byte of an answer; the request then goes once more, on a
    /// new connection.
    pub(crate) async fn send(
        &self,
        method: &str,
        url: &str,
        request: Request<'_>,
    ) -> Result<Answer, PlainError> {
        let target = Target::of(url)
            .ok_or_else(|| PlainError::Request(format!("`{url}` is not a plain http:// URL")))?;
        check_headers(request.headers)?;
        if let Some(stream) = self.take_idle(target.authority) {
            match self.exchange(stream, &target, method, &request).await {
                Err(Exchange::Stale(why)) => {
                    tracing::debug!(url, why, "a kept connection was closed; sending again")
                }
                other => return other.map_err(Exchange::into_error),
            }
        }
        let stream = self.connect(&target).await?;
        self.exchange(stream, &target, method, &request)
            .await
            .map_err(Exchange::into_error)
    }

    async fn connect(&self, target: &Target<'_>) -> Result<TcpStream, PlainError> {
        let address = target.address();
        let patience = self.connect_timeout;
        let addresses: Vec<SocketAddr> =
            match tokio::time::timeout(patience, tokio::net::lookup_host(&*address)).await {
                Err(_) => {
                    return Err(PlainError::Connect(format!(
                        "tcp connect error: {address} was not resolved within {} s",
                        patience.as_secs_f64()
                    )));
                }
                Ok(Err(e)) => return Err(PlainError::Connect(format!("tcp connect error: {e}"))),
                Ok(Ok(found)) => found.collect(),
            };
        if addresses.is_empty() {
            return Err(PlainError::Connect(format!(
                "tcp connect error: {address} has no address"
            )));
        }
        let stream = connect_any(&addresses, patience).await?;
        // The head and the body go in two writes; without this the second would wait for
        // the server's delayed acknowledgement of the first.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        Ok(stream)
    }

    /// Writes the request on `stream` and reads the answer's head.
    async fn exchange(
        &self,
        mut stream: TcpStream,
        target: &Target<'_>,
        method: &str,
        request: &Request<'_>,
    ) -> Result<Answer, Exchange> {
        // In a block of its own: the request's bytes are gone before the answer is waited for.
        {
            let body = (request.body)().map_err(Exchange::Failed)?;
            let head = request_head(method, target, request.headers, body.as_deref());
            let written = write_request(&mut stream, &head, body.as_deref());
            match tokio::time::timeout(self.read_timeout, written).await {
                Err(_) => return Err(Exchange::Failed(PlainError::Timeout)),
                Ok(Err(e)) => return Err(Exchange::Stale(format!("writing the request: {e}"))),
                Ok(Ok(())) => {}
            }
        }
        let mut raw = Vec::new();
        loop {
            let more = fill(&stream, &mut raw, self.read_timeout)
                .await
                .map_err(|e| match e {
                    PlainError::Broken(why) if raw.is_empty() => Exchange::Stale(why),
                    other => Exchange::Failed(other),
                })?;
            if !more {
                let why = "the server closed the connection before answering".to_owned();
                return Err(if raw.is_empty() {
                    Exchange::Stale(why)
                } else {
                    Exchange::Failed(PlainError::Broken(why))
                });
            }
            // `1xx` answers (`100 Continue`, `103 Early Hints`) come before the real one.
            while let Some(head) = parse_head(&raw).map_err(Exchange::Failed)? {
                if (100..200).contains(&head.status) && head.status != 101 {
                    raw.drain(..head.length);
                    continue;
                }
                let framing = head.framing(method);
                let keep_alive = head.keep_alive && !matches!(framing, Framing::ToEnd);
                return Ok(Answer {
                    status: head.status,
                    retry_after: head.retry_after,
                    body: Body {
                        stream: Some(stream),
                        raw,
                        at: head.length,
                        framing,
                        keep_alive,
                        read_timeout: self.read_timeout,
                        home: Some((Arc::clone(&self.idle), target.authority.into())),
                    },
                });
            }
            if raw.len() > MAX_HEAD {
                return Err(Exchange::Failed(PlainError::Malformed(format!(
                    "the answer's head is longer than {MAX_HEAD} bytes"
                ))));
            }
        }
    }

    /// A kept connection to `authority` that is still open and has nothing unread.
    fn take_idle(&self, authority: &str) -> Option<TcpStream> {
        let mut idle = lock(&self.idle);
        idle.retain(|kept| kept.since.elapsed() < IDLE_FOR);
        while let Some(at) = idle.iter().rposition(|kept| &*kept.authority == authority) {
            let kept = idle.swap_remove(at);
            let mut probe = [0u8; 1];
            // Open and quiet: the read would block. Closed (0) or sending something
            // unasked: not usable.
            if let Err(e) = kept.stream.try_read(&mut probe)
                && e.kind() == io::ErrorKind::WouldBlock
            {
                return Some(kept.stream);
            }
        }
        None
    }
}

fn lock(idle: &IdleList) -> std::sync::MutexGuard<'_, Vec<Idle>> {
    // A panic while holding this lock leaves a list of sockets, still a valid list.
    idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Connects to the first of `addresses` that answers, each tried in turn for an even share of
/// `patience` (as hyper's connector does): a name whose first address drops packets (an IPv6
/// route that goes nowhere) still reaches the next one in time.
async fn connect_any(
    addresses: &[SocketAddr],
    patience: Duration,
) -> Result<TcpStream, PlainError> {
    let share = patience / u32::try_from(addresses.len().max(1)).unwrap_or(u32::MAX);
    let mut last = String::new();
    for address in addresses {
        match tokio::time::timeout(share, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("{address}: {e}"),
            Err(_) => {
                last = format!("{address}: no answer within {} s", share.as_secs_f64());
            }
        }
    }
    Err(PlainError::Connect(format!("tcp connect error: {last}")))
}

/// How an exchange failed: on a kept connection before any answer (send again), or for good.
enum Exchange {
    Stale(String),
    Failed(PlainError),
}

impl Exchange {
    fn into_error(self) -> PlainError {
        match self {
            Self::Stale(why) => PlainError::Broken(why),
            Self::Failed(error) => error,
        }
    }
}

async fn write_request(stream: &mut TcpStream, head: &[u8], body: Option<&[u8]>) -> io::Result<()> {
    stream.write_all(head).await?;
    if let Some(body) = body {
        stream.write_all(body).await?;
    }
    stream.flush().await
}

/// Refuses a header value with a control character (a line break would start a header of
/// its own): both clients check what they are given with this, before anything is sent.
pub(crate) fn check_headers(headers: &[(&'static str, String, bool)]) -> Result<(), PlainError> {
    match headers
        .iter()
        .find(|(_, value, _)| value.bytes().any(|b| b.is_ascii_control() && b != b'\t'))
    {
        Some((name, _, _)) => Err(PlainError::Request(format!(
            "the `{name}` header's value has a control character; check the setting it comes from (an API key variable with a line break in it, say)"
        ))),
        None => Ok(()),
    }
}

/// The request line and headers, ready to write (checked by [`check_headers`]).
fn request_head(
    method: &str,
    target: &Target<'_>,
    headers: &[(&'static str, String, bool)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nhost: {}\r\nuser-agent: agent-fabric/{}\r\n",
        target.path,
        target.authority,
        env!("CARGO_PKG_VERSION")
    );
    for (name, value, _) in headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    if let Some(body) = body {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    } else if method != "GET" && method != "HEAD" {
        head.push_str("content-length: 0\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// Waits until the socket has something, then appends what one read gives to `raw`.
/// `false` at the connection's end.
async fn fill(
    stream: &TcpStream,
    raw: &mut Vec<u8>,
    patience: Duration,
) -> Result<bool, PlainError> {
    loop {
        match tokio::time::timeout(patience, stream.readable()).await {
            Err(_) => return Err(PlainError::Timeout),
            Ok(Err(e)) => return Err(PlainError::Broken(e.to_string())),
            Ok(Ok(())) => {}
        }
        match read_piece(stream, raw) {
            Ok(n) => return Ok(n > 0),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(PlainError::Broken(e.to_string())),
        }
    }
}

/// One read into a stack buffer, copied out at its size: nothing larger than what came is
/// held between reads. Not async, so the buffer is no part of a future.
fn read_piece(stream: &TcpStream, raw: &mut Vec<u8>) -> io::Result<usize> {
    let mut piece = [0u8; READ_PIECE];
    let n = stream.try_read(&mut piece)?;
    raw.extend_from_slice(&piece[..n]);
    Ok(n)
}

/// What the head of an answer says.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    /// The head's length in bytes.
    length: usize,
    keep_alive: bool,
    chunked: bool,
    /// A `Transfer-Encoding` other than `chunked` last: the body runs to the end.
    encoded: bool,
    content_length: Option<u64>,
    retry_after: Option<String>,
}

impl Head {
    fn framing(&self, method: &str) -> Framing {
        if method == "HEAD" || self.status == 204 || self.status == 304 {
            Framing::Length(0)
        } else if self.chunked {
            Framing::Chunked(Chunk::Size)
        } else if self.encoded {
            Framing::ToEnd
        } else {
            self.content_length.map_or(Framing::ToEnd, Framing::Length)
        }
    }
}

/// Parses an answer's head from the start of `raw`; `None` until all of it has come.
fn parse_head(raw: &[u8]) -> Result<Option<Head>, PlainError> {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut lines);
    let length = match answer.parse(raw) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(PlainError::Malformed(format!(
                "the server's answer is not HTTP/1.1 ({e}); it starts with: {}",
                crate::transport::cut(&String::from_utf8_lossy(&raw[..raw.len().min(80)]))
            )));
        }
    };
    let (Some(status), Some(version)) = (answer.code, answer.version) else {
        return Err(PlainError::Malformed("the answer has no status".to_owned()));
    };
    let mut head = Head {
        status,
        length,
        // HTTP/1.1 keeps the connection unless told otherwise; HTTP/1.0 only when told.
        keep_alive: version == 1,
        chunked: false,
        encoded: false,
        content_length: None,
        retry_after: None,
    };
    for line in answer.headers.iter() {
        let value = String::from_utf8_lossy(line.value);
        let value = value.trim();
        if line.name.eq_ignore_ascii_case("content-length") {
            let length = value.parse::<u64>().map_err(|_| {
                PlainError::Malformed(format!(
                    "the answer's Content-Length `{value}` is not a number"
                ))
            })?;
            if head.content_length.is_some_and(|seen| seen != length) {
                return Err(PlainError::Malformed(
                    "the answer has two different Content-Length headers".to_owned(),
                ));
            }
            head.content_length = Some(length);
        } else if line.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            head.chunked = last.eq_ignore_ascii_case("chunked");
            head.encoded = !head.chunked;
        } else if line.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    head.keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && version == 0 {
                    head.keep_alive = true;
                }
            }
        } else if line.name.eq_ignore_ascii_case("retry-after") {
            head.retry_after = Some(value.to_owned());
        }
    }
    Ok(Some(head))
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes are left.
    Length(u64),
    /// `Transfer-Encoding: chunked`, at this point of its framing.
    Chunked(Chunk),
    /// The body runs until the server closes the connection.
    ToEnd,
    /// All of it has been read.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// A size line comes next.
    Size,
    /// This many bytes of a chunk's data are left.
    Data(u64),
    /// The line break after a chunk's data comes next.
    DataEnd,
    /// The trailer lines after the last chunk, up to an empty line.
    Trailers,
}

/// An answer's body, read piece by piece; the connection goes back to its client when all
/// of it has been read and the server keeps it open.
#[derive(Debug)]
pub(crate) struct Body {
    stream: Option<TcpStream>,
    /// Bytes read but not yet handed out, from `at`.
    raw: Vec<u8>,
    at: usize,
    framing: Framing,
    keep_alive: bool,
    read_timeout: Duration,
    /// Where the connection is kept for later, and for which authority.
    home: Option<(IdleList, Box<str>)>,
}

impl Body {
    /// The next piece of the body, `None` at its end.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<u8>>, PlainError> {
        loop {
            match self.framing {
                Framing::Done => {
                    self.release();
                    return Ok(None);
                }
                Framing::Length(0) => self.framing = Framing::Done,
                Framing::Length(left) => {
                    let piece = self
                        .take(left, "the answer ended before its Content-Length")
                        .await?;
                    self.framing = Framing::Length(left - piece.len() as u64);
                    return Ok(Some(piece));
                }
                Framing::ToEnd => {
                    if self.buffered() == 0 && !self.fill().await? {
                        self.framing = Framing::Done;
                        continue;
                    }
                    return Ok(Some(self.take_buffered(u64::MAX)));
                }
                Framing::Chunked(Chunk::Data(0)) => self.framing = Framing::Chunked(Chunk::DataEnd),
                Framing::Chunked(Chunk::Data(left)) => {
                    let piece = self.take(left, "the answer ended inside a chunk").await?;
                    self.framing = Framing::Chunked(Chunk::Data(left - piece.len() as u64));
                    return Ok(Some(piece));
                }
                Framing::Chunked(Chunk::Size) => {
                    let line = self.line().await?;
                    let size = chunk_size(&line)?;
                    self.framing = Framing::Chunked(if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    });
                }
                Framing::Chunked(Chunk::DataEnd) => {
                    let line = self.line().await?;
                    if !line.is_empty() {
                        return Err(PlainError::Malformed(
                            "a chunk of the answer is longer than its size says".to_owned(),
                        ));
                    }
                    self.framing = Framing::Chunked(Chunk::Size);
                }
                Framing::Chunked(Chunk::Trailers) => {
                    if self.line().await?.is_empty() {
                        self.framing = Framing::Done;
                    }
                }
            }
        }
    }

    /// The whole rest of the body.
    pub(crate) async fn read_all(&mut self) -> Result<Vec<u8>, PlainError> {
        let mut all = Vec::new();
        while let Some(piece) = self.next().await? {
            if all.is_empty() {
                all = piece;
            } else {
                all.extend_from_slice(&piece);
            }
        }
        Ok(all)
    }

    fn buffered(&self) -> usize {
        self.raw.len() - self.at
    }

    /// Up to `most` bytes: what is buffered, else what the next read brings.
    async fn take(&mut self, most: u64, cut_short: &str) -> Result<Vec<u8>, PlainError> {
        if self.buffered() == 0 && !self.fill().await? {
            return Err(PlainError::Broken(cut_short.to_owned()));
        }
        Ok(self.take_buffered(most))
    }

    fn take_buffered(&mut self, most: u64) -> Vec<u8> {
        let n = self
            .buffered()
            .min(usize::try_from(most).unwrap_or(usize::MAX));
        if self.at == 0 && n == self.raw.len() {
            return std::mem::take(&mut self.raw);
        }
        let piece = self.raw[self.at..self.at + n].to_vec();
        self.at += n;
        piece
    }

    /// The next line of the chunked framing, without its line break.
    async fn line(&mut self) -> Result<Vec<u8>, PlainError> {
        loop {
            if let Some(end) = self.raw[self.at..].windows(2).position(|w| w == b"\r\n") {
                let line = self.raw[self.at..self.at + end].to_vec();
                self.at += end + 2;
                return Ok(line);
            }
            if self.buffered() > MAX_CHUNK_LINE {
                return Err(PlainError::Malformed(format!(
                    "a line of the answer's chunked framing is longer than {MAX_CHUNK_LINE} bytes"
                )));
            }
            if !self.fill().await? {
                return Err(PlainError::Broken(
                    "the answer ended inside its chunked framing".to_owned(),
                ));
            }
        }
    }

    /// Reads more, keeping only what is not handed out yet (nothing at all while waiting,
    /// when all of it was).
    async fn fill(&mut self) -> Result<bool, PlainError> {
        if self.at == self.raw.len() {
            self.raw = Vec::new();
        } else {
            self.raw.drain(..self.at);
        }
        self.at = 0;
        let Some(stream) = &self.stream else {
            return Ok(false);
        };
        fill(stream, &mut self.raw, self.read_timeout).await
    }

    /// Hands the connection back for the next request, when the server keeps it and sent
    /// nothing past this answer.
    fn release(&mut self) {
        let stream = self.stream.take();
        if let (Some(stream), Some((idle, authority))) = (stream, self.home.take())
            && self.keep_alive
            && self.buffered() == 0
        {
            let mut idle = lock(&idle);
            if idle.len() < IDLE_MAX {
                idle.push(Idle {
                    authority,
                    stream,
                    since: Instant::now(),
                });
            }
        }
    }
}

/// A chunk's size from its line (`1a2b` or `1a2b;name=value`).
fn chunk_size(line: &[u8]) -> Result<u64, PlainError> {
    let text = String::from_utf8_lossy(line);
    let digits = text.split(';').next().unwrap_or("").trim();
    u64::from_str_radix(digits, 16).map_err(|_| {
        PlainError::Malformed(format!(
            "`{}` is not the size of a chunk",
            crate::transport::cut(&text)
        ))
    })
}

#[cfg(test)]
#[path = "plain_tests.rs"]
mod tests;
