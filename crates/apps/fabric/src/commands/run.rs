//! `fabric run`: one task, start to finish, through the run service.

use fabric_core::service::{ProjectRequest, ServiceConfig, Submission, TaskRequest};

use super::follow::{EMBED_GRACE, follow, observer_for};
use crate::cli::{Cli, RunArgs};
use crate::wiring;

pub(crate) async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    // Asked before the fabric is wired: a yes here lets this run use what it trusted.
    if args.prompt.is_some() && !args.json {
        super::trust::ask_before(&settings, args.project.as_deref()).await?;
    }
    let network_allowed = if args.network_allowed {
        Some(true)
    } else if args.no_network_allowed {
        Some(false)
    } else {
        None
    };
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let service = fabric.service.clone();
    // Runs a stopped process left go on alongside this one; their outcomes go to stderr.
    let resumed = if args.resume_interrupted {
        super::resume::start_all(&service).await?
    } else {
        Vec::new()
    };
    let code = match &args.prompt {
        Some(prompt) => {
            let request = TaskRequest {
                prompt: prompt.clone(),
                specialists: args.specialists.clone(),
                model_key: args.model_key.clone(),
                model: args.model.clone(),
                network_allowed,
                max_steps: args.max_steps,
                stream: args.stream,
                sandbox: args.sandbox,
                continued: false,
                origin: fabric_domain::runlog::RunOrigin::User,
                project: args.project.as_ref().map(|path| ProjectRequest {
                    path: path.clone(),
                    base: args.base.clone(),
                }),
                context_id: None,
                continues: args.continues()?,
                mcp_servers: Vec::new(),
                approval_mode: None,
            };
            let when = super::attend::when_asked(args.on_question.as_deref(), args.json)?;
            let submission = Submission::new(request)
                .observed(observer_for(args.json, args.stream))
                .attended(when);
            let handle = service.submit(submission)?;
            follow(&service, handle, args.json).await?
        }
        None => 0,
    };
    let resumed_code = super::resume::report_all(&service, resumed, false).await;
    // The run is embedded for search in the background; give that a moment before exiting
    // (what is not done then is done by the next `fabric index rebuild` or `fabric serve`).
    service.shutdown(EMBED_GRACE).await;
    fabric.flush_telemetry().await;
    Ok(if args.prompt.is_some() {
        code
    } else {
        resumed_code
    })
}
