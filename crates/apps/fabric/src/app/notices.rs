//! What a person sees on stderr while the model servers start and pull
//! (`fabric_llm::ServerNotices`): a line per notice, and a live progress bar per pull.

use fabric_llm::{PullProgress, PullShow, ServerNotices};

/// Notices on stderr.
pub(crate) struct Stderr;

impl ServerNotices for Stderr {
    fn notice(&self, line: &str) {
        eprintln!("{line}");
    }

    fn pulling(&self, name: &str) -> Box<dyn PullShow> {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Box::new(Bar {
            bar,
            name: name.to_owned(),
            last_status: String::new(),
        })
    }
}

/// One pull's progress bar.
struct Bar {
    bar: indicatif::ProgressBar,
    name: String,
    last_status: String,
}

impl PullShow for Bar {
    fn progress(&mut self, p: &PullProgress) {
        if let (Some(total), Some(done)) = (p.total, p.completed) {
            self.bar.set_length(total);
            self.bar.set_position(done);
        }
        self.bar.set_message(format!("{}: {}", self.name, p.status));
        // When stderr is not a terminal indicatif draws nothing; say each status once there
        // (a layer's download sends hundreds of lines with the same status).
        if self.bar.is_hidden() && p.status != self.last_status {
            eprintln!("pull {}: {}", self.name, p.status);
            self.last_status.clone_from(&p.status);
        }
    }

    fn finish(self: Box<Self>) {
        self.bar.finish_and_clear();
    }
}
