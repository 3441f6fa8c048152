//! wordcount.
fn main() {}
