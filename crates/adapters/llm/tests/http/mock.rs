//! A scripted HTTP server: it answers each request with the next reply of its script and
//! records what it received.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use fabric_domain::Message;
use fabric_engine::{ChatObserver, ChatRequest};
use fabric_llm::HttpSettings;
use serde_json::Value;

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
    delay_before: Duration,
    chunk_gap: Duration,
}

impl Reply {
    pub(crate) fn status(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            delay_before: Duration::ZERO,
            chunk_gap: Duration::ZERO,
        }
    }

    pub(crate) fn json(value: Value) -> Self {
        Self::status(200, &value.to_string())
    }

    /// A body sent in pieces of `every` bytes, with a pause between them so each piece
    /// reaches the client on its own.
    pub(crate) fn chunked(content_type: &str, text: &str, every: usize) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: text.as_bytes().chunks(every).map(<[u8]>::to_vec).collect(),
            delay_before: Duration::ZERO,
            chunk_gap: Duration::from_millis(2),
        }
    }

    pub(crate) fn pieces(content_type: &str, pieces: &[&str]) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
            delay_before: Duration::ZERO,
            chunk_gap: Duration::from_millis(5),
        }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub(crate) fn delayed(mut self, delay: Duration) -> Self {
        self.delay_before = delay;
        self
    }
}

/// One received request.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

#[derive(Default)]
pub(crate) struct Mock {
    replies: Mutex<VecDeque<Reply>>,
    received: Mutex<Vec<Received>>,
}

impl Mock {
    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub(crate) fn body(&self, i: usize) -> Value {
        self.received()[i].body.clone()
    }
}

/// Starts a server with `script`; returns its base address (`http://127.0.0.1:port`).
pub(crate) async fn start(script: Vec<Reply>) -> (String, Arc<Mock>) {
    let mock = Arc::new(Mock {
        replies: Mutex::new(script.into()),
        received: Mutex::new(Vec::new()),
    });
    let app = Router::new().fallback(handle).with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), mock)
}

async fn handle(State(mock): State<Arc<Mock>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    mock.received.lock().unwrap().push(Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    });
    let reply = mock.replies.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        return Response::builder()
            .status(StatusCode::IM_A_TEAPOT)
            .body(Body::from("script ran out"))
            .unwrap();
    };
    tokio::time::sleep(reply.delay_before).await;
    let gap = reply.chunk_gap;
    let stream =
        futures_util::stream::unfold(reply.chunks.into_iter(), move |mut chunks| async move {
            let chunk = chunks.next()?;
            tokio::time::sleep(gap).await;
            Some((Ok::<_, Infallible>(Bytes::from(chunk)), chunks))
        });
    let mut builder = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(name, value);
    }
    builder.body(Body::from_stream(stream)).unwrap()
}

/// Settings for tests: quick retries, short timeouts.
pub(crate) fn settings(base_url: &str) -> HttpSettings {
    HttpSettings {
        base_url: base_url.to_owned(),
        api_key_env: None,
        timeout_s: 10,
        connect_timeout_s: 2,
        max_retries: 2,
        backoff_base_ms: 1,
        max_concurrent: None,
        constrained: Default::default(),
        chaining: Default::default(),
    }
}

/// An observer that keeps every delta.
#[derive(Default)]
pub(crate) struct Recorder(pub(crate) Mutex<Vec<String>>);

impl ChatObserver for Recorder {
    fn on_text_delta(&self, delta: &str) {
        self.0.lock().unwrap().push(delta.to_owned());
    }
}

impl Recorder {
    pub(crate) fn deltas(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

pub(crate) fn request<'a>(
    messages: &'a [Message],
    tools: &'a [Value],
    stream: bool,
) -> ChatRequest<'a> {
    // Leaked: a few bytes per test, so the helper can keep taking plain `Value`s.
    let tools: &'a fabric_engine::ToolDefinitions = Box::leak(Box::new(
        fabric_engine::ToolDefinitions::new(tools.iter().map(def).collect()),
    ));
    ChatRequest {
        model: "test-model",
        messages,
        tools,
        temperature: None,
        top_p: None,
        max_tokens: None,
        stream,
        vision: false,
    }
}

/// A test's OpenAI-shaped definition as the port's typed one.
pub(crate) fn def(v: &Value) -> fabric_engine::ToolDef {
    let f = &v["function"];
    fabric_engine::ToolDef {
        name: f["name"].as_str().unwrap_or_default().to_owned(),
        description: f["description"].as_str().unwrap_or_default().to_owned(),
        parameters: f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"})),
    }
}
