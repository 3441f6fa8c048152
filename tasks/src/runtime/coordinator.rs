//! What the group consumer waits for from the group coordinator, each wait bounded by the
//! request timeout (issue 44: errors in seconds, never a hang): the commits of the group
//! offsets, and the consumer's close.
//!
//! librdkafka bounds neither. A synchronous commit (`rd_kafka_commit`) waits for its answer
//! with no deadline (`RD_POLL_INFINITE`), and with the coordinator out of reach (connections
//! whose requests go unanswered, or that fail authentication, as after an OAUTHBEARER token
//! expired) the answer does not come: the drop of an application was seen to hang for more
//! than ten minutes, and one with its coordinator's connections blackholed still waited
//! after five (`tests/bounded_close.rs`). A consumer's close (rdkafka's `BaseConsumer` drop,
//! which polls until librdkafka says it closed) waits for every commit still unanswered, so
//! it does not return either.
//!
//! An asynchronous commit is no way out with rdkafka 0.39: it reports no result of a manual
//! `CommitMode::Async` commit (librdkafka answers such a commit only on a reply queue or to an
//! `offset_commit_cb`, and rdkafka gives it neither; `ConsumerContext::commit_callback` hears
//! only of librdkafka's automatic commits), and a close must know whether its commit counted.
//! So each commit is made synchronously on a thread of its own, which owns a handle on the
//! consumer, and waited for up to the request timeout; one that outlives it is left to finish
//! there, and until it does, further commits fail at once instead of piling up threads. The
//! close runs the same way (see [`GroupConsumer::close_within`]).

use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak, mpsc};
use std::thread;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};
use store_api::{Error, Result};

use crate::group::topics::convert;
use crate::runtime::shared::{GroupCommits, GroupContext, Shared, partition_id};

/// How often a closing consumer's thread looks whether it is the consumer's last owner.
const OWNERS_STEP: Duration = Duration::from_millis(5);

/// Commits `offsets` (topic, partition, next offset) to the group and waits for the
/// coordinator's answer up to the request timeout.
///
/// # Errors
/// The coordinator's refusal, or `Timeout` when it did not answer in time (see
/// [`commit_within`]).
pub(crate) fn commit_group(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Shared,
    offsets: &[(&str, u32, u64)],
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for &(topic, partition, offset) in offsets {
        let offset = i64::try_from(offset)
            .map_err(|_| Error::invalid(format!("offset {offset} is beyond kafka's range")))?;
        tpl.add_partition_offset(topic, partition_id(partition), Offset::Offset(offset))
            .map_err(|err| convert("committing the group offsets (OffsetCommit)", err))?;
    }
    commit_within(consumer, shared, tpl)?
        .map_err(|err| convert("committing the group offsets (OffsetCommit)", err))
}

/// Commits `tpl` synchronously on a thread of its own and returns librdkafka's answer, if
/// it comes within the request timeout.
///
/// A commit that times out may still be applied later: the group offset is a floor (the
/// stores hold each task's position), never ahead of what the stores committed.
///
/// # Errors
/// `Timeout` when librdkafka did not answer within the request timeout, or an earlier
/// commit is still unanswered (its thread is still waiting: the coordinator is out of
/// reach); an I/O error when no thread could be started.
pub(crate) fn commit_within(
    consumer: &BaseConsumer<GroupContext>,
    shared: &Shared,
    tpl: TopicPartitionList,
) -> Result<KafkaResult<()>> {
    let commits = &shared.group_commits;
    let Some(owned) = commits.consumer.get().and_then(Weak::upgrade) else {
        // The consumer is being dropped, and its close serves a last revocation: no thread
        // can own it, so the commit is only sent.
        tracing::debug!("the group consumer is closing: its last commit is sent unwaited");
        consumer
            .commit(&tpl, CommitMode::Async)
            .map_err(|err| convert("committing the group offsets (OffsetCommit)", err))?;
        return Err(Error::Timeout(
            "the group consumer is closing: its commit was sent, not waited for".to_owned(),
        ));
    };
    let timeout = shared.config.request_timeout();
    if commits.unanswered.swap(true, Ordering::AcqRel) {
        return Err(Error::Timeout(format!(
            "the group coordinator has not answered an earlier offset commit within \
             {timeout:?} (the request timeout): it is out of reach"
        )));
    }
    let unanswered = Arc::clone(&commits.unanswered);
    let (answer_tx, answer_rx) = mpsc::sync_channel(1);
    let spawned = thread::Builder::new()
        .name("statestore-group-commit".to_owned())
        .spawn(move || {
            let answer = owned.commit(&tpl, CommitMode::Sync);
            unanswered.store(false, Ordering::Release);
            let _ = answer_tx.send(answer);
            // Should the application have let go of the consumer meanwhile, it closes here.
            drop(owned);
        });
    if let Err(err) = spawned {
        commits.unanswered.store(false, Ordering::Release);
        return Err(Error::io("starting a thread for a group commit", err));
    }
    answer_rx.recv_timeout(timeout).map_err(|_| {
        Error::Timeout(format!(
            "the group coordinator did not answer an offset commit within {timeout:?} (the \
             request timeout)"
        ))
    })
}

/// The application's handle on the group consumer, which [`close_within`] closes within a
/// deadline.
///
/// [`close_within`]: GroupConsumer::close_within
pub(crate) struct GroupConsumer(Option<Arc<BaseConsumer<GroupContext>>>);

impl GroupConsumer {
    pub(crate) fn new(consumer: Arc<BaseConsumer<GroupContext>>) -> GroupConsumer {
        GroupConsumer(Some(consumer))
    }

    /// Closes the consumer (librdkafka's close, in rdkafka's `BaseConsumer` drop: the last
    /// revocation served, the offset commits still unanswered waited for, the group left
    /// unless the member is static) and waits up to `timeout` for it.
    ///
    /// The close runs on a thread of its own once that thread is the consumer's last owner;
    /// one that outlives `timeout` is left to finish there, with what the consumer's context
    /// holds (the state directory's lock among it). While a commit's thread owns the
    /// consumer too, waiting for an answer (see [`commit_within`]), the close would wait for
    /// that commit: it is left to that thread, which closes the consumer once answered.
    ///
    /// After this the handle must not be used.
    pub(crate) fn close_within(&mut self, commits: &GroupCommits, timeout: Duration) {
        let Some(consumer) = self.0.take() else {
            return;
        };
        let unanswered = Arc::clone(&commits.unanswered);
        let (closed_tx, closed_rx) = mpsc::sync_channel(1);
        let spawned = thread::Builder::new()
            .name("statestore-consumer-close".to_owned())
            .spawn(move || {
                while Arc::strong_count(&consumer) > 1 {
                    if unanswered.load(Ordering::Acquire) {
                        // Dropping the channel's end tells the application so.
                        return;
                    }
                    thread::sleep(OWNERS_STEP);
                }
                drop(consumer);
                let _ = closed_tx.send(());
            });
        if let Err(err) = spawned {
            // The consumer went with the thread's closure: it closed here, unbounded.
            tracing::warn!(%err, "no thread for the group consumer's close: it closed in place");
            return;
        }
        match closed_rx.recv_timeout(timeout) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => tracing::warn!(
                "an offset commit still waits for the group coordinator: the group consumer \
                 closes in the background once it is answered"
            ),
            Err(mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
                ?timeout,
                "the group consumer did not close within the request timeout (is the group \
                 coordinator out of reach?): it goes on closing in the background"
            ),
        }
    }
}

impl Deref for GroupConsumer {
    type Target = Arc<BaseConsumer<GroupContext>>;

    fn deref(&self) -> &Arc<BaseConsumer<GroupContext>> {
        self.0
            .as_ref()
            .expect("the group consumer is used only until the application's drop closes it")
    }
}
