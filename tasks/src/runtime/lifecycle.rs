//! The application's state, as Kafka Streams' `KafkaStreams.State` names it, and the listener
//! told of each change.

use std::panic::{AssertUnwindSafe, catch_unwind};

use parking_lot::Mutex;

/// Where an [`Application`](crate::Application) is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppState {
    /// Made, not polled yet.
    Created,
    /// The group is rebalancing, or tasks assigned here are being restored.
    Rebalancing,
    /// Every task assigned here is processing.
    Running,
    /// [`close`](crate::Application::close) is committing and closing the tasks.
    PendingShutdown,
    /// Closed.
    NotRunning,
    /// A poll returned an error that stops the instance (a processor failure under
    /// `shutdown_client`, a failure that cannot be retried).
    Error,
}

/// Told of every change of the application's state, with the new state and the old one (Kafka
/// Streams' `KafkaStreams.StateListener`). It runs on the thread that changed the state: the
/// polling thread, inside a poll or a close. A listener that panics is logged and ignored.
pub trait StateListener: Send {
    /// The state changed from `old` to `new`.
    fn on_change(&mut self, new: AppState, old: AppState);
}

impl<F> StateListener for F
where
    F: FnMut(AppState, AppState) + Send,
{
    fn on_change(&mut self, new: AppState, old: AppState) {
        self(new, old);
    }
}

/// The state and its listener.
pub(crate) struct Lifecycle {
    state: Mutex<AppState>,
    listener: Mutex<Option<Box<dyn StateListener>>>,
}

impl Lifecycle {
    pub fn new() -> Lifecycle {
        Lifecycle {
            state: Mutex::new(AppState::Created),
            listener: Mutex::new(None),
        }
    }

    pub fn state(&self) -> AppState {
        *self.state.lock()
    }

    pub fn set_listener(&self, listener: Box<dyn StateListener>) {
        *self.listener.lock() = Some(listener);
    }

    /// Moves to `new` and tells the listener, unless the state is `new` already or final
    /// (`NotRunning` and `Error` are left only for `NotRunning`, by a close).
    pub fn to(&self, new: AppState) {
        let old = {
            let mut state = self.state.lock();
            let old = *state;
            let final_state = matches!(old, AppState::NotRunning | AppState::Error);
            if old == new
                || old == AppState::NotRunning
                || (final_state && new != AppState::NotRunning)
            {
                return;
            }
            *state = new;
            old
        };
        tracing::info!(?old, ?new, "application state");
        if let Some(listener) = self.listener.lock().as_mut() {
            let told = catch_unwind(AssertUnwindSafe(|| listener.on_change(new, old)));
            if told.is_err() {
                tracing::error!(?old, ?new, "the state listener panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::{AppState, Lifecycle};

    #[test]
    fn the_listener_hears_each_change_once_and_final_states_stay() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let lifecycle = Lifecycle::new();
        let sink = Arc::clone(&heard);
        lifecycle.set_listener(Box::new(move |new, old| sink.lock().push((old, new))));
        lifecycle.to(AppState::Rebalancing);
        lifecycle.to(AppState::Rebalancing);
        lifecycle.to(AppState::Running);
        lifecycle.to(AppState::Error);
        lifecycle.to(AppState::Running);
        lifecycle.to(AppState::NotRunning);
        lifecycle.to(AppState::Rebalancing);
        assert_eq!(
            *heard.lock(),
            [
                (AppState::Created, AppState::Rebalancing),
                (AppState::Rebalancing, AppState::Running),
                (AppState::Running, AppState::Error),
                (AppState::Error, AppState::NotRunning)
            ]
        );
        assert_eq!(lifecycle.state(), AppState::NotRunning);
    }

    #[test]
    fn a_panicking_listener_is_ignored() {
        let lifecycle = Lifecycle::new();
        lifecycle.set_listener(Box::new(|_, _| panic!("listener")));
        lifecycle.to(AppState::Running);
        assert_eq!(lifecycle.state(), AppState::Running);
    }
}
