//! The process's log filter, changeable at runtime through `PUT /v1/config/log_level`
//! (tracing-subscriber's reload layer). The filter starts from `KEEL_LOG` (default
//! `info`).

use std::sync::{Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

struct Reloadable {
    handle: reload::Handle<EnvFilter, Registry>,
    /// The filter in force, as given (only the admin thread changes it).
    current: Mutex<String>,
}

static FILTER: OnceLock<Reloadable> = OnceLock::new();

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Installs the process's logger: to stderr, colored on a terminal.
pub fn init() {
    let spec = std::env::var("KEEL_LOG").ok().filter(|s| EnvFilter::try_new(s).is_ok()).unwrap_or("info".into());
    let (filter, handle) = reload::Layer::new(EnvFilter::new(&spec));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    tracing_subscriber::registry().with(filter).with(fmt).init();
    let _ = FILTER.set(Reloadable { handle, current: Mutex::new(spec) });
}

/// The filter in force (`None` when the process did not install the logger).
pub fn current() -> Option<String> {
    let f = FILTER.get()?;
    let current = f.current.lock().unwrap_or_else(|e| e.into_inner());
    Some(current.clone())
}

/// Replaces the filter: `level` is a level (`debug`) or a list of `target=level`
/// directives with an optional default level (`info,keel_broker::replication=debug`).
pub fn set(spec: &str) -> Result<(), String> {
    check(spec)?;
    let f = FILTER.get().ok_or("the log filter cannot be changed in this process")?;
    let filter = EnvFilter::try_new(spec).map_err(|e| format!("bad log filter {spec:?}: {e}"))?;
    f.handle.reload(filter).map_err(|e| format!("cannot change the log filter: {e}"))?;
    *f.current.lock().unwrap_or_else(|e| e.into_inner()) = spec.to_string();
    tracing::info!(filter = spec, "log filter changed");
    Ok(())
}

/// Refuses anything but levels and `target=level` directives: a bare word EnvFilter
/// would take as a target name (logging everything of it) is a typo here.
fn check(spec: &str) -> Result<(), String> {
    if spec.trim().is_empty() {
        return Err("empty log level".into());
    }
    for directive in spec.split(',') {
        let level = directive.rsplit_once('=').map_or(directive, |(_, l)| l).trim().to_ascii_lowercase();
        if !LEVELS.contains(&level.as_str()) {
            return Err(format!("bad log level in {directive:?}: expected one of {}", LEVELS.join(", ")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn levels_and_directives_are_checked() {
        assert!(super::check("debug").is_ok());
        assert!(super::check("info,keel_broker::replication=trace").is_ok());
        assert!(super::check("verbose").is_err());
        assert!(super::check("keel=loud").is_err());
        assert!(super::check("").is_err());
    }
}
