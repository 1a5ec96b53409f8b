//! Compiles the `.proto` sources that ship inside the `envoy-types` package into one
//! `FileDescriptorSet` (`$OUT_DIR/envoy_descriptors.bin`), which `src/descriptor.rs` embeds with
//! `include_bytes!`.
//!
//! The descriptors drive proto3 JSON/YAML transcoding and canonical (deterministic) encoding.
//! They are compiled with `protox` (pure Rust, no `protoc`) from the exact `envoy-types` package
//! the crate links against, so the pool always describes the generated types. Nothing is copied
//! into this repository.
//!
//! The package is located with `cargo metadata` (the `manifest_path` of package `envoy-types`),
//! falling back to a glob of `$CARGO_HOME/registry/src/*/envoy-types-0.7.*/` when that fails
//! (`cargo metadata` needs every package of the lock file downloaded, which a `cargo build -p`
//! does not guarantee). Any failure fails the build with the reason.
//!
//! With `XDS_PROTO_BUILD_STATS=1` in the environment, a run of the script (after a change to this
//! file or `cargo clean -p xds-proto`) reports where it found the sources, how long they took
//! to compile and the size of the set as cargo warnings.

use std::cell::RefCell;
use std::collections::HashMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::rc::Rc;
use std::time::Instant;

use protox::file::{
    ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver,
};
use protox::prost_reflect::DescriptorPool;

/// Include roots inside `envoy-types/proto/`: each is a folder that imports are resolved against.
const INCLUDE_ROOTS: &[&str] = &[
    "data-plane-api",
    "xds",
    "googleapis",
    "protoc-gen-validate",
    "cel-spec/proto",
    "opentelemetry-proto",
    "client_model",
    "ratelimit/api",
];

/// Folders (relative to `envoy-types/proto/`) whose every `.proto` is compiled: the whole Envoy
/// API (config, extensions, service, type, data, admin, watchdog, annotations), the xDS/UDPA
/// protos and the rate-limit service config (`ratelimit.config.ratelimit.v3`), i.e. every package
/// `envoy-types` generates Rust types for. Their imports (googleapis, validate, cel,
/// opentelemetry, prometheus, well-known types) come along. All of it compiles in about a second.
const COMPILE_DIRS: &[&str] =
    &["data-plane-api/envoy", "xds/xds", "xds/udpa", "ratelimit/api/ratelimit"];

/// Well-known types compiled explicitly so that every one of them is in the pool, imported or not.
const WELL_KNOWN: &[&str] = &[
    "google/protobuf/any.proto",
    "google/protobuf/api.proto",
    "google/protobuf/descriptor.proto",
    "google/protobuf/duration.proto",
    "google/protobuf/empty.proto",
    "google/protobuf/field_mask.proto",
    "google/protobuf/source_context.proto",
    "google/protobuf/struct.proto",
    "google/protobuf/timestamp.proto",
    "google/protobuf/type.proto",
    "google/protobuf/wrappers.proto",
];

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=build.rs");
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: xds-proto build script: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let located = Instant::now();
    let package = find_envoy_types()?;
    // Lets a test check the descriptors come from the locked envoy-types version: the script
    // only reruns when build.rs changes, so a version bump needs `cargo clean -p xds-proto`.
    println!("cargo:rustc-env=XDS_PROTO_ENVOY_TYPES_DIR={}", package.display());
    let proto_root = package.join("proto");
    if env::var_os("XDS_PROTO_BUILD_STATS").is_some() {
        println!("cargo:warning=found {} in {:?}", proto_root.display(), located.elapsed());
    }
    if !proto_root.is_dir() {
        return Err(format!(
            "the envoy-types package has no proto folder at {}",
            proto_root.display()
        ));
    }

    let mut files = Vec::new();
    for dir in COMPILE_DIRS {
        let dir = proto_root.join(dir);
        if !dir.is_dir() {
            return Err(format!("missing proto folder {}", dir.display()));
        }
        collect_protos(&dir, &mut files)?;
    }
    files.sort();

    let includes: Vec<PathBuf> = INCLUDE_ROOTS
        .iter()
        .map(|root| proto_root.join(root))
        .filter(|root| root.is_dir())
        .collect();

    let started = Instant::now();
    let (encoded, compiled) = compile(&includes, &files)?;
    let elapsed = started.elapsed();

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let out = out_dir.join("envoy_descriptors.bin");
    fs::write(&out, &encoded).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    if env::var_os("XDS_PROTO_BUILD_STATS").is_some() {
        println!(
            "cargo:warning=compiled {} proto files ({} files in the set) in {elapsed:?}: {} bytes",
            files.len(),
            compiled,
            encoded.len()
        );
    }
    Ok(())
}

/// Compiles `files` (and the well-known types) into one encoded `FileDescriptorSet` holding every
/// file and its imports, dependencies first. Returns the set and its number of files.
fn compile(includes: &[PathBuf], files: &[PathBuf]) -> Result<(Vec<u8>, usize), String> {
    let patches = Patches::default();
    let mut resolver = ChainFileResolver::new();
    for include in includes {
        resolver.add(IncludeFileResolver::new(include.clone()));
    }
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(PatchingResolver {
        inner: resolver,
        patches: Rc::clone(&patches),
    });
    compiler.include_imports(true).include_source_info(false);
    compiler
        .open_files(WELL_KNOWN)
        .map_err(|e| format!("cannot compile the well-known types: {e}"))?;
    for file in files {
        let mut attempts = 0;
        while let Err(error) = compiler.open_file(file) {
            attempts += 1;
            let fix = (attempts <= MAX_PATCHES_PER_FILE)
                .then(|| shadowing_fix(&error, &compiler.descriptor_pool()))
                .flatten();
            let Some((name, from, to)) = fix else {
                return Err(format!("cannot compile {}: {error:?}", file.display()));
            };
            patches.borrow_mut().entry(name).or_default().push((from, to));
        }
    }
    if env::var_os("XDS_PROTO_BUILD_STATS").is_some() {
        let patches = patches.borrow();
        let names: usize = patches.values().map(Vec::len).sum();
        println!("cargo:warning=qualified {names} shadowed type names in {} files", patches.len());
    }
    Ok((compiler.encode_file_descriptor_set(), compiler.files().len()))
}

/// How many shadowed names one file may need qualified before its error is final.
const MAX_PATCHES_PER_FILE: usize = 32;

/// Source rewrites per file name: (relative type name, fully qualified type name).
type Patches = Rc<RefCell<HashMap<String, Vec<(String, String)>>>>;

/// Reads files through `inner`, then applies the rewrites recorded for them in `patches`.
///
/// `protox` (through `prost-reflect`) resolves the first component of a relative type name
/// against every package in its pool, while `protoc` only looks at the packages of the file's
/// direct imports. Envoy relies on the `protoc` rule: in package
/// `envoy.extensions.clusters.dynamic_forward_proxy.v3`, `common.dynamic_forward_proxy.v3.
/// DnsCacheConfig` must skip `envoy.extensions.clusters.common` (defined by a transitive import)
/// and find `envoy.extensions.common.dynamic_forward_proxy.v3.DnsCacheConfig`. When `protox`
/// reports such a shadowed name, [`shadowing_fix`] finds the type `protoc` would pick and the
/// file is re-read with the name fully qualified (`.envoy.extensions.common...`). The compiled
/// descriptor is then the one `protoc` produces: type names in descriptors are fully qualified.
struct PatchingResolver {
    inner: ChainFileResolver,
    patches: Patches,
}

impl FileResolver for PatchingResolver {
    fn resolve_path(&self, path: &Path) -> Option<String> {
        self.inner.resolve_path(path)
    }

    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        let file = self.inner.open_file(name)?;
        let patches = self.patches.borrow();
        let (Some(rewrites), Some(source)) = (patches.get(name), file.source()) else {
            return Ok(file);
        };
        let mut source = source.to_owned();
        for (from, to) in rewrites {
            source = replace_type_name(&source, from, to);
        }
        File::from_source(name, &source)
    }
}

/// For an error "'X' resolves to 'P.X', which is not defined" in file F: the file name, `X` and
/// `.Q.X` where `Q` is the innermost proper ancestor scope of `P` in which `Q.X` is a message or
/// enum of `pool`. `None` for any other error.
fn shadowing_fix(error: &protox::Error, pool: &DescriptorPool) -> Option<(String, String, String)> {
    let file = error.file()?.to_owned();
    let message = error.to_string();
    let rest = message.strip_prefix('\'')?;
    let (relative, rest) = rest.split_once("' resolves to '")?;
    let (shadowed, _) = rest.split_once("', which is not defined")?;
    let mut scope = shadowed.strip_suffix(relative)?.strip_suffix('.')?;
    while !scope.is_empty() {
        scope = scope.rsplit_once('.').map_or("", |(parent, _)| parent);
        let candidate =
            if scope.is_empty() { relative.to_owned() } else { format!("{scope}.{relative}") };
        if pool.get_message_by_name(&candidate).is_some()
            || pool.get_enum_by_name(&candidate).is_some()
        {
            return Some((file, relative.to_owned(), format!(".{candidate}")));
        }
    }
    None
}

/// `source` with every whole-name occurrence of the type name `from` replaced by `to` (an
/// occurrence must not be part of a longer dotted identifier).
fn replace_type_name(source: &str, from: &str, to: &str) -> String {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = String::with_capacity(source.len() + to.len());
    let mut rest = source;
    while let Some(at) = rest.find(from) {
        out.push_str(&rest[..at]);
        let before = out.chars().next_back();
        let after = rest[at + from.len()..].chars().next();
        if before.is_some_and(is_name_char) || after.is_some_and(is_name_char) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

/// The directory holding the `envoy-types` package (its `Cargo.toml`).
fn find_envoy_types() -> Result<PathBuf, String> {
    let metadata_error = match from_cargo_metadata() {
        Ok(dir) => return Ok(dir),
        Err(e) => e,
    };
    if env::var_os("XDS_PROTO_BUILD_STATS").is_some() {
        println!("cargo:warning=cargo metadata failed, globbing the registry: {metadata_error}");
    }
    from_registry_glob().map_err(|glob_error| {
        format!(
            "cannot find the envoy-types package: cargo metadata: {metadata_error}; registry: {glob_error}"
        )
    })
}

/// Asks `cargo metadata` (the cargo running this build) where `envoy-types` lives.
///
/// `--frozen` (offline, and the lock file must be up to date) keeps it from touching the network
/// or rewriting `Cargo.lock` while the build holds it: the build just resolved the lock file.
fn from_cargo_metadata() -> Result<PathBuf, String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?);
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--frozen", "--manifest-path"])
        .arg(manifest_dir.join("Cargo.toml"))
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cannot parse the cargo metadata output: {e}"))?;
    let packages =
        metadata["packages"].as_array().ok_or("cargo metadata output has no packages")?;
    packages
        .iter()
        .filter(|p| p["name"] == "envoy-types")
        .filter_map(|p| p["manifest_path"].as_str())
        .filter_map(|manifest| Path::new(manifest).parent().map(Path::to_path_buf))
        .max()
        .ok_or_else(|| "no envoy-types package in the dependency graph".to_owned())
}

/// Falls back to `$CARGO_HOME/registry/src/*/envoy-types-0.7.*`, taking the highest version.
fn from_registry_glob() -> Result<PathBuf, String> {
    let cargo_home = match env::var_os("CARGO_HOME") {
        Some(home) => PathBuf::from(home),
        None => PathBuf::from(env::var_os("HOME").ok_or("neither CARGO_HOME nor HOME is set")?)
            .join(".cargo"),
    };
    let src = cargo_home.join("registry").join("src");
    let registries =
        fs::read_dir(&src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let mut best: Option<(Vec<u64>, PathBuf)> = None;
    for registry in registries.flatten() {
        let Ok(entries) = fs::read_dir(registry.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(version) = name.to_str().and_then(|n| n.strip_prefix("envoy-types-0.7."))
            else {
                continue;
            };
            let Ok(patch) = version.parse::<u64>() else {
                continue;
            };
            let key = vec![0, 7, patch];
            if entry.path().join("proto").is_dir()
                && best.as_ref().is_none_or(|(current, _)| key > *current)
            {
                best = Some((key, entry.path()));
            }
        }
    }
    best.map(|(_, path)| path)
        .ok_or_else(|| format!("no envoy-types-0.7.* with a proto folder under {}", src.display()))
}

/// Every `.proto` file under `dir`, recursively.
fn collect_protos(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?.path();
        if path.is_dir() {
            collect_protos(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            files.push(path);
        }
    }
    Ok(())
}
