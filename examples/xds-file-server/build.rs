//! Records the git commit the binary is built from (`XDS_BUILD_COMMIT`, shown by `--version`
//! and the `xds_build_info` metric). Outside a git checkout, or without git, it is `unknown`;
//! a packager may set `XDS_BUILD_COMMIT` in the environment instead.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=XDS_BUILD_COMMIT");
    let commit =
        std::env::var("XDS_BUILD_COMMIT").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| {
            Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|out| out.status.success())
                .and_then(|out| String::from_utf8(out.stdout).ok())
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".to_owned())
        });
    // A new commit moves HEAD or the branch it points at; watch both where they exist (a path
    // that does not exist would rerun this script on every build).
    let git = Path::new("../../.git");
    for watched in [git.join("HEAD"), git.join("refs/heads"), git.join("packed-refs")] {
        if watched.exists() {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
    }
    println!("cargo:rustc-env=XDS_BUILD_COMMIT={commit}");
}
