//! The repetition breaker (issue #24): a small model that calls the same tool with the same
//! arguments and gets the same result again and again (`list_files` five times on an empty
//! workspace) is told so, then refused, then stopped with a typed status.
//!
//! Deterministic over the conversation: it sees only the calls and the results the model
//! was sent, so a continued run that replays its recorded steps reaches the same verdicts
//! at the same calls without anything recorded for it.

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
    /// The last call's tool, arguments and result, as the model saw them.
    last: Option<(String, String, String)>,
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
    /// `args` is the call's argument key ([`key`]).
    pub(crate) fn before(&mut self, tool: &str, args: &str) -> Verdict {
        let repeats = self.limit > 0
            && self.count >= self.limit
            && self
                .last
                .as_ref()
                .is_some_and(|(t, a, _)| t == tool && a == args);
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
        args: &str,
        result: &str,
        others: &[String],
    ) -> Option<String> {
        if self.limit == 0 {
            return None;
        }
        let same = self
            .last
            .as_ref()
            .is_some_and(|(t, a, r)| t == tool && a == args && r == result);
        if same {
            self.count += 1;
        } else {
            self.last = Some((tool.to_owned(), args.to_owned(), result.to_owned()));
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

/// The key two calls' arguments are compared by: the parsed object as JSON text (keys
/// sorted), or the raw text when it is not JSON.
pub(crate) fn key(args: &Result<serde_json::Value, String>, raw: &str) -> String {
    match args {
        Ok(value) => value.to_string(),
        Err(_) => raw.to_owned(),
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
            assert_eq!(r.before("list_files", args), Verdict::Run);
            let note = r.after("list_files", args, "(empty)", &tools());
            assert_eq!(note.is_some(), n == 3, "call {n}");
        }
        let note = {
            let mut again = Repeats::new(3);
            for _ in 0..2 {
                again.after("list_files", args, "(empty)", &tools());
            }
            again.after("list_files", args, "(empty)", &tools())
        };
        assert_eq!(
            note.as_deref(),
            Some(
                "note: this is the 3rd time in a row that `list_files` was called with these arguments and returned this same result; calling it again will not change it, and an identical call will be refused. Act on the result instead: call another tool (write_file), or call finish_task if the work is done."
            )
        );
        let Verdict::Refuse(first) = r.before("list_files", args) else {
            panic!("the 4th identical call is refused");
        };
        assert!(first.starts_with("not run: `list_files` was already called 3 times in a row"));
        assert!(first.ends_with("is refused too"), "{first}");
        let Verdict::Refuse(second) = r.before("list_files", args) else {
            panic!("the 5th identical call is refused");
        };
        assert!(second.ends_with("ends the run"), "{second}");
        let Verdict::Stop(reason) = r.before("list_files", args) else {
            panic!("the 6th identical call stops the run");
        };
        assert!(reason.contains("6 times in a row"), "{reason}");
    }

    #[test]
    fn issue_24_another_call_or_result_resets_the_streak() {
        let mut r = Repeats::new(3);
        let args = r#"{"path":"a"}"#;
        r.after("read_file", args, "x", &tools());
        r.after("read_file", args, "x", &tools());
        // The file changed in between: not a repetition.
        assert!(r.after("read_file", args, "y", &tools()).is_none());
        assert_eq!(r.count(), 1);
        r.after("read_file", args, "y", &tools());
        r.after("list_files", "{}", "a", &tools());
        assert_eq!(r.before("read_file", args), Verdict::Run);
        assert_eq!(r.count(), 1);
        // Other arguments after a full streak run.
        let mut r = Repeats::new(2);
        r.after("read_file", args, "x", &tools());
        r.after("read_file", args, "x", &tools());
        assert_eq!(r.before("read_file", r#"{"path":"b"}"#), Verdict::Run);
        assert!(matches!(r.before("read_file", args), Verdict::Refuse(_)));
    }

    #[test]
    fn issue_24_a_limit_of_zero_is_off() {
        let mut r = Repeats::new(0);
        for _ in 0..10 {
            assert_eq!(r.before("list_files", "{}"), Verdict::Run);
            assert!(r.after("list_files", "{}", "", &tools()).is_none());
        }
    }
}
