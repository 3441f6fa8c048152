//! The changelog conformance suite on the file log and the memory log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use statestore_changelog::{Changelog, FileLog, FileLogConfig, MemoryLog};
use store_api::Result;

/// Opens a file log with default options.
fn file_log(dir: &Path, topic: &str, partition: u32) -> Result<Box<dyn Changelog>> {
    let log = FileLog::open(dir, topic, partition, FileLogConfig::default())?;
    Ok(Box::new(log))
}

/// Opens a file log whose segments roll every 4 KiB, so the cases also cross segments.
fn small_segment_file_log(dir: &Path, topic: &str, partition: u32) -> Result<Box<dyn Changelog>> {
    let config = FileLogConfig {
        segment_bytes: 4096,
        ..FileLogConfig::default()
    };
    Ok(Box::new(FileLog::open(dir, topic, partition, config)?))
}

/// Memory logs by directory, topic and partition: opening the same one again returns a handle
/// on the same records, which is what a reopen means for a log that lives in memory.
fn memory_log(dir: &Path, topic: &str, partition: u32) -> Result<Box<dyn Changelog>> {
    type Registry = Mutex<HashMap<(PathBuf, String, u32), MemoryLog>>;
    static LOGS: LazyLock<Registry> = LazyLock::new(Registry::default);
    let mut logs = LOGS.lock().expect("memory log registry poisoned");
    let log = logs
        .entry((dir.to_path_buf(), topic.to_string(), partition))
        .or_insert_with(|| MemoryLog::new(topic, partition))
        .clone();
    Ok(Box::new(log))
}

mod file {
    statestore_conformance::changelog_suite!(super::file_log);
}

mod file_small_segments {
    statestore_conformance::changelog_suite!(super::small_segment_file_log);
}

mod memory {
    statestore_conformance::changelog_suite!(super::memory_log);
}
