//! How run statistics are grouped: one closed set, read by the CLI, HTTP and MCP front ends
//! and answered by the store.

use crate::words::closed_set;

closed_set! {
    /// How `fabric stats` (and `GET /stats`, the `run_stats` tool) groups runs.
    pub enum StatsGroup {
        /// By specialist (a task force counts for each member).
        #[default]
        Specialist = "specialist",
        /// By model key.
        Model = "model",
        /// By tool (calls and errors).
        Tool = "tool",
    }
}
