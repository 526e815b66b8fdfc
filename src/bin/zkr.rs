//! `zkr`: the command-line face of zookeeper-recipes.
fn main() {}
