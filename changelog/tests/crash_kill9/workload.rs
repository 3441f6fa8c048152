//! The writer's updates, derived from a seed and a step number alone, and the model state
//! they build, so the parent knows exactly what any committed step left behind.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The key holding the number of the last step written, committed with that step's updates.
pub const STEP_KEY: &[u8] = b"__step";

/// Distinct keys the updates touch: few enough that keys are overwritten and deleted often.
const KEYS: u32 = 200;

/// One update: a put, or a delete (`None`).
pub type Update = (Vec<u8>, Option<Vec<u8>>);

/// The updates of `step` (numbered from 1): mostly small commits of 1 to 12 updates, and one
/// step in ten a larger one of 20 to 80, about 80% puts of 0 to 200 random bytes.
pub fn step_updates(seed: u64, step: u64) -> Vec<Update> {
    let mut rng = StdRng::seed_from_u64(seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let count = if rng.random_bool(0.1) {
        rng.random_range(20..=80)
    } else {
        rng.random_range(1..=12)
    };
    (0..count)
        .map(|_| {
            let key = format!("key{:04}", rng.random_range(0..KEYS)).into_bytes();
            if rng.random_bool(0.2) {
                return (key, None);
            }
            let mut value = vec![0u8; rng.random_range(0..=200)];
            rng.fill(&mut value[..]);
            (key, Some(value))
        })
        .collect()
}

/// The expected store content after some step.
#[derive(Debug)]
pub struct Model {
    seed: u64,
    step: u64,
    state: BTreeMap<Vec<u8>, Vec<u8>>,
    updates: u64,
}

impl Model {
    /// The state before step 1: empty.
    pub fn new(seed: u64) -> Model {
        Model {
            seed,
            step: 0,
            state: BTreeMap::new(),
            updates: 0,
        }
    }

    /// The last step applied.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Updates applied so far, over all steps.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// The expected content of the store.
    pub fn state(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        &self.state
    }

    /// Applies the steps after the current one up to `step`.
    pub fn advance_to(&mut self, step: u64) {
        while self.step < step {
            self.step += 1;
            for (key, value) in step_updates(self.seed, self.step) {
                self.updates += 1;
                match value {
                    Some(value) => self.state.insert(key, value),
                    None => self.state.remove(&key),
                };
            }
            let marker = self.step.to_be_bytes().to_vec();
            self.state.insert(STEP_KEY.to_vec(), marker);
        }
    }
}
