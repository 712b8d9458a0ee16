//! How hard a task looks, from cheap features of its text (seed 003: complexity routing),
//! so a simple task goes to a small local model and a hard one to a strong one.
//!
//! Deterministic and a single pass over the words: no model, no I/O. The score is 0 to 100;
//! each feature adds points up to its own cap, and the explanation names each one, so a
//! person can see why a task went where it went ("complexity 72 ≥ 60: quality; long: 64
//! words +15, steps: 3 +18, ...").

/// A task's score and what made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complexity {
    /// 0 (trivial) to 100 (hard).
    pub score: u8,
    /// Each feature that counted, with its points, in a fixed order.
    pub features: Vec<(String, i32)>,
}

impl Complexity {
    /// The features, as one line: `long: 64 words +15, steps: 3 +18`.
    pub fn explain(&self) -> String {
        if self.features.is_empty() {
            return "no sign of complexity".to_owned();
        }
        self.features
            .iter()
            .map(|(what, points)| format!("{what} {points:+}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Verbs of work that takes design, many files or careful checking.
const HARD_VERBS: &[&str] = &[
    "refactor",
    "design",
    "architect",
    "implement",
    "migrate",
    "optimize",
    "optimise",
    "debug",
    "diagnose",
    "analyze",
    "analyse",
    "integrate",
    "port",
    "rewrite",
    "benchmark",
    "parallelize",
    "parallelise",
    "secure",
    "audit",
    "profile",
    "investigate",
    "research",
    "compare",
    "evaluate",
    "build",
    "deploy",
    "scale",
    "restructure",
    "correlate",
    "propose",
    "plan",
    "automate",
    "coordinate",
];

/// Things that are systems rather than files.
const SYSTEM_NOUNS: &[&str] = &[
    "api",
    "backend",
    "frontend",
    "schema",
    "protocol",
    "pipeline",
    "service",
    "services",
    "database",
    "algorithm",
    "architecture",
    "module",
    "modules",
    "codebase",
    "repository",
    "monolith",
    "infrastructure",
    "cluster",
];

/// Verbs of small, mechanical work.
const EASY_VERBS: &[&str] = &[
    "list", "show", "print", "rename", "echo", "count", "read", "say", "greet", "copy", "move",
    "delete", "touch", "cat", "hello", "tell",
];

/// Words that say the result must hold under conditions.
const CONSTRAINTS: &[&str] = &[
    "without",
    "tests",
    "test",
    "performance",
    "concurrency",
    "concurrent",
    "thread-safe",
    "backwards",
    "compatible",
    "compatibility",
    "edge",
    "security",
    "memory",
    "latency",
    "throughput",
    "production",
    "robust",
    "scalable",
    "distributed",
    "transaction",
    "transactions",
];

/// Programming languages and formats.
const LANGUAGES: &[&str] = &[
    "rust",
    "python",
    "go",
    "golang",
    "typescript",
    "javascript",
    "java",
    "kotlin",
    "c",
    "c++",
    "cpp",
    "c#",
    "ruby",
    "php",
    "sql",
    "bash",
    "haskell",
    "scala",
    "swift",
    "elixir",
    "zig",
];

/// Words that mark a sequence of steps.
const STEP_MARKERS: &[&str] = &[
    "then",
    "after",
    "afterwards",
    "finally",
    "first",
    "second",
    "next",
    "also",
    "before",
    "once",
];

/// Scores a task.
pub fn score(prompt: &str) -> Complexity {
    let lower = prompt.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '"' | '`'))
        .map(|w| w.trim_matches(|c: char| matches!(c, '.' | ':' | '!' | '?' | '\'')))
        .filter(|w| !w.is_empty())
        .collect();
    let mut features: Vec<(String, i32)> = Vec::new();
    let mut add = |what: String, points: i32| {
        if points != 0 {
            features.push((what, points));
        }
    };

    let n = words.len();
    let length = match n {
        0..=8 => 0,
        9..=14 => 8,
        15..=24 => 20,
        25..=40 => 28,
        41..=80 => 35,
        _ => 40,
    };
    add(format!("long: {n} words"), length);

    let count = |set: &[&str]| words.iter().filter(|w| set.contains(w)).count() as i32;
    let hard = count(HARD_VERBS);
    add(format!("hard verbs: {hard}"), (hard * 18).min(36));

    let easy = count(EASY_VERBS);
    if hard == 0 {
        add(format!("easy verbs: {easy}"), -(easy * 6).min(12));
    }

    let constraints = count(CONSTRAINTS);
    add(
        format!("constraints: {constraints}"),
        (constraints * 10).min(30),
    );

    let systems = count(SYSTEM_NOUNS);
    add(format!("systems: {systems}"), (systems * 6).min(18));

    // Several things to do: numbered or bulleted lines, sequence words, and the commas and
    // `and`s that join clauses.
    let listed = prompt
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("- ")
                || l.starts_with("* ")
                || l.split_once(['.', ')'])
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .count() as i32;
    let joins = prompt.matches([',', ';']).count() as i32 + count(&["and"]);
    let steps = listed + count(STEP_MARKERS) + joins;
    add(format!("steps: {steps}"), (steps * 7).min(28));

    // Files and paths named: `src/main.rs`, `notes.md`, `a/b/`.
    let files = words
        .iter()
        .filter(|w| {
            w.contains('/')
                || w.rsplit_once('.').is_some_and(|(stem, ext)| {
                    !stem.is_empty()
                        && (1..=4).contains(&ext.len())
                        && ext.chars().all(|c| c.is_ascii_alphanumeric())
                        && !ext.chars().all(|c| c.is_ascii_digit())
                })
        })
        .count() as i32;
    add(format!("files named: {files}"), (files * 5).min(15));

    let languages = count(LANGUAGES);
    add(
        format!("languages: {languages}"),
        ((languages - 1).max(0) * 10).min(20),
    );

    let total: i32 = features.iter().map(|(_, p)| p).sum();
    Complexity {
        score: u8::try_from(total.clamp(0, 100)).unwrap_or(100),
        features,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Labelled tasks: `true` is complex. The heuristic's accuracy at the default threshold
    /// (60) is reported in docs/QUALITY.md.
    const TABLE: &[(&str, bool)] = &[
        ("Create hello.txt containing Hello World", false),
        ("List the files in the workspace", false),
        ("Print the contents of notes.md", false),
        ("Rename a.txt to b.txt", false),
        ("Count the lines in data.csv", false),
        ("Write a haiku about autumn into poem.txt", false),
        ("Say hello", false),
        ("Delete the temporary file tmp.log", false),
        ("Show me what is in README.md", false),
        ("Write the number 42 into answer.txt", false),
        (
            "Make a file todo.md with three items: milk, eggs, bread",
            false,
        ),
        ("Copy config.yaml to config.bak", false),
        ("Tell me the date", false),
        (
            "Read main.py and summarize what it does in one sentence",
            false,
        ),
        ("Add a line saying done to log.txt", false),
        ("Echo the word test", false),
        ("Create an empty directory called build", false),
        ("Fix the typo in the title of index.html", false),
        ("Write a function that adds two numbers in Python", false),
        ("Convert this list to uppercase: apple, pear", false),
        (
            "Refactor the HTTP layer of the service to use async handlers, keep the public API backwards compatible, and add tests for every endpoint",
            true,
        ),
        (
            "Design and implement a rate limiter in Rust for our API gateway that is thread-safe and handles bursts; then benchmark it against the current one",
            true,
        ),
        (
            "Migrate the PostgreSQL schema to add tenant ids to every table without downtime, update the Go services, and write a rollback plan",
            true,
        ),
        (
            "Investigate why the nightly job leaks memory under load, profile it, and propose a fix with tests",
            true,
        ),
        (
            "Port the parser in src/parser.py to Rust, keeping the same behaviour on every edge case, then integrate it with the CLI",
            true,
        ),
        (
            "1. Read the logs in logs/\n2. Find the requests slower than 2 s\n3. Correlate them with deploys\n4. Write a report with charts",
            true,
        ),
        (
            "Implement OAuth2 login for the web app, store sessions securely, and add integration tests covering token refresh and revocation",
            true,
        ),
        (
            "Analyze the performance of our SQL queries in reports.sql and optimize the three slowest, measuring before and after",
            true,
        ),
        (
            "Build a small distributed key-value store with replication and write a design document explaining the consistency guarantees",
            true,
        ),
        (
            "Audit the codebase for security issues around file uploads and fix what you find without breaking the existing API",
            true,
        ),
        (
            "Research three open-source job queues, compare their throughput and failure handling, and recommend one for our Python and TypeScript services",
            true,
        ),
        (
            "Rewrite the authentication module in TypeScript, add unit tests, update the docs, and make sure the old tokens remain valid",
            true,
        ),
        (
            "Debug the race condition in worker.go that drops jobs under concurrency, write a regression test, and fix it",
            true,
        ),
        (
            "Set up a CI pipeline that builds the Rust and Python packages, runs the tests on three platforms, and publishes releases",
            true,
        ),
        (
            "Parallelize the image processing pipeline in pipeline.py, keep memory under 2 GB, and compare the throughput with the serial version",
            true,
        ),
        (
            "Evaluate whether we should split the monolith into services: analyze the module dependencies, estimate the effort, and write a proposal",
            true,
        ),
        (
            "First scan the repository for deprecated API calls, then replace them with the new client in every file, and finally run the tests",
            true,
        ),
        (
            "Implement a CRDT-based collaborative text editor backend in Rust with a WebSocket API and property tests for convergence",
            true,
        ),
        (
            "Optimize the startup time of the Java service by profiling class loading, caching configuration, and measuring the latency before and after",
            true,
        ),
        (
            "Design a schema for multi-tenant billing with invoices, credits and refunds, implement the migrations in SQL, and write tests for the edge cases",
            true,
        ),
    ];

    /// Written after the weights were set and never used to tune them: the honest figure.
    const HELD_OUT: &[(&str, bool)] = &[
        ("Append today's date to journal.txt", false),
        ("What files are in the src folder?", false),
        ("Write a limerick about a cat", false),
        ("Replace foo with bar in main.c", false),
        ("Sort the names in names.txt alphabetically", false),
        ("Translate the greeting in hello.txt to French", false),
        (
            "Add pagination to the orders endpoint, update the OpenAPI document, and write tests for the first, middle and last pages",
            true,
        ),
        (
            "Find out why the login page takes 8 seconds on mobile, measure where the time goes, and make it load in under 2 seconds",
            true,
        ),
        (
            "Split the 3,000-line utils.py into cohesive modules, keep every import working, and run the test suite after each move",
            true,
        ),
        (
            "Write a Kubernetes operator in Go that provisions databases per tenant, with leader election and retries",
            true,
        ),
        (
            "Review the pull request that changes our payment flow, check the error handling and idempotency, and list the risks",
            true,
        ),
        ("Make the title bold in README.md", false),
    ];

    /// Checks a labelled table at the default threshold of 60.
    fn assert_accuracy(table: &[(&str, bool)], at_least: f64) {
        let wrong: Vec<String> = table
            .iter()
            .map(|(task, complex)| (task, complex, score(task)))
            .filter(|(_, complex, c)| (c.score >= 60) != **complex)
            .map(|(task, _, c)| format!("{} ({}): {task}", c.score, c.explain()))
            .collect();
        let accuracy = 1.0 - wrong.len() as f64 / table.len() as f64;
        assert!(
            accuracy >= at_least,
            "accuracy {accuracy:.3}, misrouted:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn held_out_tasks_are_routed_about_as_well() {
        assert_accuracy(HELD_OUT, 0.6);
    }

    #[test]
    fn the_labelled_table_is_mostly_right_at_the_default_threshold() {
        assert!(TABLE.len() >= 40);
        assert_accuracy(TABLE, 0.9);
    }

    #[test]
    fn the_score_is_deterministic_bounded_and_explained() {
        let task = TABLE[21].0;
        let a = score(task);
        assert_eq!(a, score(task));
        assert!(a.score <= 100);
        assert!(a.explain().contains("hard verbs"), "{}", a.explain());
        assert_eq!(score("").score, 0);
        assert_eq!(score("").explain(), "no sign of complexity");
        let huge =
            "refactor the distributed database api, then test performance and memory, ".repeat(50);
        assert_eq!(score(&huge).score, 100);
    }
}
