//! The workaround for tansu 0.6's group coordinator that `TasksConfig::tansu_workarounds`
//! turns on: a stall detector that leaves the group and joins it again.

use super::*;

impl Application {
    /// Rejoins the group when a partition owned elsewhere has records waiting and its group
    /// offset has not moved for [`TasksConfig::stall_timeout`], while this instance owned
    /// tasks and saw no rebalance: nobody processes it.
    ///
    /// tansu 0.6 gets there when the group's leader misses its session timeout (a `kill -9`,
    /// a long pause) while the group is stable and another member's heartbeat notices it: the
    /// coordinator drops the leader from the members but keeps it as the leader, so every
    /// member that rejoins is handed its previous assignment back and the dead leader's
    /// partitions belong to no one. A member that leaves makes it forget that leader, and the
    /// next join rebalances every partition.
    pub(super) fn check_progress(&mut self) -> Result<()> {
        let shared = &self.shared;
        let mine: Vec<u32> = shared.tasks.lock().keys().copied().collect();
        let rebalances = shared.rebalances.load(Ordering::Relaxed);
        if mine.is_empty() || rebalances != self.progress_since {
            // A rebalance stops every partition for a while, and without an assignment of
            // its own an instance cannot tell a rebalance from a stall.
            self.progress.clear();
            self.progress_since = rebalances;
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for input in &shared.inputs {
            for partition in (0..shared.partitions).filter(|p| !mine.contains(p)) {
                tpl.add_partition(input, partition_id(partition));
            }
        }
        let timeout = shared.config.request_timeout();
        let committed = match self.consumer.committed_offsets(tpl, timeout) {
            Ok(committed) => committed,
            Err(err) => {
                tracing::debug!(%err, "reading the group offsets failed");
                return Ok(());
            }
        };
        let now = Instant::now();
        let mut stalled = Vec::new();
        let mut lagging = BTreeMap::new();
        for elem in committed.elements() {
            let Ok(partition) = u32::try_from(elem.partition()) else {
                continue;
            };
            let high = self
                .consumer
                .fetch_watermarks(elem.topic(), elem.partition(), timeout)
                .map(|(_, high)| high);
            let behind = match (elem.offset(), high) {
                (Offset::Offset(at), Ok(high)) => at < high,
                (_, Ok(high)) => high > 0,
                (_, Err(_)) => false,
            };
            if !behind {
                continue;
            }
            let key = (elem.topic().to_owned(), partition);
            let since = match self.progress.get(&key) {
                Some(&(offset, since)) if offset == elem.offset() => since,
                _ => now,
            };
            if now.duration_since(since) >= shared.config.stall_timeout() {
                stalled.push(key.clone());
            }
            lagging.insert(key, (elem.offset(), since));
        }
        self.progress = lagging;
        if stalled.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            ?stalled,
            "partitions with records waiting made no progress in the group for {:?}: the \
             coordinator may hold a stale assignment; leaving and rejoining the group",
            shared.config.stall_timeout()
        );
        self.progress.clear();
        self.rejoin()
    }

    /// Leaves the group (every task is committed and closed by the revocation) and joins it
    /// again: a leave makes tansu 0.6 forget a departed leader, so the next join rebalances
    /// every partition.
    fn rejoin(&mut self) -> Result<()> {
        self.consumer.unsubscribe();
        let deadline = Instant::now() + self.shared.config.request_timeout();
        while !self.shared.tasks.lock().is_empty() && Instant::now() < deadline {
            // A record polled here is dropped: its task is being revoked, and whoever owns
            // it next resumes from the position committed with its state.
            drop(self.consumer.poll(Duration::from_millis(100)));
        }
        if let Some(err) = self.shared.error.lock().take() {
            return Err(err);
        }
        let inputs = &self.shared.inputs;
        let topics: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.consumer
            .subscribe(&topics)
            .map_err(|err| convert(&format!("subscribing to {inputs:?} again"), err))
    }
}
