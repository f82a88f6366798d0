//! The `install` test binary: package, deploy, upgrade, restore.

#[path = "../common/mod.rs"]
mod common;

mod deploy;
mod package;
mod restore;
mod upgrade;
