//! `xds-file-server`: the control plane binary. Everything but the logging set-up is in the
//! library ([`xds_file_server::run`]), so the tests can reach its pieces.

use clap::Parser;
use xds_file_server::cli::Args;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let filter = match tracing_subscriber::EnvFilter::try_new(&args.log) {
        Ok(filter) => filter,
        Err(e) => {
            eprintln!("xds-file-server: --log {:?}: {e}", args.log);
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt().with_env_filter(filter).init();
    match xds_file_server::run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Display, not Debug: the reason as a sentence, not a quoted string.
        Err(e) => {
            eprintln!("xds-file-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
