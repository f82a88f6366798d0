//! The `briefrail` binary: parse flags, load config, set up logs, dispatch. Thin on purpose:
//! everything it does is a library call.

use std::process::ExitCode;

use briefrail::config::Settings;
use briefrail::surface::cli::{self, Cli};
use clap::Parser;

fn main() -> ExitCode {
    let args = match Cli::try_parse() {
        Ok(args) => args,
        Err(e) => {
            end_quietly_when_the_reader_goes();
            e.exit()
        }
    };
    if !matches!(args.command, cli::Command::Run) {
        end_quietly_when_the_reader_goes();
    }
    // A health check answers 0 or 1 only: Docker reserves 2.
    let healthcheck = matches!(args.command, cli::Command::Healthcheck { .. });
    let mut settings = match Settings::load(args.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("briefrail: {e}");
            return ExitCode::from(if healthcheck { 1 } else { 2 });
        }
    };
    if matches!(args.command, cli::Command::Demo) && std::env::var_os("RUST_LOG").is_none() {
        // The demo narrates on stdout; logs would only interleave with it.
        settings.log.level = "error,lapin=off".into();
    }
    let logging = briefrail::surface::logging::init(&settings);
    if let cli::Command::Run = args.command {
        let settings = std::sync::Arc::new(settings);
        let builder = match briefrail::builders::from_settings(&settings.builder) {
            Ok(b) => b,
            Err(e) => return finish(Err(e)),
        };
        let system = actix_rt::System::new();
        let result = system.block_on(async {
            let result = briefrail::surface::run::run(
                settings,
                builder,
                briefrail::surface::run::termination(),
            )
            .await;
            // The node has stopped and its last builds' spans are queued: send them.
            logging.flush().await;
            result
        });
        return finish(result);
    }
    if let cli::Command::Demo = args.command {
        let system = actix_rt::System::new();
        return finish(system.block_on(async {
            let result = briefrail::surface::demo::run(&settings).await;
            logging.flush().await;
            result
        }));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("briefrail: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(cli::execute(args.command, &settings));
    match finish(result) {
        code if healthcheck && code != ExitCode::SUCCESS => ExitCode::from(1),
        code => code,
    }
}

/// Exit status and the one-line reason on stderr.
fn finish(result: briefrail::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "briefrail: {}",
                briefrail::secret::redact_urls(&briefrail::error::report(&e))
            );
            ExitCode::from(cli::exit_code(&e) as u8)
        }
    }
}

/// `briefrail status … | head -1`: once the reader is gone, a command ends as a Unix tool does,
/// by SIGPIPE and silently, instead of panicking in `println!` with a backtrace. Rust's runtime
/// ignores SIGPIPE; this puts back the default. Not for `run`: a node writes to its command
/// builders' pipes and must meet a child that stopped reading as an error it handles, not die
/// of it. (The demo's builders are in-process, and sockets send with `MSG_NOSIGNAL`.)
fn end_quietly_when_the_reader_goes() {
    // SAFETY: called on the main thread before any other thread or runtime is started, with
    // the default disposition, which needs no handler to stay valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
