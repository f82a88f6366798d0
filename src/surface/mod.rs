//! The operator surface: the command line (`feature = "cli"`), the narrated demo, the HTTP admin
//! endpoint (`feature = "http"`), the logs, `run`, which serves one node until told to stop, and
//! the health check a container runs against it (`healthcheck`).

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "http")]
pub mod console;
#[cfg(feature = "cli")]
pub mod demo;
#[cfg(feature = "http")]
pub mod fairness_api;
#[cfg(any(feature = "cli", feature = "testing"))]
pub mod healthcheck;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "cli")]
pub mod logging;
#[cfg(feature = "http")]
pub mod ops_api;
#[cfg(any(feature = "cli", feature = "testing"))]
pub mod run;
#[cfg(feature = "http")]
pub mod selection;
#[cfg(feature = "http")]
pub mod web;
