//! The file-backed control plane's configuration: Envoy resources in YAML or JSON.
//!
//! ```text
//! resources:                      # served to every node (the default group)
//!   - "@type": <type URL, e.g. of envoy.config.cluster.v3.Cluster>
//!     name: backend
//!     ...
//! groups:                         # optional: per node id or node cluster, its own resources
//!   edge-proxies:
//!     resources: [ ... ]
//! ```
//!
//! A path may be one file or a directory of `.yaml`/`.yml`/`.json` files, read in name order and
//! merged. Every resource is checked against its type's schema (an unknown field is an error that
//! names its path), names are unique per type and group, and every group's snapshot must pass the
//! consistency check (rule O3). `examples/xds-file-server/config/default.yaml` is a complete example.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;
use xds_cache::{Snapshot, SnapshotBuilder};
use xds_proto::EncodedResource;

/// The name of the group served to nodes that no `groups:` entry names.
pub const DEFAULT_GROUP: &str = "";

/// A configuration that loaded: one snapshot per group.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Snapshots by group (the default group is [`DEFAULT_GROUP`]).
    pub groups: BTreeMap<String, Snapshot>,
}

/// Why a configuration did not load: which file, where in it, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (or directory) at fault.
    pub file: PathBuf,
    /// Where in the document, e.g. `groups.edge.resources[2]`; empty for the whole file.
    pub location: String,
    /// What is wrong (a field path inside the resource, when there is one, comes first).
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if !self.location.is_empty() {
            write!(f, ": {}", self.location)?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The files a configuration path stands for, in the order they are read.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let err =
        |reason: String| ConfigError { file: path.to_owned(), location: String::new(), reason };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| err(e.to_string()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")))
        .collect();
    files.sort();
    Ok(files)
}

/// What identifies the current content of a configuration path: changes when a file is added,
/// removed, rewritten or renamed over.
pub fn fingerprint(path: &Path) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
    files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            (f, modified, meta.map_or(0, |m| m.len()))
        })
        .collect()
}

/// The default limit on one configuration file's size: 64 MiB, far beyond any hand-written
/// configuration, and small enough that a runaway generator cannot exhaust the server's memory.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Loads and checks the configuration at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, &Config::default(), MAX_FILE_BYTES)
}

/// Loads the configuration at `path`, reusing the encoded resources of `previous` (and of other
/// groups) whose content is unchanged: every resource version is held once in memory, however
/// many groups serve it and however often the file is reloaded. A file larger than
/// `max_file_bytes` is refused before it is read.
pub fn load_with(
    path: &Path,
    previous: &Config,
    max_file_bytes: u64,
) -> Result<Config, ConfigError> {
    let mut interned = Interner::default();
    for snapshot in previous.groups.values() {
        for t in snapshot.types() {
            for r in snapshot.resources(t) {
                interned.intern(r.clone());
            }
        }
    }
    let mut builders: BTreeMap<String, SnapshotBuilder> = BTreeMap::new();
    builders.entry(DEFAULT_GROUP.to_owned()).or_default();
    for file in files(path)? {
        let err =
            |reason: String| ConfigError { file: file.clone(), location: String::new(), reason };
        let size = std::fs::metadata(&file).map_err(|e| err(e.to_string()))?.len();
        if size > max_file_bytes {
            return Err(err(format!(
                "the file has {size} bytes, more than the limit of {max_file_bytes}"
            )));
        }
        let text = std::fs::read_to_string(&file).map_err(|e| err(e.to_string()))?;
        read_text(&file, &text, &mut builders, &mut interned)?;
    }
    build(path, builders)
}

/// Loads and checks a configuration from `text`, as if it had been read from the file `file`:
/// its extension picks the format (`.json` is JSON, anything else YAML) and errors name it.
/// Nothing is read from disk.
///
/// ```
/// use std::path::Path;
///
/// let config = xds_file_server::config::parse_str(Path::new("inline.yaml"), "resources: []\n")?;
/// assert!(config.groups[xds_file_server::config::DEFAULT_GROUP].is_empty());
/// let err = xds_file_server::config::parse_str(Path::new("inline.json"), "{").unwrap_err();
/// assert!(err.to_string().starts_with("inline.json: syntax error"));
/// # Ok::<(), xds_file_server::config::ConfigError>(())
/// ```
pub fn parse_str(file: &Path, text: &str) -> Result<Config, ConfigError> {
    let mut builders: BTreeMap<String, SnapshotBuilder> = BTreeMap::new();
    builders.entry(DEFAULT_GROUP.to_owned()).or_default();
    read_text(file, text, &mut builders, &mut Interner::default())?;
    build(file, builders)
}

/// Reads one file's text into the group builders.
fn read_text(
    file: &Path,
    text: &str,
    builders: &mut BTreeMap<String, SnapshotBuilder>,
    interned: &mut Interner,
) -> Result<(), ConfigError> {
    let err =
        |location: String, reason: String| ConfigError { file: file.to_owned(), location, reason };
    // An empty file is what a truncating editor or an interrupted copy leaves behind: taking it
    // as "serve nothing" would withdraw every resource from every proxy at once.
    let empty = || {
        err(String::new(), "the file is empty; to serve no resources write `resources: []`".into())
    };
    if text.trim().is_empty() {
        return Err(empty());
    }
    let doc = if file.extension().is_some_and(|e| e == "json") {
        serde_json::from_str::<Value>(text)
            .map_err(|e| err(String::new(), format!("syntax error: {e}")))?
    } else {
        xds_proto::yaml_to_json(text).map_err(|e| err(String::new(), e.to_string()))?
    };
    if doc.is_null() {
        return Err(empty());
    }
    read_document(&doc, builders, interned).map_err(|(location, reason)| err(location, reason))
}

/// Builds every group's snapshot, checking its consistency (rule O3); errors name `path`.
fn build(path: &Path, builders: BTreeMap<String, SnapshotBuilder>) -> Result<Config, ConfigError> {
    let mut groups = BTreeMap::new();
    for (group, builder) in builders {
        let snapshot = builder.build_consistent().map_err(|e| ConfigError {
            file: path.to_owned(),
            location: if group.is_empty() { "resources".into() } else { format!("groups.{group}") },
            reason: e.to_string(),
        })?;
        groups.insert(group, snapshot);
    }
    Ok(Config { groups })
}

type Located = (String, String);

/// One shared handle per (type, name, version).
#[derive(Default)]
struct Interner(HashMap<(String, String, String), EncodedResource>);

impl Interner {
    fn intern(&mut self, r: EncodedResource) -> EncodedResource {
        let key = (r.type_url().as_str().to_owned(), r.name().to_owned(), r.version().to_owned());
        self.0.entry(key).or_insert(r).clone()
    }
}

fn read_document(
    doc: &Value,
    builders: &mut BTreeMap<String, SnapshotBuilder>,
    interned: &mut Interner,
) -> Result<(), Located> {
    let Some(top) = doc.as_object() else {
        return Err((String::new(), "expected a mapping with `resources:` and `groups:`".into()));
    };
    for key in top.keys() {
        if key != "resources" && key != "groups" {
            return Err((key.clone(), "unknown key: expected `resources` or `groups`".into()));
        }
    }
    if let Some(list) = top.get("resources") {
        let builder = builders.entry(DEFAULT_GROUP.to_owned()).or_default();
        read_resources(list, "resources", builder, interned)?;
    }
    if let Some(groups) = top.get("groups") {
        let groups = groups
            .as_object()
            .ok_or(("groups".to_owned(), "expected a mapping of group names".to_owned()))?;
        for (name, group) in groups {
            let here = format!("groups.{name}");
            if name.is_empty() {
                return Err((here, "a group needs a non-empty name".into()));
            }
            let fields = group
                .as_object()
                .ok_or((here.clone(), "expected a mapping with `resources:`".to_owned()))?;
            if let Some(key) = fields.keys().find(|k| *k != "resources") {
                return Err((format!("{here}.{key}"), "unknown key: expected `resources`".into()));
            }
            let list = fields.get("resources").unwrap_or(&Value::Null);
            let builder = builders.entry(name.clone()).or_default();
            read_resources(list, &format!("{here}.resources"), builder, interned)?;
        }
    }
    Ok(())
}

fn read_resources(
    list: &Value,
    at: &str,
    builder: &mut SnapshotBuilder,
    interned: &mut Interner,
) -> Result<(), Located> {
    let items = match list {
        Value::Null => return Ok(()),
        Value::Array(items) => items,
        _ => return Err((at.to_owned(), "expected a list of resources".into())),
    };
    for (i, item) in items.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let any = xds_proto::any_from_json(item).map_err(|e| (here.clone(), e.to_string()))?;
        let resource =
            EncodedResource::from_any(&any).map_err(|e| (here.clone(), e.to_string()))?;
        if builder.contains(resource.type_url(), resource.name()) {
            return Err((
                here,
                format!("{} {:?} is defined twice", resource.type_url().label(), resource.name()),
            ));
        }
        builder.add_encoded(interned.intern(resource));
    }
    Ok(())
}
