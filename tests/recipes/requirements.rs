//! The one test that fails, saying how to install them, when ZooKeeper or Java is missing.
//!
//! Every other test skips in that case (printing why), so that a newcomer without ZooKeeper sees
//! one clear failure with the install command instead of fifty; under `CI=true` they all fail.

use zookeeper_recipes_rigs::fixtures as common;

#[test]
fn zookeeper_java_and_curator_are_installed() {
    if let Err(e) = zookeeper_recipes_testing::zookeeper_available() {
        panic!("the integration tests need a real ZooKeeper: {e}");
    }
    if let Err(e) = common::curator::java_available() {
        panic!("the Curator interop tests need a JDK and Curator's jars: {e}");
    }
}
