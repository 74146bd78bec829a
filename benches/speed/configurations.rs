//! What the `speed` bench is asked to measure, and the targets it measures against.

/// What the server is asked for, by engine. Server time is taken as a call's p50 less the floor's.
pub struct Targets {
    /// The issue that set them.
    pub issue: u32,
    /// Server time of a fresh call of trivial code, at most.
    pub server_ms: f64,
    /// Fresh calls per second with 8 in flight, at least.
    pub calls_per_s: f64,
    /// Fuel of a fresh `x = 1`, at most (RustPython's guest only).
    pub fuel: Option<u64>,
}

impl Targets {
    /// The targets for a server started with `flags` (its engine and allowed modules).
    pub fn of(flags: &[String]) -> Targets {
        match (
            has(flags, "--engine", "cpython"),
            has(flags, "--allow", "@data"),
        ) {
            (false, _) => Targets {
                issue: 16,
                server_ms: 0.5,
                calls_per_s: 1200.0,
                fuel: Some(150_000),
            },
            (true, data) => Targets {
                issue: 28,
                server_ms: if data { 1.0 } else { 0.5 },
                calls_per_s: 1500.0,
                fuel: None,
            },
        }
    }
}

/// Whether `flags` hold `flag value`.
pub fn has(flags: &[String], flag: &str, value: &str) -> bool {
    flags.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// What this bench was asked for after `--` (cargo adds `--bench`).
pub struct Asked {
    /// `--engine NAME` and `--allow MODULES`, for the server.
    pub flags: Vec<String>,
    /// `--record`, with `--note TEXT` if given.
    pub record: Option<Option<String>>,
}

impl Asked {
    pub fn parse() -> anyhow::Result<Asked> {
        let mut asked = Asked {
            flags: Vec::new(),
            record: None,
        };
        let mut note = None;
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(flag) = args.next() {
            if flag == "--record" {
                asked.record = Some(None);
                continue;
            }
            anyhow::ensure!(
                ["--engine", "--allow", "--note"].contains(&flag.as_str()),
                "unknown argument {flag:?}: this bench takes --engine NAME, --allow MODULES, or \
                 --record [--note TEXT]"
            );
            let value = args
                .next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
            match flag.as_str() {
                "--note" => note = Some(value),
                _ => asked.flags.extend([flag, value]),
            }
        }
        match &mut asked.record {
            Some(record) => {
                anyhow::ensure!(
                    asked.flags.is_empty(),
                    "--record measures every configuration: give it no --engine or --allow"
                );
                *record = note;
            }
            None => anyhow::ensure!(note.is_none(), "--note goes with --record"),
        }
        Ok(asked)
    }
}

/// What `--record` measures: each engine, and the CPython engine's data-stack template.
pub const CONFIGURATIONS: [&[&str]; 3] = [
    &[],
    &["--engine", "cpython"],
    &["--engine", "cpython", "--allow", "@data"],
];

/// The configuration's name in the documents' table.
pub fn name(flags: &[String]) -> String {
    match (
        has(flags, "--engine", "cpython"),
        has(flags, "--allow", "@data"),
    ) {
        (false, _) => "RustPython".into(),
        (true, false) => "CPython".into(),
        (true, true) => "CPython, `--allow @data`".into(),
    }
}
