//! The file server's configuration loader: good files load, every kind of broken file is refused
//! with the file, the place and the reason.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::path::{Path, PathBuf};

use xds_file_server::config::{self, DEFAULT_GROUP};
use xds_proto::{ResourceType, TypeUrl};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xds-config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const CLUSTER: &str = r#"
  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: backend
    type: EDS
    eds_cluster_config: { eds_config: { ads: {} } }
"#;
const CLA: &str = r#"
  - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
    cluster_name: backend
"#;

#[test]
fn the_default_config_loads_with_its_groups() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.yaml");
    let config = config::load(&path).unwrap();
    assert_eq!(config.groups.keys().collect::<Vec<_>>(), ["", "grpc-clients"]);
    let default = &config.groups[DEFAULT_GROUP];
    assert_eq!(default.resources(&TypeUrl::from(ResourceType::Listener)).count(), 1);
    assert_eq!(default.len(), 4);
}

#[test]
fn a_directory_of_files_is_merged() {
    let dir = temp_dir("merge");
    write(&dir, "a.yaml", &format!("resources:{CLUSTER}"));
    write(&dir, "b.yaml", &format!("resources:{CLA}"));
    write(&dir, "notes.txt", "ignored");
    let config = config::load(&dir).unwrap();
    assert_eq!(config.groups[DEFAULT_GROUP].len(), 2);
}

#[test]
fn broken_files_name_the_file_the_place_and_the_reason() {
    let dir = temp_dir("broken");
    let cases = [
        ("syntax.yaml", "resources: [ {".to_owned(), "syntax error"),
        (
            "field.yaml",
            format!("resources:{CLA}    endpointz: []\n"),
            "resources[0]: endpointz: unknown field",
        ),
        (
            "type.yaml",
            "resources:\n  - \"@type\": type.googleapis.com/envoy.config.nope.v3.Nope\n    name: x\n"
                .to_owned(),
            "resources[0]: unknown @type",
        ),
        (
            "inconsistent.yaml",
            format!("resources:{CLUSTER}"),
            "cluster \"backend\" references endpoint \"backend\", which is missing",
        ),
        ("duplicate.yaml", format!("resources:{CLA}{CLA}"), "resources[1]: endpoint \"backend\" is defined twice"),
        ("key.yaml", "resourcez: []\n".to_owned(), "resourcez: unknown key"),
        ("list.yaml", "resources: 3\n".to_owned(), "expected a list"),
    ];
    for (name, text, expected) in cases {
        let path = write(&dir, name, &text);
        let err = config::load(&path).unwrap_err().to_string();
        assert!(err.contains(name), "{err} names the file");
        assert!(err.contains(expected), "{name}: {err:?} should contain {expected:?}");
    }
}

#[test]
fn an_empty_file_is_refused_but_an_explicitly_empty_configuration_loads() {
    let dir = temp_dir("empty");
    for (name, text) in
        [("empty.yaml", ""), ("blank.yaml", "\n  \n# nothing\n"), ("empty.json", " ")]
    {
        let err = config::load(&write(&dir, name, text)).unwrap_err();
        assert!(err.to_string().contains("the file is empty"), "{name}: {err}");
    }
    let config = config::load(&write(&dir, "none.yaml", "resources: []\n")).unwrap();
    assert!(config.groups[DEFAULT_GROUP].is_empty());
}

#[test]
fn a_file_over_the_size_limit_is_refused_before_it_is_read() {
    let dir = temp_dir("huge");
    let path = write(&dir, "huge.yaml", &format!("resources: []\n# {}\n", "x".repeat(5000)));
    let err = config::load_with(&path, &config::Config::default(), 4096).unwrap_err();
    assert!(err.to_string().contains("more than the limit of 4096"), "{err}");
    assert!(config::load(&path).is_ok(), "the default limit is far larger");
}

#[test]
fn fingerprints_change_with_content() {
    let dir = temp_dir("fingerprint");
    let path = write(&dir, "c.yaml", &format!("resources:{CLA}"));
    let before = config::fingerprint(&path);
    write(&dir, "c.yaml", &format!("resources:{CLA}{CLUSTER}"));
    assert_ne!(config::fingerprint(&path), before);
}

#[test]
fn reloads_and_groups_share_unchanged_resources() {
    let dir = temp_dir("intern");
    let text = format!(
        "resources:{CLUSTER}{CLA}groups:\n  g:\n    resources:{}",
        CLA.replace("\n  ", "\n      ")
    );
    let path = write(&dir, "c.yaml", &text);
    let first = config::load(&path).unwrap();
    let cla_type = TypeUrl::from(ResourceType::ClusterLoadAssignment);
    let in_default = first.groups[DEFAULT_GROUP].get(&cla_type, "backend").unwrap();
    let in_group = first.groups["g"].get(&cla_type, "backend").unwrap();
    assert!(in_default.ptr_eq(in_group), "one copy per version across groups");
    let second = config::load_with(&path, &first, config::MAX_FILE_BYTES).unwrap();
    let again = second.groups[DEFAULT_GROUP].get(&cla_type, "backend").unwrap();
    assert!(again.ptr_eq(in_default), "one copy per version across reloads");
}
