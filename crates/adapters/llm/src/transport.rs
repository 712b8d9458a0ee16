//! The HTTP transport every client shares: a pooled HTTP client (our own HTTP/1.1 client for
//! `http://` servers, reqwest for `https://` and proxies; ADR-127), the API key, retries with
//! backoff, and the mapping of transport failures onto [`ChatError`].

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fabric_engine::ChatError;
use reqwest::header::RETRY_AFTER;
use reqwest::{Method, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ClientBuildError;
use crate::plain::{Plain, PlainError};

/// Backoff never waits longer than this between two attempts, whatever the attempt count.
const MAX_BACKOFF: Duration = Duration::from_secs(20);
/// A server's `Retry-After` is honoured up to this long; beyond it we would rather fail and tell
/// the user than hang a run for minutes.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How much of an error body is kept in [`ChatError::Status`]: enough to read the server's
/// message, not a whole HTML page.
const MAX_ERROR_BODY_CHARS: usize = 500;

/// How to reach a model server and how patiently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// The server's base address, for example `http://localhost:11434/v1`. A trailing slash is
    /// tolerated.
    pub base_url: String,
    /// The name of the environment variable that holds the API key, if the server needs one.
    /// The variable is read once, when the client is built.
    pub api_key_env: Option<String>,
    /// How long to wait for the server to send anything (headers or the next piece of a
    /// stream), in seconds. Local models can be slow to start answering, so this is generous.
    pub timeout_s: u64,
    /// How long to wait for a connection, in seconds.
    pub connect_timeout_s: u64,
    /// How many times a retryable failure is retried (0: one attempt only).
    pub max_retries: u32,
    /// The first backoff pause in milliseconds; it doubles with every retry.
    pub backoff_base_ms: u64,
    /// Most requests at once to this server, from every client of the process
    /// (`max_concurrent_requests`); `None`: no limit.
    pub max_concurrent: Option<usize>,
    /// How tool calls are asked for (`constrained_decoding`; OpenAI-compatible servers).
    pub constrained: crate::ConstrainedDecoding,
    /// How a Responses API client sends a conversation (`response_chaining`).
    pub chaining: fabric_domain::ResponseChaining,
}

impl HttpSettings {
    /// Settings for `base_url` with defaults suited to a local model server: no API key,
    /// 300 s read timeout, 5 s connect timeout, 3 retries starting at 500 ms.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            timeout_s: 300,
            connect_timeout_s: 5,
            max_retries: 3,
            backoff_base_ms: 500,
            max_concurrent: None,
            constrained: crate::ConstrainedDecoding::Off,
            chaining: fabric_domain::ResponseChaining::FullInput,
        }
    }
}

impl HttpSettings {
    /// How to reach `model`'s server (ADR-098: a connection's settings, which discovery,
    /// probes and pulls also make for themselves, not a second model key): its address,
    /// key, patience, retries and concurrency as the key says, the transport's own
    /// connect timeout and backoff.
    pub fn of(model: &fabric_domain::ModelConfig) -> Self {
        Self {
            api_key_env: model.api_key_env.clone(),
            timeout_s: model.timeout_s,
            max_retries: model.max_retries,
            max_concurrent: model.concurrent_requests().map(|n| n as usize),
            constrained: model.constrained(),
            chaining: model.response_chaining,
            ..Self::new(model.base_url.clone())
        }
    }
}

/// How long a server that answers "Loading model" is waited for.
const LOADING_PATIENCE: Duration = Duration::from_secs(120);
/// How often it is asked again meanwhile.
const LOADING_POLL: Duration = Duration::from_millis(500);

/// Whether the server said it is still loading its model (llama.cpp's 503
/// `{"error": {"message": "Loading model", "type": "unavailable_error"}}`).
fn is_loading(error: &ChatError) -> bool {
    matches!(error, ChatError::Status { status: 503, body, .. }
        if body.to_ascii_lowercase().contains("loading model"))
}

/// The API key, kept out of every `Debug` output and log line.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One failed attempt, with the pause the server asked for, if any.
struct Failure {
    error: ChatError,
    retry_after: Option<Duration>,
}

impl From<ChatError> for Failure {
    fn from(error: ChatError) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

/// How much of a successful answer one attempt reads.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// The whole body.
    Whole,
    /// Only the headers; the caller streams the body.
    Open,
}

/// What an attempt got, per [`Read`].
enum Outcome {
    Whole(Vec<u8>),
    Open(Stream),
}

/// A successful answer whose body the caller reads piece by piece.
#[derive(Debug)]
pub(crate) enum Stream {
    Reqwest(Response),
    Plain(crate::plain::Body),
}

/// Which HTTP client carries the requests.
#[derive(Debug, Clone)]
enum Client {
    /// `https://`, proxies, anything [`crate::plain`] leaves out.
    Reqwest(reqwest::Client),
    /// A plain `http://` server (ADR-127).
    Plain(Plain),
}

/// How the API key is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI-compatible servers, Ollama behind a proxy).
    Bearer,
    /// `x-api-key: <key>` and `anthropic-version` (Anthropic's Messages API).
    Anthropic,
}

/// The Messages API version the Anthropic client speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A pooled HTTP client bound to one server.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    client: Client,
    base_url: String,
    api_key: Option<ApiKey>,
    auth: Auth,
    timeout_s: u64,
    max_retries: u32,
    backoff_base: Duration,
}

impl Transport {
    /// Builds the client once; it pools connections for every later call.
    pub(crate) fn new(settings: &HttpSettings) -> Result<Self, ClientBuildError> {
        Self::with_auth(settings, Auth::Bearer)
    }

    /// Builds the client with the key sent the way `auth` says.
    pub(crate) fn with_auth(settings: &HttpSettings, auth: Auth) -> Result<Self, ClientBuildError> {
        let base_url = settings.base_url.trim().trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ClientBuildError::InvalidBaseUrl {
                url: settings.base_url.clone(),
            });
        }
        let connect_timeout = Duration::from_secs(settings.connect_timeout_s);
        let read_timeout = Duration::from_secs(settings.timeout_s);
        let client = if crate::plain::serves(&base_url) {
            Client::Plain(Plain::new(connect_timeout, read_timeout))
        } else {
            Client::Reqwest(reqwest_client(&base_url, connect_timeout, read_timeout)?)
        };
        let api_key = settings.api_key_env.as_deref().and_then(read_api_key);
        Ok(Self {
            client,
            base_url,
            api_key,
            auth,
            timeout_s: settings.timeout_s,
            max_retries: settings.max_retries,
            backoff_base: Duration::from_millis(settings.backoff_base_ms),
        })
    }

    /// The base address without a trailing slash.
    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Sends a request and reads the whole answer, retrying retryable failures. Reading the
    /// body is part of the attempt: a non-streaming answer can be retried until it is complete.
    pub(crate) async fn fetch(
        &self,
        method: Method,
        url: &str,
        body: Option<&(impl Serialize + Sync)>,
    ) -> Result<Vec<u8>, ChatError> {
        let encode = || encode_body(body);
        let body = Encode::of(body, &encode);
        match self.with_retries(method, url, &body, Read::Whole).await? {
            Outcome::Whole(bytes) => Ok(bytes),
            // Not produced for `Read::Whole`; reading the rest keeps this total anyway.
            Outcome::Open(mut stream) => {
                let mut all = Vec::new();
                while let Some(piece) = self.next_chunk(url, &mut stream).await? {
                    all.extend_from_slice(&piece);
                }
                Ok(all)
            }
        }
    }

    /// Sends a request and returns the successful response for the caller to read as a
    /// stream. Only getting the response is retried: once pieces reach the observer, sending
    /// again would show them twice.
    pub(crate) async fn open_stream(
        &self,
        url: &str,
        body: &(impl Serialize + Sync),
    ) -> Result<Stream, ChatError> {
        match self
            .with_retries(
                Method::POST,
                url,
                &Encode::of(Some(body), &|| encode_body(Some(body))),
                Read::Open,
            )
            .await?
        {
            Outcome::Open(stream) => Ok(stream),
            Outcome::Whole(_) => Err(ChatError::Decode {
                url: url.to_owned(),
                detail: "internal: a streamed answer was read whole".to_owned(),
            }),
        }
    }

    /// The next piece of a streamed body, `None` at its end.
    pub(crate) async fn next_chunk(
        &self,
        url: &str,
        stream: &mut Stream,
    ) -> Result<Option<Vec<u8>>, ChatError> {
        match stream {
            Stream::Reqwest(response) => match response.chunk().await {
                Ok(chunk) => Ok(chunk.map(|c| c.to_vec())),
                Err(e) => Err(self.map_reqwest(url, &e)),
            },
            Stream::Plain(body) => body.next().await.map_err(|e| self.map_plain(url, e)),
        }
    }

    // The retry loop takes what to do as data (`Read`) rather than as an async closure: the
    // futures of generic async closures do not prove `Send` to `async_trait`. The body is
    // encoded by each attempt, so none of it is held between attempts or, with the plain
    // client, while the answer is waited for (issue #45); it comes as a function, not as
    // the value to encode, so this loop and the clients under it are built once, not once
    // per kind of request body.
    async fn with_retries(
        &self,
        method: Method,
        url: &str,
        body: &Encode<'_>,
        read: Read,
    ) -> Result<Outcome, ChatError> {
        let mut attempt: u32 = 0;
        let started = std::time::Instant::now();
        loop {
            attempt += 1;
            let failure = match self.attempt(method.clone(), url, body, read).await {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            if !failure.error.is_retryable() {
                return Err(failure.error);
            }
            // A server still loading its model (llama.cpp answers 503 "Loading model") is
            // waited for, up to LOADING_PATIENCE, without using up the retries (issue #24).
            if is_loading(&failure.error) && started.elapsed() < LOADING_PATIENCE {
                tracing::info!(url, "the model server is still loading its model; waiting");
                attempt -= 1;
                tokio::time::sleep(LOADING_POLL).await;
                continue;
            }
            if attempt > self.max_retries {
                // With retries switched off the caller wants the plain error, not a wrapper
                // that claims something was retried.
                if self.max_retries == 0 {
                    return Err(failure.error);
                }
                return Err(ChatError::RetriesExhausted {
                    attempts: attempt,
                    last: Box::new(failure.error),
                });
            }
            let pause = failure
                .retry_after
                .map(|d| d.min(MAX_RETRY_AFTER))
                .unwrap_or_else(|| backoff(self.backoff_base, attempt));
            tracing::debug!(
                url,
                attempt,
                error = %failure.error.kind_tag(),
                pause_ms = pause.as_millis() as u64,
                "model server call failed, retrying"
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// One request: success is a 2xx response (read whole if asked); anything else becomes
    /// a [`Failure`].
    async fn attempt(
        &self,
        method: Method,
        url: &str,
        body: &Encode<'_>,
        read: Read,
    ) -> Result<Outcome, Failure> {
        let headers = self.headers(body.present);
        match &self.client {
            Client::Reqwest(client) => {
                let body = (body.encode)().map_err(|e| {
                    Failure::from(ChatError::Decode {
                        url: url.to_owned(),
                        detail: unencodable(&e),
                    })
                })?;
                // Boxed, as the answer's reading below: a run waits in this future for its
                // model, and inline the largest arm sized every run's (issue #45).
                Box::pin(self.attempt_reqwest(client, method, url, &headers, body, read)).await
            }
            Client::Plain(plain) => {
                let encode = || (body.encode)().map_err(|e| PlainError::Request(unencodable(&e)));
                let request = crate::plain::Request {
                    headers: &headers,
                    body: &encode,
                };
                let answer = plain
                    .send(method.as_str(), url, request)
                    .await
                    .map_err(|e| Failure::from(self.map_plain(url, e)))?;
                Box::pin(self.conclude_plain(url, answer, read)).await
            }
        }
    }

    /// The headers of every request besides `Host`, `User-Agent` and `Content-Length`; the
    /// flag marks a value no log may show.
    fn headers(&self, has_body: bool) -> Vec<(&'static str, String, bool)> {
        let mut headers = vec![(
            "accept",
            "application/json, text/event-stream, application/x-ndjson".to_owned(),
            false,
        )];
        match (self.auth, &self.api_key) {
            (Auth::Bearer, Some(key)) => {
                headers.push(("authorization", format!("Bearer {}", key.0), true));
            }
            (Auth::Bearer, None) => {}
            (Auth::Anthropic, key) => {
                headers.push(("anthropic-version", ANTHROPIC_VERSION.to_owned(), false));
                if let Some(key) = key {
                    headers.push(("x-api-key", key.0.clone(), true));
                }
            }
        }
        if has_body {
            headers.push(("content-type", "application/json".to_owned(), false));
        }
        // The model call's span, when the run is traced (issue #13): the server's own spans,
        // if it makes any, become its children.
        if let Some(traceparent) = fabric_engine::trace::current_traceparent() {
            headers.push(("traceparent", traceparent, false));
        }
        headers
    }

    async fn attempt_reqwest(
        &self,
        client: &reqwest::Client,
        method: Method,
        url: &str,
        headers: &[(&'static str, String, bool)],
        body: Option<Bytes>,
        read: Read,
    ) -> Result<Outcome, Failure> {
        crate::plain::check_headers(headers).map_err(|e| Failure::from(self.map_plain(url, e)))?;
        let mut request = client.request(method, url);
        for (name, value, sensitive) in headers {
            // Checked above, so the value is one; marked sensitive, reqwest keeps it out of
            // its own logs.
            if let Ok(mut value) = reqwest::header::HeaderValue::from_str(value) {
                value.set_sensitive(*sensitive);
                request = request.header(*name, value);
            }
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Failure::from(self.map_reqwest(url, &e)))?;
        let status = response.status();
        if status.is_success() {
            return match read {
                Read::Open => Ok(Outcome::Open(Stream::Reqwest(response))),
                Read::Whole => match response.bytes().await {
                    Ok(bytes) => Ok(Outcome::Whole(bytes.to_vec())),
                    Err(e) => Err(self.map_reqwest(url, &e).into()),
                },
            };
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        let text = response.text().await.unwrap_or_default();
        Err(Failure {
            error: status_error(url, status.as_u16(), &text),
            retry_after,
        })
    }

    /// Reads a plain answer as [`attempt`](Self::attempt) does reqwest's.
    async fn conclude_plain(
        &self,
        url: &str,
        mut answer: crate::plain::Answer,
        read: Read,
    ) -> Result<Outcome, Failure> {
        if (200..300).contains(&answer.status) {
            return match read {
                Read::Open => Ok(Outcome::Open(Stream::Plain(answer.body))),
                Read::Whole => match answer.body.read_all().await {
                    Ok(bytes) => Ok(Outcome::Whole(bytes)),
                    Err(e) => Err(self.map_plain(url, e).into()),
                },
            };
        }
        let retry_after = answer.retry_after.as_deref().and_then(retry_after);
        let text = answer.body.read_all().await.unwrap_or_default();
        Err(Failure {
            error: status_error(url, answer.status, &String::from_utf8_lossy(&text)),
            retry_after,
        })
    }

    /// Maps a plain client's failure as [`map_reqwest`](Self::map_reqwest) does reqwest's.
    fn map_plain(&self, url: &str, error: PlainError) -> ChatError {
        let url = url.to_owned();
        match error {
            PlainError::Connect(detail) | PlainError::Broken(detail) => {
                ChatError::Unreachable { url, detail }
            }
            PlainError::Timeout => ChatError::Timeout {
                url,
                seconds: self.timeout_s,
            },
            PlainError::Malformed(detail) | PlainError::Request(detail) => {
                ChatError::Decode { url, detail }
            }
        }
    }

    /// Maps a transport failure onto the port's error, naming the URL and the cause.
    fn map_reqwest(&self, url: &str, error: &reqwest::Error) -> ChatError {
        // Connect comes first: a connect timeout is a server that is not there, not a slow one.
        if error.is_connect() {
            ChatError::Unreachable {
                url: url.to_owned(),
                detail: error_chain(error),
            }
        } else if error.is_timeout() {
            ChatError::Timeout {
                url: url.to_owned(),
                seconds: self.timeout_s,
            }
        } else if error.is_decode() {
            ChatError::Decode {
                url: url.to_owned(),
                detail: error_chain(error),
            }
        } else {
            // Connection reset, a body cut off mid-way: the server went away, which is worth a
            // retry like any other unreachable server.
            ChatError::Unreachable {
                url: url.to_owned(),
                detail: error_chain(error),
            }
        }
    }
}

/// Parses a whole JSON answer, naming the URL and serde's reason when it does not fit.
pub(crate) fn decode_json<T: DeserializeOwned>(url: &str, bytes: &[u8]) -> Result<T, ChatError> {
    serde_json::from_slice(bytes).map_err(|e| ChatError::Decode {
        url: url.to_owned(),
        detail: format!(
            "{e}; the answer starts with: {}",
            cut(&String::from_utf8_lossy(bytes))
        ),
    })
}

/// Keeps the start of a server's text for an error message.
pub(crate) fn cut(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The request's JSON, its spare capacity given back: reqwest holds it (for a redirect) until
/// the answer comes (issue #45).
fn encode_body(body: Option<&impl Serialize>) -> Result<Option<Bytes>, serde_json::Error> {
    body.map(|body| {
        serde_json::to_vec(body).map(|mut bytes| {
            bytes.shrink_to_fit();
            Bytes::from(bytes)
        })
    })
    .transpose()
}

/// A request's body, made again by each attempt: whether there is one, and how to encode it.
struct Encode<'a> {
    present: bool,
    encode: &'a (dyn Fn() -> Result<Option<Bytes>, serde_json::Error> + Sync),
}

impl<'a> Encode<'a> {
    fn of(
        body: Option<&'a (impl Serialize + Sync)>,
        encode: &'a (dyn Fn() -> Result<Option<Bytes>, serde_json::Error> + Sync),
    ) -> Self {
        Self {
            present: body.is_some(),
            encode,
        }
    }
}

/// What a [`ChatError::Decode`] says of a request that could not be encoded.
fn unencodable(error: &serde_json::Error) -> String {
    format!("could not encode the request: {error}")
}

/// The reqwest client of a server the plain client does not serve.
fn reqwest_client(
    base_url: &str,
    connect_timeout: Duration,
    read_timeout: Duration,
) -> Result<reqwest::Client, ClientBuildError> {
    // Worded as reqwest's own builder error was when it read the roots itself.
    let tls = crate::tls::client_config(base_url).map_err(|e| ClientBuildError::HttpClient {
        detail: format!("builder error: {}", error_chain(&e)),
    })?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(connect_timeout)
        .read_timeout(read_timeout)
        .user_agent(concat!("agent-fabric/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ClientBuildError::HttpClient {
            detail: error_chain(&e),
        })
}

fn status_error(url: &str, code: u16, body: &str) -> ChatError {
    match code {
        401 | 403 => ChatError::Unauthorized {
            url: url.to_owned(),
            status: code,
        },
        _ => ChatError::Status {
            url: url.to_owned(),
            status: code,
            body: cut(body),
        },
    }
}

/// `Retry-After` in seconds; the HTTP-date form is rare on model servers and falls back to
/// our own backoff.
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    let seconds: f64 = value.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(3600.0)))
}

/// Exponential backoff for the given (1-based) attempt, capped, plus up to a quarter of
/// jitter so that several agents hitting one busy server do not retry in lockstep.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = exp.min(MAX_BACKOFF);
    let spread = capped.as_millis() as u64 / 4;
    let jitter = if spread == 0 {
        0
    } else {
        // Clock nanoseconds are random enough for jitter and spare us a dependency.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::from(d.subsec_nanos()))
            .unwrap_or(0);
        nanos % (spread + 1)
    };
    capped + Duration::from_millis(jitter)
}

fn read_api_key(var: &str) -> Option<ApiKey> {
    match std::env::var(var) {
        Ok(key) if !key.trim().is_empty() => Some(ApiKey(key.trim().to_owned())),
        _ => {
            // The server will answer 401 if it needs the key; that error tells the user which
            // setting to fix. The value is never logged, only the variable's name.
            tracing::warn!(
                variable = var,
                "the API key variable is not set; sending no key"
            );
            None
        }
    }
}

/// The error and its causes, which is where reqwest puts the useful part
/// ("connection refused", "dns error").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        let first = backoff(base, 1);
        assert!(first >= base && first <= base + base / 4);
        let third = backoff(base, 3);
        assert!(third >= Duration::from_millis(400));
        let huge = backoff(base, 40);
        assert!(huge <= MAX_BACKOFF + MAX_BACKOFF / 4);
    }

    #[test]
    fn cut_keeps_short_text_and_shortens_long_text() {
        assert_eq!(cut("  short  "), "short");
        let long = "é".repeat(2000);
        let kept = cut(&long);
        assert_eq!(kept.chars().count(), MAX_ERROR_BODY_CHARS + 1);
    }

    #[test]
    fn retry_after_reads_seconds() {
        assert_eq!(retry_after(""), None);
        assert_eq!(retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn api_key_debug_is_redacted() {
        assert_eq!(format!("{:?}", ApiKey("sk-secret".into())), "<redacted>");
    }

    /// A key with a line break is refused by both clients alike, before any connection,
    /// naming the header (reqwest's path used to leave the header out silently).
    #[tokio::test]
    async fn a_key_with_a_line_break_is_refused_by_either_client() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let plain = Transport::new(&HttpSettings::new(&base_url)).unwrap();
        assert!(matches!(plain.client, Client::Plain(_)));
        let reqwest = Transport {
            client: Client::Reqwest(reqwest::Client::new()),
            ..plain.clone()
        };
        for transport in [plain, reqwest] {
            let transport = Transport {
                api_key: Some(ApiKey("sk-1\r\nx-injected: 1".into())),
                ..transport
            };
            let error = transport
                .fetch(Method::GET, &format!("{base_url}/v1/models"), None::<&()>)
                .await
                .unwrap_err();
            assert!(
                matches!(&error, ChatError::Decode { detail, .. } if detail.contains("`authorization`")),
                "{error:?}"
            );
        }
        let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(accepted.is_err(), "no client connected");
    }
}
