//! Working with a run from the terminal (issue #42): `fabric answer` for a run that waits
//! for a person, `fabric steer` for one that works, and the terminal as the person a
//! `fabric run` asks.

use async_trait::async_trait;
use fabric_core::ports::{Person, Reply};
use fabric_core::service::{Answer, ServiceConfig, WhenAsked};
use fabric_domain::runlog::{Decision, InputAnswered, InputKind, InputRequired};
use fabric_domain::{RunId, visible_line};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use super::follow::{EMBED_GRACE, follow, observer_for};
use crate::cli::{AnswerArgs, Cli, SteerArgs};
use crate::wiring;

/// What a run started at this terminal does when it asks: `--on-question` if given, else
/// the terminal when there is one to ask, else the model is told no one can answer.
pub(super) fn when_asked(on_question: Option<&str>, json: bool) -> anyhow::Result<WhenAsked> {
    match on_question {
        Some("fail") => Ok(WhenAsked::Fail),
        Some("wait") => Ok(WhenAsked::Wait { timeout: None }),
        Some(other) => match other.strip_prefix("answer=") {
            Some(text) if !text.trim().is_empty() => Ok(WhenAsked::Answer(text.to_owned())),
            _ => Err(crate::errors::UsageError(format!(
                "--on-question takes `fail`, `wait` or `answer=TEXT`, got `{}`",
                visible_line(other)
            ))
            .into()),
        },
        None if !json && std::io::stdin().is_terminal() => {
            Ok(WhenAsked::Ask(Arc::new(Terminal)))
        }
        None => Ok(WhenAsked::Refuse(
            "it runs without a terminal to ask (`--json`, or stdin is not a terminal); start it with `--on-question wait` or `--on-question answer=TEXT` to answer otherwise".to_owned(),
        )),
    }
}

/// `fabric answer RUN_ID TEXT`: the answer goes to the run, which goes on here.
pub(crate) async fn answer(cli: &Cli, args: &AnswerArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let id = RunId::parse(&args.run_id)?;
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let service = fabric.service.clone();
    let when = when_asked(args.on_question.as_deref(), args.json)?;
    let answer = Answer {
        text: args.answer.clone(),
        decision: None,
        by: "cli".to_owned(),
    };
    let observer = observer_for(args.json, args.stream);
    let handle = service.answer(&id, answer, when, Some(observer)).await?;
    let code = follow(&service, handle, args.json).await?;
    service.shutdown(EMBED_GRACE).await;
    fabric.flush_telemetry().await;
    Ok(code)
}

/// `fabric steer RUN_ID TEXT`: said to the run, wherever it runs.
pub(crate) async fn steer(cli: &Cli, args: &SteerArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let id = RunId::parse(&args.run_id)?;
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    fabric.service.steer(&id, &args.text, "cli").await?;
    eprintln!("said to run {id}; its model hears it at its next step");
    Ok(0)
}

/// The person at this terminal: the question on stderr, the answer a line on stdin.
struct Terminal;

#[async_trait]
impl Person for Terminal {
    async fn ask(&self, request: &InputRequired) -> Reply {
        let request = request.clone();
        let asked = tokio::task::spawn_blocking(move || prompt(&request)).await;
        match asked {
            Ok(Some(answer)) => Reply::Answered(answer),
            Ok(None) | Err(_) => Reply::Unavailable(
                "the terminal closed its input before an answer was given".to_owned(),
            ),
        }
    }
}

/// Asks at the terminal until the answer reads; `None` when stdin closes.
fn prompt(request: &InputRequired) -> Option<InputAnswered> {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "\n{}", asked(request));
    let stdin = std::io::stdin();
    loop {
        let _ = write!(err, "> ");
        let _ = err.flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).ok()? == 0 {
            return None;
        }
        match reply(request, &line) {
            Ok(answer) => return Some(answer),
            Err(Some(hint)) => {
                let _ = writeln!(err, "  {hint}");
            }
            Err(None) => {}
        }
    }
}

/// A question or approval as a person at a terminal is asked it: `? QUESTION`, and its
/// choices on the next line (shared with `fabric chat`).
pub(super) fn asked(request: &InputRequired) -> String {
    let mut text = format!("? {}", visible_line(&request.question));
    if !request.choices.is_empty() {
        text.push_str(&format!(
            "\n  choices: {}",
            visible_line(&request.choices.join(" | "))
        ));
    }
    text
}

/// The answer a typed line gives `request`; `Err` when it gives none: with what to type
/// instead (`None` for an empty line, which is asked again).
pub(super) fn reply(
    request: &InputRequired,
    line: &str,
) -> Result<InputAnswered, Option<&'static str>> {
    let line = line.trim();
    if line.is_empty() {
        return Err(None);
    }
    match request.input {
        InputKind::Question => Ok(answered(request, line, None)),
        InputKind::Approval => match Decision::leading(line) {
            Some((d, reason)) => Ok(answered(request, reason, Some(d))),
            None => Err(Some(
                "answer approve, approve_for_run or deny (with a reason after it)",
            )),
        },
    }
}

fn answered(request: &InputRequired, text: &str, decision: Option<Decision>) -> InputAnswered {
    InputAnswered {
        call_id: request.call_id.clone(),
        answer: text.to_owned(),
        decision,
        by: "terminal".to_owned(),
    }
}
