//! The `briefrail` binary. Thin on purpose: the command line is a library call, so the binary
//! uses nothing but the crate's public API.

fn main() -> std::process::ExitCode {
    briefrail::cli_main()
}
