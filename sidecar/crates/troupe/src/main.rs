//! The `troupe` binary: parses the command line and hands over to `troupe::cli`.

fn main() -> std::process::ExitCode {
    troupe::cli::main()
}
