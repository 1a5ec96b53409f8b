//! Filesystem delivery (rule F1): the resources a cache serves, written as one
//! `DiscoveryResponse` file per type, the way Envoy's filesystem subscriptions read them.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::Message;
use xds_cache::{Cache, Signal, Variant, WatchRequest};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryResponse;
use xds_proto::{EncodedResource, ResourceType, TypeUrl};

/// How response files are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// YAML (`.yaml`), Envoy's usual choice.
    Yaml,
    /// proto3 JSON (`.json`).
    Json,
    /// Binary protobuf (`.pb`).
    Binary,
}

impl FileFormat {
    fn extension(self) -> &'static str {
        match self {
            FileFormat::Yaml => "yaml",
            FileFormat::Json => "json",
            FileFormat::Binary => "pb",
        }
    }
}

/// Writes `DiscoveryResponse` files, each replaced atomically: the new content is written beside
/// the file, flushed to disk, then renamed over it, so a watcher never reads half a file.
///
/// The temporary file is created exclusively (`O_CREAT|O_EXCL`, which never follows a symlink)
/// under a name unique to this process and write, so a link planted in the directory cannot
/// redirect the content elsewhere; the rename replaces a planted link rather than following it.
/// `Secret` files (private keys) are created with mode `0600`, others `0644` (see
/// [`FileWriter::modes`]).
#[derive(Clone, Debug)]
pub struct FileWriter {
    dir: PathBuf,
    format: FileFormat,
    mode: u32,
    secret_mode: u32,
}

/// Makes temporary file names unique within the process.
static NEXT_TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl FileWriter {
    /// A writer into `dir` (created if missing on the first write).
    pub fn new(dir: impl Into<PathBuf>, format: FileFormat) -> Self {
        FileWriter { dir: dir.into(), format, mode: 0o644, secret_mode: 0o600 }
    }

    /// The permission bits of new files (before the umask): `mode` for most types,
    /// `secret_mode` for `Secret` (default `0o644` and `0o600`). Unix only.
    #[must_use]
    pub fn modes(mut self, mode: u32, secret_mode: u32) -> Self {
        self.mode = mode;
        self.secret_mode = secret_mode;
        self
    }

    /// The file a type is written to: `cds.yaml`, `lds.yaml`, `eds.yaml`, ... (a custom type is
    /// named by its message name).
    pub fn path_for(&self, type_url: &TypeUrl) -> PathBuf {
        let stem = match type_url.builtin() {
            Some(ResourceType::Cluster) => "cds",
            Some(ResourceType::ClusterLoadAssignment) => "eds",
            Some(ResourceType::Listener) => "lds",
            Some(ResourceType::RouteConfiguration) => "rds",
            Some(ResourceType::ScopedRouteConfiguration) => "srds",
            Some(ResourceType::VirtualHost) => "vhds",
            Some(ResourceType::Secret) => "sds",
            Some(ResourceType::Runtime) => "rtds",
            Some(ResourceType::TypedExtensionConfig) => "ecds",
            Some(ResourceType::LbEndpoint) => "leds",
            None => type_url.message_name(),
        };
        self.dir.join(format!("{stem}.{}", self.format.extension()))
    }

    /// Writes the response for one type and returns its path.
    pub fn write(
        &self,
        type_url: &TypeUrl,
        version: &str,
        resources: &[EncodedResource],
    ) -> io::Result<PathBuf> {
        let response = DiscoveryResponse {
            version_info: version.to_owned(),
            resources: resources.iter().map(EncodedResource::to_any).collect(),
            type_url: type_url.as_str().to_owned(),
            ..Default::default()
        };
        let bytes = match self.format {
            FileFormat::Binary => response.encode_to_vec(),
            FileFormat::Json => {
                let value = xds_proto::to_json(&response).map_err(io::Error::other)?;
                let mut text = serde_json::to_vec_pretty(&value).map_err(io::Error::other)?;
                text.push(b'\n');
                text
            }
            FileFormat::Yaml => {
                xds_proto::to_yaml_string(&response).map_err(io::Error::other)?.into_bytes()
            }
        };
        let path = self.path_for(type_url);
        let mode = if type_url.builtin() == Some(ResourceType::Secret) {
            self.secret_mode
        } else {
            self.mode
        };
        write_atomically(&path, &bytes, mode)?;
        Ok(path)
    }

    /// Follows `cache` as `node` sees it and rewrites each type's file whenever its version
    /// changes. Returns the future that does it: run it on your runtime (nothing is spawned);
    /// it ends only when dropped. Write errors are logged and retried at the next change.
    pub async fn follow(self, cache: impl Cache, node: Node, types: Vec<TypeUrl>) {
        let signal = Arc::new(Signal::new());
        let mut watches = Vec::new();
        for t in types {
            match cache.watch(
                WatchRequest { node: &node, type_url: &t, variant: Variant::Sotw },
                signal.clone(),
            ) {
                Ok(w) => watches.push((t, w)),
                Err(e) => {
                    tracing::warn!(type_url = %t, error = %e, "not writing files for this type")
                }
            }
        }
        let mut written: BTreeMap<TypeUrl, String> = BTreeMap::new();
        loop {
            for (t, watch) in &watches {
                let mut current = None;
                watch.read(&mut |view| {
                    if view.is_ready()
                        && written.get(t).map(String::as_str) != Some(&view.version())
                    {
                        let mut resources = Vec::new();
                        view.for_each(&mut |r| resources.push(r.clone()));
                        current = Some((view.version(), resources));
                    }
                });
                if let Some((version, resources)) = current {
                    match self.write(t, &version, &resources) {
                        Ok(path) => {
                            tracing::info!(path = %path.display(), %version, "wrote discovery response file");
                            written.insert(t.clone(), version.into());
                        }
                        Err(e) => {
                            tracing::error!(type_url = %t, error = %e, "writing a discovery response file failed")
                        }
                    }
                }
            }
            signal.raised().await;
        }
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("response");
    let (tmp, mut file) = create_exclusive(dir, name, mode)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// A new temporary file beside `name`: created exclusively (an existing file or symlink of that
/// name is an error, never followed, so that
/// a symlink planted in the directory cannot redirect the write), under a name unique to this process and write.
fn create_exclusive(dir: &Path, name: &str, mode: u32) -> io::Result<(PathBuf, std::fs::File)> {
    let mut last = None;
    for _ in 0..8 {
        let n = NEXT_TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        #[cfg(not(unix))]
        let _ = mode;
        match options.open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            // Someone planted this name: try the next one rather than touch it.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    #[test]
    fn f1_files_are_whole_discovery_responses() {
        let dir = std::env::temp_dir().join(format!("xds-files-{}", std::process::id()));
        let cluster =
            EncodedResource::new(&Cluster { name: "c1".into(), ..Default::default() }).unwrap();
        let t = TypeUrl::from(ResourceType::Cluster);
        for format in [FileFormat::Yaml, FileFormat::Json, FileFormat::Binary] {
            let w = FileWriter::new(&dir, format);
            let path = w.write(&t, "v1", std::slice::from_ref(&cluster)).unwrap();
            assert!(path.ends_with(format!("cds.{}", format.extension())));
            let bytes = std::fs::read(&path).unwrap();
            let response: DiscoveryResponse = match format {
                FileFormat::Binary => DiscoveryResponse::decode(&*bytes).unwrap(),
                FileFormat::Json => {
                    xds_proto::from_json_str(std::str::from_utf8(&bytes).unwrap()).unwrap()
                }
                FileFormat::Yaml => {
                    xds_proto::from_yaml_str(std::str::from_utf8(&bytes).unwrap()).unwrap()
                }
            };
            assert_eq!(response.version_info, "v1");
            assert_eq!(response.resources, vec![cluster.to_any()]);
            // No temporary file is left behind.
            let left: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
                .collect();
            assert!(left.is_empty(), "{left:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn finding_8_a_planted_symlink_is_not_followed_and_secrets_are_private() {
        use std::os::unix::fs::PermissionsExt;
        use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
        let base = std::env::temp_dir().join(format!("xds-files-link-{}", std::process::id()));
        let dir = base.join("out");
        std::fs::create_dir_all(&dir).unwrap();
        let outside = base.join("stolen");
        // The old code's temporary name, and every name of this process's next writes.
        std::os::unix::fs::symlink(&outside, dir.join(".sds.yaml.tmp")).unwrap();
        let next = NEXT_TMP.load(std::sync::atomic::Ordering::Relaxed);
        for n in next..next + 4 {
            let name = format!(".sds.yaml.{}.{n}.tmp", std::process::id());
            std::os::unix::fs::symlink(&outside, dir.join(name)).unwrap();
        }
        let secret =
            EncodedResource::new(&Secret { name: "key".into(), ..Default::default() }).unwrap();
        let w = FileWriter::new(&dir, FileFormat::Yaml);
        let path = w.write(&TypeUrl::from(ResourceType::Secret), "v1", &[secret]).unwrap();
        assert!(!outside.exists(), "the write followed a planted symlink");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
