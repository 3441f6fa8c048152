//! Commits of several tasks at once, each on a thread of its own.

/// Runs `commit` on each of `tasks`, each on a thread of its own when there are several: a
/// task's stores commit one after the other on its thread, as [`Task::commit`](crate::state::task::Task::commit) orders them,
/// while the tasks' changelog appends, syncs (or broker acknowledgements) and checkpoint
/// writes overlap. Returns each task's key and outcome, in the order given; every task is
/// committed whatever the others' outcomes.
pub(crate) fn commit_in_parallel<K, T, R, F>(tasks: Vec<(K, &mut T)>, commit: F) -> Vec<(K, R)>
where
    K: Send,
    T: Send,
    R: Send,
    F: Fn(&mut T) -> R + Sync,
{
    if tasks.len() <= 1 {
        return tasks
            .into_iter()
            .map(|(partition, task)| (partition, commit(task)))
            .collect();
    }
    let commit = &commit;
    std::thread::scope(|scope| {
        let mut tasks = tasks.into_iter();
        let first = tasks.next();
        let others: Vec<_> = tasks
            .map(|(partition, task)| (partition, scope.spawn(move || commit(task))))
            .collect();
        let mut results: Vec<_> = first
            .into_iter()
            .map(|(partition, task)| (partition, commit(task)))
            .collect();
        for (partition, handle) in others {
            match handle.join() {
                Ok(result) => results.push((partition, result)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    use super::commit_in_parallel;

    /// Every task's commit is under way at once: each waits (up to 10 s) until all are, which
    /// commits made one after the other never reach.
    #[test]
    fn tasks_commit_at_the_same_time() {
        let inside = (Mutex::new(0usize), Condvar::new());
        let mut tasks = [10u32, 11, 12, 13];
        let due = tasks
            .iter_mut()
            .enumerate()
            .map(|(i, t)| (i as u32, t))
            .collect();
        let results = commit_in_parallel(due, |task| {
            let (count, all_in) = &inside;
            let mut count = count.lock().expect("lock");
            *count += 1;
            all_in.notify_all();
            let (count, timeout) = all_in
                .wait_timeout_while(count, Duration::from_secs(10), |count| *count < 4)
                .expect("lock");
            drop(count);
            *task += 1;
            !timeout.timed_out()
        });
        assert_eq!(
            results,
            vec![(0, true), (1, true), (2, true), (3, true)],
            "a commit waited for another to finish"
        );
        assert_eq!(tasks, [11, 12, 13, 14]);
    }
}
