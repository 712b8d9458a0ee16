//! JSON-RPC 2.0 over newline-delimited JSON, as ACP frames it on stdio: what came in, how
//! to answer it, and the agent's own requests to the client (ADR-112).

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

/// A JSON-RPC error object, as the client reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC code.
    pub code: i64,
    /// What went wrong and what to do, for the person at the editor.
    pub message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `-32700`: the line is not JSON.
    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(-32700, format!("the message is not JSON: {detail}"))
    }

    /// `-32600`: JSON, but not a JSON-RPC 2.0 message.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(-32600, message)
    }

    /// `-32601`: no such method.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            -32601,
            format!(
                "no method `{}`: `fabric acp` answers initialize, authenticate, session/new, session/load, session/list, session/set_mode, session/prompt and session/cancel (docs/ACP.md)",
                fabric_domain::visible_line(method)
            ),
        )
    }

    /// `-32602`: the parameters do not fit the method.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }

    /// `-32603`: the fabric failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(-32603, message)
    }

    /// `-32002`: the session named is not one of this process's.
    pub fn unknown_session(id: &str) -> Self {
        Self::new(
            -32002,
            format!(
                "no session `{}` in this `fabric acp` process: start one with session/new",
                fabric_domain::visible_line(id)
            ),
        )
    }

    fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

/// One message read from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A request: it must be answered.
    Request {
        /// Its id, echoed in the answer.
        id: Value,
        /// The method.
        method: String,
        /// Its parameters (`null` when absent).
        params: Value,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// Its parameters (`null` when absent).
        params: Value,
    },
    /// The client's answer to one of the agent's requests.
    Response {
        /// The id the agent gave its request.
        id: Value,
        /// The result, or the client's error.
        result: Result<Value, RpcError>,
    },
    /// Not a message: answered with this error (and the id, when one could be read).
    Invalid {
        /// The id, or `null`.
        id: Value,
        /// What is wrong.
        error: RpcError,
    },
}

impl Incoming {
    /// Reads one line.
    pub fn parse(line: &str) -> Self {
        let value: Value = match serde_json::from_str(line) {
            Ok(value) => value,
            Err(e) => {
                return Self::Invalid {
                    id: Value::Null,
                    error: RpcError::parse_error(e),
                };
            }
        };
        let id = value.get("id").cloned();
        if value.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Self::Invalid {
                id: id.unwrap_or(Value::Null),
                error: RpcError::invalid_request(
                    "not a JSON-RPC 2.0 message: an object with \"jsonrpc\": \"2.0\" is expected",
                ),
            };
        }
        let params = value.get("params").cloned().unwrap_or(Value::Null);
        match (value.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) => Self::Request {
                id,
                method: method.to_owned(),
                params,
            },
            (Some(method), None) => Self::Notification {
                method: method.to_owned(),
                params,
            },
            (None, Some(id)) => Self::Response {
                id,
                result: response_result(&value),
            },
            (None, None) => Self::Invalid {
                id: Value::Null,
                error: RpcError::invalid_request("a message needs a `method` or an `id`"),
            },
        }
    }
}

fn response_result(value: &Value) -> Result<Value, RpcError> {
    match value.get("error") {
        Some(error) => Err(RpcError::new(
            error.get("code").and_then(Value::as_i64).unwrap_or(-32603),
            error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the client answered with an error")
                .to_owned(),
        )),
        None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
    }
}

/// The client, as the agent writes to it: every line goes through one queue, in order.
pub struct Peer {
    out: mpsc::UnboundedSender<String>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>,
}

impl Peer {
    /// A peer writing to `out`.
    pub fn new(out: mpsc::UnboundedSender<String>) -> Self {
        Self {
            out,
            next_id: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn send(&self, message: &Value) {
        // The writer is gone only when the client closed stdout; nothing is left to tell.
        let _ = self.out.send(message.to_string());
    }

    /// A notification.
    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The answer to request `id`.
    pub fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}),
        };
        self.send(&message);
    }

    /// Asks the client and waits for its answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.slots().insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        rx.await.unwrap_or_else(|_| {
            Err(RpcError::internal(
                "the client closed the connection before it answered",
            ))
        })
    }

    /// Hands the client's answer to the request that waits for it.
    pub fn answered(&self, id: &Value, result: Result<Value, RpcError>) {
        let waiting = id.as_u64().and_then(|id| self.slots().remove(&id));
        match waiting {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::warn!(%id, "an ACP response to no request of the fabric's"),
        }
    }

    fn slots(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_44_lines_are_read_as_requests_notifications_responses_or_refused() {
        let request =
            Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#);
        assert!(matches!(request, Incoming::Request { ref method, .. } if method == "initialize"));
        let note = Incoming::parse(r#"{"jsonrpc":"2.0","method":"session/cancel"}"#);
        assert!(matches!(
            note,
            Incoming::Notification {
                params: Value::Null,
                ..
            }
        ));
        let answer =
            Incoming::parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#);
        assert!(matches!(answer, Incoming::Response { result: Err(ref e), .. } if e.code == -1));
        let junk = Incoming::parse("{not json");
        assert!(matches!(junk, Incoming::Invalid { ref error, .. } if error.code == -32700));
        let old = Incoming::parse(r#"{"id":1,"method":"x"}"#);
        assert!(matches!(old, Incoming::Invalid { ref error, .. } if error.code == -32600));
    }
}
