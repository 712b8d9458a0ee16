//! The repetition breaker (issue #24): a small model that calls the same tool with the same
//! arguments and gets the same result again and again (`list_files` five times on an empty
//! workspace) is told so, then refused, then stopped with a typed status.
//!
//! Deterministic over the conversation: it sees only the calls and the results the model
//! was sent, so a continued run that replays its recorded steps reaches the same verdicts
//! at the same calls without anything recorded for it.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Refusals of the repeated call before the run ends `stalled`.
pub(crate) const MAX_REFUSALS: u32 = 2;

/// What to do with the next call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Run it.
    Run,
    /// Do not run it; tell the model this.
    Refuse(String),
    /// End the run `stalled`, for this reason.
    Stop(String),
}

impl Verdict {
    /// For a call not to run: the `loop_detected` action and what the model or the user is
    /// told.
    pub(crate) fn refusal(&self) -> Option<(&'static str, &str)> {
        match self {
            Self::Run => None,
            Self::Refuse(message) => Some(("refused", message)),
            Self::Stop(reason) => Some(("stopped", reason)),
        }
    }
}

/// The streak of identical calls with identical results, within one loop.
#[derive(Debug)]
pub(crate) struct Repeats {
    /// Identical calls in a row that get the nudge (`repeat_limit`); 0: off.
    limit: u32,
    /// Hashes of the last call (tool and arguments) and of its result as the model saw
    /// it: a run in flight keeps 16 bytes, not a copy of a result of up to 16,000
    /// characters.
    last: Option<(u64, u64)>,
    /// How many times in a row it was called with that result.
    count: u32,
    /// Refusals since the streak reached the limit.
    refused: u32,
}

impl Repeats {
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            limit,
            last: None,
            count: 0,
            refused: 0,
        }
    }

    /// The verdict on a call before it runs: a call that repeats a streak at its limit is
    /// refused, and after [`MAX_REFUSALS`] refusals it ends the run.
    /// `args` is the call's argument key ([`key`], `None` when the breaker is off).
    pub(crate) fn before(&mut self, tool: &str, args: Option<u64>) -> Verdict {
        let repeats = self.limit > 0
            && self.count >= self.limit
            && self.last.is_some_and(|(call, _)| Some(call) == args);
        if !repeats {
            return Verdict::Run;
        }
        self.refused += 1;
        let times = self.count + self.refused;
        if self.refused > MAX_REFUSALS {
            return Verdict::Stop(format!(
                "the model called `{tool}` with the same arguments {times} times in a row and kept calling it after it was told the result would not change and the call was refused; try a larger model, a clearer task, or a specialist prompt that says what to do after `{tool}`"
            ));
        }
        Verdict::Refuse(format!(
            "not run: `{tool}` was already called {} times in a row with these arguments and returned the same result each time, so calling it again cannot help. Use that result: call a different tool, or call finish_task if the work is done. Calling `{tool}` with these arguments again {}",
            self.count,
            if self.refused == MAX_REFUSALS {
                "ends the run".to_owned()
            } else {
                "is refused too".to_owned()
            }
        ))
    }

    /// Notes a call that ran and what the model is sent for it; returns the note to add to
    /// that result when the streak just reached the limit.
    pub(crate) fn after(
        &mut self,
        tool: &str,
        args: Option<u64>,
        result: &str,
        others: &[String],
    ) -> Option<String> {
        let (Some(call), true) = (args, self.limit > 0) else {
            return None;
        };
        let seen = (call, hash_of(|h| result.hash(h)));
        if self.last == Some(seen) {
            self.count += 1;
        } else {
            self.last = Some(seen);
            self.count = 1;
            self.refused = 0;
        }
        (self.count == self.limit).then(|| {
            let others: Vec<&str> = others
                .iter()
                .map(String::as_str)
                .filter(|name| *name != tool && *name != fabric_domain::FINISH_TOOL)
                .take(8)
                .collect();
            let instead = if others.is_empty() {
                String::new()
            } else {
                format!(" ({})", others.join(", "))
            };
            format!(
                "note: this is the {} time in a row that `{tool}` was called with these arguments and returned this same result; calling it again will not change it, and an identical call will be refused. Act on the result instead: call another tool{instead}, or call finish_task if the work is done.",
                ordinal(self.count)
            )
        })
    }

    /// The identical calls in a row that ran so far.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// The identical calls refused since.
    pub(crate) fn refused(&self) -> u32 {
        self.refused
    }
}

impl Repeats {
    /// The key a call is compared by: its tool and its arguments, the parsed object as JSON
    /// (keys sorted) or the raw text when it is not JSON; `None` when the breaker is off,
    /// so a run without it pays nothing per call.
    pub(crate) fn key(
        &self,
        tool: &str,
        args: Option<&serde_json::Value>,
        raw: &str,
    ) -> Option<u64> {
        (self.limit > 0).then(|| {
            hash_of(|h| {
                tool.hash(h);
                match args {
                    // Serialised straight into the hasher: no copy of the arguments.
                    Some(value) => {
                        let _ = serde_json::to_writer(HashWriter(h), value);
                    }
                    None => raw.hash(h),
                }
            })
        })
    }
}

/// A hash of what `feed` writes; deterministic (`DefaultHasher::new` has fixed keys), so a
/// replayed step hashes as the live one did.
fn hash_of(feed: impl FnOnce(&mut DefaultHasher)) -> u64 {
    let mut hasher = DefaultHasher::new();
    feed(&mut hasher);
    hasher.finish()
}

/// Lets `serde_json` write into a hasher.
struct HashWriter<'a>(&'a mut DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of a call of `tool` with `args` (JSON text).
    fn k(r: &Repeats, tool: &str, args: &str) -> Option<u64> {
        r.key(
            tool,
            serde_json::from_str::<serde_json::Value>(args)
                .ok()
                .as_ref(),
            args,
        )
    }

    fn tools() -> Vec<String> {
        vec![
            "list_files".into(),
            "write_file".into(),
            "finish_task".into(),
        ]
    }

    #[test]
    fn issue_24_a_streak_is_nudged_then_refused_then_stopped() {
        let mut r = Repeats::new(3);
        let args = "{}";
        for n in 1..=3 {
            assert_eq!(
                r.before("list_files", k(&r, "list_files", args)),
                Verdict::Run
            );
            let note = r.after("list_files", k(&r, "list_files", args), "(empty)", &tools());
            assert_eq!(note.is_some(), n == 3, "call {n}");
        }
        let note = {
            let mut again = Repeats::new(3);
            for _ in 0..2 {
                again.after(
                    "list_files",
                    k(&again, "list_files", args),
                    "(empty)",
                    &tools(),
                );
            }
            again.after(
                "list_files",
                k(&again, "list_files", args),
                "(empty)",
                &tools(),
            )
        };
        assert_eq!(
            note.as_deref(),
            Some(
                "note: this is the 3rd time in a row that `list_files` was called with these arguments and returned this same result; calling it again will not change it, and an identical call will be refused. Act on the result instead: call another tool (write_file), or call finish_task if the work is done."
            )
        );
        let Verdict::Refuse(first) = r.before("list_files", k(&r, "list_files", args)) else {
            panic!("the 4th identical call is refused");
        };
        assert!(first.starts_with("not run: `list_files` was already called 3 times in a row"));
        assert!(first.ends_with("is refused too"), "{first}");
        let Verdict::Refuse(second) = r.before("list_files", k(&r, "list_files", args)) else {
            panic!("the 5th identical call is refused");
        };
        assert!(second.ends_with("ends the run"), "{second}");
        let Verdict::Stop(reason) = r.before("list_files", k(&r, "list_files", args)) else {
            panic!("the 6th identical call stops the run");
        };
        assert!(reason.contains("6 times in a row"), "{reason}");
    }

    #[test]
    fn issue_24_another_call_or_result_resets_the_streak() {
        let mut r = Repeats::new(3);
        let args = r#"{"path":"a"}"#;
        r.after("read_file", k(&r, "read_file", args), "x", &tools());
        r.after("read_file", k(&r, "read_file", args), "x", &tools());
        // The file changed in between: not a repetition.
        assert!(
            r.after("read_file", k(&r, "read_file", args), "y", &tools())
                .is_none()
        );
        assert_eq!(r.count(), 1);
        r.after("read_file", k(&r, "read_file", args), "y", &tools());
        r.after("list_files", k(&r, "list_files", "{}"), "a", &tools());
        assert_eq!(
            r.before("read_file", k(&r, "read_file", args)),
            Verdict::Run
        );
        assert_eq!(r.count(), 1);
        // Other arguments after a full streak run.
        let mut r = Repeats::new(2);
        r.after("read_file", k(&r, "read_file", args), "x", &tools());
        r.after("read_file", k(&r, "read_file", args), "x", &tools());
        assert_eq!(
            r.before("read_file", k(&r, "read_file", r#"{"path":"b"}"#)),
            Verdict::Run
        );
        assert!(matches!(
            r.before("read_file", k(&r, "read_file", args)),
            Verdict::Refuse(_)
        ));
    }

    #[test]
    fn issue_24_a_limit_of_zero_is_off() {
        let mut r = Repeats::new(0);
        for _ in 0..10 {
            assert_eq!(
                r.before("list_files", k(&r, "list_files", "{}")),
                Verdict::Run
            );
            assert!(
                r.after("list_files", k(&r, "list_files", "{}"), "", &tools())
                    .is_none()
            );
        }
    }
}
