//! The operator surface: the command line (`feature = "cli"`), the narrated demo, the HTTP admin
//! endpoint (`feature = "http"`), the logs, and `run`, which serves one node until told to stop.

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "http")]
pub mod console;
#[cfg(feature = "cli")]
pub mod demo;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "cli")]
pub mod logging;
pub mod run;
