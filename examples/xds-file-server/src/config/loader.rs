//! Reloading a configuration at the cost of what changed: each file's parsed resources are kept,
//! keyed by its [`Stamp`], and reused while the file is unchanged: a reload costs what changed, not
//! the size of the whole configuration.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::merge::Merged;
use super::read::{ReadError, Stamp, read_stable};
use super::{Config, ConfigError, Interner, ParsedFile, files, parse_file};

/// Why [`Loader::load`] gave no configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A file changed while it was read: nothing is wrong yet, but its content is not final.
    /// Try again once the files have been quiet for a while.
    #[error("{}: the file changed while it was read; it will be read again", .0.display())]
    Unstable(PathBuf),
    /// The configuration is invalid (or a file cannot be read at all).
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

impl LoadError {
    /// The error as a [`ConfigError`] (an unstable file is one whose reason says so).
    pub fn into_config_error(self) -> ConfigError {
        match self {
            LoadError::Invalid(e) => e,
            LoadError::Unstable(file) => ConfigError {
                file,
                location: String::new(),
                reason: "the file changed while it was read".into(),
            },
        }
    }
}

/// What the last [`Loader::load`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Configuration files the path stands for.
    pub files: usize,
    /// Files read and parsed because they were new or changed.
    pub parsed: usize,
    /// Files whose parsed resources were reused because their stamp was unchanged.
    pub reused: usize,
    /// Groups whose snapshot was rebuilt and re-checked because a changed file touches them
    /// (created, changed or removed); every other group keeps its very snapshot.
    pub groups_rebuilt: usize,
    /// Resources added, changed or removed in those groups.
    pub resources_changed: usize,
    /// Files not read because they keep changing: served as last parsed, or left out.
    pub pinned: usize,
}

/// Loads the configuration at one path again and again at the cost of what changed since the
/// previous good load: only new or changed files are parsed, only the groups they touch are
/// rebuilt (from their current snapshot, with only the changed resources re-checked against rule
/// O3, see `merge.rs`), and every other group keeps its very snapshot. What remains per reload
/// is a `stat` per file and, per touched group and type, one copy of the type's name index.
///
/// The loader does blocking file I/O and CPU-heavy parsing: run it on a thread of its own (the
/// binary's reload thread), never on an async runtime's worker.
pub struct Loader {
    path: PathBuf,
    max_file_bytes: u64,
    parsed: HashMap<PathBuf, (Stamp, Arc<ParsedFile>)>,
    pub(super) interned: Interner,
    stats: LoadStats,
    parsed_total: u64,
    /// The last good configuration, and what it takes to change it incrementally.
    merged: Merged,
}

impl Loader {
    /// A loader for the file or directory `path`, refusing any file over `max_file_bytes`.
    pub fn new(path: &Path, max_file_bytes: u64) -> Loader {
        Loader {
            path: path.to_owned(),
            max_file_bytes,
            parsed: HashMap::new(),
            interned: Interner::default(),
            stats: LoadStats::default(),
            parsed_total: 0,
            merged: Merged::default(),
        }
    }

    /// The path this loader reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the last load did.
    pub fn last_stats(&self) -> LoadStats {
        self.stats
    }

    /// How many files have been parsed since the loader was made.
    pub fn parsed_total(&self) -> u64 {
        self.parsed_total
    }

    /// Loads and checks the configuration, reparsing only files whose [`Stamp`] changed.
    ///
    /// # Errors
    ///
    /// [`LoadError::Unstable`] when a file changed while it was read; [`LoadError::Invalid`] when
    /// the configuration is wrong (an empty directory, a special file, a file over the size
    /// limit, a syntax or schema error, a duplicate name, an inconsistent group).
    pub fn load(&mut self) -> Result<Config, LoadError> {
        self.load_pinned(&BTreeSet::new())
    }

    /// [`Loader::load`], except that the files in `pinned` are not read: each is taken as it was
    /// last parsed, or left out if it never parsed. The reload thread pins files that keep
    /// changing past its settle limit, so that edits to every other file are still applied.
    ///
    /// # Errors
    ///
    /// As [`Loader::load`].
    pub fn load_pinned(&mut self, pinned: &BTreeSet<PathBuf>) -> Result<Config, LoadError> {
        let list = files(&self.path)?;
        self.stats = LoadStats { files: list.len(), ..LoadStats::default() };
        let mut current: Vec<(PathBuf, Arc<ParsedFile>)> = Vec::with_capacity(list.len());
        for file in list {
            if pinned.contains(&file) {
                self.stats.pinned += 1;
                if let Some((_, parsed)) = self.parsed.get(&file) {
                    current.push((file, parsed.clone()));
                }
                continue;
            }
            let cached = self.parsed.get(&file).filter(|(stamp, _)| {
                std::fs::metadata(&file).is_ok_and(|m| m.is_file() && Stamp::of(&m) == *stamp)
            });
            if let Some((_, parsed)) = cached {
                self.stats.reused += 1;
                current.push((file, parsed.clone()));
                continue;
            }
            let err = |reason: String| ConfigError {
                file: file.clone(),
                location: String::new(),
                reason,
            };
            let (stamp, text) = match read_stable(&file, self.max_file_bytes) {
                Ok(read) => read,
                Err(ReadError::Unstable) => return Err(LoadError::Unstable(file)),
                Err(ReadError::Refused(reason)) => return Err(err(reason).into()),
            };
            self.stats.parsed += 1;
            self.parsed_total += 1;
            let parsed = parse_file(&file, &text, &mut self.interned)?;
            // Keep a good parse even if the whole load fails on another file: fixing that
            // file then costs only its own parse.
            self.parsed.insert(file.clone(), (stamp, Arc::new(parsed)));
            let parsed = self.parsed[&file].1.clone();
            current.push((file, parsed));
        }
        let (config, merged) = self.merged.update(&self.path, &current)?;
        self.stats.groups_rebuilt = merged.groups;
        self.stats.resources_changed = merged.resources;
        // Forget files that are gone; drop interned resources no file holds any more once the
        // interner has grown to twice what the files hold (amortised: O(change) per load).
        let present: HashSet<&PathBuf> = current.iter().map(|(f, _)| f).collect();
        self.parsed.retain(|path, _| present.contains(path));
        let live: usize = self.parsed.values().map(|(_, p)| p.len()).sum();
        if self.interned.len() > 2 * live + 1024 {
            let mut interned = Interner::default();
            for (_, parsed) in self.parsed.values() {
                for r in parsed.resources() {
                    interned.intern(r.clone());
                }
            }
            self.interned = interned;
        }
        Ok(config)
    }
}
