//! The README read as a new user reads it: a crate outside the workspace whose manifest is the
//! Install section's (each `git = "<repository URL>"` pointing at this checkout instead) builds
//! every Rust snippet of the README, a snippet with a `main` as an example and one without as
//! a test. A snippet that needs a crate the Install section does not name fails to build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root, one level above this crate.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tasks/ has a parent")
        .to_path_buf()
}

/// The target directory this test binary was built in (`<target>/debug/deps/readme_install-*`),
/// so the new crate reuses every compiled dependency, RocksDB included.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("<target>/debug/deps/readme_install-*")
        .to_path_buf()
}

/// The fenced blocks of `markdown` whose info string starts with `lang`, with the line each
/// starts on.
fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<(usize, Vec<&'a str>)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, Vec<&str>)> = None;
    for (number, line) in markdown.lines().enumerate() {
        match (&mut current, line.strip_prefix("```")) {
            (Some(_), Some("")) => blocks.extend(current.take()),
            (Some((_, lines)), _) => lines.push(line),
            (None, Some(info)) if info.split(',').next() == Some(lang) => {
                current = Some((number + 1, Vec::new()));
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The workspace's crates by name: the path of each in `[workspace.dependencies]`.
fn crate_paths(manifest: &str) -> Vec<(String, PathBuf)> {
    let root = workspace();
    manifest
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(" = { path = \"")?;
            let (path, _) = rest.split_once('"')?;
            Some((name.trim().to_owned(), root.join(path)))
        })
        .collect()
}

/// The Install section's manifest, each git dependency on a crate of this checkout made a path
/// dependency on it.
fn install_manifest(readme: &str, crates: &[(String, PathBuf)]) -> String {
    let install = &readme[readme.find("## Install").expect("an Install section")..];
    let install = &install[..install[3..]
        .find("\n## ")
        .map_or(install.len(), |end| end + 3)];
    let toml = blocks(install, "toml");
    assert_eq!(toml.len(), 1, "the Install section has one toml block");
    let mut manifest = String::new();
    for line in &toml[0].1 {
        let line = match line.split_once(" = { git = \"<repository URL>\"") {
            Some((name, rest)) => {
                let (_, path) = crates
                    .iter()
                    .find(|(known, _)| known == name.trim())
                    .unwrap_or_else(|| panic!("the Install section names {name}, no crate here"));
                format!("{name} = {{ path = {path:?}{rest}")
            }
            None => (*line).to_owned(),
        };
        manifest.push_str(&line);
        manifest.push('\n');
    }
    manifest
}

/// Writes the new crate into `dir`: the Install section's dependencies, the workspace's profiles
/// (other profiles would compile every dependency again), its lock file (the same versions, so
/// nothing is fetched), and the README's snippets. Returns how many snippets it wrote.
fn write_user_crate(dir: &Path) -> usize {
    let root = workspace();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace manifest");
    let profiles = &manifest[manifest.find("[profile.").expect("workspace profiles")..];
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let dependencies = install_manifest(&readme, &crate_paths(&manifest));
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"my-application\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
             publish = false\n\n{dependencies}\n[workspace]\n\n{profiles}"
        ),
    )
    .expect("write Cargo.toml");
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    std::fs::create_dir(dir.join("src")).expect("src/");
    std::fs::write(dir.join("src/lib.rs"), "").expect("write lib.rs");
    for sub in ["examples", "tests"] {
        std::fs::create_dir(dir.join(sub)).expect("examples/ and tests/");
    }
    let snippets = blocks(&readme, "rust");
    for (line, lines) in &snippets {
        // rustdoc's hidden lines (`# ...`) are part of the code.
        let code: String = lines
            .iter()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .flat_map(|l| [l, "\n"])
            .collect();
        let sub = if code.contains("fn main(") {
            "examples"
        } else {
            "tests"
        };
        std::fs::write(dir.join(sub).join(format!("readme_line_{line}.rs")), code)
            .expect("write a snippet");
    }
    snippets.len()
}

#[test]
fn the_readme_snippets_build_with_the_install_section_alone() {
    let krate = tempfile::tempdir().expect("tempdir");
    let snippets = write_user_crate(krate.path());
    assert!(snippets >= 4, "the README has {snippets} Rust snippets");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        // The test profile, as this test's build: a build script's output is keyed by
        // profile, so under `dev` RocksDB and librdkafka would be compiled again.
        .args([
            "build",
            "--offline",
            "--profile",
            "test",
            "--examples",
            "--tests",
        ])
        .current_dir(krate.path())
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run cargo build");
    assert!(
        output.status.success(),
        "the README's snippets do not build from the Install section alone:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_install_sections_git_dependencies_become_path_dependencies() {
    let readme = "## Install\n\n```toml\n[dependencies]\nstatestore = { git = \"<repository URL>\" }\n```\n\n## Next\n\n```rust\nfn main() {}\n```\n";
    let crates = vec![("statestore".to_owned(), PathBuf::from("/x/statestore"))];
    let manifest = install_manifest(readme, &crates);
    assert_eq!(
        manifest,
        "[dependencies]\nstatestore = { path = \"/x/statestore\" }\n"
    );
    assert_eq!(blocks(readme, "rust"), vec![(10, vec!["fn main() {}"])]);
}
