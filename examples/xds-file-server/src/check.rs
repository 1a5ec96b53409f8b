//! `xds-file-server check`: load a configuration exactly as the server would, and say what each
//! group serves, without serving anything. For CI pipelines and for an operator about to edit a
//! live config.

use std::io::{self, Write};
use std::path::Path;

use crate::config::{self, Config, DEFAULT_GROUP};

/// Loads the configuration at `path` (files bounded by `max_bytes`) and writes a report to `out`:
/// per group, how many resources of each type and each resource's name and version.
///
/// # Errors
///
/// The configuration error (which file, where, what) when it would be refused by the server; the
/// report is then not written. I/O errors writing to `out`.
pub fn check(path: &Path, max_bytes: u64, out: &mut dyn Write) -> Result<(), CheckError> {
    let config = config::load_with(path, &Config::default(), max_bytes)?;
    report(path, &config, out)?;
    Ok(())
}

/// Why `check` failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The configuration would be refused.
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Io(#[from] io::Error),
}

fn report(path: &Path, config: &Config, out: &mut dyn Write) -> io::Result<()> {
    let total: usize = config.groups.values().map(|s| s.len()).sum();
    writeln!(out, "{}: ok, {} group(s), {total} resource(s)", path.display(), config.groups.len())?;
    for (group, snapshot) in &config.groups {
        let shown = if group == DEFAULT_GROUP { "(default)" } else { group.as_str() };
        let counts: Vec<String> = snapshot
            .types()
            .map(|t| format!("{} {}", snapshot.resources(t).count(), t.label()))
            .collect();
        writeln!(
            out,
            "group {shown}: {}",
            if counts.is_empty() { "nothing".into() } else { counts.join(", ") }
        )?;
        for t in snapshot.types() {
            for resource in snapshot.resources(t) {
                writeln!(out, "  {:<24} {}  {}", t.label(), resource.name(), resource.version())?;
            }
        }
    }
    Ok(())
}
