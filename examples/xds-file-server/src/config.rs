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
//! A path may be one file or a directory of `.yaml`/`.yml`/`.json` files (names starting with `.`
//! are skipped, so a writer can prepare a file beside the real one and rename it over), read in
//! name order and merged. [`Loader`] reloads it at the cost of the files that changed; only
//! regular files are read, each bounded by the size limit and only if it did not change during
//! the read. Every resource is checked against its type's schema (an unknown field is an error that
//! names its path) and against Envoy's validation rules (`xds_proto::validate`: a port above
//! 65535, a route without an action, ... are refused here rather than NACKed by every proxy),
//! names are unique per type and group, and every group's snapshot must pass the
//! consistency check (rule O3). `examples/xds-file-server/config/default.yaml` is a complete example.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use xds_cache::Snapshot;
use xds_proto::pb::google::protobuf::Any;
use xds_proto::{DocumentError, DocumentPart, EncodedResource, ResourceType, TextFormat, TypeUrl};

mod loader;
mod merge;
mod read;

pub use loader::{LoadError, LoadStats, Loader};
pub use read::Stamp;

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

/// The files a configuration path stands for, in the order they are read: the path itself, or
/// the `.yaml`/`.yml`/`.json` entries of a directory whose names do not start with `.` (so a
/// writer may prepare `.name.yaml` beside the real file and rename it over). A directory with no
/// such entry is refused like an empty file: an emptied directory is an accident far more often
/// than an intent to withdraw every resource.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let err =
        |reason: String| ConfigError { file: path.to_owned(), location: String::new(), reason };
    // `metadata` never opens the path, so a FIFO or device here cannot block us.
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| err(e.to_string()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or(".");
            !name.starts_with('.')
                && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
        })
        .collect();
    if files.is_empty() {
        return Err(err("the directory has no .yaml, .yml or .json file; to serve no resources \
                        write a file with `resources: []`"
            .into()));
    }
    files.sort();
    Ok(files)
}

/// What identifies the current content of a configuration path: changes when a file is added,
/// removed, rewritten or renamed over.
pub fn fingerprint(path: &Path) -> Vec<(PathBuf, Option<Stamp>)> {
    files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let stamp = std::fs::metadata(&f).ok().map(|m| Stamp::of(&m));
            (f, stamp)
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
    let mut loader = Loader::new(path, max_file_bytes);
    for snapshot in previous.groups.values() {
        for t in snapshot.types() {
            for r in snapshot.resources(t) {
                loader.interned.intern(r.clone());
            }
        }
    }
    loader.load().map_err(LoadError::into_config_error)
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
    let parsed = parse_file(file, text, &mut Interner::default())?;
    let (config, _) =
        merge::Merged::default().update(file, &[(file.to_owned(), std::sync::Arc::new(parsed))])?;
    Ok(config)
}

/// One file's resources, by group, in the order the file lists them: what the loader keeps per
/// file so that an unchanged file is never parsed again (a reload costs what changed).
#[derive(Debug, Default)]
pub struct ParsedFile {
    groups: BTreeMap<String, Vec<EncodedResource>>,
}

impl ParsedFile {
    /// How many resources the file defines, over all its groups.
    pub fn len(&self) -> usize {
        self.groups.values().map(Vec::len).sum()
    }

    /// Whether the file defines no resource.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every resource the file defines.
    pub(crate) fn resources(&self) -> impl Iterator<Item = &EncodedResource> {
        self.groups.values().flatten()
    }
}

/// Reads one file's text: parse, check every resource against its schema, encode it. Duplicates
/// within the file are errors here; duplicates across files when the files are merged.
///
/// The text is read one resource at a time (`xds_proto::read_resource_document`): each is
/// encoded and dropped before the next is read, so a load holds the text, one resource's JSON and
/// the encoded resources, not a tree of the whole document (~17x the file's size).
fn parse_file(file: &Path, text: &str, interned: &mut Interner) -> Result<ParsedFile, ConfigError> {
    let err =
        |location: String, reason: String| ConfigError { file: file.to_owned(), location, reason };
    let format = if file.extension().is_some_and(|e| e == "json") {
        TextFormat::Json
    } else {
        TextFormat::Yaml
    };
    let mut parsed = ParsedFile::default();
    // Both parsers bound nesting depth (xds_proto::MAX_NESTING) in linear time: a deeply nested
    // file is refused, not a stack overflow.
    let read = xds_proto::read_resource_document(text, format, |part| match part {
        DocumentPart::Group(name) => {
            parsed.groups.entry(name.to_owned()).or_default();
            Ok(())
        }
        DocumentPart::Resource { group, value, .. } => {
            let resource = interned.intern(encode(&value)?);
            match parsed.groups.get_mut(group) {
                Some(list) => list.push(resource),
                None => {
                    parsed.groups.insert(group.to_owned(), vec![resource]);
                }
            }
            Ok(())
        }
    });
    read.map_err(|e| match e {
        // An empty file is what a truncating editor or an interrupted copy leaves behind: taking
        // it as "serve nothing" would withdraw every resource from every proxy at once.
        DocumentError::Empty => err(
            String::new(),
            "the file is empty; to serve no resources write `resources: []`".into(),
        ),
        DocumentError::Syntax(e) => {
            let mut reason = e.to_string();
            if let xds_proto::JsonError::Syntax { line: Some(line), .. } = e
                && !reason.contains("line")
            {
                reason.push_str(&format!(" (line {line})"));
            }
            err(String::new(), reason)
        }
        DocumentError::At { location, reason } => err(location, reason),
        // A fault a later xds-proto tells apart: its message is the reason.
        other => err(String::new(), other.to_string()),
    })?;
    // The lists grew as the resources came; the loader keeps them while the file is unchanged.
    for list in parsed.groups.values_mut() {
        list.shrink_to_fit();
    }
    // Duplicate names are found when files are merged (`Builders::add`), within a file too.
    Ok(parsed)
}

/// One shared handle per (type, name, version).
#[derive(Default)]
pub(crate) struct Interner(HashMap<(String, String, String), EncodedResource>);

impl Interner {
    pub(crate) fn intern(&mut self, r: EncodedResource) -> EncodedResource {
        let key = (r.type_url().as_str().to_owned(), r.name().to_owned(), r.version().to_owned());
        self.0.entry(key).or_insert(r).clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Checks one resource of a file against its schema, Envoy's rules and rule C2, and encodes it.
fn encode(item: &Value) -> Result<EncodedResource, String> {
    let any = xds_proto::any_from_json(item).map_err(|e| e.to_string())?;
    let (any, name) = unwrap_named(any)?;
    // Envoy's own rules (protoc-gen-validate), checked here so that a resource every proxy
    // would NACK is refused at load, naming the field, and the last good config keeps serving.
    xds_proto::validate_any(&any).map_err(|e| e.to_string())?;
    check_leds_collections(&any)?;
    let resource = match name {
        Some(name) => {
            EncodedResource::from_encoded(TypeUrl::parse(&any.type_url), &name, &any.value)
        }
        None => EncodedResource::from_any(&any),
    };
    resource.map_err(|e| e.to_string())
}

/// An LEDS `LbEndpoint` has no name field of its own: the configuration names it with Envoy's
/// wrapper, `{"@type": ...discovery.v3.Resource, name: xdstp://..., resource: {LbEndpoint}}`
/// (rule C2). Returns the resource inside and its name; any other resource as it is.
fn unwrap_named(any: Any) -> Result<(Any, Option<String>), String> {
    use xds_proto::pb::envoy::service::discovery::v3::Resource;
    use xds_proto::prost::{Message, Name};
    let lb_endpoint = ResourceType::LbEndpoint.type_url();
    // The `@type` of Envoy's named-resource wrapper.
    let named = Resource::type_url();
    if any.type_url != named {
        if any.type_url == lb_endpoint {
            return Err(format!(
                "an LbEndpoint has no name field: wrap it as {{\"@type\": {named}, name: \
                 xdstp://.../envoy.config.endpoint.v3.LbEndpoint/..., resource: {{...}}}}"
            ));
        }
        return Ok((any, None));
    }
    let wrapper = Resource::decode(any.value.as_slice()).map_err(|e| e.to_string())?;
    let Resource { name, resource, version, aliases, ttl, cache_control, metadata, .. } = wrapper;
    if !version.is_empty() || !aliases.is_empty() || ttl.is_some() || cache_control.is_some() {
        return Err("a named resource takes `name` and `resource` only".into());
    }
    let _ = metadata;
    let inner = resource.ok_or("a named resource needs `resource`")?;
    if inner.type_url != lb_endpoint {
        return Err(format!(
            "only LbEndpoint resources are named with a wrapper (every other type has a name \
             field); got {}",
            inner.type_url
        ));
    }
    // Served only through glob collections: the name must be a member's xdstp:// name.
    let parsed = xds_proto::xdstp::XdstpName::parse(&name)
        .map_err(|e| format!("name: an LbEndpoint is served through LEDS collections, so its name must be an xdstp:// name ({e})"))?;
    if parsed.is_glob() {
        return Err(format!("name: {name} is a glob collection, not a member of one"));
    }
    Ok((inner, Some(name)))
}

/// Rule C2: a ClusterLoadAssignment locality that takes its endpoints from LEDS names a glob
/// collection of `envoy.config.endpoint.v3.LbEndpoint` (`xdstp://{authority}/envoy.config.
/// endpoint.v3.LbEndpoint/{path}/*`): anything else no client could ever subscribe to.
fn check_leds_collections(any: &Any) -> Result<(), String> {
    use xds_proto::pb::envoy::config::endpoint::v3::{
        ClusterLoadAssignment, locality_lb_endpoints,
    };
    use xds_proto::prost::Message;
    if any.type_url != ResourceType::ClusterLoadAssignment.type_url() {
        return Ok(());
    }
    let cla = ClusterLoadAssignment::decode(any.value.as_slice()).map_err(|e| e.to_string())?;
    for (i, locality) in cla.endpoints.iter().enumerate() {
        let Some(locality_lb_endpoints::LbConfig::LedsClusterLocalityConfig(leds)) =
            &locality.lb_config
        else {
            continue;
        };
        let at = format!("endpoints[{i}].leds_cluster_locality_config.leds_collection_name");
        let name = &leds.leds_collection_name;
        let parsed = xds_proto::xdstp::XdstpName::parse(name)
            .map_err(|e| format!("{at}: {name:?} is not an xdstp:// glob collection ({e})"))?;
        parsed
            .check_type(ResourceType::LbEndpoint.message_name())
            .map_err(|e| format!("{at}: {e}"))?;
        if !parsed.is_glob() {
            return Err(format!(
                "{at}: {name} is not a glob collection (its last id segment must be `*`)"
            ));
        }
    }
    Ok(())
}
