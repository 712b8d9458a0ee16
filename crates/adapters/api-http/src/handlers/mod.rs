//! The handlers, one module per group of endpoints.

pub(crate) mod attend;
pub(crate) mod budget;
pub(crate) mod catalog;
pub(crate) mod meta;
pub(crate) mod metrics;
pub(crate) mod review;
pub(crate) mod runs;
pub(crate) mod start;
