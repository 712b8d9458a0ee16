//! The person at `fabric chat`'s prompt: a turn's question or approval is printed above the
//! prompt and the next line typed answers it (ADR-107).

use async_trait::async_trait;
use fabric_core::ports::{Person, Reply};
use fabric_domain::runlog::{InputAnswered, InputRequired};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

use super::editor::Screen;
use crate::commands::attend;

/// Asks at the prompt; one per turn.
pub(super) struct AtPrompt {
    screen: Arc<Screen>,
    pending: Mutex<Option<Pending>>,
}

/// A question or approval waiting for its line.
struct Pending {
    request: InputRequired,
    answer: oneshot::Sender<InputAnswered>,
}

impl AtPrompt {
    pub(super) fn new(screen: Arc<Screen>) -> Self {
        Self {
            screen,
            pending: Mutex::new(None),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives `line` to the question or approval waiting, if one is (`false`: none is, the
    /// line is for the turn). A line that does not answer it (an approval's answer must
    /// start with its decision) leaves it waiting, with what to type.
    pub(super) fn offer(&self, line: &str) -> bool {
        let mut slot = self.slot();
        let Some(pending) = slot.take() else {
            return false;
        };
        match attend::reply(&pending.request, line) {
            Ok(answer) => {
                let _ = pending.answer.send(answer);
            }
            Err(hint) => {
                if let Some(hint) = hint {
                    self.screen.print(format!("  {hint}"));
                }
                *slot = Some(pending);
            }
        }
        true
    }
}

#[async_trait]
impl Person for AtPrompt {
    async fn ask(&self, request: &InputRequired) -> Reply {
        let (answer, answered) = oneshot::channel();
        *self.slot() = Some(Pending {
            request: request.clone(),
            answer,
        });
        self.screen.print(format!(
            "{}\n  answer at the prompt",
            attend::asked(request)
        ));
        match answered.await {
            Ok(answer) => Reply::Answered(answer),
            Err(_) => Reply::Unavailable(
                "the chat session ended its turn before an answer was given".to_owned(),
            ),
        }
    }
}
