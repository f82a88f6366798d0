//! The operator surface: the command line and the logs.

pub mod cli;
pub mod demo;
pub mod http;
pub mod logging;
pub mod run;
