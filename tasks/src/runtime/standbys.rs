//! Keeping the standby copies this instance should hold (see the `standby` module).

use super::*;

impl Application {
    /// Reads the group's members and their partitions (see the `members` module), opens the
    /// standby copies this instance should keep (see the `standby` module), closes the others,
    /// and brings every copy up to the end of its changelogs. Publishes the members and the
    /// copies for interactive queries (see the `queries` module).
    pub(super) fn maintain_standbys(&mut self) -> Result<()> {
        let rebalances = self.shared.rebalances.load(Ordering::Relaxed);
        let view = match members::describe(
            &self.consumer,
            &self.shared.config.application_id,
            // Co-partitioned under the range assignor: every input topic is split alike.
            &self.shared.inputs[0],
            self.shared.partitions,
            self.shared.config.assignment_strategy,
            self.shared.config.request_timeout(),
        ) {
            Ok(view) => {
                self.describe_backoff = GROUP_CHECK_INTERVAL;
                view
            }
            Err(err) => {
                // Standbys are an optimisation: without the member list, keep what there is.
                self.describe_backoff = (self.describe_backoff * 2).min(MAX_DESCRIBE_BACKOFF);
                tracing::warn!(%err, retry_in = ?self.describe_backoff, "describing the consumer group failed; standbys unchanged");
                return Ok(());
            }
        };
        let shared = &self.shared;
        let replicas = shared.config.num_standby_replicas;
        shared
            .queries
            .publish(view.as_ref(), rebalances, &shared.client_id, replicas);
        let Some(view) = view else {
            // Mid-rebalance the assignment is in flux: keep the copies as they are.
            return Ok(());
        };
        let mut active: Vec<u32> = shared.tasks.lock().keys().copied().collect();
        // A restoring task's directory is its restore's until the restore ends.
        active.extend(shared.restorer.lock().tasks.keys().copied());
        let mut wanted = standby_tasks(&view.members, &shared.client_id, replicas);
        wanted.retain(|p| !active.contains(p));
        let mut standbys = shared.standbys.lock();
        let unwanted: Vec<u32> = standbys
            .keys()
            .filter(|p| !wanted.contains(p))
            .copied()
            .collect();
        for partition in unwanted {
            if let Some(standby) = standbys.remove(&partition) {
                shared.queries.forget_standby(partition);
                tracing::info!(task = %standby.id, "standby no longer wanted here");
                standby.close()?;
            }
        }
        for &partition in &wanted {
            if let std::collections::btree_map::Entry::Vacant(slot) = standbys.entry(partition) {
                let id = TaskId::new(0, partition);
                let opened = Standby::open(
                    &shared.state,
                    &shared.config,
                    &shared.clients,
                    id,
                    shared.partitions,
                );
                let Some(standby) = tolerate_timeout(opened, id, "opening")? else {
                    continue;
                };
                tracing::info!(task = %id, "standby opened");
                slot.insert(standby);
            }
        }
        let mut listener = shared.listener.lock();
        for (&partition, standby) in standbys.iter_mut() {
            let caught_up = standby.catch_up(&mut **listener);
            tolerate_timeout(caught_up, standby.id, "catching up")?;
            if let Some(view) = standby.view() {
                shared.queries.standbys.lock().insert(partition, view);
            }
        }
        Ok(())
    }
}

/// A standby's `result`, or `None` when the brokers did not answer in time (every retriable
/// error of its requests ends as a timeout): a standby is an optimisation, tried again at the
/// next group check (a catch-up replays from the copy's checkpoint, so a partial one is
/// harmless), and the instance goes on processing its own tasks meanwhile.
fn tolerate_timeout<T>(result: Result<T>, id: TaskId, doing: &str) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.kind() == ErrorKind::Timeout => {
            tracing::warn!(task = %id, %err, "{doing} a standby timed out; tried again later");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}
