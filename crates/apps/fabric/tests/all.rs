//! End-to-end tests of the `fabric` binary against the scripted LLM server: real processes,
//! real HTTP, real files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
