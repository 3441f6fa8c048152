//! The CLI as a library, used as a user would: a crate outside the workspace whose `main` is
//! `statestore_cli::main_with` with a backend of its own (`tests/fixtures/btree_main.rs`),
//! built with cargo, then `restore` into that backend and `dump` from it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use statestore_changelog::{Changelog, FileLog, FileLogConfig};
use store_api::BatchOp;

/// The workspace root, two levels above this crate.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// The target directory this test binary was built in (`<target>/debug/deps/own_binary-*`),
/// so the user's crate reuses every compiled dependency, RocksDB included.
fn target_dir() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_statestore"));
    bin.ancestors()
        .nth(2)
        .expect("<target>/<profile>/statestore")
        .to_path_buf()
}

/// A new crate in `dir`: path dependencies on the workspace's crates, the workspace's profiles
/// (other profiles would compile every dependency again) and its lock file (the same versions,
/// so nothing is fetched).
fn write_user_crate(dir: &Path) {
    let root = workspace();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace manifest");
    let profiles = &manifest[manifest.find("[profile.").expect("workspace profiles")..];
    let cli = root.join("cli");
    let api = root.join("store-api");
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"my-statestore\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
             publish = false\n\n[dependencies]\nstatestore-cli = {{ path = {cli:?} }}\n\
             store-api = {{ path = {api:?} }}\n\n[workspace]\n\n{profiles}"
        ),
    )
    .expect("write Cargo.toml");
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    std::fs::create_dir(dir.join("src")).expect("src/");
    std::fs::write(
        dir.join("src/main.rs"),
        include_str!("fixtures/btree_main.rs"),
    )
    .expect("write main.rs");
}

/// Builds the user's crate and returns its binary.
fn build_user_binary(dir: &Path) -> PathBuf {
    let target = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        // The test profile, as this test's build: a build script's output is keyed by
        // profile, so under `dev` RocksDB and librdkafka would be compiled again.
        .args([
            "build",
            "--offline",
            "--profile",
            "test",
            "--bin",
            "my-statestore",
        ])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo build");
    assert!(
        output.status.success(),
        "building the user's crate failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    target.join("debug").join("my-statestore")
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .expect("run my-statestore")
}

fn ok(bin: &Path, args: &[&str]) -> String {
    let output = run(bin, args);
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A changelog of store `counts` of application `app`, partition 0, in the file log where
/// `restore` looks by default (`STATE_DIR/changelog`).
fn write_changelog(state_dir: &Path) {
    let log = FileLog::open(
        &state_dir.join("changelog"),
        "app-counts-changelog",
        0,
        FileLogConfig::default(),
    )
    .expect("open file log");
    let ops = [
        BatchOp::Put {
            key: b"word/a".to_vec(),
            value: b"1".to_vec(),
        },
        BatchOp::Put {
            key: b"word/b".to_vec(),
            value: b"2".to_vec(),
        },
        BatchOp::Put {
            key: b"word/gone".to_vec(),
            value: b"3".to_vec(),
        },
        BatchOp::Delete {
            key: b"word/gone".to_vec(),
        },
        BatchOp::Put {
            key: b"word/a".to_vec(),
            value: b"4".to_vec(),
        },
    ];
    log.append(&ops).expect("append");
    log.close().expect("close log");
}

#[test]
fn a_users_binary_restores_into_and_dumps_its_own_backend() {
    let krate = tempfile::tempdir().expect("tempdir");
    write_user_crate(krate.path());
    let bin = build_user_binary(krate.path());

    let state = tempfile::tempdir().expect("tempdir");
    write_changelog(state.path());
    let d = state.path().to_str().expect("utf-8 path");
    let restored = ok(
        &bin,
        &[
            "restore",
            d,
            "--application",
            "app",
            "--store",
            "counts",
            "--backend",
            "btree",
        ],
    );
    assert!(
        restored.contains("restored 5 records into btree/counts"),
        "{restored}"
    );
    let dumped = ok(&bin, &["dump", d, "counts", "--application", "app"]);
    assert_eq!(
        dumped,
        "# task 0_0, backend btree, store counts\nword/a\t4\nword/b\t2\n"
    );
    let inspected = ok(&bin, &["inspect", d]);
    assert!(inspected.contains("backend btree"), "{inspected}");

    // The built-ins are still there, after them the user's backend.
    let output = run(
        &bin,
        &[
            "restore",
            d,
            "--application",
            "app",
            "--store",
            "counts",
            "--backend",
            "nosuch",
        ],
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("registered: memory, rocksdb, sled, redb, btree"),
        "{err}"
    );
}
