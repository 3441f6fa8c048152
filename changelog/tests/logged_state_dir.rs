//! The state directory: locking (in this process and from another), modes, names, cleanup,
//! and the checkpoint file.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use statestore_changelog::{Checkpoint, StateDirectory, TaskId, read_checkpoint, write_checkpoint};
use store_api::{Error, ErrorKind};

/// Set in the child process of `a_second_process_gets_locked`: the directory to hold.
const CHILD_DIR_ENV: &str = "STATESTORE_TEST_LOCK_CHILD_DIR";

/// Held while a child process is forked, and by tests that release a lock and take it again:
/// between fork and exec the child holds a copy of every open descriptor, lock files included,
/// so a lock released in that window would still look held.
static FORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn no_fork() -> std::sync::MutexGuard<'static, ()> {
    FORK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn a_second_open_in_this_process_is_locked() {
    let _no_fork = no_fork();
    let dir = tempfile::tempdir().expect("tempdir");
    let first = StateDirectory::open(dir.path(), "app").expect("open");
    let err = StateDirectory::open(dir.path(), "app").expect_err("second open");
    let Error::Locked { path, detail } = err else {
        panic!("not Locked: {err}")
    };
    assert_eq!(path, dir.path().join("app"));
    assert!(
        detail.contains(&std::process::id().to_string()),
        "no pid in {detail:?}"
    );
    // Another application in the same state directory is independent.
    StateDirectory::open(dir.path(), "other").expect("other app");
    drop(first);
    StateDirectory::open(dir.path(), "app").expect("reopen after drop");
}

/// Not a test on its own: the child process of `a_second_process_gets_locked`, which holds
/// the lock until its stdin closes.
#[test]
#[ignore = "run only as the child process of a_second_process_gets_locked"]
fn child_holds_state_dir_lock() {
    let dir = std::env::var(CHILD_DIR_ENV).expect("run by a_second_process_gets_locked");
    let _state = StateDirectory::open(Path::new(&dir), "app").expect("child open");
    println!("LOCKED");
    let mut line = String::new();
    while std::io::stdin()
        .read_line(&mut line)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
}

#[test]
fn a_second_process_gets_locked_until_the_holder_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forking = no_fork();
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "child_holds_state_dir_lock",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(forking);
    // libtest prints the test name on the same line, so the marker ends a line.
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let locked = stdout
            .lines()
            .map_while(Result::ok)
            .any(|line| line.ends_with("LOCKED"));
        let _ = tx.send(locked);
    });
    let locked = rx.recv_timeout(Duration::from_secs(60)).unwrap_or(false);
    if !locked {
        let _ = child.kill();
        panic!("the child never took the lock");
    }

    let err = StateDirectory::open(dir.path(), "app").expect_err("held by the child");
    let Error::Locked { path, detail } = err else {
        panic!("not Locked: {err}")
    };
    assert_eq!(path, dir.path().join("app"));
    assert_eq!(detail, format!("held by process {}", child.id()));

    // SIGKILL: the OS releases the lock of a process that never cleaned up.
    child.kill().expect("kill");
    child.wait().expect("wait");
    StateDirectory::open(dir.path(), "app").expect("open after the holder died");
}

#[cfg(unix)]
#[test]
fn directories_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("state");
    let state = StateDirectory::open(&root, "app").expect("open");
    let task = state.task(TaskId::new(0, 1)).expect("task");
    let store = task.store_dir("rocksdb", "counts").expect("store dir");
    assert_eq!(store, root.join("app/0_1/rocksdb/counts"));
    for path in [
        root.clone(),
        root.join("app"),
        root.join("app/0_1"),
        root.join("app/0_1/rocksdb"),
        store,
    ] {
        let mode = std::fs::metadata(&path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", path.display());
    }
}

#[test]
fn names_are_validated() {
    let dir = tempfile::tempdir().expect("tempdir");
    for bad in ["", ".", "..", "a/b", "nul\0"] {
        let err = StateDirectory::open(dir.path(), bad).expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }
    let state = StateDirectory::open(dir.path(), "app").expect("open");
    let task = state.task(TaskId::new(0, 0)).expect("task");
    for bad in ["", ".", "..", "../escape", "a\0"] {
        assert_eq!(
            task.store_dir("redb", bad).expect_err(bad).kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            task.store_dir(bad, "counts").expect_err(bad).kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            state.changelog_topic(bad).expect_err(bad).kind(),
            ErrorKind::InvalidArgument
        );
    }
    assert_eq!(
        state.changelog_topic("counts").expect("topic"),
        "app-counts-changelog"
    );
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn a_task_is_held_by_one_handle_at_a_time() {
    let _no_fork = no_fork();
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDirectory::open(dir.path(), "app").expect("open");
    let task = state.task(TaskId::new(1, 2)).expect("task");
    assert_eq!(task.path(), dir.path().join("app/1_2"));
    let err = state.task(TaskId::new(1, 2)).expect_err("already open");
    assert_eq!(err.kind(), ErrorKind::Locked);
    drop(task);
    state.task(TaskId::new(1, 2)).expect("reopen");
}

fn age(path: &Path, by: Duration) {
    let file = std::fs::File::open(path).expect("open dir");
    file.set_modified(SystemTime::now() - by)
        .expect("set mtime");
}

#[test]
fn cleanup_removes_only_unassigned_old_closed_tasks() {
    let _no_fork = no_fork();
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDirectory::open(dir.path(), "app").expect("open");
    let ids: Vec<TaskId> = (0..4).map(|p| TaskId::new(0, p)).collect();
    for id in &ids {
        drop(state.task(*id).expect("task"));
    }
    let held = state.task(ids[3]).expect("task");
    std::fs::create_dir(dir.path().join("app/notes")).expect("mkdir");
    let hour = Duration::from_secs(3600);
    for (id, old) in [
        (ids[0], true),
        (ids[1], true),
        (ids[2], false),
        (ids[3], true),
    ] {
        if old {
            age(&dir.path().join("app").join(id.to_string()), 2 * hour);
        }
    }
    age(&dir.path().join("app/notes"), 2 * hour);

    // 0_0 is assigned, 0_2 is recent, 0_3 is open: only 0_1 goes.
    assert_eq!(
        state.cleanup(&[ids[0]], hour).expect("cleanup"),
        vec![ids[1]]
    );
    assert_eq!(
        state.task_ids().expect("list"),
        vec![ids[0], ids[2], ids[3]]
    );
    // Without a delay the recent one goes too, never the open one nor foreign entries.
    assert_eq!(
        state.cleanup(&[ids[0]], Duration::ZERO).expect("cleanup"),
        vec![ids[2]]
    );
    assert!(dir.path().join("app/notes").exists());
    assert!(dir.path().join("app/.lock").exists());
    drop(held);
    assert_eq!(
        state.cleanup(&[], Duration::ZERO).expect("cleanup"),
        vec![ids[0], ids[3]]
    );
}

#[test]
fn checkpoint_round_trip_through_the_task() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDirectory::open(dir.path(), "app").expect("open");
    let task = state.task(TaskId::new(0, 3)).expect("task");
    let cp = task.checkpoint();
    assert_eq!(cp.get("app-counts-changelog", 3), None);
    cp.set("app-counts-changelog", 3, 41).expect("set");
    cp.set("app-totals-changelog", 3, 17).expect("set");
    cp.set("app-counts-changelog", 3, 42).expect("set");
    drop(task);
    let text = std::fs::read_to_string(dir.path().join("app/0_3/.checkpoint")).expect("read");
    assert_eq!(
        text,
        "0\n2\napp-counts-changelog 3 42\napp-totals-changelog 3 17\n"
    );
    let task = state.task(TaskId::new(0, 3)).expect("reopen");
    assert_eq!(task.checkpoint().get("app-totals-changelog", 3), Some(17));
    task.checkpoint()
        .remove("app-totals-changelog", 3)
        .expect("remove");
    let entries = read_checkpoint(task.checkpoint().path())
        .expect("read")
        .expect("present");
    assert_eq!(entries.len(), 1);
    let err = task
        .checkpoint()
        .set("bad topic", 3, 1)
        .expect_err("whitespace");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn garbage_checkpoints_are_corruption_and_a_missing_one_is_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(".checkpoint");
    assert!(read_checkpoint(&path).expect("missing").is_none());
    for garbage in [
        &b"1\n0\n"[..],
        b"0\n2\nt 0 1\n",
        b"0\n1\nt zero 1\n",
        b"\xff\xfe",
        b"",
        b"0\n1\nt 0 1 extra\n",
    ] {
        std::fs::write(&path, garbage).expect("write");
        let err = read_checkpoint(&path).expect_err("garbage");
        assert_eq!(err.kind(), ErrorKind::Corruption, "{garbage:?}");
        let err = Checkpoint::open(&path).expect_err("garbage");
        assert_eq!(err.kind(), ErrorKind::Corruption);
    }
    // Kafka Streams writes the same format: its files read back.
    std::fs::write(&path, "0\n1\nmy-app-store-changelog 0 12345\n").expect("write");
    let entries = read_checkpoint(&path).expect("read").expect("present");
    assert_eq!(entries.values().copied().collect::<Vec<_>>(), vec![12345]);
    write_checkpoint(&path, &entries).expect("write");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "0\n1\nmy-app-store-changelog 0 12345\n"
    );
}
