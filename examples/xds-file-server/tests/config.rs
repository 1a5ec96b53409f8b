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
    assert_eq!(
        loader.last_stats(),
        config::LoadStats {
            files: 3,
            parsed: 3,
            reused: 0,
            groups_rebuilt: 1,
            resources_changed: 3,
            pinned: 0
        }
    );

    loader.load().unwrap();
    assert_eq!(
        loader.last_stats(),
        config::LoadStats {
            files: 3,
            parsed: 0,
            reused: 3,
            groups_rebuilt: 0,
            resources_changed: 0,
            pinned: 0
        }
    );

    // Replace b.yaml the atomic way (write beside, rename over): only it is parsed again.
    write(&dir, ".b.yaml.tmp", &cluster("b2"));
    std::fs::rename(dir.join(".b.yaml.tmp"), dir.join("b.yaml")).unwrap();
    let second = loader.load().unwrap();
    assert_eq!(
        loader.last_stats(),
        config::LoadStats {
            files: 3,
            parsed: 1,
            reused: 2,
            groups_rebuilt: 1,
            resources_changed: 2,
            pinned: 0
        }
    );
    let cluster_type = TypeUrl::from(ResourceType::Cluster);
    let names: Vec<&str> =
        second.groups[DEFAULT_GROUP].resources(&cluster_type).map(|r| r.name()).collect();
    assert_eq!(names, ["a", "b2", "c"]);
    // Unchanged files keep the very same encoded resources.
    let a1 = first.groups[DEFAULT_GROUP].get(&cluster_type, "a").unwrap();
    assert!(second.groups[DEFAULT_GROUP].get(&cluster_type, "a").unwrap().ptr_eq(a1));

    std::fs::remove_file(dir.join("c.yaml")).unwrap();
    let third = loader.load().unwrap();
    assert_eq!(
        loader.last_stats(),
        config::LoadStats {
            files: 2,
            parsed: 0,
            reused: 2,
            groups_rebuilt: 1,
            resources_changed: 1,
            pinned: 0
        }
    );
    assert_eq!(third.groups[DEFAULT_GROUP].len(), 2);
    assert_eq!(loader.parsed_total(), 4);
}

/// An EDS cluster `name` and, when `port` is given, its ClusterLoadAssignment (one endpoint).
fn eds(name: &str, port: Option<u16>) -> String {
    let mut text = format!(
        "\n  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    name: {name}\n    type: EDS\n    eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }}\n"
    );
    if let Some(port) = port {
        text.push_str(&cla(name, port));
    }
    text
}

fn cla(name: &str, port: u16) -> String {
    format!(
        "\n  - \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n    cluster_name: {name}\n    endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}] }}]\n"
    )
}

fn group(name: &str, resources: &str) -> String {
    format!("groups:\n  {name}:\n    resources:{}", resources.replace("\n  ", "\n      "))
}

/// A reload costs what changed: editing the file of one group rebuilds
/// and re-checks that group only; every other group keeps its very snapshot (so the server sets
/// nothing for it: no version change, no stream woken). The loader used to rebuild every group
/// from every file's resources and check each group whole.
#[test]
fn a_reload_rebuilds_only_the_groups_the_changed_file_touches() {
    let dir = temp_dir("per-group");
    write(&dir, "common.yaml", &format!("resources:{}", eds("shared", Some(8000))));
    for (file, name) in [("a.yaml", "alpha"), ("b.yaml", "beta"), ("c.yaml", "gamma")] {
        write(&dir, file, &group(name, &eds(name, Some(9000))));
    }
    let mut loader = config::Loader::new(&dir, config::MAX_FILE_BYTES);
    let before = loader.load().unwrap();
    assert_eq!(loader.last_stats().groups_rebuilt, 4);

    write(&dir, "b.yaml", &group("beta", &eds("beta", Some(9001))));
    let after = loader.load().unwrap();
    let stats = loader.last_stats();
    assert_eq!((stats.parsed, stats.groups_rebuilt, stats.resources_changed), (1, 1, 1));
    for name in [DEFAULT_GROUP, "alpha", "gamma"] {
        assert!(after.groups[name].is_same(&before.groups[name]), "{name:?} was rebuilt");
    }
    assert!(!after.groups["beta"].is_same(&before.groups["beta"]));
    let cla_type = TypeUrl::from(ResourceType::ClusterLoadAssignment);
    let old = before.groups["beta"].get(&cla_type, "beta").unwrap();
    let new = after.groups["beta"].get(&cla_type, "beta").unwrap();
    assert_ne!(old.version(), new.version());

    // The same content rewritten (a new stamp): parsed again, nothing rebuilt.
    write(&dir, "b.yaml", &group("beta", &eds("beta", Some(9001))));
    let again = loader.load().unwrap();
    assert_eq!(loader.last_stats().groups_rebuilt, 0);
    assert!(again.groups["beta"].is_same(&after.groups["beta"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reference from an unchanged file to a resource the edited file no longer defines is caught:
/// the incremental check looks up who names what was removed, in every file. The load is
/// refused with the error a full load gives, and the last good configuration stays whole (the
/// next good edit is merged over it, not over the refused one).
#[test]
fn a_cross_file_reference_broken_by_editing_one_file_is_refused() {
    let dir = temp_dir("cross-file");
    write(&dir, "clusters.yaml", &format!("resources:{}{}", eds("api", None), eds("web", None)));
    write(&dir, "endpoints.yaml", &format!("resources:{}{}", cla("api", 1), cla("web", 2)));
    let mut loader = config::Loader::new(&dir, config::MAX_FILE_BYTES);
    let good = loader.load().unwrap();

    // endpoints.yaml drops `web`, still named by clusters.yaml.
    write(&dir, "endpoints.yaml", &format!("resources:{}", cla("api", 3)));
    let err = loader.load().unwrap_err().into_config_error().to_string();
    assert!(
        err.ends_with(
            "resources: inconsistent snapshot: cluster \"web\" references endpoint \"web\", which is missing"
        ),
        "{err}"
    );
    // The same error as a load from scratch.
    assert_eq!(config::load(&dir).unwrap_err().to_string(), err);

    // Fixed by removing the cluster too: the merge starts from the last good state, so `web`'s
    // endpoint (gone) and `api`'s new port are both applied.
    write(&dir, "clusters.yaml", &format!("resources:{}", eds("api", None)));
    let fixed = loader.load().unwrap();
    let cla_type = TypeUrl::from(ResourceType::ClusterLoadAssignment);
    let cluster_type = TypeUrl::from(ResourceType::Cluster);
    let names = |c: &config::Config, t: &TypeUrl| -> Vec<String> {
        c.groups[DEFAULT_GROUP].resources(t).map(|r| r.name().to_owned()).collect()
    };
    assert_eq!(names(&fixed, &cla_type), ["api"]);
    assert_eq!(names(&fixed, &cluster_type), ["api"]);
    let api = |c: &config::Config| c.groups[DEFAULT_GROUP].get(&cla_type, "api").unwrap().clone();
    assert_ne!(api(&fixed).version(), api(&good).version());
    fixed.groups[DEFAULT_GROUP].check_consistency().unwrap();

    // A referrer added in one file whose target another file lacks: refused as well.
    write(&dir, "more.yaml", &format!("resources:{}", eds("orphan", None)));
    let err = loader.load().unwrap_err().into_config_error().to_string();
    assert!(err.contains("cluster \"orphan\" references endpoint \"orphan\""), "{err}");
    // Moving a resource from one file to another in one edit is no duplicate and no gap.
    std::fs::remove_file(dir.join("more.yaml")).unwrap();
    write(&dir, "clusters.yaml", "resources: []\n");
    write(&dir, "endpoints.yaml", &format!("resources:{}", eds("api", Some(4))));
    let moved = loader.load().unwrap();
    assert_eq!(names(&moved, &cluster_type), ["api"]);
    assert_eq!(loader.last_stats().resources_changed, 1, "only the endpoint's port changed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rule C2 in the configuration format: LbEndpoint resources named by `xdstp://` member names
/// (Envoy's `discovery.v3.Resource` wrapper), and a ClusterLoadAssignment whose locality takes its
/// endpoints from their LEDS glob collection.
const LEDS_CONFIG: &str = r#"
resources:
  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: backend
    type: EDS
    eds_cluster_config: { eds_config: { ads: {} } }
  - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
    cluster_name: backend
    endpoints:
      - leds_cluster_locality_config:
          leds_config: { ads: {} }
          leds_collection_name: "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/*?env=prod"
  - "@type": type.googleapis.com/envoy.service.discovery.v3.Resource
    name: "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/e1?env=prod"
    resource:
      "@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
      endpoint: { address: { socket_address: { address: 10.0.0.1, port_value: 8080 } } }
  - "@type": type.googleapis.com/envoy.service.discovery.v3.Resource
    name: "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/e2?env=prod"
    resource:
      "@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
      endpoint: { address: { socket_address: { address: 10.0.0.2, port_value: 8080 } } }
"#;

#[test]
fn c02_leds_endpoints_and_collections_load_and_bad_collection_names_are_refused() {
    let dir = temp_dir("leds");
    let config = config::load(&write(&dir, "leds.yaml", LEDS_CONFIG)).unwrap();
    let group = &config.groups[DEFAULT_GROUP];
    let lb = TypeUrl::from(ResourceType::LbEndpoint);
    let names: Vec<_> = group.resources(&lb).map(|r| r.name().to_owned()).collect();
    let member = |leaf: &str| {
        format!(
            "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/{leaf}?env=prod"
        )
    };
    assert_eq!(names, [member("e1"), member("e2")]);
    // Every member of the collection the assignment names.
    let glob = member("*");
    assert!(names.iter().all(|n| xds_proto::xdstp::is_member(n, &glob)));

    let glob_line = "backend/zone-a/*?env=prod\"";
    let cases = [
        // Not a glob: no client could subscribe to it as a collection.
        (glob_line.replace("zone-a/*", "zone-a/e1"), "is not a glob collection"),
        // A glob of another type.
        (
            LEDS_CONFIG.replacen(
                "leds_collection_name: \"xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint",
                "leds_collection_name: \"xdstp://cp.example/envoy.config.cluster.v3.Cluster",
                1,
            ),
            "xdstp name is of type envoy.config.cluster.v3.Cluster",
        ),
        // Not an xdstp:// name at all.
        (
            LEDS_CONFIG.replacen(
                "\"xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/*?env=prod\"",
                "plain-name",
                1,
            ),
            "is not an xdstp:// glob collection",
        ),
        // An LbEndpoint without a name.
        (
            format!(
                "{LEDS_CONFIG}  - \"@type\": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint\n    endpoint: {{}}\n"
            ),
            "resources[4]: an LbEndpoint has no name field",
        ),
    ];
    for (i, (text, expected)) in cases.into_iter().enumerate() {
        let text = if text.starts_with("backend/") {
            LEDS_CONFIG.replacen(glob_line, &text, 1)
        } else {
            text
        };
        let err =
            config::load(&write(&dir, &format!("bad{i}.yaml"), &text)).unwrap_err().to_string();
        assert!(err.contains(expected), "case {i}: {err:?} should contain {expected:?}");
        if i < 3 {
            assert!(
                err.contains("resources[1]: endpoints[0].leds_cluster_locality_config"),
                "{err}"
            );
        }
    }
}

/// Rule O3 for LEDS: an assignment whose locality names a collection with no member in its group
/// is refused like an EDS cluster whose assignment is missing (an error, not a warning: the
/// proxy would get a locality it cannot route to), on a first load and on a reload that removes
/// the last member from another file; the last good configuration keeps serving. Removing some
/// members, or the last one together with the locality, is fine.
#[test]
fn o03_an_assignment_naming_an_empty_leds_collection_is_refused() {
    let dir = temp_dir("leds-o3");
    let split = LEDS_CONFIG
        .find("  - \"@type\": type.googleapis.com/envoy.service.discovery.v3.Resource")
        .unwrap();
    let (assignment, members) = LEDS_CONFIG.split_at(split);
    let collection =
        "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/*?env=prod";
    let expected = format!(
        "inconsistent snapshot: endpoint \"backend\" references the collection lb_endpoint \"{collection}\", which has no member"
    );

    // The assignment alone: refused on a first load, and by `check`'s path (a load of the file).
    let alone = write(&dir, "alone.yaml", assignment);
    let err = config::load(&alone).unwrap_err().to_string();
    assert!(err.ends_with(&expected), "{err}");
    std::fs::remove_file(&alone).unwrap();

    // Assignment and members in two files.
    let all = dir.join("all");
    std::fs::create_dir_all(&all).unwrap();
    write(&all, "assignment.yaml", assignment);
    write(&all, "members.yaml", &format!("resources:\n{members}"));
    let mut loader = config::Loader::new(&all, config::MAX_FILE_BYTES);
    let good = loader.load().unwrap();
    let lb = TypeUrl::from(ResourceType::LbEndpoint);
    let names = |c: &config::Config| -> Vec<String> {
        c.groups[DEFAULT_GROUP].resources(&lb).map(|r| r.name().to_owned()).collect()
    };
    assert_eq!(names(&good).len(), 2);

    // One member goes: fine.
    let one = &members[..members.rfind("  - \"@type\"").unwrap()];
    write(&all, "members.yaml", &format!("resources:\n{one}"));
    let fewer = loader.load().unwrap();
    assert_eq!(names(&fewer).len(), 1);
    // The last one goes while the assignment still names the collection: refused, with the
    // error a load from scratch gives.
    write(&all, "members.yaml", "resources: []\n");
    let err = loader.load().unwrap_err().into_config_error().to_string();
    assert!(err.ends_with(&expected), "{err}");
    assert_eq!(config::load(&all).unwrap_err().to_string(), err);
    // Fixed by dropping the locality in the same state: the merge goes on from the last good one.
    let inline = assignment.replace(
        &format!(
            "      - leds_cluster_locality_config:\n          leds_config: {{ ads: {{}} }}\n          leds_collection_name: \"{collection}\"\n"
        ),
        "      - lb_endpoints: []\n",
    );
    assert_ne!(inline, assignment);
    write(&all, "assignment.yaml", &inline);
    let fixed = loader.load().unwrap();
    assert!(names(&fixed).is_empty());
    fixed.groups[DEFAULT_GROUP].check_consistency().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files are read one resource at a time, and every fault of a file's layout still
/// reads as it did when the whole document was parsed into one value first (these texts are
/// that loader's), in YAML and in JSON.
#[test]
fn layout_faults_read_as_before_in_both_formats() {
    const CLA_Y: &str = "{\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment, cluster_name: backend}";
    const BAD_Y: &str = "{\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment, cluster_namez: backend}";
    const CLA_J: &str = "{\"@type\": \"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\", \"cluster_name\": \"backend\"}";
    let yaml = [
        ("- a\n- b\n", "c.yaml: expected a mapping with `resources:` and `groups:`"),
        ("hello", "c.yaml: expected a mapping with `resources:` and `groups:`"),
        ("80: x\n", "c.yaml: 80: unknown key: expected `resources` or `groups`"),
        (
            "resources: []\nextra: 1\n",
            "c.yaml: extra: unknown key: expected `resources` or `groups`",
        ),
        // A syntax error anywhere comes before the other faults, with its line.
        (
            "extra: 1\nresources: [}",
            "c.yaml: syntax error: mismatched bracket '[' closed by '}' at line 2, column 12",
        ),
        ("groups:\n", "c.yaml: groups: expected a mapping of group names"),
        ("groups: []", "c.yaml: groups: expected a mapping of group names"),
        ("groups: {\"\": {resources: []}}", "c.yaml: groups.: a group needs a non-empty name"),
        ("groups: {edge: 3}", "c.yaml: groups.edge: expected a mapping with `resources:`"),
        ("groups: {edge: }", "c.yaml: groups.edge: expected a mapping with `resources:`"),
        (
            "groups: {edge: {resourcez: []}}",
            "c.yaml: groups.edge.resourcez: unknown key: expected `resources`",
        ),
        (
            "groups: {edge: {resources: {}}}",
            "c.yaml: groups.edge.resources: expected a list of resources",
        ),
        (
            &format!("groups: {{edge: {{resources: [{CLA_Y}, {CLA_Y}, {CLA_Y}, {BAD_Y}]}}}}"),
            "c.yaml: groups.edge.resources[3]: cluster_namez: unknown field",
        ),
        ("~", "c.yaml: the file is empty; to serve no resources write `resources: []`"),
        (
            "# only a comment\n",
            "c.yaml: the file is empty; to serve no resources write `resources: []`",
        ),
        (
            "? [1, 2]\n: x\n",
            "c.yaml: syntax error: a mapping key must be a scalar, not a collection",
        ),
        (
            "resources: [{? [1]: x}]",
            "c.yaml: syntax error: a mapping key must be a scalar, not a collection",
        ),
        (
            &format!("base: &b {{resources: [{CLA_Y}]}}\n"),
            "c.yaml: base: unknown key: expected `resources` or `groups`",
        ),
        (
            "resources: []\n---\nresources: []\n",
            "c.yaml: syntax error: multiple YAML documents detected; use from_str_multiple or from_str_multiple_with_options at line 3, column 1",
        ),
        ("resources: [1, 2]", "c.yaml: resources[0]: invalid type: integer `1`, expected a map"),
        (
            "resources: []\nresources: []\n",
            "c.yaml: syntax error: duplicate mapping key: resources, set DuplicateKeyPolicy in Options if acceptable at line 2, column 1",
        ),
        (
            "resources:\n  - \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n    cluster_name: a\n  -  x: [\n",
            "c.yaml: syntax error: unclosed bracket '[' at line 4, column 9",
        ),
        (
            &format!("resources:\n  - {}\n", "[".repeat(200)),
            "c.yaml: syntax error: nesting deeper than 100 levels at line 2 column 105",
        ),
    ];
    let json = [
        ("null", "c.json: the file is empty; to serve no resources write `resources: []`"),
        ("[]", "c.json: expected a mapping with `resources:` and `groups:`"),
        ("\"x\"", "c.json: expected a mapping with `resources:` and `groups:`"),
        ("- a\n", "c.json: syntax error: invalid number at line 1 column 2"),
        ("80: x\n", "c.json: syntax error: trailing characters at line 1 column 3"),
        ("{\"groups\": null}", "c.json: groups: expected a mapping of group names"),
        ("{\"groups\": {\"e\": null}}", "c.json: groups.e: expected a mapping with `resources:`"),
        (
            &format!(
                "{{\"resources\": [{CLA_J}], \"groups\": {{\"x\": {{\"resources\": [{CLA_J}, 3]}}}}}}"
            ),
            "c.json: groups.x.resources[1]: invalid type: integer `3`, expected a map",
        ),
        (
            &format!("{{\"resources\": [{CLA_J}], \"bogus\": 1}}"),
            "c.json: bogus: unknown key: expected `resources` or `groups`",
        ),
        ("{\"resources\": [1], }", "c.json: syntax error: trailing comma at line 1 column 20"),
        ("{\"resources\": []} x", "c.json: syntax error: trailing characters at line 1 column 19"),
        (
            &format!("{{\"resources\": [{}]}}", "[".repeat(200)),
            "c.json: syntax error: nesting deeper than 100 levels at line 1 column 114",
        ),
    ];
    for (file, cases) in [("c.yaml", &yaml[..]), ("c.json", &json[..])] {
        for (text, expected) in cases {
            let err = config::parse_str(Path::new(file), text).unwrap_err().to_string();
            assert_eq!(&err, expected, "{text}");
        }
    }
}

/// What a file declares loads as it did when the whole document was parsed first:
/// a group without resources is still a group, and YAML anchors, aliases and merge keys apply
/// across groups.
#[test]
fn groups_anchors_and_merge_keys_load_as_before() {
    let cla = "{\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment, cluster_name: backend}";
    let groups = |text: &str| -> Vec<(String, usize)> {
        let config = config::parse_str(Path::new("c.yaml"), text).unwrap();
        config.groups.iter().map(|(name, snapshot)| (name.clone(), snapshot.len())).collect()
    };
    let owned = |expected: &[(&str, usize)]| -> Vec<(String, usize)> {
        expected.iter().map(|(name, len)| ((*name).to_owned(), *len)).collect()
    };
    assert_eq!(groups("groups: {edge: {}}"), owned(&[("", 0), ("edge", 0)]));
    assert_eq!(
        groups("resources:\ngroups: {a: {resources: []}, b: {resources: ~}}\n"),
        owned(&[("", 0), ("a", 0), ("b", 0)])
    );
    assert_eq!(
        groups(&format!("groups: {{a: &g {{resources: [{cla}]}}, b: *g}}")),
        owned(&[("", 0), ("a", 1), ("b", 1)])
    );
    assert_eq!(
        groups(&format!("resources: [&c {cla}]\ngroups: {{b: {{resources: [*c]}}}}")),
        owned(&[("", 1), ("b", 1)])
    );
    assert_eq!(
        groups(&format!("groups: {{a: {{<<: {{resources: [{cla}]}}}}}}")),
        owned(&[("", 0), ("a", 1)])
    );
    // The same resource in two groups is one encoded copy.
    let config = config::parse_str(
        Path::new("c.json"),
        &format!(
            "{{\"resources\": [{0}], \"groups\": {{\"b\": {{\"resources\": [{0}]}}}}}}",
            "{\"@type\": \"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\", \"cluster_name\": \"backend\"}"
        ),
    )
    .unwrap();
    let cla_type = TypeUrl::from(ResourceType::ClusterLoadAssignment);
    let a = config.groups[DEFAULT_GROUP].get(&cla_type, "backend").unwrap();
    assert!(a.ptr_eq(config.groups["b"].get(&cla_type, "backend").unwrap()));
}

/// A JSON parser keeps the last of two equal keys silently, so a file that names the same list
/// or group twice loaded one of them; it is refused now, as YAML refuses it.
#[test]
fn a_json_key_given_twice_is_refused() {
    for (text, expected) in [
        ("{\"resources\": [], \"resources\": []}", "c.json: resources: the key is given twice"),
        ("{\"groups\": {\"a\": {}, \"a\": {}}}", "c.json: groups.a: the key is given twice"),
    ] {
        let err = config::parse_str(Path::new("c.json"), text).unwrap_err().to_string();
        assert_eq!(err, expected);
    }
}
