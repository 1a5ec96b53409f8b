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
#[derive(Clone, Debug)]
pub struct FileWriter {
    dir: PathBuf,
    format: FileFormat,
}

impl FileWriter {
    /// A writer into `dir` (created if missing on the first write).
    pub fn new(dir: impl Into<PathBuf>, format: FileFormat) -> Self {
        FileWriter { dir: dir.into(), format }
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
        write_atomically(&path, &bytes)?;
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
                            written.insert(t.clone(), version);
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
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("response");
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)
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
            assert!(!dir.join(format!(".cds.{}.tmp", format.extension())).exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
