//! The `surface` test binary: cli, cli_console, console, surface, settings, demo, browser,
//! examples.

#[path = "../common/mod.rs"]
mod common;

mod browser;
mod cli;
mod cli_console;
mod console;
mod demo;
mod examples;
mod settings;
mod surface;
