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

#[test]
fn an_emptied_directory_is_refused_like_an_empty_file() {
    let dir = temp_dir("emptied");
    let file = write(&dir, "a.yaml", &format!("resources:{CLA}"));
    write(&dir, "notes.txt", "not configuration");
    write(&dir, ".a.yaml.swp", "an editor's swap file is not configuration");
    let mut loader = config::Loader::new(&dir, config::MAX_FILE_BYTES);
    assert_eq!(loader.load().unwrap().groups[DEFAULT_GROUP].len(), 1);
    std::fs::remove_file(&file).unwrap();
    let err = loader.load().unwrap_err().to_string();
    assert!(err.contains("has no .yaml, .yml or .json file"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "the error names the directory: {err}");
    assert!(config::load(&dir).is_err(), "an empty directory is refused at start too");
}

/// Runs `f` on a thread and fails (instead of hanging) if it does not return in time.
fn within_seconds<T: Send + 'static>(seconds: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(seconds)).expect("returned instead of blocking")
}

#[test]
fn special_files_are_refused_without_blocking_and_reads_are_bounded() {
    let dir = temp_dir("special");
    write(&dir, "a.yaml", &format!("resources:{CLA}"));
    let fifo = dir.join("b.yaml");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0, "mkfifo");
    let d = dir.clone();
    let err = within_seconds(20, move || config::load(&d).unwrap_err().to_string());
    assert!(err.contains("b.yaml") && err.contains("FIFO"), "{err}");
    std::fs::remove_file(&fifo).unwrap();
    assert!(config::load(&dir).is_ok(), "gone, the FIFO no longer stops loads");

    // A symbolic link to an endless device: refused, never read past the limit.
    let zero = dir.join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let z = zero.clone();
    let err = within_seconds(20, move || config::load(&z).unwrap_err().to_string());
    assert!(err.contains("zero.yaml") && err.contains("character device"), "{err}");
}

#[test]
fn deep_nesting_is_refused_naming_the_file_and_line() {
    let dir = temp_dir("deep");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    for (name, text) in [
        ("deep.yaml", format!("resources:\n  - {deep}\n")),
        ("deep.json", format!("{{\"resources\":\n[{deep}]}}")),
    ] {
        let err = config::load(&write(&dir, name, &text)).unwrap_err().to_string();
        assert!(err.contains(name), "{err}");
        assert!(err.contains("nesting deeper than 100 levels"), "{name}: {err}");
        assert!(err.contains("line 2"), "{name}: the error names the line: {err}");
    }
}

#[test]
fn a_reload_parses_only_the_files_that_changed() {
    let dir = temp_dir("incremental");
    let cluster = |name: &str| {
        format!(
            "resources:\n  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    name: {name}\n    type: STATIC\n"
        )
    };
    for name in ["a", "b", "c"] {
        write(&dir, &format!("{name}.yaml"), &cluster(name));
    }
    let mut loader = config::Loader::new(&dir, config::MAX_FILE_BYTES);
    let first = loader.load().unwrap();
    assert_eq!(first.groups[DEFAULT_GROUP].len(), 3);
    assert_eq!(loader.last_stats(), config::LoadStats { files: 3, parsed: 3, reused: 0 });

    loader.load().unwrap();
    assert_eq!(loader.last_stats(), config::LoadStats { files: 3, parsed: 0, reused: 3 });

    // Replace b.yaml the atomic way (write beside, rename over): only it is parsed again.
    write(&dir, ".b.yaml.tmp", &cluster("b2"));
    std::fs::rename(dir.join(".b.yaml.tmp"), dir.join("b.yaml")).unwrap();
    let second = loader.load().unwrap();
    assert_eq!(loader.last_stats(), config::LoadStats { files: 3, parsed: 1, reused: 2 });
    let cluster_type = TypeUrl::from(ResourceType::Cluster);
    let names: Vec<&str> =
        second.groups[DEFAULT_GROUP].resources(&cluster_type).map(|r| r.name()).collect();
    assert_eq!(names, ["a", "b2", "c"]);
    // Unchanged files keep the very same encoded resources.
    let a1 = first.groups[DEFAULT_GROUP].get(&cluster_type, "a").unwrap();
    assert!(second.groups[DEFAULT_GROUP].get(&cluster_type, "a").unwrap().ptr_eq(a1));

    std::fs::remove_file(dir.join("c.yaml")).unwrap();
    let third = loader.load().unwrap();
    assert_eq!(loader.last_stats(), config::LoadStats { files: 2, parsed: 0, reused: 2 });
    assert_eq!(third.groups[DEFAULT_GROUP].len(), 2);
    assert_eq!(loader.parsed_total(), 4);
}
