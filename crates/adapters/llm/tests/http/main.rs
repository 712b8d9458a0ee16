//! Real HTTP tests: each test starts a tiny scripted server on 127.0.0.1:0 and talks to it
//! through the real clients. One test binary keeps linking cheap.

// Helpers outside `#[test]` functions (the mock server) may unwrap too: a failure there is a
// broken test setup and should panic loudly.
#![allow(clippy::unwrap_used)]

mod anthropic;
mod embed;
mod mock;
mod ollama;
mod openai;
mod responses;
