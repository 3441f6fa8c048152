//! statestore CLI.
fn main() {}
