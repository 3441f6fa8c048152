//! The global stores as their readers see them (processors, interactive queries): each store
//! by name, and why they are no longer kept, if they are not. The runtime's global store
//! thread writes them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use store_api::{Error, KeyValueStore, Result};

/// The global stores of an application, read only.
#[derive(Default)]
pub(crate) struct GlobalReads {
    stores: HashMap<String, Arc<dyn KeyValueStore>>,
    /// Why the thread keeping the stores stopped, if it did.
    failure: Mutex<Option<String>>,
}

impl GlobalReads {
    pub(crate) fn new(stores: HashMap<String, Arc<dyn KeyValueStore>>) -> Self {
        GlobalReads {
            stores,
            failure: Mutex::new(None),
        }
    }

    /// Global store `name`, or `None` when there is none of that name.
    ///
    /// # Errors
    /// The failure that stopped the thread keeping the stores.
    pub(crate) fn store(&self, name: &str) -> Result<Option<&dyn KeyValueStore>> {
        if let Some(failure) = self.failure.lock().as_ref() {
            return Err(Error::invalid(format!(
                "the global stores are no longer kept: {failure}"
            )));
        }
        Ok(self.stores.get(name).map(|store| store.as_ref()))
    }

    /// Records why the stores are no longer kept.
    pub(crate) fn fail(&self, failure: String) {
        self.failure.lock().get_or_insert(failure);
    }
}
